"""Schemas of ``python -m olmocr.train`` (conf/train.yaml) and of its ``algo``, ``optimizer``, ``scheduler`` and
``strategy`` groups (the last three generated from the builders' signatures)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from omegaconf import MISSING

import olmocr.data.schema  # noqa: F401 - training composes the data and model groups
from olmocr.config import OneOf, Range, StageConfig, schema_for, store
from olmocr.train import optim, schedules, strategy
from olmocr.train.checkpoint import Checkpointing
from olmocr.train.vllm_server import VLLMGeneration


@dataclass
class SFTAlgoConfig:
    name: str = "sft"
    # From a projector at random weights: before the first step, its output is centred and scaled on this many
    # training pages (olmocr.models.projector), so image tokens differ by what they show. GRPO and DPO start
    # from a trained model, whose projector this would undo: the key is SFT's alone.
    centre_projector: Annotated[int | None, Range(at_least=1, null="off")] = None


@dataclass
class GRPOAlgoConfig:
    """GRPO with trl: what is generated and how the loss is formed. Any other trl ``GRPOConfig`` field
    goes in ``trl_args`` (its name, type and trl's rules across values checked before any work)."""

    name: str = "grpo"
    num_generations: Annotated[int, Range(at_least=2)] = 8
    temperature: Annotated[float, Range(above=0)] = 0.8
    top_p: Annotated[float, Range(above=0, at_most=1)] = 1.0
    max_completion_length: Annotated[int, Range(at_least=1)] = 4096
    beta: Annotated[float, Range(at_least=0)] = 0.0  # KL coefficient; 0 loads no reference model
    loss_type: Annotated[str, OneOf("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo")] = "dapo"
    importance_sampling_level: Annotated[str, OneOf("token", "sequence")] = "token"  # sequence: GSPO
    scale_rewards: Annotated[str, OneOf("group", "batch", "none")] = "group"
    epsilon: Annotated[float, Range(above=0)] = 0.2
    num_iterations: Annotated[int, Range(at_least=1)] = 1
    # transformers (plain generate; CPU and tests), vllm_colocate (vLLM inside each trainer process) or
    # vllm_server (a `trl vllm-serve` process on its own GPU; see launch_commands.json in the run dir)
    generation: Annotated[str, OneOf("transformers", "vllm_colocate", "vllm_server")] = "transformers"
    vllm: VLLMGeneration = field(default_factory=VLLMGeneration)  # how vLLM runs, for both vllm_* generations
    log_completions: bool = False
    # The control of a GRPO experiment: each batch's rewards permuted across its completions (the same values,
    # nothing about which text earned them; olmocr/train/grpo_signal.py). Not for training a model.
    shuffle_rewards: bool = False
    trl_args: dict[str, Any] = field(default_factory=dict)


@dataclass
class DPOAlgoConfig:
    """DPO with trl on preference pairs (data=pairs). The reference model is the starting checkpoint (its
    log-probabilities computed alongside: trl precomputes them only for text, and pages are images); any other
    trl ``DPOConfig`` field goes in ``trl_args`` (its name, type and trl's rules checked first)."""

    name: str = "dpo"
    beta: Annotated[float, Range(above=0)] = 0.1  # how far the policy may move from the reference; smaller: further
    # sigmoid is DPO; the others are trl's other DPO losses
    loss_type: Annotated[str, OneOf("sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair",
                                    "sppo_hard", "aot", "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft",
                                    "sigmoid_norm")] = "sigmoid"
    # The chosen answer's negative log-likelihood added to the loss with this weight (trl's loss_type [<loss_type>,
    # sft]). Pairs of a page's own samples often differ by a letter; DPO alone then lowers both answers' likelihood
    # and the model stops writing either (the reader lost 32 points of held-out pages in 100 steps; docs/reading.md).
    sft_weight: Annotated[float, Range(at_least=0)] = 0.0
    # Which tokens of a pair's answers its loss reads: whole (every token of both) or to_divergence (each answer
    # up to and including the first token where the two differ; the sft term's chosen tokens likewise)
    scope: Annotated[str, OneOf("whole", "to_divergence")] = "whole"
    # robust/cDPO: the share of pairs assumed mislabelled
    label_smoothing: Annotated[float, Range(at_least=0, below=0.5)] = 0.0
    # prompt + answer tokens; longer pairs are cut
    max_length: Annotated[int | None, Range(at_least=1, null="no cut")] = None
    trl_args: dict[str, Any] = field(default_factory=dict)


@dataclass
class DurationConfig:
    unit: Annotated[str, OneOf("steps", "epochs", "tokens")] = "steps"
    value: Annotated[float | None, Range(above=0)] = 100


@dataclass
class LoraConfig:
    r: Annotated[int, Range(at_least=1)] = 8
    alpha: Annotated[int, Range(above=0)] = 32
    dropout: Annotated[float, Range(at_least=0, below=1)] = 0.1
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class FinetuneConfig:
    """What trains: freeze the vision tower or the language model, or train LoRA adapters on the LM."""

    freeze_vision: bool = False
    freeze_language: bool = False
    lora: LoraConfig | None = None


@dataclass
class TrainerConfig:
    batch_size: Annotated[int, Range(at_least=1)] = 1  # per device
    grad_accum: Annotated[int, Range(at_least=1)] = 1
    max_duration: DurationConfig = field(default_factory=DurationConfig)
    # Stop early without changing the schedule; value null = no hard stop. (Not Optional[DurationConfig]:
    # OmegaConf cannot merge a command-line dict into a null structured node.)
    hard_stop: DurationConfig = field(default_factory=lambda: DurationConfig(value=None))
    precision: Annotated[str, OneOf("fp32", "bf16")] = "fp32"  # bf16: autocast
    clip_grad_norm: Annotated[float | None, Range(above=0, null="no clipping")] = 1.0
    eval_interval: Annotated[int | None, Range(at_least=0, null="none")] = 500
    eval_max_batches: Annotated[int | None, Range(at_least=1, null="the whole eval set")] = None
    num_workers: Annotated[int, Range(at_least=0)] = 0
    activation_checkpointing: bool = False
    compile: bool = False
    # torch.compile's backend: inductor generates kernels (Triton on GPUs, C++ on CPUs); aot_eager traces the
    # blocks and their backward as inductor does and runs the graphs eagerly (debugging a compile failure)
    compile_backend: str = "inductor"
    device: Annotated[str, OneOf("auto", "cuda", "cpu")] = "auto"


@dataclass
class EvalConfig:
    # Held-out bench scores at every trainer.eval_interval (olmocr.train.bench_eval.BenchEval, conf/eval/);
    # null: none.
    bench: Any = None


@dataclass
class TrainConfig(StageConfig):
    algo: Any = MISSING  # SFTAlgoConfig, GRPOAlgoConfig or DPOAlgoConfig, by the algo group
    model: Any = MISSING
    # DataConfig or FolderDataConfig (sft), BenchDataConfig (grpo), PairsDataConfig (dpo), by the data group
    data: Any = MISSING
    rewards: dict[str, Any] = field(default_factory=dict)  # grpo: conf/rewards/, checked by validate()
    optimizer: Any = MISSING
    scheduler: Any = MISSING
    strategy: Any = MISSING  # ddp, fsdp or deepspeed, by the strategy group (olmocr.train.strategy)
    callbacks: dict[str, Any] = field(default_factory=dict)
    eval: EvalConfig = field(default_factory=EvalConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    checkpoint: Checkpointing = field(default_factory=Checkpointing)  # olmocr.train.checkpoint
    run_name: str = "tiny_sft"
    seed: int = 0


store("train_schema", TrainConfig)
store("sft_schema", SFTAlgoConfig, group="algo")
store("grpo_schema", GRPOAlgoConfig, group="algo")
store("dpo_schema", DPOAlgoConfig, group="algo")
for builder in (optim.adamw, optim.muon):
    store(f"{builder.__name__}_schema", schema_for(builder), group="optimizer")
for kind in strategy.STRATEGIES:
    store(f"{kind.name}_schema", schema_for(kind), group="strategy")
for builder in (schedules.linear, schedules.cosine, schedules.constant, schedules.wsd, schedules.inverse_sqrt):
    store(f"{builder.__name__}_schema", schema_for(builder), group="scheduler")
