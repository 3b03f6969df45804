"""Souping K checkpoints: wall time and peak memory of ``olmocr.prepare``'s streaming soup against the
plain way (load every source, average, save), on K bf16 copies of a random ~200M-parameter Qwen2.5-VL.

    python benchmarks/checkpoint_tools.py [--copies 4] [--repeats 3] [--layers 14]

prepare also hashes every tensor of every source and of the output (provenance.json), so the baseline
runs twice: plain, and with the same hashes (the same deliverable). Each run is a fresh process (peak
RSS is the process's own high-water mark), runs alternate between the methods, and the figures are
medians. Memory is reported as peak RSS over what the process held before reading any weights (Python,
torch), and as a multiple of one model's weights. Targets: the soup's peak at most 1.3x one model, and
its time no worse than the baseline's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def status_mb(field: str) -> float:
    """A memory figure of this process from /proc/self/status: VmRSS now, or VmHWM, its peak (not
    getrusage: ru_maxrss survives fork and exec, so a child would report its parent's peak)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def weights_hash(state: dict) -> str:
    """prepare's content hash of a loaded state dict."""
    from olmocr.checkpoints.tensors import DTYPES, Entry, WeightsHash, to_bytes

    names = {dtype: name for name, dtype in DTYPES.items()}
    digest = WeightsHash()
    for name, tensor in state.items():
        digest.add(Entry(name, names[tensor.dtype], tuple(tensor.shape), 0, 0), to_bytes(tensor))
    return digest.hexdigest()


def baseline(sources: list[str], output: str, hashes: bool = False) -> None:
    """Load every source, average each tensor in fp32, save: K models in memory at once."""
    import torch
    from safetensors.torch import load_file, save_file

    states = [load_file(os.path.join(source, "model.safetensors")) for source in sources]
    if hashes:
        [weights_hash(state) for state in states]
    averaged = {}
    for name, first in states[0].items():
        total = first.to(torch.float32)
        for state in states[1:]:
            total = total + state[name].to(torch.float32)
        averaged[name] = (total / len(states)).to(first.dtype)
    if hashes:
        weights_hash(averaged)
    os.makedirs(output)
    save_file(averaged, os.path.join(output, "model.safetensors"), metadata={"format": "pt"})


METHODS = {"prepare": lambda sources, output: ours(sources, output),
           "baseline": baseline,
           "baseline+hashes": lambda sources, output: baseline(sources, output, hashes=True)}


def ours(sources: list[str], output: str) -> None:
    from olmocr.checkpoints.release import prepare

    prepare(sources, output)


def child(method: str, sources: list[str], output: str) -> None:
    import torch  # noqa: F401 - imported before the baseline reading, as both methods need it

    import olmocr.checkpoints.release  # noqa: F401 - what the stage has imported before it soups
    import olmocr.utils.runinfo  # noqa: F401

    before = status_mb("VmRSS")
    start = time.perf_counter()
    METHODS[method](sources, output)
    print(json.dumps({"seconds": time.perf_counter() - start, "before_mb": before, "peak_mb": status_mb("VmHWM")}))


def make_sources(root: str, copies: int, layers: int) -> tuple[list[str], int]:
    """K copies of one random model in bf16, each with its own noise; returns their folders and the
    weights' size in bytes."""
    import torch
    from safetensors.torch import load_file, save_file

    from olmocr.models import TinyModel

    tiny = TinyModel(hidden_size=1024, num_layers=layers, num_heads=16, num_kv_heads=4, intermediate_size=2816,
                     vision_depth=8, vision_hidden_size=512, vision_heads=8, vocab_size=4096,
                     cache_dir=os.path.join(root, "cache"))
    state = load_file(os.path.join(tiny.path, "model.safetensors"))
    params = sum(t.numel() for t in state.values())
    sources = []
    for k in range(copies):
        folder = os.path.join(root, f"seed{k}")
        shutil.copytree(tiny.path, folder)
        generator = torch.Generator().manual_seed(k)
        noisy = {name: (t + 1e-3 * torch.randn(t.shape, generator=generator)).to(torch.bfloat16)
                 for name, t in state.items()}
        save_file(noisy, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        sources.append(folder)
    print(f"{copies} sources of {params / 1e6:.0f}M parameters in bf16 ({2 * params / 1e6:.0f} MB each)")
    return sources, 2 * params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layers", type=int, default=14, help="language model layers (14: about 200M parameters)")
    parser.add_argument("--child", choices=list(METHODS), help=argparse.SUPPRESS)
    parser.add_argument("--sources", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.sources, args.output)
        return
    root = tempfile.mkdtemp(prefix="olmocr-soup-bench-")
    try:
        sources, model_bytes = make_sources(root, args.copies, args.layers)
        runs: dict[str, list[dict]] = {method: [] for method in METHODS}
        for _ in range(args.repeats):
            for method in runs:
                output = os.path.join(root, "out")
                shutil.rmtree(output, ignore_errors=True)
                proc = subprocess.run([sys.executable, __file__, "--child", method, "--sources", *sources,
                                       "--output", output], capture_output=True, text=True)
                if proc.returncode:
                    sys.exit(f"{method} failed:\n{proc.stderr[-3000:]}")
                runs[method].append(json.loads(proc.stdout.strip().splitlines()[-1]))
        model_mb = model_bytes / 2**20
        print(f"\n{'method':<17}{'seconds':>9}{'peak RSS MB':>13}{'over start MB':>15}{'x one model':>13}")
        medians = {}
        for method, rows in runs.items():
            seconds = statistics.median(r["seconds"] for r in rows)
            peak = statistics.median(r["peak_mb"] for r in rows)
            over = statistics.median(r["peak_mb"] - r["before_mb"] for r in rows)
            medians[method] = (seconds, over)
            print(f"{method:<17}{seconds:>9.2f}{peak:>13.0f}{over:>15.0f}{over / model_mb:>13.2f}")
        (ours_s, ours_mb), (base_s, base_mb) = medians["prepare"], medians["baseline"]
        hashed_s = medians["baseline+hashes"][0]
        print(f"\nsoup of {args.copies} (median of {args.repeats}): time {ours_s / hashed_s:.2f}x the baseline's with "
              f"the same hashes ({ours_s / base_s:.2f}x the plain baseline's); memory {ours_mb / base_mb:.2f}x the "
              f"baseline's, {ours_mb / model_mb:.2f}x one model (target at most 1.3x)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
