import glob
import importlib.util
import os
import re
import subprocess

import pytest
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate
from omegaconf import OmegaConf

from olmocr.checkpoints.schema import SCHEMES
from olmocr.cli import stages
from olmocr.config import CONF_DIR, PROJECT_ROOT, build, compose
from olmocr.data.dataset import sources
from olmocr.data.chain import build_pipeline
from olmocr.models import HubModel, TinyModel
from olmocr.train import algos


def options(group: str) -> list[str]:
    return sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(CONF_DIR, group, "*.yaml")))


PRIMARY = sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(CONF_DIR, "*.yaml")))
STAGES = stages()
BY_CONFIG = {stage.config: stage for stage in STAGES.values()}
SAMPLE_PAGES = os.path.join(PROJECT_ROOT, "data", "sample", "train", "pdfs")
DATA_REQUIRED = {"folder": [f"data.roots=[{SAMPLE_PAGES}]"]}


def test_groups_have_the_promised_options():
    assert options("model") == ["olmocr2_7b", "qwen25_vl_7b", "qwen2_vl_7b", "qwen3_vl_8b", "reader", "reader_trained",
                                "tiny"]
    assert {"sample", "olmocr_mix"} <= set(options("data"))
    assert {"v1", "v4", "v4_augmented"} <= set(options("data/steps"))


def test_every_primary_config_is_one_stages():
    """A primary config without a stage, or a stage without its config, cannot slip in."""
    assert sorted(BY_CONFIG) == PRIMARY and len(BY_CONFIG) == len(STAGES)
    for module, stage in STAGES.items():
        assert importlib.util.find_spec(module) is not None  # python -m <module> runs it
        assert stage.doc.startswith(f"python -m {module}"), module  # what --help shows first


@pytest.mark.parametrize("name", PRIMARY)
@pytest.mark.integration
def test_every_primary_config_composes(name):
    cfg = compose(name, BY_CONFIG[name].placeholders())
    assert OmegaConf.to_container(cfg, resolve=True)


def test_a_required_value_left_out_is_named():
    with pytest.raises(ValueError, match=r"candidates: required, give candidates=…"):
        compose("bench")
    with pytest.raises(ValueError, match=r"data.roots: required"):
        compose("check_data", ["data=folder"])


@pytest.mark.parametrize("model", options("model"))
def test_every_model_option_instantiates_without_downloading(model, cache_dir, tiny):
    cfg = compose("check_data", [f"model={model}"])
    if cfg.model.get("name_or_path", "").startswith(cfg.paths.reading):  # a reader trained here: none in a test
        with pytest.raises(ValueError, match=r"model.name_or_path: .*reader is not a folder"):
            build(cfg.model)  # the user's mistake in one line, as the stages' build reports it
        cfg = compose("check_data", [f"model={model}", f"model.name_or_path={tiny.path}"])
        assert build(cfg.model).load_processor() is not None
        return
    source = instantiate(cfg.model)
    assert isinstance(source, TinyModel if model in ("tiny", "reader") else HubModel)  # built here, or a Hub name
    if isinstance(source, HubModel):
        assert "/" in source.name_or_path and source.family.name in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


# SFT data (page/target pairs) and GRPO data (bench pages) take different step lists.
SFT_DATA, BENCH_DATA, PAIRS_DATA = (["folder", "olmocr_mix", "olmocr_mix_0225", "reading", "sample", "structure", "typeset"],
                                    ["reading_prompts", "structure_prompts", "synth_bench", "synthmix"], ["pairs"])
SFT_STEPS, PROMPT_STEPS = ["v1", "v4", "v4_augmented"], ["prompt_v4"]


def test_every_data_and_steps_option_is_classified():
    assert sorted(SFT_DATA + BENCH_DATA + PAIRS_DATA) == options("data")
    assert sorted(SFT_STEPS + PROMPT_STEPS) == options("data/steps")


@pytest.mark.parametrize("data", BENCH_DATA)
@pytest.mark.parametrize("steps", PROMPT_STEPS)
def test_every_bench_data_and_prompt_steps_option_builds(data, steps, processor):
    cfg = compose("train", ["algo=grpo", "rewards=olmocr2", f"data={data}", f"data/steps={steps}"])
    container = OmegaConf.to_container(cfg.data, resolve=True)
    names = list(build_pipeline(container["steps"], processor=processor).steps)
    assert names == ["check_pdf", "render", "prompt", "messages"]
    for bench in list(container["train"].values()) + list(container["eval"].values()):
        assert bench["root"] and bench["types"] == [] and bench["reference"] is True


@pytest.mark.parametrize("data", SFT_DATA)
@pytest.mark.parametrize("steps", SFT_STEPS)
@pytest.mark.integration
def test_every_data_and_steps_option_builds(data, steps, processor):
    cfg = compose("check_data", [f"data={data}", f"data/steps={steps}", *DATA_REQUIRED.get(data, [])])
    container = OmegaConf.to_container(cfg.data, resolve=True)
    pipeline = build_pipeline(container["steps"], processor=processor)
    assert list(pipeline.steps)[0] == "front_matter"
    names = list(pipeline.steps)
    assert names.index("render") < names.index("prompt") < names.index("tokenize")
    if steps == "v4_augmented":
        assert names.index("rotation") == names.index("render") + 1 and names[-1] == "token_flip"
    train, evals = sources(container)
    for source in list(train.values()) + list(evals.values()):
        assert source["roots"] and source.get("weight", 1.0) > 0


@pytest.mark.parametrize("config, override, key", [
    ("synth", "num_pagez=3", "num_pagez"),
    ("synth", "num_pages=three", "num_pages"),
    ("synth", "paths.cachee=/tmp", "cachee"),
    ("check_data", "model.dtypee=float16", "dtypee"),
    ("check_data", "model.num_layers=two", "num_layers"),
    ("check_data", ["model=qwen25_vl_7b", "model.hidden_size=64"], "hidden_size"),
    ("check_data", "data.trian={}", "trian"),
    ("check_data", "data.train.synth.wieght=2", "wieght"),
    ("check_data", "data.train.synth.weight=heavy", "weight"),
    ("check_data", "data.steps.render.longest_sid=1024", "longest_sid"),
    ("check_data", "data.steps.render.longest_side=big", "longest_side"),
    ("check_data", "+data.steps.extra={_target_: olmocr.data.steps.NoSuchStep}", "NoSuchStep"),
    ("check_data", "max_samplez=3", "max_samplez"),
    ("check_data", "+data.steps.rotate={_target_: olmocr.data.steps.RotationAugmentation, probabilty: 0.1}",
     "probabilty"),
    ("pipeline", "+work.pages=3", "pages"),
    ("pipeline", "queue.lease=60", "lease"),
    ("pipeline", "workers=many", "workers"),
    ("pipeline", "convert.temperature=[0.1]", "temperature"),
    ("pipeline", "convert.steps.render.longest_sid=1024", "longest_sid"),
    ("pipeline", "server.devise=cpu", "devise"),
    ("pipeline", ["server=external", "server.url=http://h/v1", "server.model_name=m", "server.api_key=x"], "api_key"),
    ("pipeline", "work.markdwn=false", "markdwn"),
    ("pipeline_bench", "repeats=two", "repeats"),
    ("pairs", "margn=0.2", "margn"),
    ("pairs", "rewards.bench.wieght=2", "wieght"),
    ("pipeline_stats", ["workspace=/tmp/ws", "window=5"], "window"),
    # Added with `+`, as Hydra's own error for the plain typo suggests: the schema still has no such key.
    ("train", "+trainer.batch_sise=3", "trainer.batch_sise: no such key in TrainerConfig (did you mean "
                                       "trainer.batch_size?)"),
    ("train", "+trainer.max_duration.valu=3", "trainer.max_duration.valu: no such key in DurationConfig"),
    # a key of another strategy than the one chosen
    ("train", "+strategy.stage=1", "strategy.stage: no such key in ReplicatedConfig"),
    ("train", "+foo=1", "foo: no such key in TrainConfig (its keys: algo, callbacks,"),
    ("synth", "+num_pagez=3", "num_pagez: no such key in SynthConfig (did you mean num_pages?)"),
    ("pipeline", "+queue.leas=60", "queue.leas: no such key"),
])
@pytest.mark.integration
def test_unknown_or_mistyped_key_fails_naming_it(config, override, key):
    with pytest.raises((ConfigCompositionException, ValueError)) as info:
        compose(config, override if isinstance(override, list) else [override])
    message = str(info.value) + str(getattr(info.value, "__cause__", ""))
    assert key in message


@pytest.mark.parametrize("override, message", [
    ("trainer.batch_size=0", "trainer.batch_size: must be at least 1, got 0"),
    ("trainer.grad_accum=-2", "trainer.grad_accum: must be at least 1, got -2"),
    ("trainer.max_duration.unit=epoch", "trainer.max_duration.unit: expected one of steps, epochs, tokens, got 'epoch'"),
    ("trainer.max_duration.value=null", "trainer.max_duration.value: required, the run's length in steps"),
    ("trainer.hard_stop.value=0", "trainer.hard_stop.value: must be positive, got 0"),
    ("checkpoint.interval=-1", "checkpoint.interval: must be at least 0, or null for none, got -1"),
    ("checkpoint.keep_last=0", "checkpoint.keep_last: must be at least 1, or null for every checkpoint, got 0"),
    ("trainer.precision=fp16", "trainer.precision: expected one of fp32, bf16, got 'fp16'"),
    (["strategy=deepspeed", "strategy.stage=3"], "strategy.stage: expected one of 1, 2, got 3"),
    ("trainer.clip_grad_norm=0", "trainer.clip_grad_norm: must be positive, or null for no clipping, got 0"),
    ("algo.name=ppo", "algo.name: expected one of sft, grpo, dpo, got 'ppo'"),
    # What the libraries would refuse only once the model is loaded (torch, peft, transformers' generate) or
    # never (a negative clipping range, Muon without Newton-Schulz steps): the declared bounds of each key.
    ("optimizer.lr=-1", "optimizer.lr: must be at least 0, got -1"),
    ("optimizer.betas=[0.9,1.5]", "optimizer.betas: must be in [0, 1), got 1.5"),
    (["optimizer=muon", "optimizer.ns_steps=0"], "optimizer.ns_steps: must be at least 1, got 0"),
    ("scheduler.warmup=-2", "scheduler.warmup: must be at least 0, got -2"),
    (["scheduler=wsd", "scheduler.final_ratio=3"], "scheduler.final_ratio: must be in [0, 1], got 3"),
    (["finetune=lora", "finetune.lora.r=0"], "finetune.lora.r: must be at least 1, got 0"),
    (["finetune.freeze_vision=true", "finetune.freeze_language=true"],
     "finetune.freeze_vision and finetune.freeze_language are both true: nothing would train"),
    (["finetune=lora", "finetune.freeze_language=true"],
     "finetune.lora trains the language model: it cannot go with finetune.freeze_language"),
    (["+experiment=grpo_tiny", "algo.temperature=0"], "algo.temperature: must be positive, got 0"),
    (["+experiment=grpo_tiny", "algo.epsilon=-0.2"], "algo.epsilon: must be positive, got -0.2"),
    (["+experiment=grpo_tiny", "algo.loss_type=ppo"],
     "algo.loss_type: expected one of grpo, dr_grpo, dapo, bnpo, cispo, sapo, luspo, vespo, got 'ppo'"),
    (["+experiment=dpo_tiny", "algo.label_smoothing=0.5"], "algo.label_smoothing: must be in [0, 0.5), got 0.5"),
])
@pytest.mark.integration
def test_a_training_value_out_of_range_stops_the_run_before_anything_is_loaded(override, message, tmp_path):
    with pytest.raises(ValueError) as info:
        STAGES["olmocr.train"](compose("train", override if isinstance(override, list) else [override]),
                               str(tmp_path))
    assert str(info.value) == message
    assert os.listdir(tmp_path) == []  # no run info, no checkpoint: nothing ran


@pytest.mark.parametrize("config, overrides, message", [
    # a builder's parameter (Annotated in its signature), reached through the group that names it
    ("pipeline", ["convert.max_tokens=0"], "convert.max_tokens: must be at least 1, got 0"),
    ("pipeline", ["convert.temperatures=[0.1,-0.5]"], "convert.temperatures: must be at least 0, got -0.5"),
    ("pipeline", ["server=vllm", "server.gpu_memory_utilization=1.5"],
     "server.gpu_memory_utilization: must be in (0, 1], or null for vLLM's default, got 1.5"),
    ("pipeline", ["model=olmocr2_7b", "model.dtype=fp8"], "model.dtype: expected one of float32, bfloat16, float16, got 'fp8'"),
    ("pipeline", ["filter=olmocr", "filter.pages=0"], "filter.pages: must be at least 1, got 0"),
    ("check_data", ["data/steps=v4_augmented", "data.steps.rotation.probability=1.5"],
     "data.steps.rotation.probability: must be in [0, 1], got 1.5"),
    ("check_data", ["data.steps.render.longest_side=8"], "data.steps.render.longest_side: must be at least 16, got 8"),
    # was the builder's own error, without the key
    ("pipeline", ["convert.steps.prompt.version=v3"], "convert.steps.prompt.version: expected one of v1, v4, brief, blocks, brief_blocks, got 'v3'"),
    # what transformers serve, or transformers' loader, would refuse only once started: its log, not a line
    ("pipeline", ["server.dtype=bfloat"], "server.dtype: expected one of auto, float32, bfloat16, float16, got 'bfloat'"),
    ("pipeline", ["server.device=gpu"],
     "server.device: expected auto, cpu, mps, cuda, cuda:N (or xpu, npu, hpu), or a GPU number, got 'gpu'"),
    ("pipeline", ["model=olmocr2_7b", "model.attn_implementation=flash_attention2"],
     "model.attn_implementation: expected eager, sdpa, flex_attention, flash_attention_2, _3 or _4 (paged|… for "
     "paged attention), or a kernel on the Hub as org/repo, got 'flash_attention2'"),
    ("pipeline", ["server=vllm", "server.dtype=fp4"],
     "server.dtype: expected one of auto, bfloat16, float, float16, float32, half, got 'fp4'"),
    ("pipeline", ["model.family=llama"], "model.family: expected one of qwen2_vl, qwen2_5_vl, qwen3_vl, got 'llama'"),
    ("check_data", ["data.steps.target.format=yaml"],
     "data.steps.target.format: expected one of front_matter, json, got 'yaml'"),
    # a stage's own field
    ("pipeline", ["queue.poll_s=0"], "queue.poll_s: must be positive, or null for a quarter lease, ≤30 s, got 0"),
    ("report_viewer", ["max_documents=0"], "max_documents: must be at least 1, or null for all, got 0"),
    ("bench", ["confidence=1"], "confidence: must be in (0, 1), got 1"),
    ("datasets", ["limit=0"], "limit: must be at least 1, or null for every row, got 0"),
    ("datasets", ["workers=0"], "workers: must be at least 1, got 0"),
    ("check_data", ["num_workers=-1"], "num_workers: must be at least 0, got -1"),
    ("bench", ["repeat_rule=all"], "repeat_rule: expected one of majority, mean, got 'all'"),
    ("compare", ["max_new_tokens=0"], "max_new_tokens: must be at least 1, got 0"),  # was transformers' error, 14 s in
    ("compare", ["pages.count=0"], "pages.count: must be at least 1, got 0"),
    ("compress", ["scheme=FP9"], f"scheme: expected one of {', '.join(SCHEMES)}, got 'FP9'"),  # was 7 s in
])
@pytest.mark.integration
def test_a_value_outside_its_declared_bounds_fails_validation_naming_the_key(config, overrides, message):
    with pytest.raises(ValueError) as info:
        compose(config, [*BY_CONFIG[config].placeholders(), *overrides])
    assert str(info.value) == message


def test_the_attention_and_device_forms_are_the_ones_transformers_takes():
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from olmocr.config import constraints
    from olmocr.models.source import ModelSource
    from olmocr.pipeline.server import TransformersServer

    attention = constraints(ModelSource.__init__)["attn_implementation"]
    device = constraints(TransformersServer.__init__)["device"]
    for name in ["eager", *ALL_ATTENTION_FUNCTIONS.valid_keys(), "kernels-community/flash-attn3",
                 "org/my.kernel@v2:attention"]:
        assert attention.holds(name), name
    assert not [name for name in ("sdpa2", "flash_attention", "paged|", "org/") if attention.holds(name)]
    assert [name for name in ("auto", "cpu", "cuda", "cuda:1", "0", "xpu:0", "mps") if not device.holds(name)] == []
    assert not [name for name in ("gpu", "cuda:", "cuda:x", "") if device.holds(name)]


def test_a_dry_run_checks_the_values_of_what_it_would_build(tmp_path, warm_python):
    # Before, a builder checked its own values when the stage built it: a dry run and a launcher (which
    # checks before it submits) let them through, and the job failed on the cluster.
    proc = subprocess.run([warm_python, "-m", "olmocr.pipeline", "dry_run=true", "convert.concurrency=0"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (2, "error: convert.concurrency: must be at least 1, got 0\n")


@pytest.mark.parametrize("overrides, error", [
    (["algo=grpo", "data=synth_bench"], "algo=grpo needs rewards: add rewards=olmocr2 (or another file in conf/rewards/)"),
    (["+experiment=grpo_tiny", "strategy=fsdp"],
     "strategy=fsdp is not available for GRPO: use ddp or deepspeed (ZeRO-1/2)"),
    (["+experiment=dpo_tiny", "+algo.trl_args.bta=0.2"], "algo.trl_args: bta not trl DPOConfig field(s)"),
    # trl's values, and its rules across them, were met after the model had loaded (on the node, after the queue)
    (["+experiment=dpo_tiny", "+algo.trl_args.padding_free=maybe"],
     "algo.trl_args.padding_free: trl's DPOConfig expects bool, got 'maybe'"),
    (["+experiment=grpo_tiny", "+algo.trl_args.top_k=ten"], "algo.trl_args.top_k: trl's GRPOConfig expects int, got 'ten'"),
    (["+experiment=dpo_tiny", "trainer.max_duration.unit=tokens"],
     "trainer.max_duration.unit: DPO counts steps or epochs, got 'tokens'"),
    # what Muon cannot train, refused by the optimizer once the model had loaded
    (["optimizer=muon", "finetune=lora"], "optimizer=muon does not support LoRA: orthogonalising rank-r adapter "
     "factors is not Muon's update; use optimizer=adamw with LoRA, or full fine-tuning with Muon"),
    (["optimizer=muon", "strategy=fsdp"], "optimizer=muon orthogonalises whole matrices and strategy=fsdp splits "
     "them: use strategy=ddp with Muon"),
    (["optimizer=muon", "strategy=deepspeed"], "optimizer=muon orthogonalises whole matrices and strategy=deepspeed "
     "splits them: use strategy=ddp with Muon"),
])
def test_what_the_algorithm_and_optimizer_need_is_checked_before_a_launcher_submits(overrides, error):
    # Was checked when the recipe started, on the node: a launcher submitted the job and a dry run passed it.
    with pytest.raises(ValueError) as info:
        stages()["olmocr.train"].check(compose("train", overrides))
    assert str(info.value) == error


def test_trl_rules_across_values_are_checked_for_the_jobs_processes_leaving_their_devices_to_the_run(monkeypatch):
    """trl's rules across its values and ours (met after the model had loaded, on the node) hold for a number of
    processes: checked where it is known, by a launcher and by a run once it has set up its processes. Building
    trl's config sets up accelerate's state, and in a process of a launched job its process group (gloo, as
    the check builds for the CPU), where the run sets up its own (NCCL on GPUs)."""
    import torch.distributed as dist
    from accelerate.state import PartialState

    cfg = compose("train", ["+experiment=grpo_tiny", "+algo.trl_args.generation_batch_size=8"])  # 4 completions a step
    stages()["olmocr.train"].check(cfg)  # a dry run: the processes are not known
    algos.check_world(cfg, 2)
    with pytest.raises(ValueError) as refused:
        algos.check_world(cfg, 3)
    assert str(refused.value) == ("algo.trl_args: trl's GRPOConfig refuses them with this run's values on 3 process(es): "
                                  "generation_batch_size (8) must be divisible by the global batch size (12).")
    assert PartialState._shared_state == {} and not dist.is_initialized()
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("LOCAL_RANK", "0")
    algos.check_world(cfg, 3)  # each rank's trainer meets the rule, on the processes the run set up
    with pytest.raises(ValueError, match="top_k: trl's GRPOConfig expects int"):
        stages()["olmocr.train"].check(compose("train", ["+experiment=grpo_tiny", "+algo.trl_args.top_k=ten"]))
    assert PartialState._shared_state == {} and not dist.is_initialized()


@pytest.mark.parametrize("override, error", [
    # Hydra's own five lines (suggesting `+`, which validation then refuses for a schema's key)
    ("trainer.batch_sise=3", "trainer.batch_sise: no such key in TrainerConfig (did you mean trainer.batch_size?)"),
    ("optimizer.lrr=1", "optimizer.lrr: no such key in olmocr.train.optim.adamw (did you mean optimizer.lr?)"),
    ("data.steps.render.longest_sid=3",
     "data.steps.render.longest_sid: no such key in olmocr.data.steps.RenderPage (did you mean "
     "data.steps.render.longest_side?)"),
    ("trainer.grad_accum=two", "trainer.grad_accum: Value 'two' of type 'str' could not be converted to Integer"),
    # OmegaConf's assertion below a null node, printed by Hydra as a trace
    ("finetune.lora.r=16", "finetune.lora.r: finetune.lora is null in this config; choose the finetune=… option "
                           "that fills it (full, lora), or give it whole (finetune.lora={…})"),
])
def test_an_override_that_cannot_apply_is_one_line_naming_the_key(override, error, tmp_path, warm_python):
    proc = subprocess.run([warm_python, "-m", "olmocr.train", override, "dry_run=true"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (2, f"error: {error}\n")


@pytest.mark.parametrize("module, override, error", [
    ("olmocr.train", "+experiment=grpo_tin", "experiment=grpo_tin: no such option in conf/experiment/; did you mean "
                                             "grpo_tiny? (the options: dpo_qwen25, dpo_tiny, grpo_qwen25, grpo_tiny, "
                                             "lora_olmocr2, pipeline_olmocr2, read_dpo, read_grpo, read_structure, "
                                             "read_structure_grpo, read_tiny, read_typeset, sft_muon, sft_qwen25)"),
    ("olmocr.train", "optimizer=nosuch", "optimizer=nosuch: no such option in conf/optimizer/ (the options: adamw, muon)"),
    ("olmocr.pipeline", "server=nosuch", "server=nosuch: no such option in conf/server/ (the options: external, "
                                         "transformers, vllm)"),
])
def test_an_unknown_group_option_is_one_line_with_the_options(module, override, error, tmp_path, warm_python):
    proc = subprocess.run([warm_python, "-m", module, override, "dry_run=true"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (2, f"error: {error}\n")


@pytest.mark.parametrize("module, override, shown", [("olmocr.train", "eval=null", "eval:\n  bench: null\n"),
                                                     ("olmocr.pipeline", "filter=null", "filter: null\n")])
def test_a_group_set_to_null_is_left_out_as_the_defaults_spell_it(module, override, shown, tmp_path, warm_python):
    proc = subprocess.run([warm_python, "-m", module, override, "dry_run=true"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert shown in proc.stdout


def test_cli_reports_a_typo_and_exits_nonzero(tmp_path, warm_python):
    proc = subprocess.run([warm_python, "-m", "olmocr.data", "data.steps.render.longest_sid=1024"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "data.steps.render.longest_sid" in proc.stderr
    assert not os.path.exists(tmp_path / "outputs" / "check_data") or not glob.glob(
        str(tmp_path / "outputs/check_data/*/summary.json"))


@pytest.mark.parametrize("module", STAGES)
@pytest.mark.integration
def test_every_stage_answers_help_and_dry_run_without_working(module, tmp_path, warm_python):
    run = [warm_python, "-m", module]
    proc = subprocess.run([*run, "--help", "dry_run=true"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"python -m {module}") and "== Configuration groups" in proc.stdout
    assert "model     : olmocr2_7b, qwen25_vl_7b" in proc.stdout
    assert "dry_run: true" in proc.stdout  # the config shown has the overrides applied
    proc = subprocess.run([*run, "dry_run=true", *STAGES[module].placeholders()], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "dry_run: true" in proc.stdout and "paths:" in proc.stdout
    assert not glob.glob(str(tmp_path / "outputs" / "**" / "*.json"), recursive=True)  # nothing ran


def test_a_missing_model_is_one_line_before_any_data_work(tmp_path, warm_python):
    proc = subprocess.run([warm_python, "-m", "olmocr.train", "model=qwen25_vl_7b",
                           f"model.name_or_path={tmp_path}/nonexistent"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == (f"error: model.name_or_path: {tmp_path}/nonexistent is not a folder (expected a checkpoint "
                           "folder in Hugging Face format, or a hub id like org/name)\n")
    assert not os.path.exists(tmp_path / "outputs")  # said before the run dir is made
    # A recipe whose bench is not fetched yet: one line before the run dir is made, as the model folder.
    proc = subprocess.run([warm_python, "-m", "olmocr.train", "+experiment=sft_qwen25", f"paths.cache={tmp_path}/cache",
                           f"hydra.run.dir={tmp_path}/run"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (2, f"error: eval.bench.root: {tmp_path}/cache/datasets/olmOCR-bench is not "
                                                 "a folder (a bench folder: *.jsonl tests and pdfs/; python -m "
                                                 "olmocr.datasets dataset=olmocr_bench fetches olmOCR-bench)\n")
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.parametrize("multirun", ["-m", "hydra.mode=MULTIRUN"])
def test_multirun_gives_one_dir_per_job(tmp_path, multirun, warm_python):
    proc = subprocess.run(
        [warm_python, "-m", "olmocr.synth", multirun, "seed=1,2", "num_pages=2", f"hydra.sweep.dir={tmp_path}/sweep"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    for job, seed in (("0", 1), ("1", 2)):
        pdfs = sorted(os.listdir(tmp_path / "sweep" / job / "pages" / "pdfs"))
        assert pdfs[0].startswith(f"synth_s{seed}_")
        saved = OmegaConf.load(tmp_path / "sweep" / job / ".hydra" / "config.yaml")
        assert saved.seed == seed
        assert (tmp_path / "sweep" / job / "run_info.json").exists()


def test_a_local_sweep_checks_every_job_before_the_first_one_runs(tmp_path, warm_python):
    # Hydra's local launcher composes each job as it starts it: the bad second job was found after the first
    # had run to its end.
    proc = subprocess.run([warm_python, "-m", "olmocr.synth", "-m", "num_pages=2,0", f"hydra.sweep.dir={tmp_path}/sweep"],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.splitlines()[-1] == "error: num_pages: must be at least 1, got 0"
    assert os.listdir(tmp_path / "sweep") == ["multirun.yaml"]  # no job was started


def test_a_value_the_stage_refuses_leaves_no_run_dir_behind(tmp_path, warm_python):
    """A typo on the command line is one line, and outputs/ does not fill with dated folders holding only .hydra/."""
    proc = subprocess.run([warm_python, "-m", "olmocr.synth", "num_pages=0", f"hydra.run.dir={tmp_path}/run"],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert (proc.returncode, proc.stderr) == (2, "error: num_pages: must be at least 1, got 0\n")
    assert not (tmp_path / "run").exists()


def test_a_training_sweep_with_many_overrides_gets_a_folder_a_file_system_takes(tmp_path, warm_python):
    """A training job's folder is named by its overrides, so that the same command resumes there; past a file
    name's 255 bytes (a dozen overrides, or one long path) the job could not start at all."""
    from olmocr.config import job_dirname

    assert job_dirname("optimizer.lr=0.001,seed=1") == "optimizer.lr=0.001,seed=1"
    assert job_dirname("data.roots=[/data/scans]") == "data.roots=[/data/scans]"  # as before: the folder nests
    many = ",".join(f"trainer.option_{i}=value_{i}" for i in range(12))
    short = job_dirname(many)
    assert len(short.encode()) <= 255 and "/" not in short and short.startswith(many[:150])
    assert job_dirname(many) == short and job_dirname(many + "0") != short
    assert "/" not in job_dirname("data.roots=[/" + "a" * 300 + "]")

    overrides = ["optimizer.lr=0.000123456", "optimizer.weight_decay=0.0123456", "trainer.batch_size=1",
                 "checkpoint.interval=10", "trainer.eval_interval=10", "seed=12345", "callbacks.plots=null",
                 "data.steps.render.longest_side=256", "model.dtype=float32", "eval.bench=null",
                 "trainer.clip_grad_norm=0.5", "trainer.max_duration.value=3"]
    proc = subprocess.run([warm_python, "-m", "olmocr.train", "-m", "dry_run=true", *overrides,
                           f"hydra.sweep.dir={tmp_path}/sweep"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (job,) = [d for d in os.listdir(tmp_path / "sweep") if d != "multirun.yaml"]
    assert re.fullmatch(r"callbacks\.plots=null,checkpoint\.interval=10,data\.steps.*-[0-9a-f]{12}", job), job


def test_no_config_sets_hydra_mode():
    """Whether a command runs once or as a sweep is on its command line (`-m`, `hydra.mode=`), which is where
    olmocr.cli reads it: no primary config, experiment or cluster file sets it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from olmocr.config import register_schemas

    register_schemas()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        composed = [(name, []) for name in PRIMARY]
        composed += [("pipeline" if e.startswith("pipeline_") else "train", [f"+experiment={e}"])
                     for e in options("experiment")]
        composed += [("train", [f"cluster={c}"]) for c in options("cluster")]
        for name, overrides in composed:
            cfg = hydra_compose(config_name=name, overrides=overrides, return_hydra_config=True)
            assert cfg.hydra.mode is None, (name, overrides)


def test_a_step_added_from_the_command_line_lands_in_place(processor):
    cfg = compose("check_data", [
        "+data.steps.rotate={_target_: olmocr.data.steps.RotationAugmentation, probability: 0.1, _after_: render}",
        "+data.steps.latex._after_=target", "~data.steps.rules"])
    steps = OmegaConf.to_container(cfg.data.steps, resolve=True)
    names = list(build_pipeline(steps, processor=processor).steps)
    assert names == ["front_matter", "check_pdf", "render", "rotate", "prompt", "target", "latex", "messages",
                     "tokenize"]
    # The production order rejects text before any PDF work.
    default = list(compose("check_data").data.steps)
    assert default.index("rules") < default.index("check_pdf") < default.index("render")


PIPELINE_EXPERIMENTS = [e for e in options("experiment") if e.startswith("pipeline_")]


EXTERNAL = ["server.url=http://h/v1", "server.model_name=m"]


@pytest.mark.parametrize("overrides", [[f"+experiment={e}"] for e in PIPELINE_EXPERIMENTS]
                         + [[f"work={o}"] for o in options("work")] + [[f"convert={o}"] for o in options("convert")]
                         + [[f"server={o}", *(EXTERNAL if o == "external" else [])] for o in options("server")])
def test_pipeline_options_compose_and_build(overrides, tmp_path):
    from olmocr.pipeline.convert import PageConverter
    from olmocr.pipeline.server import Server

    cfg = compose("pipeline", overrides)
    server = build(cfg.server, model=instantiate(cfg.model))
    converter = build(cfg.convert, server=server, log_dir=str(tmp_path))
    assert isinstance(server, Server) and isinstance(converter, PageConverter)
    assert callable(build(cfg.work, converter=converter))


@pytest.mark.parametrize("experiment", [e for e in options("experiment") if e not in PIPELINE_EXPERIMENTS])
def test_every_experiment_composes_and_instantiates(experiment, processor, tiny):
    cfg = compose("train", [f"+experiment={experiment}"])
    if cfg.model.get("name_or_path", "").startswith(cfg.paths.reading):  # a reader trained here: none in a test
        cfg = compose("train", [f"+experiment={experiment}", f"model.name_or_path={tiny.path}"])
    source = instantiate(cfg.model)
    assert isinstance(source, (HubModel, TinyModel))  # constructing a hub model downloads nothing
    model = tiny.load_model()
    optimizer = build(cfg.optimizer, model=model)
    build(cfg.scheduler, optimizer=optimizer, total_steps=100)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    for callback in cfg.callbacks.values():
        build(callback, run_config=resolved, output_dir="/tmp")
    # Every recipe scores a held-out bench at its evals (built here; the bench folder is read when a run starts).
    assert cfg.trainer.eval_interval and cfg.checkpoint.keep_best == "eval/bench/overall"
    bench_eval = build(cfg.eval.bench, output_dir="/tmp")
    assert bench_eval.steps["render"]["longest_side"] == cfg.data.steps.render.longest_side
    steps = OmegaConf.to_container(cfg.data.steps, resolve=True)
    pipeline = build_pipeline(steps, processor=processor).steps
    assert cfg.run_name == experiment
    from olmocr.train.hf import training_arguments

    strategy = build(cfg.strategy, info=None, precision="fp32").trainer_arguments()
    base = training_arguments(resolved["trainer"], strategy, save_interval=cfg.checkpoint.interval, output_dir="/tmp/x", max_steps=10, seed=0, use_cpu=True, evaluate=False)
    if cfg.algo.name == "sft":
        assert "tokenize" in pipeline and not cfg.rewards
        return
    if cfg.algo.name == "dpo":
        assert "tokenize" not in pipeline  # trl tokenises prompts and answers
        algos.check(cfg, world_size=1)
        args = algos.dpo_arguments(base, resolved["algo"])
        with_sft = [cfg.algo.loss_type, "sft"] if cfg.algo.sft_weight else [cfg.algo.loss_type]
        assert (args.beta, args.loss_type) == (cfg.algo.beta, with_sft)
        assert args.loss_weights == ([1.0, cfg.algo.sft_weight] if cfg.algo.sft_weight else None)
        return
    from olmocr.rewards import build_rewards

    assert "tokenize" not in pipeline  # trl tokenises GRPO prompts
    funcs, weights = build_rewards(resolved["rewards"], eos_token_ids=[2])
    assert len(funcs) == len(weights) > 0
    if cfg.algo.generation != "transformers" and importlib.util.find_spec("vllm") is None:
        with pytest.raises(ValueError, match="needs vLLM"):
            algos.check(cfg, world_size=1)
    else:
        algos.check(cfg, world_size=1)
    # Every option reaches trl's own config and is accepted there.
    args = algos.grpo_arguments(base, resolved["algo"])
    assert (args.num_generations, args.temperature, args.beta) == \
        (cfg.algo.num_generations, cfg.algo.temperature, cfg.algo.beta)
    assert (args.ddp_find_unused_parameters, args.deepspeed, args.gradient_checkpointing) == \
        (strategy.get("ddp_find_unused_parameters"), strategy.get("deepspeed"), cfg.trainer.activation_checkpointing)
    compiled = training_arguments({**resolved["trainer"], "compile": True, "compile_backend": "aot_eager"}, {}, save_interval=None,
                                  output_dir="/tmp/x", max_steps=10, seed=0, use_cpu=True, evaluate=False)
    compiled = algos.grpo_arguments(compiled, resolved["algo"])  # our blocks are compiled, not trl's whole model
    assert (compiled.torch_compile, compiled.torch_compile_backend) == (False, None)
