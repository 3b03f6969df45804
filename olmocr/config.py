"""Structured-config schemas behind the YAML tree, and config validation.

Schemas for ``_target_`` nodes are generated from the target's own signature, so a builder and its
schema cannot drift apart. YAML options name their schema in their defaults list, which makes an
unknown key or a wrong type a compose-time error naming the key. Entries of free-form maps (the data
steps) are checked against the same generated schemas by :func:`validate`, which every entrypoint
calls before doing any work.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import sys
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONF_DIR = os.path.join(PROJECT_ROOT, "conf")
# Parameters that stages hand to builders at run time rather than through config.
RUNTIME_PARAMETERS = {"processor", "model", "optimizer", "total_steps", "run_config", "output_dir",
                      "eos_token_ids"}

OmegaConf.register_new_resolver("olmocr.root", lambda: PROJECT_ROOT, replace=True)
OmegaConf.register_new_resolver("olmocr.expand", lambda path: os.path.expanduser(path), replace=True)


def _omegaconf_type(annotation):
    """Map a signature annotation onto a type OmegaConf can enforce (Any where it cannot)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        inner = _omegaconf_type(args[0]) if len(args) == 1 else Any
        return Optional[inner] if type(None) in typing.get_args(annotation) else inner
    if annotation in (int, float, str, bool):
        return annotation
    if origin in (list, list) or annotation is list:
        args = typing.get_args(annotation)
        return list[_omegaconf_type(args[0]) if args else Any]
    if origin in (dict, dict) or annotation is dict:
        args = typing.get_args(annotation)
        return dict[str, _omegaconf_type(args[1]) if args else Any]
    return Any


def locate(path: str):
    """Import ``package.module.Name``; ValueError naming the path when it does not exist."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        try:
            for name in parts[cut:]:
                obj = getattr(obj, name)
        except AttributeError:
            break
        return obj
    raise ValueError(f"cannot import {path!r}")


def build(node, **runtime):
    """``hydra.utils.instantiate`` with run-time objects (a processor, the model, …) passed to the target
    only where its signature takes them and the config does not set them."""
    from hydra.utils import instantiate

    node = {k: v for k, v in (node.items() if isinstance(node, dict) else OmegaConf.to_container(node).items())
            if k != "_after_"}
    params = inspect.signature(locate(node["_target_"])).parameters
    # Run-time objects are passed to the built partial, not through Hydra, which would copy them or
    # instantiate `_target_`s found inside them.
    factory = instantiate(node, _partial_=True)
    return factory(**{k: v for k, v in runtime.items() if k in params and k not in node})


def schema_for(target: str | type) -> type:
    """A dataclass with ``_target_`` and one field per constructor parameter of ``target``."""
    return _schema_for_object(locate(target) if isinstance(target, str) else target)


def reward_schema(target: str) -> type:
    """A reward entry: its ``weight`` and the reward function's keyword-only parameters (its options;
    the other parameters are the completions and dataset columns trl passes at call time)."""
    return _schema_for_object(locate(target), reward=True)


@functools.cache
def _schema_for_object(obj, reward: bool = False) -> type:
    path = f"{obj.__module__}.{obj.__qualname__}"
    func = obj.__init__ if inspect.isclass(obj) else obj
    hints = typing.get_type_hints(func)
    specs: list = [("_target_", str, field(default=path))]
    if reward:
        specs.append(("weight", float, field(default=1.0)))
    for name, param in inspect.signature(obj).parameters.items():
        if name in RUNTIME_PARAMETERS or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if reward and param.kind is not param.KEYWORD_ONLY:
            continue
        kind = _omegaconf_type(hints.get(name, Any))
        default = MISSING if param.default is inspect.Parameter.empty else param.default
        if isinstance(default, (list, dict)):
            default = field(default_factory=lambda value=default: value)
        else:
            default = field(default=default)
        specs.append((name, kind, default))
    return dataclasses.make_dataclass(f"{obj.__name__}Config", specs)


@dataclass
class SourceConfig:
    roots: list[str] = MISSING
    weight: float = 1.0


@dataclass
class DataConfig:
    """``data`` group: named train sources (weights are repeat factors), named eval sources (one eval
    loss each) and the per-sample steps (name → ``_target_`` config, null disables a step, an optional
    ``_after_: <step>`` places it after another step)."""

    # Typed as Any because OmegaConf cannot add an entry to a dict of dataclasses from the command line
    # (+data.train.mine={roots: [...]}); validate() checks each entry against SourceConfig instead.
    train: dict[str, Any] = field(default_factory=dict)
    eval: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, Any] = field(default_factory=dict)


@dataclass
class BenchSourceConfig:
    root: str = MISSING  # a bench folder: test files (*.jsonl) and pdfs/ (with .md truth beside, optional)
    types: list[str] = field(default_factory=list)  # keep only these test types (empty: all)
    files: list[str] = field(default_factory=list)  # keep only these test files, by stem (empty: all)
    reference: bool = True  # pass <pdf>.md, where present, to rewards as the reference page


@dataclass
class BenchDataConfig:
    """``data`` group for GRPO: prompts are bench pages (a PDF page with its unit tests). Named train
    benches, optional named eval benches (reward means on held-out pages) and the prompt steps."""

    train: dict[str, Any] = field(default_factory=dict)
    eval: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, Any] = field(default_factory=dict)


@dataclass
class SFTAlgoConfig:
    name: str = "sft"


@dataclass
class GRPOAlgoConfig:
    """GRPO with trl: what is generated and how the loss is formed. Any other trl ``GRPOConfig`` field
    goes in ``trl_args`` (checked against trl's own config before any work)."""

    name: str = "grpo"
    num_generations: int = 8
    temperature: float = 0.8
    top_p: float = 1.0
    max_completion_length: int = 4096
    beta: float = 0.0  # KL coefficient; 0 loads no reference model
    loss_type: str = "dapo"  # grpo, dr_grpo, dapo, bnpo, …
    importance_sampling_level: str = "token"  # token, or sequence (GSPO)
    scale_rewards: str = "group"  # group, batch or none
    epsilon: float = 0.2
    num_iterations: int = 1
    # transformers (plain generate; CPU and tests), vllm_colocate (vLLM inside each trainer process) or
    # vllm_server (a `trl vllm-serve` process on its own GPU; see launch_commands.json in the run dir)
    generation: str = "transformers"
    vllm_server_host: str = "127.0.0.1"
    vllm_server_port: int = 8000
    vllm_server_timeout: float = 240.0
    vllm_gpu_memory_utilization: float = 0.3
    vllm_tensor_parallel_size: int = 1
    log_completions: bool = False
    trl_args: dict[str, Any] = field(default_factory=dict)


@dataclass
class PathsConfig:
    cache: str = "${olmocr.expand:${oc.env:OLMOCR_CACHE,'~/.cache/olmocr'}}"
    sample_data: str = "${olmocr.root:}/data/sample"
    olmocr_mix: str = "${oc.env:OLMOCR_MIX_DIR,/data/olmOCR-mix-1025}"
    synthmix: str = "${oc.env:OLMOCR_SYNTHMIX_DIR,/data/olmOCR-synthmix-1025}"


@dataclass
class SynthConfig:
    paths: PathsConfig = field(default_factory=PathsConfig)
    out_dir: str | None = None  # default: <run dir>/pages
    num_pages: int = 24
    seed: int = 0
    first_index: int = 0
    layout_weights: dict[str, float] = field(default_factory=dict)
    language_weights: dict[str, float] = field(default_factory=dict)
    render_check: bool = True


@dataclass
class BenchConfig:
    paths: PathsConfig = field(default_factory=PathsConfig)
    bench_dir: str = MISSING  # test files (*.jsonl, one category each) and the PDFs they name
    candidates: str = MISSING  # <pdf path without .pdf>_pg<page>_repeat<n>.md files
    group_by: str = "file"  # categories: one per test file (olmOCR-bench), or one per test type
    repeat_rule: str = "majority"  # a test passes on most repeats (olmOCR-bench), or "mean": share passing
    skip_baseline: bool = False  # drop every baseline test, the implicit ones (one per PDF) included
    skip_rejected: bool = False  # leave out tests marked checked: rejected (olmOCR-bench runs them)
    workers: int | None = None  # processes scoring pages; null: one per core
    bootstrap_samples: int = 1000
    confidence: float = 0.95
    seed: int = 0
    max_failures_listed: int = 200  # in report.md; results.json lists them all


@dataclass
class CheckDataConfig:
    paths: PathsConfig = field(default_factory=PathsConfig)
    model: Any = MISSING
    data: DataConfig = MISSING
    seed: int = 0
    max_samples: int | None = None
    num_workers: int = 0


@dataclass
class DurationConfig:
    unit: str = "steps"  # steps, epochs or tokens
    value: float | None = 100


@dataclass
class LoraConfig:
    r: int = 8
    alpha: int = 32
    dropout: float = 0.1
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class FinetuneConfig:
    """What trains: freeze the vision tower or the language model, or train LoRA adapters on the LM."""

    freeze_vision: bool = False
    freeze_language: bool = False
    lora: LoraConfig | None = None


@dataclass
class TrainerConfig:
    batch_size: int = 1  # per device
    grad_accum: int = 1
    max_duration: DurationConfig = field(default_factory=DurationConfig)
    # Stop early without changing the schedule; value null = no hard stop. (Not Optional[DurationConfig]:
    # OmegaConf cannot merge a command-line dict into a null structured node.)
    hard_stop: DurationConfig = field(default_factory=lambda: DurationConfig(value=None))
    precision: str = "fp32"  # fp32 or bf16 (autocast)
    clip_grad_norm: float | None = 1.0
    eval_interval: int | None = 500
    eval_max_batches: int | None = None
    save_interval: int | None = 500
    keep_last: int | None = 3
    num_workers: int = 0
    activation_checkpointing: bool = False
    compile: bool = False
    resume: bool = True
    device: str = "auto"
    # ddp (replicas), fsdp (FSDP2, sharded per block) or deepspeed (ZeRO stage zero_stage)
    strategy: str = "ddp"
    ddp_find_unused_parameters: bool = False
    fsdp_reshard_after_forward: bool = True
    zero_stage: int = 2


@dataclass
class TrainConfig:
    paths: PathsConfig = field(default_factory=PathsConfig)
    algo: Any = MISSING  # SFTAlgoConfig or GRPOAlgoConfig, by the algo group
    model: Any = MISSING
    data: Any = MISSING  # DataConfig (sft) or BenchDataConfig (grpo), by the data group
    rewards: dict[str, Any] = field(default_factory=dict)  # grpo: conf/rewards/, checked by validate()
    optimizer: Any = MISSING
    scheduler: Any = MISSING
    callbacks: dict[str, Any] = field(default_factory=dict)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    run_name: str = "tiny_sft"
    seed: int = 0
    dry_run: bool = False


def register_configs(builders: bool = True) -> None:
    """Put the schemas in Hydra's ConfigStore. ``builders=False`` skips the group schemas generated from
    model/optimizer/scheduler builders, whose imports (torch) a stage like synth does not need."""
    cs = ConfigStore.instance()
    cs.store(name="synth_schema", node=SynthConfig)
    cs.store(name="check_data_schema", node=CheckDataConfig)
    cs.store(name="bench_schema", node=BenchConfig)
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(group="data", name="data_schema", node=DataConfig)
    cs.store(group="data", name="bench_data_schema", node=BenchDataConfig)
    cs.store(group="algo", name="sft_schema", node=SFTAlgoConfig)
    cs.store(group="algo", name="grpo_schema", node=GRPOAlgoConfig)
    if not builders:
        return
    from olmocr.models import HubModel, TinyModel

    cs.store(group="model", name="tiny_schema", node=schema_for(TinyModel))
    cs.store(group="model", name="hub_schema", node=schema_for(HubModel))
    from olmocr.train import muon, optim, schedules

    for group, builders in (("optimizer", (optim.adamw, muon.muon)),
                            ("scheduler", (schedules.linear, schedules.cosine, schedules.constant, schedules.wsd,
                                           schedules.inverse_sqrt))):
        for builder in builders:
            cs.store(group=group, name=f"{builder.__name__}_schema", node=schema_for(builder))


def _target_nodes(node, path: str = ""):
    if node._is_none() or node._is_missing():
        return
    if isinstance(node, DictConfig):
        if "_target_" in node:
            yield path, node
        for key in node.keys():
            child = node._get_node(key)
            if isinstance(child, (DictConfig, ListConfig)):
                yield from _target_nodes(child, f"{path}.{key}" if path else str(key))
    elif isinstance(node, ListConfig):
        for i in range(len(node)):
            child = node._get_node(i)
            if isinstance(child, (DictConfig, ListConfig)):
                yield from _target_nodes(child, f"{path}[{i}]")


# Maps whose entries have one schema but must stay open to new keys (see DataConfig).
def _data_entry_schema(cfg: DictConfig) -> type:
    """Sources of an SFT data config have ``roots``; benches of a GRPO one have a ``root``."""
    return BenchSourceConfig if OmegaConf.select(cfg, "algo.name") == "grpo" else SourceConfig


TYPED_MAP_ENTRIES = {"data.train": _data_entry_schema, "data.eval": _data_entry_schema}


def _check_against(schema: type, node, path: str, what: str) -> DictConfig:
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), node)
    except OmegaConfBaseException as exc:
        key = f"{path}.{exc.key}" if getattr(exc, "key", None) else path
        raise ValueError(f"{key}: {str(exc).splitlines()[0]} ({what})") from None
    missing = list(OmegaConf.missing_keys(merged))
    if missing:
        raise ValueError(f"{path}: missing required key(s) {', '.join(missing)} ({what})")
    return merged


def validate(cfg: DictConfig) -> DictConfig:
    """Check every ``_target_`` node against its target's signature; raise ValueError naming the key.

    Also resolves every interpolation, so a bad ``${…}`` fails here rather than mid-run.
    """
    try:
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as exc:
        raise ValueError(f"config: {exc.msg if hasattr(exc, 'msg') else exc}") from None
    for path, node in _target_nodes(cfg):
        try:
            schema = reward_schema(node._target_) if path.startswith("rewards.") else schema_for(node._target_)
        except ValueError as exc:
            raise ValueError(f"{path}._target_: {exc}") from None
        # `_after_` positions a data step (olmocr.data.pipeline.step_order); it is not a constructor argument.
        params = {k: node._get_node(k) for k in node.keys() if k != "_after_"}
        _check_against(schema, OmegaConf.create(params), path, f"target {node._target_}")
    for path, schema_of in TYPED_MAP_ENTRIES.items():
        entries = OmegaConf.select(cfg, path)
        schema = schema_of(cfg)
        for name in entries or {}:
            entry = entries._get_node(name)
            if not isinstance(entry, DictConfig):
                example = "{root: ...}" if schema is BenchSourceConfig else "{roots: [...], weight: 1.0}"
                raise ValueError(f"{path}.{name}: expected a mapping like {example}, got {entry!r}")
            # Written back with its defaults filled in, so readers see a complete entry.
            what = ("a bench {root, types, files, reference}; algo=grpo takes bench data: data=synth_bench, "
                    "data=synthmix or your own" if schema is BenchSourceConfig else schema.__name__)
            entries[name] = _check_against(schema, entry, f"{path}.{name}", what)
    return cfg


def compose(config_name: str, overrides: list[str] | None = None) -> DictConfig:
    """Compose a primary config outside ``@hydra.main`` (tests, notebooks), validated."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = hydra_compose(config_name=config_name, overrides=overrides or [])
    return validate(cfg)


def submit_on_cluster(argv: list[str]) -> list[str]:
    """``cluster=<name>`` (other than local) on the command line goes through Hydra's launcher, which
    only a multirun uses: add ``--multirun``, so one command submits one job."""
    clusters = [a.split("=", 1)[1] for a in argv[1:] if a.startswith("cluster=")]
    if clusters and clusters[-1] != "local" and not {"-m", "--multirun"} & set(argv):
        return [argv[0], "--multirun", *argv[1:]]
    return argv


def run_stage(run, cfg: DictConfig, output_dir: str):
    """Call a stage's ``run``; a user error (ValueError) ends it with one line and exit code 2."""
    try:
        return run(cfg, output_dir)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
