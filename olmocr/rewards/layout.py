"""Structure rewards: how well a completion's blocks (:mod:`olmocr.formats.structure`) match the page's truth
blocks (the ``blocks`` column: the page's blocks record, where the page has one), by the bench's own layout
checks (:mod:`olmocr.bench.layout`). Each is None for a page without truth blocks, and 0 for a completion whose
blocks do not parse (or that has none)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

from olmocr.bench.layout import PageLayout, score_page
from olmocr.formats.frontmatter import FrontMatterError, parse_document
from olmocr.formats.structure import StructureError, blocks_from_record, parse_blocks
from olmocr.rewards.text import _per_completion, completion_text


@functools.lru_cache(maxsize=1024)
def _truth(record: str) -> tuple:
    return tuple(blocks_from_record(json.loads(record)))


def _scored(completions: Sequence, blocks: Sequence | None) -> list[PageLayout | None]:
    out: list[PageLayout | None] = []
    for completion, record in zip(completions, _per_completion(blocks, len(completions))):
        truth = list(_truth(record if isinstance(record, str) else json.dumps(record))) if record else []
        if not truth:
            out.append(None)
            continue
        try:
            answer = parse_blocks(parse_document(completion_text(completion))[1])
        except (FrontMatterError, StructureError):
            answer = []
        out.append(score_page(truth, answer))
    return out


def box_iou(completions: Sequence, blocks: Sequence | None = None, **_) -> list[float | None]:
    """The mean over the page's truth blocks of the IoU with the completion's block that covers it (same label,
    IoU >= 0.5; 0 where none does)."""
    return [None if p is None else p.iou / p.truth for p in _scored(completions, blocks)]


def block_labels(completions: Sequence, blocks: Sequence | None = None, **_) -> list[float | None]:
    """The share of the page's truth blocks whose best overlapping block in the completion has their label."""
    return [None if p is None else p.labelled / p.truth for p in _scored(completions, blocks)]


def block_order(completions: Sequence, blocks: Sequence | None = None, **_) -> list[float | None]:
    """The share of the page's truth blocks one after another that the completion found in that order (None for
    a page of one block)."""
    return [None if p is None or not p.pairs else p.in_order / p.pairs for p in _scored(completions, blocks)]
