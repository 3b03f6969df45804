"""The real vLLM engine (its CPU build here, the GPU build on CUDA machines) behind every stage that uses it:
the pipeline's `vllm serve` (command line, guided decoding, bench mode scored by olmocr.bench), GRPO's
server layout (`trl vllm-serve`, started with the command the launchers write) and compare's offline
engine on the tiny model and on its FP8 compression."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import SAMPLE

from olmocr.config import PROJECT_ROOT, compose
from olmocr.pipeline.server import VLLM_DTYPES

# Eager mode: graph capture costs a minute at start and buys nothing for a few pages.
VLLM_SERVER = ["server=vllm", "server.max_model_len=4096", "server.cpu_kv_cache_gib=1",
               "server.extra_args=[--enforce-eager]"]


def vllm_serve_parser():
    """The parser `vllm serve` reads its command line with (the installed vLLM's own)."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
    return parser


def test_the_vllm_serve_command_is_one_the_installed_vllm_accepts(tiny):
    from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args

    from olmocr.config import build

    cfg = compose("pipeline", ["server=vllm", "server.gpu_memory_utilization=0.8", "server.max_num_seqs=64",
                               "server.dtype=float32", "server.extra_args=[--enable-prefix-caching]"])
    server = build(cfg.server, model=tiny)
    server.port = 8765
    command = server.command()
    assert os.path.basename(command[0]) == "vllm" and command[1] == "serve"
    parser = vllm_serve_parser()
    args = parser.parse_args(command[1:])
    validate_parsed_serve_args(args)
    assert (args.model_tag, args.served_model_name, args.port, args.dtype) == (tiny.path, ["olmocr"], 8765, "float32")
    assert (args.max_model_len, args.gpu_memory_utilization, args.max_num_seqs) == (16384, 0.8, 64)
    assert args.limit_mm_per_prompt == {"image": 1, "video": 0} and args.enable_prefix_caching
    # The dtypes a config may name are this vLLM's (validation refuses others before a server starts).
    serve = next(a for a in parser._actions if a.dest == "subparser").choices["serve"]
    assert sorted(next(a for a in serve._actions if "--dtype" in a.option_strings).choices) == list(VLLM_DTYPES)
    # A flag this vLLM does not know fails here, not minutes into a GPU job.
    with pytest.raises(SystemExit):
        parser.parse_args([*command[1:], "--disable-log-requests"])
    # The CPU build reads its KV cache size as whole GiB (a fraction stops it at start): refused here.
    with pytest.raises(ValueError, match=r"server.cpu_kv_cache_gib: Value '0.5' of type 'float' could not be conv"):
        build(compose("pipeline", ["server=vllm", "server.cpu_kv_cache_gib=0.5"]).server, model=tiny)
    with pytest.raises(ValueError, match=r"server.cpu_kv_cache_gib: must be at least 1, or null for vLLM's default, got 0"):
        build(compose("pipeline", ["server=vllm", "server.cpu_kv_cache_gib=0"]).server, model=tiny)


def run_stage(python: str, module: str, args: list[str], cwd, timeout: int = 500) -> str:
    result = subprocess.run([python, "-m", module, *args], cwd=cwd, capture_output=True, text=True,
                            timeout=timeout, env={**os.environ, "PYTHONPATH": PROJECT_ROOT})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


@pytest.mark.integration
@pytest.mark.vllm
def test_the_pipeline_converts_the_sample_pdfs_through_vllm_serve(tmp_path, tiny, warm_python):
    workspace, run_dir = tmp_path / "ws", tmp_path / "run"
    args = [f"workspace={workspace}", f"pdfs=[{SAMPLE}/eval/pdfs]", *VLLM_SERVER,
            f"model.cache_dir={os.path.dirname(tiny.path)}", "progress=false", f"hydra.run.dir={run_dir}"]
    log = run_stage(warm_python, "olmocr.pipeline", args, tmp_path)
    assert "vllm serve (pid" in log and "ready on" in log
    pdfs = sorted(glob.glob(f"{SAMPLE}/eval/pdfs/*.pdf"))
    docs = [json.loads(line) for path in glob.glob(f"{workspace}/results/*.jsonl") for line in open(path)]
    assert sorted(d["metadata"]["Source-File"] for d in docs) == pdfs
    for doc in docs:
        # The engine decoded every page (random weights: answers are not in the page format, so the pages
        # keep their text layers), and counted its tokens.
        assert doc["metadata"]["total-input-tokens"] > 0 and doc["metadata"]["total-output-tokens"] > 0
        assert doc["text"].strip()
    summary = json.loads((run_dir / "run_info.json").read_text())["summary"]
    assert summary["work"]["done"] == 1 and summary["work"]["server_restarts"] == 0


@contextlib.contextmanager
def trl_vllm_serve(tiny, log):
    """GRPO's generation server (`trl vllm-serve`, which runs `vllm serve` with trl's settings) serving the
    tiny model, started with the command our launchers write; its URL."""
    from olmocr.pipeline.server import free_port
    from olmocr.train.vllm_server import vllm_server_command, wait_for_server
    from olmocr.utils.vllm_cpu import server_env

    port = free_port("127.0.0.1")
    command = vllm_server_command(tiny.path, "127.0.0.1", port, max_model_length=4096) + ["--enforce_eager", "true"]
    env = {**os.environ, **server_env(1), "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]}
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None, f"trl vllm-serve exited {proc.returncode}: {log.read_text()[-3000:]}"
            try:
                wait_for_server("127.0.0.1", port, 5, command)
                break
            except ValueError:
                assert time.monotonic() < deadline, log.read_text()[-3000:]
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.integration
@pytest.mark.vllm
def test_one_vllm_server_for_the_grpo_server_layout_a_wrong_model_name_and_guided_bench(tmp_path, tiny, processor):
    """One `trl vllm-serve` start (most of what these cost) serves three checks, in one test so that one
    worker starts it once."""
    for folder in ("typo", "bench"):
        os.makedirs(tmp_path / folder)
    with trl_vllm_serve(tiny, tmp_path / "server.log") as url:
        grpo_server_layout_generates_on_pages_as_the_trainer_sees_them(url, tiny, processor)
        a_model_name_vllm_does_not_serve_is_one_line_before_any_claim(url, tmp_path / "typo")
        guided_bench_pages_are_in_the_page_format_and_scored(url, tiny, tmp_path / "bench")


def grpo_server_layout_generates_on_pages_as_the_trainer_sees_them(trl_server, tiny, processor):
    """What a CPU allows of the server layout: trl's client sends a page as GRPO's trainer does; the server
    builds the same prompt tokens as the trainer's processor, and samples from the same distribution (its
    log-probabilities are the tiny model's, to bfloat16's precision: the CPU build computes in it). The
    weight sync is NCCL's and needs CUDA: GRPO refuses the layout without it (test_grpo), and so does trl."""
    import torch

    from olmocr.formats.prompts import build_prompt
    from olmocr.data.steps import RenderPage
    from olmocr.train.grpo import trainer_class

    # As on a worker that ran a GRPO test generating with transformers first: its trl import, without vLLM,
    # must not leave trl's client unable to reach a server later in the same process.
    trainer_class("transformers")
    from trl.generation.vllm_client import VLLMClient

    image = RenderPage(448)({"pdf_path": f"{SAMPLE}/eval/pdfs/synth_s0_01000.pdf", "page": 1})["image"]
    messages = [{"role": "user", "content": [{"type": "text", "text": build_prompt("v4", "")},
                                             {"type": "image", "image": image}]}]
    client = VLLMClient(base_url=trl_server, connection_timeout=10)
    assert client.model == tiny.path
    out = client.chat([messages], temperature=1.0, max_tokens=16, logprobs=0, generation_kwargs={"seed": 0})
    inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                           return_tensors="pt")
    assert out["prompt_ids"][0] == inputs["input_ids"][0].tolist()
    completion = out["completion_ids"][0]
    assert len(completion) == 16
    model = tiny.load_model()
    model.float()
    ids = torch.tensor([out["prompt_ids"][0] + completion])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=inputs["pixel_values"],
                       image_grid_thw=inputs["image_grid_thw"]).logits[0, -len(completion) - 1:-1]
    expected = torch.log_softmax(logits.float(), -1)[torch.arange(len(completion)), torch.tensor(completion)]
    served = torch.tensor([token[0] for token in out["logprobs"][0]])
    assert torch.allclose(served, expected, atol=0.05), (served, expected)
    with pytest.raises(NotImplementedError, match="needs a CUDA device"):
        client.init_communicator(device="cpu")


def a_model_name_vllm_does_not_serve_is_one_line_before_any_claim(trl_server, tmp_path):
    from conftest import write_pdf

    from olmocr.pipeline.__main__ import run

    workspace = tmp_path / "ws"
    pdf = write_pdf(str(tmp_path / "a.pdf"), ["A page"])
    with pytest.raises(ValueError, match=rf"^the server at {trl_server}/v1 does not answer page requests for model "
                                         r"'olmocr-typo': HTTP 404: .*olmocr-typo"):
        run(compose("pipeline", [f"workspace={workspace}", f"pdfs=[{pdf}]", "server=external",
                                 f"server.url={trl_server}/v1", "server.model_name=olmocr-typo", "progress=false"]),
            str(tmp_path / "run"))
    assert not glob.glob(f"{workspace}/claims/*") and not glob.glob(f"{workspace}/done/*")


def guided_bench_pages_are_in_the_page_format_and_scored(trl_server, tiny, tmp_path):
    """pipeline.bench against a running vLLM server (GRPO's), guided."""
    from olmocr.bench.__main__ import run as bench
    from olmocr.pipeline.bench import candidate_path

    candidates, run_dir = tmp_path / "candidates", tmp_path / "run"
    args = [f"bench_dir={SAMPLE}/eval", f"candidates={candidates}", "server=external", f"server.url={trl_server}/v1",
            f"server.model_name={tiny.path}", "convert.guided=true", "convert.max_tokens=120",
            "convert.temperatures=[0]", f"model.cache_dir={os.path.dirname(tiny.path)}", "progress=false",
            f"hydra.run.dir={run_dir}"]
    run_stage(sys.executable, "olmocr.pipeline.bench", args, tmp_path)
    pages = [json.loads(line) for line in open(run_dir / "pages.jsonl")]
    assert sorted(p["pdf"] for p in pages) == sorted(os.path.basename(p) for p in glob.glob(f"{SAMPLE}/eval/pdfs/*.pdf"))
    # Constrained to the page format, the random model's answers open with front matter that parses: no
    # attempt is unparseable (without guidance every one is: test_pipeline_ocr's transformers serve runs).
    outcomes = [attempt["outcome"] for page in pages for attempt in page["attempts"]]
    assert outcomes and not [o for o in outcomes if o.startswith("unparseable")], outcomes
    for page in pages:
        written = open(candidate_path(str(candidates), page["pdf"], page["page"], 1), encoding="utf-8").read()
        assert written == page["text"]
        # A reading that parsed is kept (upright or not); only answers cut off at max_tokens fall back.
        parsed = [a for a in page["attempts"] if a["outcome"] == "ok" or a["outcome"].startswith("page not upright")]
        assert page["fallback"] == (not parsed)
    out = tmp_path / "score"
    os.makedirs(out)
    summary = bench(compose("bench", [f"bench_dir={SAMPLE}/eval", f"candidates={candidates}", "html=false"]), str(out))
    assert summary["missing_pages"] == [] and summary["tests"] > len(pages) and 0 <= summary["overall"] <= 1


@pytest.mark.integration
@pytest.mark.vllm
def test_compare_with_vllm_decodes_as_transformers_and_serves_the_fp8_compression(tmp_path, tiny, warm_python):
    """vLLM's offline engine against transformers: the tiny model token for token (float32 in both), and the
    model `olmocr.compress` wrote, loaded by vLLM as compressed-tensors FP8 (both in one process: two engines,
    one after the other)."""
    from olmocr.compress import run as compress

    fp8 = tmp_path / "fp8"
    compress(compose("compress", [f"source={tiny.path}", f"output={fp8}"]), str(tmp_path / "compress"))
    args = ["-m", f"reference={tiny.path}", f"candidate={tiny.path},{fp8}", "engine=vllm", "dtype=float32",
            "pages.count=3", "max_new_tokens=24", f"hydra.sweep.dir={tmp_path}/sweep"]
    run_stage(warm_python, "olmocr.compare", args, tmp_path)
    same, quantized = (json.load(open(tmp_path / "sweep" / str(job) / "compare.json")) for job in (0, 1))
    assert same["engine"] == quantized["engine"] == "vllm"
    # vLLM built the prompt the reference's processor builds, image tokens and all, and chose the same tokens.
    assert same["prompt_mismatches"] == quantized["prompt_mismatches"] == 0
    assert same["tokens"] == 72 and same["match_rate"] == 1.0 and same["max_gap"] < 1e-4
    assert json.load(open(fp8 / "config.json"))["quantization_config"]["quant_method"] == "compressed-tensors"
    assert quantized["tokens"] == 72 and 0.5 < quantized["match_rate"] < 1 and quantized["passed"]
