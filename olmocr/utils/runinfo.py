"""What a run writes beside its resolved config: git revision, package versions, command line."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from importlib import metadata

from olmocr.config import PROJECT_ROOT

PACKAGES = ("olmocr", "torch", "torchvision", "transformers", "trl", "peft", "accelerate", "deepspeed",
            "llmcompressor", "hydra-core", "submitit", "beaker-py", "vllm", "pypdf", "reportlab")


def git_revision(root: str = PROJECT_ROOT) -> dict:
    def git(*args):
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return out.stdout.strip() if out.returncode == 0 else None

    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


def package_versions() -> dict:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def run_facts() -> dict:
    """What made a result: git revision, package versions, Python, command line."""
    return {"git": git_revision(), "packages": package_versions(), "python": platform.python_version(),
            "argv": sys.argv}


def write_run_info(output_dir: str, **extra) -> str:
    info = {**run_facts(), **extra}
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, "run_info.json")
    with open(path, "w") as fh:
        json.dump(info, fh, indent=2)
    return path
