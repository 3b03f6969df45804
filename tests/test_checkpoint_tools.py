"""prepare (merge, soup), compress (FP8) and compare on real tiny-model checkpoints trained here."""

import json
import os
import subprocess

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file

from conftest import SAMPLE, built_once
from olmocr.config import PROJECT_ROOT, compose

LANGUAGE_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def stage(name, overrides, out):
    module = __import__(f"olmocr.{name}", fromlist=["run"])
    return module.run(compose(name, overrides), str(out))


@pytest.fixture(scope="session")
def grpo_runs(tmp_path_factory, cache_dir):
    """Two GRPO seeds of the tiny model, three steps each; the checkpoints of steps 2 and 3 are kept. Trained
    once per session (the tests only read them)."""
    from olmocr.train.__main__ import run

    def train(root):
        for seed in (1, 2):
            run(compose("train", ["+experiment=grpo_tiny", f"seed={seed}", "trainer.max_duration.value=3",
                                  "checkpoint.interval=1", "trainer.eval_interval=null",
                                  "checkpoint.keep_best=null", "callbacks.plots=null"]), str(root / f"seed{seed}"))

    root = built_once(tmp_path_factory, "grpo_seeds", train)
    return [os.path.join(root, f"seed{seed}") for seed in (1, 2)]


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory, cache_dir):
    from olmocr.train.__main__ import run

    out = str(tmp_path_factory.mktemp("lora") / "run")
    run(compose("train", ["finetune=lora", "optimizer.lr=1e-2", "trainer.max_duration.value=2",
                          "checkpoint.interval=null", "trainer.eval_interval=null", "callbacks.plots=null",
                          "data.steps.render.longest_side=256"]), out)
    return out


@pytest.fixture(scope="session")
def fp8(tmp_path_factory, grpo_runs):
    """The tiny model's GRPO seed 1, FP8_DYNAMIC (compressed once per session)."""
    out = built_once(tmp_path_factory, "grpo_seed1_fp8",
                     lambda root: stage("compress", [f"source={grpo_runs[0]}", f"output={root}/model"], root))
    return os.path.join(out, "model")


def page_inputs(processor):
    from olmocr.checkpoints.pages import choose_pages, model_inputs, render_pages

    steps = compose("compare", ["reference=x", "candidate=y"]).steps
    (page,) = render_pages(choose_pages(os.path.join(SAMPLE, "eval"), 1), dict(steps))
    return model_inputs(processor, page)


def test_soup_of_two_grpo_seeds_is_the_fp32_mean(grpo_runs, tmp_path):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    out = tmp_path / "soup"
    record = stage("prepare", [f"sources=[{grpo_runs[0]},{grpo_runs[1]}]", f"output={out}", "step=2"], tmp_path)
    a, b = (load_file(os.path.join(run, "checkpoints", "checkpoint-2", "model.safetensors")) for run in grpo_runs)
    souped = load_file(out / "model.safetensors")
    assert souped.keys() == a.keys()
    for name in a:
        assert torch.equal(souped[name], ((a[name].float() + b[name].float()) / 2).to(a[name].dtype)), name
    assert any(not torch.equal(a[name], b[name]) for name in a)  # two seeds: there was something to average
    # No training state, a processor, and what it came from.
    files = set(os.listdir(out))
    assert not files & {"optimizer.pt", "scheduler.pt", "trainer_state.json", "rng_state.pth", "training_args.bin"}
    assert {"config.json", "generation_config.json", "processor_config.json", "tokenizer.json"} <= files
    # How the seeds' pages were presented, kept for the stages that serve the soup.
    trained = json.load(open(os.path.join(grpo_runs[0], "checkpoints", "checkpoint-2", "olmocr_pages.json")))
    assert json.loads((out / "olmocr_pages.json").read_text()) == trained
    assert trained["steps"]["olmocr.data.steps.BuildPrompt"] == {"version": "v4"}
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance == record and provenance["operation"] == "soup"
    assert [s["step"] for s in provenance["sources"]] == [2, 2]
    assert [s["weight"] for s in provenance["sources"]] == [0.5, 0.5]
    assert provenance["sources"][0]["weights_sha256"] != provenance["sources"][1]["weights_sha256"]
    assert provenance["git"]["commit"] and provenance["packages"]["torch"] == torch.__version__.split("+")[0]
    # It loads as a model anyone can serve, and generates.
    model = AutoModelForImageTextToText.from_pretrained(out)
    processor = AutoProcessor.from_pretrained(out)
    inputs = page_inputs(processor)
    generated = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert generated.shape[1] > inputs["input_ids"].shape[1]
    # Weighted, from the newest checkpoints (step 3), into a folder that exists only with overwrite=true.
    with pytest.raises(ValueError, match="exists and is not empty"):
        stage("prepare", [f"sources=[{grpo_runs[0]},{grpo_runs[1]}]", f"output={out}"], tmp_path)
    record = stage("prepare", [f"sources=[{grpo_runs[0]},{grpo_runs[1]}]", f"output={out}", "weights=[3,1]",
                               "overwrite=true"], tmp_path)
    assert [s["step"] for s in record["sources"]] == [3, 3] and record["sources"][0]["weight"] == 0.75
    a, b = (load_file(os.path.join(run, "checkpoints", "checkpoint-3", "model.safetensors")) for run in grpo_runs)
    souped = load_file(out / "model.safetensors")
    assert all(torch.equal(souped[n], ((a[n].float() * 3 + b[n].float()) / 4).to(a[n].dtype)) for n in a)


def test_merged_lora_gives_the_adapter_models_logits(lora_run, tiny, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor

    out = tmp_path / "merged"
    record = stage("prepare", [f"sources=[{lora_run}]", f"output={out}"], tmp_path)
    assert record["operation"] == "merge" and record["sources"][0]["kind"] == "adapter"
    presented = json.loads((out / "olmocr_pages.json").read_text())["steps"]  # the adapter's training pages
    assert presented["olmocr.data.steps.RenderPage"] == {"longest_side": 256}
    assert record["sources"][0]["base"]["weights_sha256"] and record["sources"][0]["adapter_weights_sha256"]
    assert not (out / "adapter_config.json").exists()
    merged = AutoModelForImageTextToText.from_pretrained(out).eval()
    adapter = os.path.join(lora_run, "checkpoints", "step_000002", "model")
    with_adapter = PeftModel.from_pretrained(tiny.load_model(), adapter).eval()
    inputs = page_inputs(AutoProcessor.from_pretrained(out))
    with torch.no_grad():
        expected, got = with_adapter(**inputs).logits, merged(**inputs).logits
        base = tiny.load_model()(**inputs).logits
    assert (got - expected).abs().max() <= 1e-5
    assert (base - expected).abs().max() > 1e-3  # the adapter changes the model


def test_s3_sources_and_output_round_trip(grpo_runs, s3_server, tmp_path):
    import boto3

    from olmocr.utils.io import filesystem

    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket="ckpt")
    fs = filesystem("s3://ckpt")
    for seed, run in enumerate(grpo_runs):
        fs.put(os.path.join(run, "checkpoints"), f"s3://ckpt/runs/seed{seed}/checkpoints", recursive=True)
    record = stage("prepare", ["sources=[s3://ckpt/runs/seed0,s3://ckpt/runs/seed1]", "output=s3://ckpt/released"],
                   tmp_path / "run")
    assert [s["checkpoint"] for s in record["sources"]] == [f"s3://ckpt/runs/seed{i}/checkpoints/checkpoint-3"
                                                            for i in (0, 1)]
    local = tmp_path / "local"
    stage("prepare", [f"sources=[{grpo_runs[0]},{grpo_runs[1]}]", f"output={local}"], tmp_path / "run2")
    fs.get("s3://ckpt/released", str(tmp_path / "back"), recursive=True)
    back = tmp_path / "back"
    assert sorted(os.listdir(back)) == sorted(os.listdir(local))
    assert (back / "model.safetensors").read_bytes() == (local / "model.safetensors").read_bytes()
    assert json.loads((back / "provenance.json").read_text())["weights_sha256"] == record["weights_sha256"]
    # An upload stopped part way (its provenance.json, written last, missing) is named as such, then replaced.
    fs.rm("s3://ckpt/released/provenance.json")
    with pytest.raises(ValueError, match=r"^output: s3://ckpt/released holds an unfinished upload \(no provenance.json"):
        stage("prepare", ["sources=[s3://ckpt/runs/seed0,s3://ckpt/runs/seed1]", "output=s3://ckpt/released"],
              tmp_path / "run3")
    stage("prepare", ["sources=[s3://ckpt/runs/seed0,s3://ckpt/runs/seed1]", "output=s3://ckpt/released",
                      "overwrite=true"], tmp_path / "run4")
    assert fs.exists("s3://ckpt/released/provenance.json")


@pytest.mark.integration
def test_release_stages_wait_out_storage_that_stops_answering_and_stop_in_one_line_past_their_patience(
        grpo_runs, s3_server, tmp_path, caplog, monkeypatch):
    """Outages met mid-run, through a proxy: one as the second source's weights are first read, one as the
    souped weights are put in place. Each read and upload waits and is made again; the result is the soup a
    run without outages makes. Past ``storage_wait_s`` the stage stops with the place and the wait, and the
    output stays recognisably unfinished. The client's own retries are off, so that short outages outlast
    them, as long ones do theirs."""
    import boto3

    from olmocr.faults import Unreachable
    from support.faultproxy import FaultProxy
    from olmocr.utils.io import filesystem

    boto3.client("s3", endpoint_url=s3_server).create_bucket(Bucket="ckpt")
    fs = filesystem("s3://ckpt")
    for seed, run in enumerate(grpo_runs):
        fs.put(os.path.join(run, "checkpoints"), f"s3://ckpt/runs/seed{seed}/checkpoints", recursive=True)
    sources = "sources=[s3://ckpt/runs/seed0,s3://ckpt/runs/seed1]"
    with FaultProxy(s3_server, rate=0.0) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
        proxy.outage_when("GET", r"/runs/seed1/checkpoints/checkpoint-3/model.safetensors$", 2)
        proxy.outage_when("PUT", r"/released/model.safetensors", 2)
        record = stage("prepare", [sources, "output=s3://ckpt/released"], tmp_path / "run")
        assert proxy.counts["outage", "GET"] and proxy.counts["outage", "PUT"]
        waited = [r.getMessage() for r in caplog.records if r.name == "olmocr.io"]
        for place in ("runs/seed1/checkpoints/checkpoint-3/model.safetensors", "released/model.safetensors"):
            # (other requests made during an outage wait too: the upload runs beside the next reads)
            assert any(m.startswith(f"s3://ckpt/{place}: the storage answers again, after ") for m in waited), waited

        proxy.outage_when("PUT", r"/unfinished/config.json", 600)
        # (the place named is the first request to give up: the upload, or a read made beside it)
        with pytest.raises(Unreachable, match=r"^s3://ckpt/\S+: the storage did not answer for \d+ s \("):
            stage("prepare", [sources, "output=s3://ckpt/unfinished", "storage_wait_s=1"], tmp_path / "run2")
    # Credentials that read but do not write are refused before any weight is read (a read of one would be too).
    with FaultProxy(s3_server, rate=1.0, faults=("access_denied",), methods=("PUT", "GET"),
                    paths=r"/readonly/|\.safetensors") as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
        with pytest.raises(Unreachable, match=r"^s3://ckpt/readonly/.write-check: the storage refused the credentials"):
            stage("prepare", [sources, "output=s3://ckpt/readonly"], tmp_path / "run4")
    local = tmp_path / "local"
    assert stage("prepare", [f"sources=[{grpo_runs[0]},{grpo_runs[1]}]", f"output={local}"],
                 tmp_path / "run3")["weights_sha256"] == record["weights_sha256"]
    assert fs.cat_file("s3://ckpt/released/model.safetensors") == (local / "model.safetensors").read_bytes()
    assert not fs.exists("s3://ckpt/unfinished/provenance.json")


def test_mismatched_architectures_fail_naming_the_tensor(grpo_runs, cache_dir, tmp_path):
    from olmocr.models import TinyModel

    other = TinyModel(intermediate_size=96, cache_dir=os.path.join(cache_dir, "models")).path
    with pytest.raises(ValueError) as info:
        stage("prepare", [f"sources=[{grpo_runs[0]},{other}]", f"output={tmp_path}/out"], tmp_path)
    message = str(info.value)
    assert "\n" not in message and message.startswith("sources[1]: tensor model.layers.0.mlp.down_proj.weight has "
                                                      "shape [64, 96], sources[0]'s has [64, 128]")
    assert not os.path.exists(tmp_path / "out") and not os.path.exists(tmp_path / "out.partial")
    with pytest.raises(ValueError, match=r"sources\[0\]: .* holds no model"):
        stage("prepare", [f"sources=[{tmp_path}]", f"output={tmp_path}/out"], tmp_path)
    with pytest.raises(ValueError, match=r"no complete checkpoint at step 7 \(it has 2, 3\)"):
        stage("prepare", [f"sources=[{grpo_runs[0]}]", f"output={tmp_path}/out", "step=7"], tmp_path)


def test_processor_files_come_from_processor_when_a_checkpoint_has_none(grpo_runs, tiny, tmp_path):
    import shutil

    from transformers import AutoProcessor

    bare = tmp_path / "bare"
    shutil.copytree(os.path.join(grpo_runs[0], "checkpoints", "checkpoint-3"), bare)
    for name in os.listdir(bare):
        if name.startswith(("processor", "preprocessor", "tokenizer", "chat_template")):
            os.remove(bare / name)
    with pytest.raises(ValueError, match=r"has no processor files .* give processor=<folder or hub id>"):
        stage("prepare", [f"sources=[{bare}]", f"output={tmp_path}/out"], tmp_path)
    record = stage("prepare", [f"sources=[{bare}]", f"output={tmp_path}/out", f"processor={tiny.path}"], tmp_path)
    assert record["operation"] == "copy" and "tokenizer.json" in record["files"]
    assert (bare / "optimizer.pt").exists() and not (tmp_path / "out" / "optimizer.pt").exists()
    reloaded = AutoProcessor.from_pretrained(tmp_path / "out")
    assert reloaded.tokenizer.get_vocab() == tiny.load_processor().tokenizer.get_vocab()
    assert (tmp_path / "out" / "model.safetensors").read_bytes() == (bare / "model.safetensors").read_bytes()


@pytest.mark.integration
def test_every_stage_that_loads_a_model_presents_pages_as_it_was_trained(lora_run, tmp_path, warm_python):
    """The merged adapter was trained on pages rendered at 256 px: the pipeline, its bench mode, compress and
    training from it present pages at 256 (their configs say 1288 or 512); a size given on the command line wins,
    with one warning."""
    out = tmp_path / "released"
    stage("prepare", [f"sources=[{lora_run}]", f"output={out}"], tmp_path)
    served = ["model=qwen25_vl_7b", f"model.name_or_path={out}", "server=vllm", "convert=default", "dry_run=true"]

    def printed(stdout: str):  # the dry run's config, without the log lines before it
        return OmegaConf.create("\n".join(line for line in stdout.splitlines() if not line.startswith("[")))

    def command(module, *args):
        return subprocess.run([warm_python, "-m", module, *args, f"hydra.run.dir={tmp_path / 'runs' / module}"],
                              cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)

    for module, key in (("olmocr.pipeline", "convert.steps"), ("olmocr.pipeline.bench", "convert.steps"),
                        ("olmocr.compress", "steps"), ("olmocr.train", "data.steps")):
        args = ([f"source={out}", f"output={tmp_path / 'fp8'}", "dry_run=true"] if module == "olmocr.compress" else
                ["model=qwen25_vl_7b", f"model.name_or_path={out}", "dry_run=true"] if module == "olmocr.train" else
                served)
        proc = command(module, *args)
        assert proc.returncode == 0, proc.stderr
        assert OmegaConf.select(printed(proc.stdout), f"{key}.render.longest_side") == 256, module
    proc = command("olmocr.pipeline", *served, "convert.steps.render.longest_side=1288")
    assert proc.returncode == 0, proc.stderr
    assert printed(proc.stdout).convert.steps.render.longest_side == 1288
    assert proc.stderr == (f"warning: convert.steps.render.longest_side=1288 (trained with 256): model.name_or_path={out} "
                           "was trained on pages presented otherwise; the command line says so, and this run presents "
                           "them so\n")


def test_fp8_quantizes_language_linears_only(grpo_runs, fp8):
    from transformers import AutoModelForImageTextToText

    source = load_file(os.path.join(grpo_runs[0], "checkpoints", "checkpoint-3", "model.safetensors"))
    compressed = load_file(os.path.join(fp8, "model.safetensors"))
    linear = [n for n in source if n.endswith(".weight") and n.split(".")[-2] in LANGUAGE_LINEAR
              and not n.startswith(("visual.", "model.visual."))]
    assert linear and all(compressed[n].dtype == torch.float8_e4m3fn for n in linear)
    untouched = [n for n in source if n.startswith(("visual.", "model.visual.", "lm_head."))]
    assert untouched and all(torch.equal(compressed[n], source[n]) for n in untouched)
    config = json.load(open(os.path.join(fp8, "config.json")))
    ignore = config["quantization_config"]["ignore"]
    assert "visual.blocks.0.attn.qkv" in ignore and "model.visual.blocks.0.attn.qkv" in ignore
    assert json.load(open(os.path.join(fp8, "olmocr_pages.json"))) == json.load(open(os.path.join(
        grpo_runs[0], "checkpoints", "checkpoint-3", "olmocr_pages.json")))  # the pages it reads, kept
    provenance = json.load(open(os.path.join(fp8, "provenance.json")))
    assert provenance["scheme"] == "FP8_DYNAMIC" and provenance["weights_bytes"]["after"] < \
        provenance["weights_bytes"]["before"]
    # Reloaded, the vision tower is not quantised (it would be, with one naming form in the ignore list).
    model = AutoModelForImageTextToText.from_pretrained(fp8)
    schemes = {n: getattr(m, "quantization_scheme", None) is not None for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear)}
    assert not any(q for n, q in schemes.items() if ".visual." in n or n == "lm_head")
    assert all(q for n, q in schemes.items() if "language_model" in n)


def test_the_schemes_a_config_may_name_are_the_librarys_presets():
    from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES

    from olmocr.checkpoints.schema import SCHEMES

    assert sorted(SCHEMES) == sorted(PRESET_SCHEMES)  # the pinned compressed-tensors' list, for an upgrade to check


def test_calibration_pages_are_rendered_at_inference_size(grpo_runs, tmp_path):
    from olmocr.checkpoints.pages import choose_pages, render_pages

    cfg = compose("compress", ["source=x", "output=y"])
    assert cfg.steps.render.longest_side == 1288  # the production prompt steps, as inference uses them
    pages = render_pages(choose_pages(cfg.calibration.root, 3), dict(cfg.steps))
    assert len(pages) == 3 and all(max(p["image"].size) == 1288 for p in pages)
    record = stage("compress", [f"source={grpo_runs[0]}", f"output={tmp_path}/model", "scheme=FP8",
                                "calibration.count=2"], tmp_path)
    assert len(record["calibration_pages"]) == 2
    scales = load_file(os.path.join(tmp_path, "model", "model.safetensors"))
    assert any(name.endswith("input_scale") for name in scales)  # static activation scales, measured
    from olmocr.checkpoints.quantize import compress

    with pytest.raises(ValueError, match="calibration.count: scheme FP8"):  # no pages (the stage always gives some)
        compress(grpo_runs[0], f"{tmp_path}/other", scheme="FP8")


@pytest.mark.integration
def test_compare_against_itself_and_against_fp8(grpo_runs, fp8, tmp_path, warm_python):
    common = ["pages.count=3", "max_new_tokens=24"]
    same = stage("compare", [f"reference={grpo_runs[0]}", f"candidate={grpo_runs[0]}", *common], tmp_path / "same")
    assert same["engine"] == "transformers" and same["tokens"] > 0
    assert same["match_rate"] == 1.0 and same["max_gap"] == 0.0 and same["passed"]
    quantized = stage("compare", [f"reference={grpo_runs[0]}", f"candidate={fp8}", *common], tmp_path / "fp8")
    assert quantized["tokens"] > 0 and 0 < quantized["match_rate"] < 1 and quantized["pages_with_mismatch"] > 0
    mismatched = [r for r in quantized["results"] if r["first_mismatch"] is not None]
    assert all(r["gap"] > 0 and r["candidate_token"] != r["reference_token"] for r in mismatched)
    table = (tmp_path / "fp8" / "compare.md").read_text()
    assert all(r["page_id"] in table for r in quantized["results"])
    # The threshold drives the exit code: every mismatch is over a threshold of 0.
    proc = subprocess.run([warm_python, "-m", "olmocr.compare", f"reference={grpo_runs[0]}", f"candidate={fp8}",
                           *common, "threshold=0", f"hydra.run.dir={tmp_path}/cli"], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    result = json.load(open(tmp_path / "cli" / "compare.json"))
    assert result["flagged"] == quantized["pages_with_mismatch"] and not result["passed"]
