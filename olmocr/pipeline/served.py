"""The model a stage serves, checked before it starts (the stage's ``paths`` check: it reads the model's folder).
Light to import: the stages' modules import it at once."""

from __future__ import annotations

import os


def check_model_pages(cfg) -> None:
    """The pages ``convert.steps`` present against those the served model was trained to read (its
    ``olmocr_pages.json``, :mod:`olmocr.data.presented`): ValueError naming every setting that differs, unless
    ``convert.match_model=false``. A model served elsewhere (server=external) or with no record is not checked.
    The ``paths`` check of the stages that serve a model (a local folder it reads)."""
    from omegaconf import OmegaConf

    from olmocr.data.presented import RECORD, differences

    name = cfg.model.get("name_or_path") if cfg.get("model") is not None else None
    if (not cfg.convert.get("match_model", True) or not isinstance(name, str)
            or str(cfg.server.get("_target_", "")).endswith(".ExternalServer") or not os.path.isdir(os.path.expanduser(name))):
        return
    found = differences(name, OmegaConf.to_container(cfg.convert.steps, resolve=True), "convert.steps")
    if found:
        raise ValueError(f"{'; '.join(found)}: model.name_or_path={name} was trained on pages presented otherwise "
                         f"(its {RECORD}); present them as it was trained, or set convert.match_model=false")
