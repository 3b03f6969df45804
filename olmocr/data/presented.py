"""How a model reads its pages, carried by the model: the settings of the data steps that make what it sees (each
step class names them, ``Step.presents``: the render size, the prompt version, where the image goes). Training
writes them beside the weights (``olmocr_pages.json``), the tools that make a released model from a checkpoint
carry them along (merge, soup, compress), and every stage that loads a model presents its pages with them
(:func:`as_trained`, applied by the stage's declaration, ``@stage(presents=…)``): a model served at 1288 px that
was trained at 448 answers nothing a page parser takes, and the run looks like a model that cannot read. A
setting given on the command line still wins, with a warning."""

from __future__ import annotations

import inspect
import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field

from omegaconf import DictConfig, OmegaConf, open_dict

from olmocr.config import locate
from olmocr.errors import UserError

RECORD = "olmocr_pages.json"


def _presents(target: str) -> tuple[str, ...]:
    return tuple(getattr(locate(target), "presents", ())) if isinstance(target, str) else ()


def presented(steps: dict | None) -> dict[str, dict]:
    """``{target: settings}`` of the steps (a resolved data-steps config) that make what the model sees; a setting
    the config leaves out has the step's default."""
    out = {}
    for step in (steps or {}).values():
        names = _presents(step.get("_target_")) if isinstance(step, dict) else ()
        if names:
            defaults = inspect.signature(locate(step["_target_"])).parameters
            out[step["_target_"]] = {name: step.get(name, defaults[name].default) for name in names}
    return out


def write_record(folder: str, steps: dict | None) -> None:
    """The record of ``steps`` in the model folder ``folder`` (nothing when they present no page)."""
    settings = presented(steps)
    if settings:
        with open(os.path.join(folder, RECORD), "w", encoding="utf-8") as fh:
            json.dump({"steps": settings}, fh, indent=2, sort_keys=True)


def copy_record(source: str, folder: str) -> None:
    """The record of the model folder ``source`` into ``folder`` (a model made from it), where it has one."""
    if os.path.isfile(os.path.join(source, RECORD)):
        shutil.copy(os.path.join(source, RECORD), os.path.join(folder, RECORD))


def read_record(folder: str) -> dict[str, dict] | None:
    """The steps' settings the model in ``folder`` was trained with, or None where it has no record (a model
    trained elsewhere, a hub id). Settings a step no longer presents are left out."""
    path = os.path.join(os.path.expanduser(folder), RECORD)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            steps = dict(json.load(fh)["steps"])
        return {target: {k: v for k, v in dict(settings).items() if k in _presents(target)}
                for target, settings in steps.items()}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{path}: not a record of the pages the model was trained on ({exc})") from None


@dataclass
class Presentation:
    """What :func:`as_trained` did: the settings it took from the model, and those the command line gave otherwise
    (``key=value (trained with value)``)."""

    taken: list[str] = field(default_factory=list)
    overridden: list[str] = field(default_factory=list)


def as_trained(cfg, steps_key: str, model_key: str, given: Iterable[str] = ()) -> Presentation:
    """Present pages as the model that ``model_key`` names was trained to read them: every setting of its record
    is set in the steps config ``steps_key`` (in place), except a key the command line gives (``given``), which
    wins. A model with no record (a hub id, a model trained elsewhere) or no local folder changes nothing."""
    done = Presentation()
    folder, steps = OmegaConf.select(cfg, model_key), OmegaConf.select(cfg, steps_key)
    if not isinstance(folder, str) or not isinstance(steps, DictConfig) or not os.path.isdir(os.path.expanduser(folder)):
        return done
    trained = read_record(folder) or {}
    names = {step.get("_target_"): name for name, step in steps.items() if isinstance(step, DictConfig)}
    given = tuple(given)
    for target, settings in sorted(trained.items()):
        name = names.get(target)
        if name is None:
            raise UserError(f"{steps_key}: no {target.rsplit('.', 1)[-1]} step, and {model_key}={folder} was trained "
                            f"with one ({settings}); add it ({steps_key}.<name>={{_target_: {target}}})")
        for setting, value in sorted(settings.items()):
            key = f"{steps_key}.{name}.{setting}"
            now = steps[name].get(setting)
            if any(key == g or key.startswith(f"{g}.") for g in given):  # the setting, or its step given whole
                if now != value:
                    done.overridden.append(f"{key}={now} (trained with {value})")
            elif now != value:
                with open_dict(steps[name]):
                    steps[name][setting] = value
                done.taken.append(f"{key}={value}")
    return done


def presents_as_trained(keys: dict[str, str]):
    """A stage's ``present``: ``{steps_key: model_key}``, each steps config presenting pages as the model that its
    key names was trained to read them (:func:`as_trained`)."""

    def present(cfg, given: Iterable[str]) -> Presentation:
        done = Presentation()
        for steps_key, model_key in keys.items():
            one = as_trained(cfg, steps_key, model_key, given)
            done.taken += one.taken
            done.overridden += [f"{o}: {model_key}={OmegaConf.select(cfg, model_key)} was trained on pages presented "
                                "otherwise" for o in one.overridden]
        return done

    return present
