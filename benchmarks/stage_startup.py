"""How fast each stage answers before doing any work: ``--help``, ``dry_run=true`` (compose, validate,
print) and a config error (an unknown key), as a user at a terminal sees it (a fresh process each time).

    python benchmarks/stage_startup.py [--repeats 5]

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

STAGES = {"train": [], "data": [], "bench": ["candidates=."], "synth": [],  # and the values each requires
          "prepare": ["sources=[.]", "output=out"], "compress": ["source=.", "output=out"],
          "compare": ["reference=.", "candidate=."], "pipeline": [], "pipeline.stats": ["workspace=."],
          "pipeline.bench": [], "report.plots": ["run_dir=."],
          "report.viewer": ["results=."], "pairs": []}
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
    args = parser.parse_args()
    floor = statistics.median(seconds(["-c", "import hydra, omegaconf"], True) for _ in range(args.repeats))
    print(f"floor (python -c 'import hydra, omegaconf'): {floor:.2f}s\n")
    print(f"{'stage':<9}" + "".join(f"{name:>22}" for name in COMMANDS))
    with tempfile.TemporaryDirectory() as tmp:
        for stage, required in STAGES.items():
            row = f"{stage:<9}"
            for name, extra in COMMANDS.items():
                cmd = ["-m", f"olmocr.{stage}", *extra, *required, f"hydra.run.dir={tmp}/{stage}"]
                median = statistics.median(seconds(cmd, name != "config error") for _ in range(args.repeats))
                row += f"{median:>13.2f}s ({median / floor:.1f}x)"
            print(row)


if __name__ == "__main__":
    main()
