"""Layout checks: how well an answer's blocks (:mod:`olmocr.formats.structure`) match a page's truth blocks, on
pages whose truth has them (``pdfs/<name>.blocks.json`` beside the truth ``.md``; the synthetic generator writes
them) and for candidates that wrote them (``<output stem>.blocks.json`` beside each output ``.md``).

Per page, a truth block is found when an answer block of the same label covers it at IoU >= 0.5 (each answer block
found once, the best overlaps first). From that:

- **layout F1** per label and over all blocks: found blocks against truth and answer blocks;
- **mean IoU**: the IoU of each truth block with the block that found it, 0 where none did, over truth blocks;
- **label accuracy**: of the truth blocks, the share whose best overlapping answer block (any label, IoU >= 0.5)
  has its label;
- **order accuracy**: of each two truth blocks one after the other, the share both found in that order.

An empty answer, or one without blocks (a markdown answer), finds nothing and scores 0 on each. Intervals are
95% bootstrap intervals over pages (a page's figures weigh by its blocks).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from olmocr.bench.intervals import bootstrap
from olmocr.formats.structure import SUFFIX, Block, StructureError, blocks_from_record

MATCH_IOU = 0.5


def iou(a: tuple, b: tuple) -> float:
    """Intersection over union of two boxes (x0, y0, x1, y1); 0 where either is empty."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def match(truth: list[Block], answer: list[Block], same_label: bool = True) -> dict[int, tuple[int, float]]:
    """Truth block index -> (answer block index, IoU) for the pairs at IoU >= 0.5, one to one, best first."""
    pairs = sorted(((iou(t.box, a.box), i, j) for i, t in enumerate(truth) for j, a in enumerate(answer)
                    if not same_label or t.label == a.label), reverse=True)
    found: dict[int, tuple[int, float]] = {}
    taken: set[int] = set()
    for overlap, i, j in pairs:
        if overlap < MATCH_IOU:
            break
        if i not in found and j not in taken:
            found[i] = (j, overlap)
            taken.add(j)
    return found


@dataclass
class PageLayout:
    truth: int  # truth blocks
    answered: int  # answer blocks
    found: int
    iou: float  # summed over truth blocks (0 for those not found)
    labelled: int  # truth blocks whose best overlapping answer block has their label
    pairs: int  # truth blocks one after another
    in_order: int
    by_label: dict[str, list[int]] = field(default_factory=dict)  # label: [found, truth, answer]


def score_page(truth: list[Block], answer: list[Block] | None) -> PageLayout:
    answer = answer or []
    found = match(truth, answer)
    anywhere = match(truth, answer, same_label=False)
    by_label: dict[str, list[int]] = {}
    for block in truth:
        by_label.setdefault(block.label, [0, 0, 0])[1] += 1
    for block in answer:
        by_label.setdefault(block.label, [0, 0, 0])[2] += 1
    for i in found:
        by_label[truth[i].label][0] += 1
    in_order = sum(1 for i in range(len(truth) - 1)
                   if i in found and i + 1 in found and found[i][0] < found[i + 1][0])
    return PageLayout(truth=len(truth), answered=len(answer), found=len(found),
                      iou=sum(overlap for _, overlap in found.values()),
                      labelled=sum(1 for i, (j, _) in anywhere.items() if answer[j].label == truth[i].label),
                      pairs=max(len(truth) - 1, 0), in_order=in_order, by_label=by_label)


def read_blocks(path: str) -> list[Block] | None:
    """The blocks of a blocks record file; None where there is none. A record that does not parse is an error."""
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        try:
            return blocks_from_record(json.load(fh))
        except (ValueError, StructureError) as exc:
            raise StructureError(f"{path}: {exc}") from None


def truth_blocks(bench_dir: str, pdf: str, page: int) -> list[Block] | None:
    """A page's truth blocks, beside its single-page PDF in the bench, when it has them."""
    if page != 1 or not pdf.lower().endswith(".pdf"):
        return None
    return read_blocks(os.path.join(bench_dir, "pdfs", pdf[:-4] + SUFFIX))


def score_candidates(bench_dir: str, pages: list[tuple[str, int]], outputs) -> dict | None:
    """Layout figures of a candidate folder over ``pages`` ((pdf, page) of the bench), or None when no page has
    truth blocks. ``outputs(pdf, page)`` lists a page's output ``.md`` files (one per repeat); each repeat is
    scored as a page of its own, a page without outputs as an empty answer, a repeat without blocks as one that
    wrote none. A candidate's blocks record that does not parse counts as no blocks, and is listed."""
    scored: list[PageLayout] = []
    unreadable: list[str] = []
    for pdf, page in pages:
        truth = truth_blocks(bench_dir, pdf, page)
        if not truth:
            continue
        files = outputs(pdf, page) or [None]
        for md in files:
            answer = None
            if md is not None:
                try:
                    answer = read_blocks(md[:-3] + SUFFIX)
                except StructureError as exc:
                    unreadable.append(str(exc))
            scored.append(score_page(truth, answer))
    if not scored:
        return None
    return summarize(scored) | {"unreadable": unreadable}


def summarize(pages: list[PageLayout]) -> dict:
    def interval(values, weights) -> dict:
        if not sum(weights):
            return {"mean": None, "low": None, "high": None}
        found = bootstrap(values, weights)
        return {"mean": round(found.mean, 4), "low": round(found.low, 4), "high": round(found.high, 4)}

    labels = sorted({label for p in pages for label in p.by_label})
    f1 = {}
    for label in labels:
        rows = [p.by_label.get(label, [0, 0, 0]) for p in pages]
        f1[label] = {"truth": sum(r[1] for r in rows), "answer": sum(r[2] for r in rows),
                     **interval([2 * r[0] for r in rows], [r[1] + r[2] for r in rows])}
    return {
        "pages": len(pages), "truth_blocks": sum(p.truth for p in pages),
        "answer_blocks": sum(p.answered for p in pages),
        "pages_without_blocks": sum(1 for p in pages if not p.answered),
        "f1": interval([2 * p.found for p in pages], [p.truth + p.answered for p in pages]),
        "f1_by_label": f1,
        "mean_iou": interval([p.iou for p in pages], [p.truth for p in pages]),
        "label_accuracy": interval([p.labelled for p in pages], [p.truth for p in pages]),
        "order_accuracy": interval([p.in_order for p in pages], [p.pairs for p in pages]),
    }


def describe(layout: dict) -> str:
    """One line of the layout figures."""
    def pct(row):
        return "n/a" if row["mean"] is None else f"{100 * row['mean']:.1f}% [{100 * row['low']:.1f}, {100 * row['high']:.1f}]"

    return (f"layout over {layout['pages']} pages ({layout['truth_blocks']} truth blocks, {layout['answer_blocks']} "
            f"answered, {layout['pages_without_blocks']} pages without blocks): F1 {pct(layout['f1'])}, mean IoU "
            f"{pct(layout['mean_iou'])}, label accuracy {pct(layout['label_accuracy'])}, order accuracy "
            f"{pct(layout['order_accuracy'])}")

