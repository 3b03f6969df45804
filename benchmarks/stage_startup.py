"""How fast each stage answers before doing any work: ``--help``, ``dry_run=true`` (compose, validate,
print) and a config error (an unknown key), as a user at a terminal sees it (a fresh process each time).

    python benchmarks/stage_startup.py [--repeats 5] [--stages olmocr.train olmocr.bench …]

Prints the median seconds of --repeats runs per stage and command, and the ratio to the floor measured
in the same run: a fresh Python that only imports hydra and omegaconf. The target is under 1.5 s each.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

from olmocr.cli import stages

COMMANDS = {"--help": ["--help"], "dry_run": ["dry_run=true"], "config error": ["no_such_key=1"]}


def seconds(args: list[str], expect_ok: bool) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if (proc.returncode == 0) != expect_ok:
        sys.exit(f"{' '.join(args)}: exit code {proc.returncode}\n{proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--stages", nargs="+", help="these stages only (default: every stage)")
    args = parser.parse_args()
    chosen = {m: s for m, s in stages().items() if not args.stages or m in args.stages}
    if args.stages and len(chosen) != len(args.stages):
        sys.exit(f"--stages: unknown stage(s) {sorted(set(args.stages) - set(chosen))} (have {', '.join(stages())})")
    floor = statistics.median(seconds(["-c", "import hydra, omegaconf"], True) for _ in range(args.repeats))
    print(f"floor (python -c 'import hydra, omegaconf'): {floor:.2f}s\n")
    width = max(len(m) for m in chosen) + 2
    print(f"{'stage':<{width}}" + "".join(f"{name:>22}" for name in COMMANDS))
    with tempfile.TemporaryDirectory() as tmp:
        for module, stage in chosen.items():
            row = f"{module:<{width}}"
            for name, extra in COMMANDS.items():
                cmd = ["-m", module, *extra, *stage.placeholders(), f"hydra.run.dir={tmp}/{module}"]
                median = statistics.median(seconds(cmd, name != "config error") for _ in range(args.repeats))
                row += f"{median:>13.2f}s ({median / floor:.1f}x)"
            print(row)


if __name__ == "__main__":
    main()
