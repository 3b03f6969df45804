#!/usr/bin/env bash
# The reader's pages (python -m olmocr.synth reading=…), each set made once; what +experiment=read_tiny trains on
# (conf/data/reading.yaml) and what it is judged on:
#   bash scripts/reading_pages.sh [OUT]            # OUT: default outputs/reading
#   OUT/train    line pages of the word bank less one word in eight (reading_words=seen)
#   OUT/letters  line pages of random letters (no prior can guess them: the reader must read)
#   OUT/mixed    line pages of training words, training words with a letter or two changed, and random letters
#   OUT/lines    paragraphs of two to four lines, of mixed words and of random letters
#   OUT/heldout  a bench of another seed in four categories: bank (every word of the bank), unseen (only the words
#                no training page has), letters, lines
#   OUT/pairs    training-like pages (other seeds) whose samples DPO mines, in three categories: words, letters,
#                mixed
#   OUT/renders  the training pages rendered at the reader's size (data.render_cache)
#   OUT/typeset  the same kinds set as documents set them (reading_type=typeset: any place, size and typeface,
#                both cases, numbers, punctuation): words, letters, mixed, codes (mixed case, numbers, identifiers),
#                lines (paragraphs) to train on; heldout, a bench of other seeds in five categories: letters,
#                unseen, codes, lines, and faces (bank sentences in the two typefaces training never uses)
#   OUT/structure pages with structure on the grid (reading=structured: a running header, headings, paragraphs, a
#                page number; each page's blocks with labels and boxes beside its truth): train (mixed words) and
#                heldout, a bench of another seed (the bank's words) whose truth has boxes
# Sizes (environment): TRAIN_PAGES=12000 of each training kind, LINES_PAGES=6000, HELDOUT_PAGES=256 of each
# category, PAIRS_PAGES=512 of each category; TYPESET_PAGES=$TRAIN_PAGES of each typeset kind (0: none made);
# STRUCTURE_PAGES=$TRAIN_PAGES structured pages to train on (0: none made).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:-outputs/reading}")
PY=${PYTHON:-.venv/bin/python}
TRAIN_PAGES=${TRAIN_PAGES:-12000} LINES_PAGES=${LINES_PAGES:-6000} HELDOUT_PAGES=${HELDOUT_PAGES:-256}
PAIRS_PAGES=${PAIRS_PAGES:-512} TYPESET_PAGES=${TYPESET_PAGES:-${TRAIN_PAGES:-12000}}
STRUCTURE_PAGES=${STRUCTURE_PAGES:-${TRAIN_PAGES:-12000}}

pages() {  # pages OUT_DIR RUN_NAME COUNT [CATEGORY] synth overrides…: made once (a stopped run is finished by the next)
  local dir=$1 name=$2 count=$3 category=$4
  shift 4
  [ -e "$dir/${category:-synth}.jsonl" ] ||
    $PY -m olmocr.synth num_pages="$count" out_dir="$dir" ${category:+category=$category} "$@" \
      hydra.run.dir="$OUT/runs/synth_$name"
}

pages "$OUT/train" train "$TRAIN_PAGES" "" reading=line reading_words=seen seed=0
pages "$OUT/letters" letters "$TRAIN_PAGES" "" reading=line reading_words=letters seed=5
pages "$OUT/mixed" mixed "$TRAIN_PAGES" "" reading=line reading_words=mixed seed=9
pages "$OUT/lines" lines_words "$LINES_PAGES" words reading=lines reading_words=mixed seed=6
pages "$OUT/lines" lines_letters "$LINES_PAGES" letters reading=lines reading_words=letters seed=7
pages "$OUT/heldout" heldout_bank "$HELDOUT_PAGES" bank reading=line reading_words=all seed=11
pages "$OUT/heldout" heldout_unseen "$HELDOUT_PAGES" unseen reading=line reading_words=unseen seed=12
pages "$OUT/heldout" heldout_letters "$HELDOUT_PAGES" letters reading=line reading_words=letters seed=13
pages "$OUT/heldout" heldout_lines "$HELDOUT_PAGES" lines reading=lines reading_words=all seed=14
pages "$OUT/pairs" pairs_words "$PAIRS_PAGES" words reading=line reading_words=seen seed=2
pages "$OUT/pairs" pairs_letters "$PAIRS_PAGES" letters reading=line reading_words=letters seed=8
pages "$OUT/pairs" pairs_mixed "$PAIRS_PAGES" mixed reading=line reading_words=mixed seed=10

if [ "$TYPESET_PAGES" -gt 0 ]; then
  T="$OUT/typeset" TS=(reading_type=typeset)
  pages "$T/words" t_words "$TYPESET_PAGES" "" reading=line reading_words=seen "${TS[@]}" seed=30
  pages "$T/letters" t_letters "$TYPESET_PAGES" "" reading=line reading_words=letters "${TS[@]}" seed=31
  pages "$T/mixed" t_mixed "$TYPESET_PAGES" "" reading=line reading_words=mixed "${TS[@]}" seed=32
  pages "$T/codes" t_codes "$TYPESET_PAGES" "" reading=line reading_words=codes "${TS[@]}" seed=33
  pages "$T/lines" t_lines_words "$(( (TYPESET_PAGES + 1) / 2 ))" words reading=lines reading_words=mixed "${TS[@]}" seed=34
  pages "$T/lines" t_lines_letters "$(( (TYPESET_PAGES + 1) / 2 ))" letters reading=lines reading_words=letters "${TS[@]}" seed=35
  pages "$T/heldout" t_heldout_letters "$HELDOUT_PAGES" letters reading=line reading_words=letters "${TS[@]}" seed=41
  pages "$T/heldout" t_heldout_unseen "$HELDOUT_PAGES" unseen reading=line reading_words=unseen "${TS[@]}" seed=42
  pages "$T/heldout" t_heldout_codes "$HELDOUT_PAGES" codes reading=line reading_words=codes "${TS[@]}" seed=43
  pages "$T/heldout" t_heldout_lines "$HELDOUT_PAGES" lines reading=lines reading_words=all "${TS[@]}" seed=44
  pages "$T/heldout" t_heldout_faces "$HELDOUT_PAGES" faces reading=line reading_words=all "${TS[@]}" \
    'reading_faces=[carlito,caladea]' seed=45
fi

if [ "$STRUCTURE_PAGES" -gt 0 ]; then
  pages "$OUT/structure/train" s_train "$STRUCTURE_PAGES" "" reading=structured reading_words=mixed seed=50
  pages "$OUT/structure/heldout" s_heldout "$HELDOUT_PAGES" structured reading=structured reading_words=all seed=51
fi

# The training pages rendered once, on every core, into the render cache read_tiny reads them from
# (data.render_cache): its steps then wait on no render, where a first read renders on a core the step needs.
[ -e "$OUT/renders/done" ] ||
  { $PY -m olmocr.data model=reader data=reading paths.reading="$OUT" num_workers="$(nproc)" \
      hydra.run.dir="$OUT/runs/render" && touch "$OUT/renders/done"; }
[ "$STRUCTURE_PAGES" -eq 0 ] || [ -e "$OUT/renders/structure_done" ] ||
  { $PY -m olmocr.data model=reader data=structure paths.reading="$OUT" num_workers="$(nproc)" \
      hydra.run.dir="$OUT/runs/render_structure" && touch "$OUT/renders/structure_done"; }
[ "$TYPESET_PAGES" -eq 0 ] || [ -e "$OUT/renders/typeset_done" ] ||
  { $PY -m olmocr.data model=reader data=typeset paths.reading="$OUT" num_workers="$(nproc)" \
      hydra.run.dir="$OUT/runs/render_typeset" && touch "$OUT/renders/typeset_done"; }
