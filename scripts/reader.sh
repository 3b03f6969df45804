#!/usr/bin/env bash
# The reader learning to read on CPU: reading pages, then SFT of model=reader on them (+experiment=read_tiny),
# scored at each eval on held-out pages by their strict unit tests.
#   bash scripts/reader.sh [OUT] [train overrides…]
# OUT (default outputs/reading) gets train/ (sentences of the word bank less one word in eight) and heldout/
# (another seed, every word); both are made once. Re-running resumes the run. Sizes (environment):
# TRAIN_PAGES=20000 HELDOUT_PAGES=64 LEVEL=line.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:-outputs/reading}")
shift $(( $# > 0 ? 1 : 0 ))
PY=${PYTHON:-.venv/bin/python}
TRAIN_PAGES=${TRAIN_PAGES:-20000} HELDOUT_PAGES=${HELDOUT_PAGES:-64} LEVEL=${LEVEL:-line}
[ -e "$OUT/train/synth.jsonl" ] ||
  $PY -m olmocr.synth reading="$LEVEL" reading_words=seen num_pages="$TRAIN_PAGES" out_dir="$OUT/train" \
    hydra.run.dir="$OUT/runs/synth_train"
[ -e "$OUT/heldout/synth.jsonl" ] ||
  $PY -m olmocr.synth reading="$LEVEL" reading_words=all seed=1 num_pages="$HELDOUT_PAGES" out_dir="$OUT/heldout" \
    hydra.run.dir="$OUT/runs/synth_heldout"
$PY -m olmocr.train +experiment=read_tiny paths.reading="$OUT" "$@"
