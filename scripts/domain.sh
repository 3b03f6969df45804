#!/usr/bin/env bash
# Fine-tune on your own documents, each step the stage's own command with its own run dir under OUT:
#   your PDFs → a teacher model's readings (the pipeline) → training pages (pipeline.export) → your pages
#   to train on and a held-out bench of your own pages, tests written from the teacher's readings
#   (bench.split) → LoRA fine-tune of the model, the best checkpoint by that bench (train) → a released
#   folder (prepare step=best) → the base model and the fine-tuned one read the held-out pages
#   (pipeline.bench) → olmOCR-bench scores of both on your pages (bench)
#   bash scripts/domain.sh PDF_FOLDER [OUT]
# PDFs that all have their .md beside them (pages you labelled, or the bundled data/sample/train/pdfs) need
# no teacher. Defaults: the tiny model on CPU as base and fine-tuned model (and as teacher, though it reads
# no page: give TEACHER), end to end in minutes; the figures then say nothing of the model, only show the
# path. On GPUs (docs/domain.md):
#   TEACHER='+experiment=pipeline_olmocr2'   BASE='model=olmocr2_7b'   RELEASED='model=olmocr2_7b'
#   TUNE='+experiment=lora_olmocr2'          SERVE='server=vllm'
# Environment: TEACHER (pipeline overrides: which model reads your PDFs, any server=), BASE (the model to
# fine-tune and compare against), RELEASED (how a released folder of BASE's family is loaded), TUNE
# (training overrides), SERVE (the server bench mode uses), HELDOUT (share of documents held out, 0.2),
# STEPS (training steps, when TUNE does not set them). Re-running skips what is done.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: bash scripts/domain.sh PDF_FOLDER [OUT]" >&2; exit 2; }
PDFS=$(realpath -m "$1")
OUT=$(realpath -m "${2:-outputs/domain}")
[ -d "$PDFS" ] || [[ "$PDFS" == s3://* ]] || { echo "error: $1 is not a folder of PDFs" >&2; exit 2; }
PY=${PYTHON:-.venv/bin/python}
step() { echo; echo "== $* ($(date +%T))"; }
TEACHER_GIVEN=${TEACHER+set}
read -r -a TEACHER <<< "${TEACHER:-server=vllm convert.guided=true}"
read -r -a BASE <<< "${BASE:-model=tiny}"
# The tiny model's released folder as any Hugging Face checkpoint is loaded: its family and image size.
read -r -a RELEASED <<< "${RELEASED:-model=olmocr2_7b model.dtype=float32 model.image_min_pixels=3136 model.image_max_pixels=65536}"
STEPS=${STEPS:-20}
read -r -a TUNE <<< "${TUNE:-finetune=lora optimizer.lr=1e-3 trainer.max_duration.value=$STEPS trainer.eval_interval=$(( STEPS >= 4 ? STEPS / 4 : 1 ))}"
read -r -a SERVE <<< "${SERVE:-}"

PAGES="$OUT/pages"
unlabelled=$(find "$PDFS" -name '*.pdf' | while read -r pdf; do [ -e "${pdf%.pdf}.md" ] || echo "$pdf"; done | wc -l)
if [ -d "$PDFS" ] && [ -z "$TEACHER_GIVEN" ] && [ "$unlabelled" -eq 0 ]; then
  step "every PDF has its .md beside it (pages you labelled): no teacher, these are the pages"
  PAGES="$PDFS"
else
  step "the teacher reads your PDFs (page results kept for export)"
  $PY -m olmocr.pipeline workspace="$OUT/workspace" "pdfs=[$PDFS]" work.page_results=true progress=false \
    "${TEACHER[@]}" hydra.run.dir="$OUT/runs/teacher"
  $PY -m olmocr.pipeline.export workspace="$OUT/workspace" out_dir="$PAGES" hydra.run.dir="$OUT/runs/export"
  [ -n "$(find "$PAGES" -name '*.md' 2>/dev/null | head -1)" ] || {
    echo "error: the teacher read none of your pages (every page fell back to its text layer: $OUT/runs/teacher);" \
      "set TEACHER to a model that reads them (the tiny model on CPU reads none)" >&2; exit 1; }
fi

step "your pages: to train on, and a held-out bench with tests from the teacher's readings"
[ -e "$OUT/split/heldout/heldout.jsonl" ] ||
  $PY -m olmocr.bench.split pages="$PAGES" out_dir="$OUT/split" heldout="${HELDOUT:-0.2}" \
    hydra.run.dir="$OUT/runs/split"

step "fine-tune, scored on the held-out bench at each eval, the best checkpoint kept"
$PY -m olmocr.train "${BASE[@]}" data=folder "data.roots=[$OUT/split/train]" data.eval_fraction=0 \
  eval.bench.root="$OUT/split/heldout" \
  checkpoint.keep_best=eval/bench/overall "${TUNE[@]}" run_name=domain hydra.run.dir="$OUT/train"
[ -e "$OUT/release/finetuned" ] ||
  $PY -m olmocr.prepare "sources=[$OUT/train]" step=best output="$OUT/release/finetuned" \
    hydra.run.dir="$OUT/runs/prepare"

step "the base model and the fine-tuned one read the held-out pages"
$PY -m olmocr.pipeline.bench "${BASE[@]}" "${SERVE[@]}" bench_dir="$OUT/split/heldout" \
  candidates="$OUT/candidates/base" progress=false hydra.run.dir="$OUT/runs/bench_mode_base"
$PY -m olmocr.pipeline.bench "${RELEASED[@]}" model.name_or_path="$OUT/release/finetuned" "${SERVE[@]}" \
  bench_dir="$OUT/split/heldout" candidates="$OUT/candidates/finetuned" progress=false \
  hydra.run.dir="$OUT/runs/bench_mode_finetuned"

step "olmOCR-bench on your pages: the fine-tuned model against the base"
$PY -m olmocr.bench bench_dir="$OUT/split/heldout" "candidates=[$OUT/candidates/base,$OUT/candidates/finetuned]" \
  hydra.run.dir="$OUT/bench"
$PY - "$OUT/bench" <<'EOF'
import json, os, sys
out = sys.argv[1]
a, b = (json.load(open(os.path.join(out, name))) for name in ("results.json", "results_b.json"))
print(f"held-out bench of your pages, {a['tests']} tests, {a['scoring']} scoring: base {a['overall']:.1%}, "
      f"fine-tuned {b['overall']:.1%} ({b['overall'] - a['overall']:+.1%}); per test type: {out}/report.html")
for name, r in (("base", a), ("fine-tuned", b)):
    m = r["makeup"]
    cer = f", character error rate {m['cer']:.3f}" if m["cer"] is not None else ""
    print(f"  {name}: the model answered {m['answered']} of {m['pages']} pages ({m['fallback']} text layer, "
          f"{m['empty']} empty){cer}")
if not (a["makeup"]["answered"] and b["makeup"]["answered"]):
    print("  not a comparison of models: a side answered no page, its score is its fallbacks' (the text layer); "
          "set BASE/TEACHER to a model that reads your pages")
EOF
