#!/usr/bin/env bash
# The reader learning to read on CPU: its pages (scripts/reading_pages.sh), then SFT of model=reader on them
# (+experiment=read_tiny), scored at each eval on the held-out bench by its strict unit tests, then the run
# released to OUT/reader (model=reader_trained: what +experiment=read_grpo and read_dpo start from).
#   bash scripts/reader.sh [OUT] [train overrides…]
# OUT defaults to outputs/reading; pages are made once (sizes: see scripts/reading_pages.sh). Re-running resumes
# the run.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:-outputs/reading}")
shift $(( $# > 0 ? 1 : 0 ))
PY=${PYTHON:-.venv/bin/python}
PYTHON=$PY bash scripts/reading_pages.sh "$OUT"
$PY -m olmocr.train +experiment=read_tiny paths.reading="$OUT" hydra.run.dir="$OUT/runs/read_tiny" "$@"
$PY -m olmocr.prepare sources="[$OUT/runs/read_tiny]" output="$OUT/reader" overwrite=true \
  hydra.run.dir="$OUT/runs/release"
