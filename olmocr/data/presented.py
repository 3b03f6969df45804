"""What a model was trained to read: how its pages were rendered and prompted, the data steps inference must
repeat. Training writes it beside the weights (``olmocr_pages.json``), the tools that make a released model
from a checkpoint carry it along (merge, soup, compress), and the stages that serve a model read it, so that
pages presented otherwise (another render size, another prompt) are said before a page is converted: a model
served at 1288 px that was trained at 448 answers nothing a page parser takes, and the run looks like a
model that cannot read."""

from __future__ import annotations

import json
import os
import shutil

RECORD = "olmocr_pages.json"
# The steps whose settings make what the model sees; the others only choose or check the samples, or (in
# training) augment them and build the targets.
PRESENTED = ("olmocr.data.steps.RenderPage", "olmocr.data.steps.BuildPrompt", "olmocr.data.steps.BuildMessages")


def presented(steps: dict | None) -> dict[str, dict]:
    """``{target: settings}`` of the steps (a resolved data-steps config) that make what the model sees."""
    out = {}
    for step in (steps or {}).values():
        if isinstance(step, dict) and step.get("_target_") in PRESENTED:
            out[step["_target_"]] = {k: v for k, v in step.items() if not str(k).startswith("_")}
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
    trained elsewhere, a hub id)."""
    path = os.path.join(os.path.expanduser(folder), RECORD)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            return dict(json.load(fh)["steps"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a record of the pages the model was trained on ({exc})") from None


def differences(folder: str, steps: dict | None, key: str) -> list[str]:
    """``key.<step>.<setting>=<value> (trained with <value>)`` for every setting in which ``steps`` (the config
    node ``key``) present pages otherwise than the model in ``folder`` was trained to read them; empty where they
    agree or the model has no record."""
    trained = read_record(folder)
    if not trained:
        return []
    names = {step.get("_target_"): name for name, step in (steps or {}).items() if isinstance(step, dict)}
    given = presented(steps)
    out = []
    for target, settings in sorted(trained.items()):
        name = names.get(target)
        if name is None:
            out.append(f"{key} has no {target.rsplit('.', 1)[-1]} step (trained with {settings})")
            continue
        for setting, value in sorted(settings.items()):
            if given[target].get(setting) != value:
                out.append(f"{key}.{name}.{setting}={given[target].get(setting)} (trained with {value})")
    return out
