#!/usr/bin/env bash
# The whole model factory on the tiny model, on CPU, each step the stage's own command with its own run
# dir under OUT (default outputs/factory):
#   synthetic pages (train + held-out bench) → SFT → two GRPO seeds from the SFT model → soup → FP8 →
#   compare → pipeline bench mode (SFT and soup) → olmOCR-bench scores, the two compared
# Re-running skips what is done: training resumes (and finds a finished run finished), bench mode keeps
# the pages it already wrote; synthetic pages and released folders (written whole, renamed when
# complete) are made once; the comparison and the scores are made again only when what they read is newer.
#   bash scripts/factory.sh [OUT]
# Sizes (environment): TRAIN_PAGES=48 BENCH_PAGES=12 SFT_STEPS=40 GRPO_STEPS=4 COMPARE_PAGES=4.
# Production: the same commands with +experiment=sft_qwen25 / grpo_qwen25, real data, cluster=slurm or
# cluster=beaker, server=vllm (docs/factory.md).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:-outputs/factory}")
PY=${PYTHON:-.venv/bin/python}
step() { echo; echo "== $* ($(date +%T))"; }
newer() { [ -e "$1" ] && for input in "${@:2}"; do [ "$1" -nt "$input" ] || return 1; done; }
# The tiny model's folder as any Hugging Face checkpoint is served and trained: its family and image size.
AS_FOLDER=(model=olmocr2_7b model.dtype=float32 model.image_min_pixels=3136 model.image_max_pixels=65536)
# SFT renders its pages at 256 px (what the tiny processor keeps of them anyway); every later stage presents pages
# as the model it loads was trained to read them (the model folder's olmocr_pages.json).
TRAIN_PAGES=${TRAIN_PAGES:-48} BENCH_PAGES=${BENCH_PAGES:-12} SFT_STEPS=${SFT_STEPS:-40} GRPO_STEPS=${GRPO_STEPS:-4}
COMPARE_PAGES=${COMPARE_PAGES:-4}

step "synthetic pages: training pages, and a held-out bench (another seed, other page numbers)"
[ -e "$OUT/pages/train/synth.jsonl" ] ||
  $PY -m olmocr.synth num_pages="$TRAIN_PAGES" seed=1 out_dir="$OUT/pages/train" hydra.run.dir="$OUT/runs/synth_train"
[ -e "$OUT/pages/bench/synth.jsonl" ] ||
  $PY -m olmocr.synth num_pages="$BENCH_PAGES" seed=2 first_index=100000 out_dir="$OUT/pages/bench" \
    hydra.run.dir="$OUT/runs/synth_bench"

step "SFT of the tiny model on the training pages, scored on the held-out bench at each eval"
$PY -m olmocr.train data=folder "data.roots=[$OUT/pages/train/pdfs]" data.steps.render.longest_side=256 \
  trainer.max_duration.value="$SFT_STEPS" \
  eval.bench.root="$OUT/pages/bench" run_name=factory_sft hydra.run.dir="$OUT/sft"
[ -e "$OUT/release/sft" ] ||
  $PY -m olmocr.prepare "sources=[$OUT/sft]" output="$OUT/release/sft" hydra.run.dir="$OUT/runs/prepare_sft"

step "GRPO: two seeds from the SFT model, rewarded by the training pages' unit tests"
$PY -m olmocr.train -m +experiment=grpo_tiny seed=1,2 "${AS_FOLDER[@]}" model.name_or_path="$OUT/release/sft" \
  data.train.synth.root="$OUT/pages/train" eval.bench.root="$OUT/pages/bench" trainer.max_duration.value="$GRPO_STEPS" \
  hydra.sweep.dir="$OUT/grpo" \
  'hydra.sweep.subdir=seed${seed}'

step "soup of the seeds, FP8, and how closely FP8 decodes like the soup"
[ -e "$OUT/release/soup" ] ||
  $PY -m olmocr.prepare "sources=[$OUT/grpo/seed1,$OUT/grpo/seed2]" output="$OUT/release/soup" \
    hydra.run.dir="$OUT/runs/prepare_soup"
[ -e "$OUT/release/fp8" ] ||
  $PY -m olmocr.compress source="$OUT/release/soup" output="$OUT/release/fp8" hydra.run.dir="$OUT/runs/compress"
newer "$OUT/compare/compare.json" "$OUT/release/soup" "$OUT/release/fp8" ||
  $PY -m olmocr.compare reference="$OUT/release/soup" candidate="$OUT/release/fp8" pages.root="$OUT/pages/bench" \
    pages.count="$COMPARE_PAGES" max_flagged="$COMPARE_PAGES" hydra.run.dir="$OUT/compare"

step "pipeline bench mode on the held-out bench: the SFT model and the soup"
for model in sft soup; do
  $PY -m olmocr.pipeline.bench "${AS_FOLDER[@]}" model.name_or_path="$OUT/release/$model" \
    bench_dir="$OUT/pages/bench" candidates="$OUT/candidates/$model" progress=false \
    hydra.run.dir="$OUT/runs/bench_mode_$model"
done

step "olmOCR-bench: the soup against the SFT model"
newer "$OUT/bench/results.json" "$OUT/candidates/sft" "$OUT/candidates/soup" ||
  $PY -m olmocr.bench bench_dir="$OUT/pages/bench" "candidates=[$OUT/candidates/sft,$OUT/candidates/soup]" \
    hydra.run.dir="$OUT/bench"
echo
echo "factory done: $OUT/bench/report.html, $OUT/sft/plots, $OUT/grpo/seed1/plots, $OUT/compare/compare.md"
