"""The whole model factory on the tiny model (scripts/factory.sh), end to end on CPU: every stage's
artifact exists and loads; run again, it skips what is done."""

from __future__ import annotations

import glob
import json
import os
import subprocess

import pytest
import torch

from olmocr.config import PROJECT_ROOT


# Smaller than the script's defaults: every stage still runs on real pages, for fewer of them and fewer steps.
SIZES = {"TRAIN_PAGES": 8, "BENCH_PAGES": 3, "SFT_STEPS": 8, "GRPO_STEPS": 2, "COMPARE_PAGES": 2}


def factory(out, python: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": python, **{k: str(v) for k, v in SIZES.items()}}
    return subprocess.run(["bash", "scripts/factory.sh", str(out)], cwd=PROJECT_ROOT, env=env, capture_output=True,
                          text=True, timeout=1200)


@pytest.mark.integration
def test_the_factory_runs_end_to_end_and_reruns_as_a_no_op(tmp_path, cache_dir, warm_python):
    from olmocr.models import HubModel

    out = tmp_path / "factory"
    proc = factory(out, warm_python)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    bench = SIZES["BENCH_PAGES"]
    assert len(glob.glob(f"{out}/pages/train/pdfs/*.pdf")) == SIZES["TRAIN_PAGES"]
    assert len(glob.glob(f"{out}/pages/bench/pdfs/*.pdf")) == bench
    assert {"loss.png", "lr.png"} <= set(os.listdir(out / "sft" / "plots"))
    for seed in ("seed1", "seed2"):
        assert os.path.exists(out / "grpo" / seed / "plots" / "rewards.png")
        assert glob.glob(f"{out}/grpo/{seed}/checkpoints/checkpoint-{SIZES['GRPO_STEPS']}")
    from safetensors.torch import load_file

    last = f"checkpoint-{SIZES['GRPO_STEPS']}"
    a, b = (load_file(out / "grpo" / seed / "checkpoints" / last / "model.safetensors")
            for seed in ("seed1", "seed2"))
    assert any(not torch.equal(a[k], b[k]) for k in a)  # two seeds, two runs: a soup of something
    provenance = json.load(open(out / "release" / "soup" / "provenance.json"))
    assert len(provenance["sources"]) == 2
    for name in ("sft", "soup"):  # released folders load as Hugging Face models
        model = HubModel(str(out / "release" / name), family="qwen2_5_vl", dtype="float32").load_model()
        assert sum(p.numel() for p in model.parameters()) > 0
    fp8 = json.load(open(out / "release" / "fp8" / "config.json"))
    assert fp8["quantization_config"]["quant_method"] == "compressed-tensors"
    assert json.load(open(out / "compare" / "compare.json"))["passed"]
    for name in ("sft", "soup"):
        assert len(glob.glob(str(out / "candidates" / name / "*.md"))) == bench
        assert os.path.exists(out / "candidates" / name / "answers.jsonl")  # which outputs the model wrote
    scores = json.load(open(out / "bench" / "results.json"))
    assert scores["tests"] > bench and scores["missing_pages"] == []
    assert json.load(open(out / "bench" / "compare.json"))["comparisons"][0]["b"] == str(out / "candidates" / "soup")
    assert os.path.getsize(out / "bench" / "report.html") > 0
    # Again: nothing is made twice.
    made = {p: os.path.getmtime(p) for p in (out / "pages/train/synth.jsonl", out / "release/soup/model.safetensors",
                                             out / "release/fp8/config.json", out / "compare/compare.json",
                                             out / "bench/results.json", next((out / "candidates/soup").iterdir()))}
    again = factory(out, warm_python)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    assert {p: os.path.getmtime(p) for p in made} == made
    log = again.stdout + again.stderr
    assert f"0 to convert, {bench} already in" in log
    assert log.count("where this run stops: nothing to train") == 3  # SFT and both GRPO seeds, found finished
