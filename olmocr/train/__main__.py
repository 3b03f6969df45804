"""python -m olmocr.train — fine-tune a document-OCR model: SFT (algo=sft), GRPO (algo=grpo) or DPO
(algo=dpo)."""

from __future__ import annotations

import functools

from omegaconf import DictConfig, OmegaConf

import olmocr.train.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.cli import Launch, Sidecar, stage
from olmocr.config import locate
from olmocr.data.presented import presents_as_trained
from olmocr.errors import UserError
from olmocr.train import algos, optim
from olmocr.train.recipe import check_finetune, check_trainer


def cluster_needs(cfg: DictConfig) -> Launch:
    """One torch.distributed job over every GPU of every replica, resuming from its checkpoints; with
    ``algo.generation=vllm_server``, GRPO's generation server beside it on the leader replica."""
    sidecar = None
    if cfg.algo.get("generation") == "vllm_server":
        model = cfg.model.get("name_or_path")
        if not model:
            raise UserError("the GRPO server layout serves a hub model: model.name_or_path must be set")
        vllm = OmegaConf.to_object(cfg.algo.vllm)
        sidecar = Sidecar(command=functools.partial(vllm.server_command, model), host_key="algo.vllm.server_host",
                          gpus=vllm.server_gpus)
    return Launch(distributed=True, resumes=True, sidecar=sidecar,
                  replica_state=locate(cfg.strategy._target_).replica_state,
                  check_world=functools.partial(algos.check_world, cfg))


# algo.name -> its recipe (olmocr.train.recipe), imported only when it runs
RECIPES = {"sft": "olmocr.train.sft.SFT", "grpo": "olmocr.train.grpo.GRPO", "dpo": "olmocr.train.dpo.DPO"}


def check(cfg: DictConfig) -> None:
    if cfg.algo.name not in RECIPES:
        raise UserError(f"algo.name: expected one of {', '.join(RECIPES)}, got {cfg.algo.name!r}")
    check_trainer(cfg.trainer)
    check_finetune(cfg.finetune.freeze_vision, cfg.finetune.freeze_language, cfg.finetune.lora)
    if cfg.optimizer._target_ == f"{optim.muon.__module__}.{optim.muon.__name__}":
        strategy = locate(cfg.strategy._target_)
        optim.check_muon(split_by=None if strategy.whole_matrices else strategy.name, lora=cfg.finetune.lora is not None)
    algos.check(cfg)


def check_paths(cfg: DictConfig) -> None:
    """The local folders the run reads, before its run dir is made (a path a cluster job reads is checked there)."""
    from olmocr.models.source import check_name_or_path
    from olmocr.train.bench_eval import check_root

    name = cfg.model.get("name_or_path")
    if isinstance(name, str):
        check_name_or_path(name)
    bench = cfg.eval.get("bench")
    if bench is not None and isinstance(bench.get("root"), str):
        check_root(bench.root)


# Training from a model that carries how it reads its pages (a released checkpoint of this project: GRPO or DPO
# after SFT) trains and evaluates on pages presented as it learned to read them.
@stage("train", launch=cluster_needs, check=check, paths=check_paths,
       present=presents_as_trained({"data.steps": "model.name_or_path", "eval.bench.steps": "model.name_or_path"}))
def run(cfg: DictConfig, output_dir: str) -> dict:
    return locate(RECIPES[cfg.algo.name])(cfg, output_dir).run()


if __name__ == "__main__":
    run.main()
