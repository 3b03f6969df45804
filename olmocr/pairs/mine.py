"""Preference pairs from a model's own samples: per bench page, ``samples`` completions scored by the
reward functions (weighted sum, as GRPO combines them); the best is chosen, the worst rejected, when
they differ by at least ``margin``."""

from __future__ import annotations

import json
import logging
import math
import os
import zlib
from collections import Counter
from collections.abc import Callable

from olmocr.utils.jsonl import mend, read_rows

log = logging.getLogger("olmocr.pairs")


def total_rewards(funcs: list[Callable], weights: list[float], completions: list[str], columns: dict) -> list[list]:
    """Per completion: its weighted total (a reward that does not apply, None, counts as 0) and each
    reward's value."""
    per_reward = [fn(completions, **columns) for fn in funcs]
    rows = []
    for i in range(len(completions)):
        values = {fn.__name__: values[i] for fn, values in zip(funcs, per_reward)}
        total = sum(w * v for w, v in zip(weights, values.values()) if v is not None)
        rows.append([total, values])
    return rows


def choose_pair(scored: list[dict], margin: float) -> tuple[dict, dict] | str:
    """(chosen, rejected) among the scored samples, or why this page gives no pair."""
    usable = [s for s in scored if not s.get("error") and math.isfinite(s["reward"])]
    if len(usable) < 2:
        return "fewer than 2 answers"
    best = max(usable, key=lambda s: s["reward"])
    worst = min(usable, key=lambda s: s["reward"])
    if best["reward"] - worst["reward"] < margin or best["reward"] == worst["reward"]:
        return "rewards within the margin"
    return best, worst


class PairFile:
    """The pairs JSONL, appended one page at a time (a stopped run keeps every finished page), and the
    pages already mined, read back so a re-run skips them. Pages with no pair are recorded too."""

    def __init__(self, path: str):
        self.path = path
        self.done: set[str] = set()
        self.counts: Counter = Counter()
        mend(path)  # a line a kill cut short goes: that page is mined again
        if os.path.exists(path):
            for row in read_rows(path):
                self.done.add(row["page_id"])
                self.counts["pairs" if row.get("chosen") is not None else "no_pair"] += 1

    def add(self, row: dict) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        self.done.add(row["page_id"])
        self.counts["pairs" if row.get("chosen") is not None else "no_pair"] += 1


def page_seed(seed: int | None, page_id: str) -> int | None:
    """The sampling seed of a page's first sample, from the run's seed and the page (its k-th sample: + k)."""
    return None if seed is None else zlib.crc32(f"{seed}:{page_id}".encode()) % 2**30


async def mine_page(converter, page: dict, samples: int, temperature: float, rewards: tuple, margin: float,
                    reference: str | None, seed: int | None = None) -> dict:
    """One page's line: its samples with their rewards, and the pair (or why there is none)."""
    from olmocr.data.steps import Reject

    row = {"page_id": page["page_id"], "pdf_path": page["pdf_path"], "page": page["page"]}
    try:
        _, replies = await converter.sample({"pdf_path": page["pdf_path"], "page": page["page"]}, samples,
                                            temperature, page_seed(seed, page["page_id"]))
    except Reject as exc:
        return {**row, "chosen": None, "why": f"not rendered: {exc}"}
    answered = [r for r in replies if not r.error]
    scored = [{"text": r.text, "error": r.error, "reward": float("nan")} for r in replies]
    if answered:
        columns = {"tests": [page["tests"]] * len(answered), "reference": [reference] * len(answered),
                   "finish_reason": [r.finish_reason for r in answered], "page_id": [page["page_id"]] * len(answered)}
        totals = iter(total_rewards(*rewards, [r.text for r in answered], columns))
        for entry in scored:
            if not entry["error"]:
                entry["reward"], entry["rewards"] = next(totals)
    pair = choose_pair(scored, margin)
    samples_out = [{**{k: v for k, v in s.items() if k != "text"},
                    "reward": s["reward"] if math.isfinite(s["reward"]) else None} for s in scored]
    if isinstance(pair, str):
        return {**row, "chosen": None, "why": pair, "samples": samples_out}
    chosen, rejected = pair
    return {**row, "chosen": chosen["text"], "rejected": rejected["text"], "chosen_reward": chosen["reward"],
            "rejected_reward": rejected["reward"], "samples": samples_out}
