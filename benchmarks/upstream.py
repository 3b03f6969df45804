"""olmocr 0.4.27 (the published package) in a throwaway venv, for benchmarks that measure against it."""

from __future__ import annotations

import os
import subprocess
import sys

UPSTREAM = "olmocr==0.4.27"


def upstream_python(venv: str, deps: list[str], module: str) -> tuple[str | None, str]:
    """A Python with olmocr 0.4.27 and ``deps`` in ``venv`` (made when missing) that imports ``module``;
    or None and why not. The package goes in without its own dependencies (torch, vLLM, …): only what
    the measured module imports is installed."""
    python = os.path.join(venv, "bin", "python")
    steps = [[python, "-m", "pip", "install", "-q", *deps]]
    if not os.path.exists(python):
        steps = [[sys.executable, "-m", "venv", venv], [python, "-m", "pip", "install", "-q", "--no-deps", UPSTREAM],
                 *steps]
    for step in steps:
        proc = subprocess.run(step, capture_output=True, text=True)
        if proc.returncode != 0:
            return None, f"cannot install {UPSTREAM}: {(proc.stderr or proc.stdout).strip().splitlines()[-1]}"
    # Not from this checkout, whose own olmocr package would shadow the venv's.
    proc = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True, cwd=venv)
    if proc.returncode != 0:
        return None, f"{UPSTREAM} does not import: {proc.stderr.strip().splitlines()[-1]}"
    return python, venv


def upstream_or_skip(skip: bool, venv: str | None, scratch: str, deps: list[str], module: str) -> str | None:
    """The upstream Python to measure, or None (``skip``, or it cannot be installed), saying which."""
    if skip:
        print("olmocr 0.4.27: skipped (--no-upstream)")
        return None
    python, why = upstream_python(venv or os.path.join(scratch, "venv"), deps, module)
    print(f"olmocr 0.4.27: skipped ({why})" if python is None else f"olmocr 0.4.27 in {why}")
    return python
