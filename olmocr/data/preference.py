"""DPO rows from preference pairs: each pair's page rendered and prompted by the configured steps (the
inference steps), the chosen and rejected answers as assistant turns, in trl's conversational form."""

from __future__ import annotations

import logging

from olmocr.data.chain import MadeWhenRead, RejectReport, build_pipeline
from olmocr.data.steps import BuildMessages, Reject, control_token_in
from olmocr.errors import UserError

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
            raise UserError(f"data: pairs file {path} does not exist (python -m olmocr.pairs writes one)") from None
        for number, row in parse_lines(text, path):  # a line torn by a killed pairs run: left out
            try:
                if row.get("chosen") is None:
                    without += 1
                    continue
                pairs.append({"pdf_path": row["pdf_path"], "page": int(row["page"]), "page_id": row["page_id"],
                              "chosen": str(row["chosen"]), "rejected": str(row["rejected"])})
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                raise UserError(f"{path}:{number}: not a pair line ({type(exc).__name__}: {exc})") from None
    return pairs, without


def pair_row(pipeline, pair: dict) -> dict:
    """trl's row of a pair: its page rendered and prompted by the steps, the answers as assistant turns."""
    sample = pipeline({"pdf_path": pair["pdf_path"], "page": pair["page"]})
    return {"prompt": sample["messages"], "images": [sample["image"]], "page_id": pair["page_id"],
            "chosen": [{"role": "assistant", "content": pair["chosen"]}],
            "rejected": [{"role": "assistant", "content": pair["rejected"]}]}


def build_preference_dataset(paths: list[str], steps: dict, special_tokens: list[str],
                             report_path: str | None = None):
    """A Hugging Face dataset of ``prompt`` (chat messages), ``images``, ``chosen``, ``rejected``, made as its
    rows are read (:class:`MadeWhenRead`: 100 pairs made up front at 1288 px held 371 MB). Pairs whose answers
    spell out one of the tokenizer's ``special_tokens`` are skipped here, pages that fail a step when read;
    both are counted and written to ``report_path``."""
    import functools

    from datasets import Dataset

    pipeline = build_pipeline(steps)
    if not any(isinstance(step, BuildMessages) for step in pipeline.steps.values()):
        raise UserError("data.steps: DPO prompts need a 'messages' step (olmocr.data.steps.BuildMessages)")
    pairs, without = read_pairs(paths)
    report = RejectReport(report_path)
    kept = []
    for pair in pairs:
        spelled = [(side, token) for side in ("chosen", "rejected")
                   if (token := control_token_in(pair[side], special_tokens)) is not None]
        if spelled:
            side, token = spelled[0]
            report.add(pair, Reject("control_token", f"{pair['page_id']}: the {side} answer spells out {token}"))
            continue
        kept.append(pair)
    skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(report.counts.items())) or "none"
    log.info("%d pairs from %s (%d pages gave no pair; pairs skipped: %s); pages are made as the trainer reads "
             "them", len(kept), ", ".join(paths), without, skipped)
    if not kept:
        raise UserError(f"data: no usable pairs in {', '.join(paths)}")
    made = MadeWhenRead(kept, functools.partial(pair_row, pipeline), report)
    return Dataset.from_dict({"index": list(range(len(kept)))}).with_transform(made)
