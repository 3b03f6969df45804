"""DPO rows from preference pairs: each pair's page rendered and prompted by the configured steps (the
inference steps), the chosen and rejected answers as assistant turns, in trl's conversational form."""

from __future__ import annotations

import logging

from olmocr.data.pipeline import RejectReport, build_pipeline
from olmocr.data.steps import BuildMessages, Reject, control_token_in

log = logging.getLogger(__name__)


def read_pairs(paths: list[str]) -> tuple[list[dict], int]:
    """The pairs of ``paths`` (lines without a pair skipped), and how many pages gave none."""
    from olmocr.utils.io import read_text
    from olmocr.utils.jsonl import parse_lines

    pairs, without = [], 0
    for path in paths:
        try:
            text = read_text(path)
        except FileNotFoundError:
            raise ValueError(f"data: pairs file {path} does not exist (python -m olmocr.pairs writes one)") from None
        for number, row in parse_lines(text, path):  # a line torn by a killed pairs run: left out
            try:
                if row.get("chosen") is None:
                    without += 1
                    continue
                pairs.append({"pdf_path": row["pdf_path"], "page": int(row["page"]), "page_id": row["page_id"],
                              "chosen": str(row["chosen"]), "rejected": str(row["rejected"])})
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{number}: not a pair line ({type(exc).__name__}: {exc})") from None
    return pairs, without


def build_preference_dataset(paths: list[str], steps: dict, special_tokens: list[str],
                             report_path: str | None = None):
    """A Hugging Face dataset of ``prompt`` (chat messages), ``images``, ``chosen``, ``rejected``. Pages
    that fail a step, and pairs whose answers spell out one of the tokenizer's ``special_tokens``, are
    skipped, counted and written to ``report_path``."""
    from datasets import Dataset
    from tqdm import tqdm

    pipeline = build_pipeline(steps)
    if not any(isinstance(step, BuildMessages) for step in pipeline.steps.values()):
        raise ValueError("data.steps: DPO prompts need a 'messages' step (olmocr.data.steps.BuildMessages)")
    pairs, without = read_pairs(paths)
    report = RejectReport(report_path)
    rows = []
    for pair in tqdm(pairs, desc="pairs", unit="pair", disable=len(pairs) < 50):
        try:
            for side in ("chosen", "rejected"):
                token = control_token_in(pair[side], special_tokens)
                if token is not None:
                    raise Reject("control_token", f"{pair['page_id']}: the {side} answer spells out {token}")
            sample = pipeline({"pdf_path": pair["pdf_path"], "page": pair["page"]})
        except Reject as exc:
            report.add(pair, exc)
            continue
        rows.append({"prompt": sample["messages"], "images": [sample["image"]], "page_id": pair["page_id"],
                     "chosen": [{"role": "assistant", "content": pair["chosen"]}],
                     "rejected": [{"role": "assistant", "content": pair["rejected"]}]})
    skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(report.counts.items())) or "none"
    log.info("%d pairs from %s (%d pages gave no pair; pairs skipped: %s)", len(rows), ", ".join(paths), without,
             skipped)
    if not rows:
        raise ValueError(f"data: no usable pairs in {', '.join(paths)}")
    return Dataset.from_list(rows)
