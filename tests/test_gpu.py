"""Tests that need a CUDA device; conftest skips them elsewhere."""

import json
import os
import subprocess
import sys

import pytest
import torch

from olmocr.config import PROJECT_ROOT
from test_train import losses, train

pytestmark = pytest.mark.gpu


def test_tiny_trains_on_cuda_in_bf16(tmp_path, cache_dir):
    result, out = train(tmp_path, ["trainer.device=cuda", "trainer.precision=bf16", "trainer.max_duration.value=6",
                                   "checkpoint.interval=3", "trainer.eval_interval=3",
                                   "checkpoint.keep_best=eval/bench/overall"])
    got = losses(out)
    assert sorted(got) == list(range(1, 7)) and all(torch.isfinite(torch.tensor(v)) for v in got.values())
    assert os.path.exists(os.path.join(result["checkpoint"], "model", "model.safetensors"))
    evals = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if '"eval"' in line]
    assert [r["step"] for r in evals] == [3, 6] and all(0 <= r["eval/bench/overall"] <= 1 for r in evals)
    assert result["best"]["step"] in (3, 6)


def test_compiled_blocks_train_on_cuda_with_inductor(tmp_path, cache_dir):
    """Inductor's Triton kernels for the blocks, forward and backward, in bf16 (the CPU test runs the same graphs
    without generated kernels)."""
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        _, out = train(tmp_path, ["trainer.device=cuda", "trainer.precision=bf16", "trainer.compile=true",
                                  "trainer.max_duration.value=4", "trainer.eval_interval=2", "checkpoint.interval=null"])
    got = losses(out)
    assert sorted(got) == [1, 2, 3, 4] and all(torch.isfinite(torch.tensor(v)) for v in got.values())
    evals = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if '"eval"' in line]
    assert [r["step"] for r in evals] == [2, 4]


def test_compiled_grpo_trains_on_cuda_with_inductor(tmp_path, cache_dir):
    """GRPO's compiled blocks with inductor's kernels in bf16, generation eager (test_grpo checks the graphs on
    CPU without generated kernels)."""
    from conftest import compiling
    from test_grpo import grpo

    with compiling(recompile_limit=3):
        result, out = grpo(tmp_path, ["trainer.device=cuda", "trainer.precision=bf16", "trainer.compile=true",
                                      "trainer.max_duration.value=2", "checkpoint.interval=null"])
    rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if '"train"' in line]
    assert result["state"]["step"] == 2 and all(torch.isfinite(torch.tensor(r["train/loss"])) for r in rows)


def test_grpo_bench_eval_decodes_with_the_colocated_vllm_engine(tmp_path, cache_dir):
    """algo.generation=vllm_colocate: the bench eval pushes the current weights to trl's vLLM engine and decodes
    the held-out pages with it (engine=vllm insists on it)."""
    pytest.importorskip("vllm")
    from test_grpo import EVALS, grpo

    result, out = grpo(tmp_path, [*EVALS, "trainer.device=cuda", "trainer.precision=bf16", "trainer.max_duration.value=2",
                                  "algo.generation=vllm_colocate", "algo.vllm.gpu_memory_utilization=0.2",
                                  "eval.bench.engine=vllm"])
    evals = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if '"eval"' in line]
    assert [r["step"] for r in evals] == [2] and 0 <= evals[0]["eval/bench/overall"] <= 1
    pages = [json.loads(line) for line in open(os.path.join(out, "bench_eval", "step_000002", "pages.jsonl"))]
    assert len(pages) == 8 and all(p["output_tokens"] > 0 for p in pages)


def test_qwen25_vl_7b_benchmark_reports_mfu(tmp_path):
    proc = subprocess.run(
        [sys.executable, "benchmarks/train_throughput.py", "--arch", "qwen25_vl_7b", "--device", "cuda",
         "--precision", "bf16", "--longest-side", "1288", "--batch-size", "1", "--steps", "3", "--repeats", "1",
         "--no-hf", "--activation-checkpointing", "--peak-tflops", "989"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=1800,
        env=dict(os.environ, OLMOCR_CACHE=str(tmp_path)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "MFU" in proc.stdout


def test_grpo_tiny_on_cuda_in_bf16(tmp_path, cache_dir):
    from test_grpo import grpo, metrics

    result, out = grpo(tmp_path, ["trainer.device=cuda", "trainer.precision=bf16", "trainer.max_duration.value=2"])
    rows = metrics(out)
    assert sorted(rows) == [1, 2] and all("train/rewards/bench/mean" in r for r in rows.values())
    assert result["checkpoint"].endswith("checkpoint-2")


def test_compare_with_vllm_against_transformers(tmp_path, cache_dir, tiny):
    """The vLLM engine of compare: greedy tokens and their probabilities from vLLM, the same prompt tokens
    as the processor's, on the tiny model and on its FP8 version (vLLM reads the compressed folder)."""
    pytest.importorskip("vllm")
    from test_checkpoint_tools import stage

    stage("compress", [f"source={tiny.path}", f"output={tmp_path}/fp8"], tmp_path / "compress")
    for candidate in (tiny.path, f"{tmp_path}/fp8"):
        summary = stage("compare", [f"reference={tiny.path}", f"candidate={candidate}", "engine=vllm", "pages.count=2",
                                    "max_new_tokens=16", "max_flagged=2"], tmp_path / os.path.basename(candidate))
        assert summary["engine"] == "vllm" and summary["tokens"] > 0
        assert summary["prompt_mismatches"] == 0  # vLLM and the processor built the same prompt
        assert all(0 <= r["match_rate"] <= 1 for r in summary["results"])


def test_bench_mode_through_vllm_serve_on_the_fp8_tiny_model(tmp_path, cache_dir, tiny):
    """server=vllm: vllm serve started on the FP8 folder from olmocr.compress, health-checked, every tested
    page converted, the server stopped at the end."""
    pytest.importorskip("vllm")
    from test_checkpoint_tools import stage

    stage("compress", [f"source={tiny.path}", f"output={tmp_path}/fp8"], tmp_path / "compress")
    proc = subprocess.run([sys.executable, "-m", "olmocr.pipeline.bench", "server=vllm", "model=olmocr2_7b",
                           f"model.name_or_path={tmp_path}/fp8", "server.max_model_len=4096",
                           "server.gpu_memory_utilization=0.3", f"candidates={tmp_path}/candidates",
                           "progress=false", f"hydra.run.dir={tmp_path}/run"],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert len(os.listdir(tmp_path / "candidates")) == 8
    assert "vllm serve" in (tmp_path / "run" / "server.log").read_text()


def test_pipeline_through_vllm_serve_with_guided_decoding_on_a_mixed_folder(tmp_path, tiny):
    """server=vllm convert.guided=true over PDFs, images and an archive: vLLM takes the structured_outputs
    regex (its start-up check passes), and no answer of the random model is ever out of the page format:
    an attempt is either read or cut off at max_tokens, never unparseable."""
    pytest.importorskip("vllm")
    import glob
    import json

    from mixed_inputs import build

    build(str(tmp_path / "in"))
    workspace = tmp_path / "ws"
    proc = subprocess.run([sys.executable, "-m", "olmocr.pipeline", f"workspace={workspace}", f"pdfs=[{tmp_path}/in]",
                           "server=vllm", "model=olmocr2_7b", f"model.name_or_path={tiny.path}", "work=ocr",
                           "convert=default", "convert.guided=true", "convert.max_tokens=200",
                           "convert.temperatures=[0.1,0.8]", "work.page_results=true", "server.max_model_len=4096",
                           "server.gpu_memory_utilization=0.3", "progress=false", f"hydra.run.dir={tmp_path}/run"],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    records = [json.loads(line) for path in glob.glob(f"{workspace}/pages/*.jsonl") for line in open(path)]
    assert len(records) == 12
    outcomes = {attempt["outcome"].split(":")[0] for r in records for attempt in r["attempts"]}
    assert outcomes <= {"ok", "cut off at max_tokens=200", "page not upright", "no text layer"}, outcomes
