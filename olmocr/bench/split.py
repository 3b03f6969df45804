"""python -m olmocr.bench.split pages=… out_dir=… — your own pages as pages to train on and a held-out bench.

``pages`` is a folder (any depth) of single-page ``X.pdf`` with ``X.md`` beside it: what
``pipeline.export`` writes from a teacher model's readings, or pages you labelled. A seeded share of the
source documents (``heldout``; whole documents, so no page of a held-out document is trained on) becomes an
olmOCR-bench folder, ``out_dir/heldout``: its pages under ``pdfs/`` (each with its reading beside it, the truth
the bench measures a character error rate against) and ``heldout.jsonl``, tests written from each page's own
reading:

- present: the page's longest sentences (up to ``present_per_page``), a couple of edits allowed;
- order: each of those sentences before the next one in the reading;
- absent: lines at the top or bottom of the PDF's text layer that the reading left out (running heads,
  page numbers: what the reader judged not to be the page's content);
- table: cells of the reading's tables (up to ``table_cells_per_page``) with the cell to their right or below.

The other documents' pages go to ``out_dir/train`` (hard links where the file system has them), the
folder ``data=folder`` trains on. Running it again writes both anew from ``pages``.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
from collections import Counter

from omegaconf import DictConfig

import olmocr.bench.schema  # noqa: F401 - puts this stage's schema in Hydra's ConfigStore
from olmocr.cli import stage
from olmocr.errors import UserError

log = logging.getLogger("olmocr.bench.split")
PAGE_SUFFIX = re.compile(r"_pg\d+$")  # pipeline.export names a page <source>_pg<page>
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
MARKUP = re.compile(r"<[^>]+>|\|")
EDGE_LINES = 2  # text-layer lines looked at, at the top and at the bottom of a page


def page_pairs(root: str) -> list[str]:
    """The page stems (path without .md) under ``root`` that have both files."""
    stems = []
    for folder, _, files in os.walk(root):
        for name in sorted(files):
            stem = os.path.join(folder, name[:-3])
            if name.endswith(".md") and os.path.isfile(stem + ".pdf"):
                stems.append(stem)
    return sorted(stems)


def document_of(stem: str, root: str) -> str:
    return PAGE_SUFFIX.sub("", os.path.relpath(stem, root))


def squash(text: str) -> str:
    return " ".join(re.sub(r"[^\w]+", " ", text.lower()).split())


def sentences(text: str) -> list[str]:
    """The reading's sentences outside tables and markup, in reading order."""
    out = []
    for line in text.splitlines():
        if MARKUP.search(line) or line.lstrip().startswith("#"):
            continue
        out += [s.strip() for s in SENTENCE_END.split(line) if 20 <= len(s.strip()) <= 200]
    return out


def page_tests(name: str, text: str, text_layer: str, present_per_page: int, table_cells: int,
               rng: random.Random) -> list:
    """The tests of one held-out page, from its reading (``text``) and its PDF's own text layer."""
    from olmocr.bench.records import AbsentTest, OrderTest, PresentTest, TableTest
    from olmocr.formats.tables import parse_tables

    tests, count = [], Counter()

    def tid(kind: str) -> str:
        count[kind] += 1
        return f"{name}_{kind}_{count[kind] - 1:02d}"

    found = sentences(text)
    chosen = sorted(sorted(range(len(found)), key=lambda i: -len(found[i]))[:present_per_page])
    for i in chosen:
        tests.append(PresentTest(pdf=f"{name}.pdf", page=1, id=tid("present"), text=found[i], max_diffs=2))
    for a, b in zip(chosen, chosen[1:]):
        if squash(found[a]) != squash(found[b]):
            tests.append(OrderTest(pdf=f"{name}.pdf", page=1, id=tid("order"), before=found[a], after=found[b],
                                   max_diffs=2))
    lines = [line.strip() for line in text_layer.splitlines() if line.strip()]
    reading = squash(text)
    for line in dict.fromkeys(lines[:EDGE_LINES] + lines[-EDGE_LINES:]):
        if len(line) >= 4 and re.search(r"[^\W\d_]", line) and squash(line) and squash(line) not in reading:
            tests.append(AbsentTest(pdf=f"{name}.pdf", page=1, id=tid("absent"), text=line, max_diffs=0))
    cells = []
    for table in parse_tables(text):
        values = Counter(v.strip() for v in table.text.values())
        for pos, value in table.text.items():
            for direction in ("right", "down"):
                near = table.neighbours(direction, pos)
                if value.strip() and values[value.strip()] == 1 and len(near) == 1:
                    other = table.text[next(iter(near))].strip()
                    if other:
                        cells.append((value.strip(), direction, other))
                        break
    for value, direction, other in rng.sample(cells, min(table_cells, len(cells))):
        tests.append(TableTest(pdf=f"{name}.pdf", page=1, id=tid("table"), cell=value, **{direction: other}))
    return tests


def place(source: str, target: str) -> None:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    try:
        os.link(source, target)
    except OSError:  # another file system, or one without hard links
        shutil.copyfile(source, target)


@stage("bench_split")
def run(cfg: DictConfig, output_dir: str) -> dict:
    from olmocr.formats.frontmatter import FrontMatterError, parse_document
    from olmocr.formats.pdf import PdfError, text_layer
    from olmocr.utils.runinfo import write_run_info

    if not os.path.isdir(cfg.pages):
        raise UserError(f"pages: {cfg.pages} is not a folder (of X.pdf + X.md pages: pipeline.export's out_dir)")
    stems = page_pairs(cfg.pages)
    documents = sorted({document_of(stem, cfg.pages) for stem in stems})
    if len(documents) < 2:
        raise UserError(f"pages: {cfg.pages} holds {len(documents)} document(s) with X.pdf + X.md pages; "
                        "a split needs at least 2")
    rng = random.Random(cfg.seed)
    held = set(rng.sample(documents, min(len(documents) - 1, max(1, round(cfg.heldout * len(documents))))))
    heldout, train = os.path.join(cfg.out_dir, "heldout"), os.path.join(cfg.out_dir, "train")
    for folder in (heldout, train):
        shutil.rmtree(folder, ignore_errors=True)
    counts: Counter = Counter()
    tests = []
    for stem in stems:
        rel = os.path.relpath(stem, cfg.pages)
        if document_of(stem, cfg.pages) not in held:
            for ext in (".pdf", ".md"):
                place(stem + ext, os.path.join(train, rel + ext))
            counts["train_pages"] += 1
            continue
        name = rel.replace(os.sep, "__")
        try:
            _, text = parse_document(open(stem + ".md", encoding="utf-8").read())
            layer = text_layer(stem + ".pdf")
        except (FrontMatterError, PdfError, UnicodeDecodeError) as exc:
            log.warning("%s: left out of the held-out bench (%s)", rel, exc)
            counts["unreadable"] += 1
            continue
        made = page_tests(name, text, layer, cfg.present_per_page, cfg.table_cells_per_page, rng)
        if not made:
            counts["no_tests"] += 1  # a page with nothing to test (a figure, a blank page) is no bench page
            continue
        place(stem + ".pdf", os.path.join(heldout, "pdfs", f"{name}.pdf"))
        place(stem + ".md", os.path.join(heldout, "pdfs", f"{name}.md"))  # its truth: the bench's error rate
        tests += made
        counts["heldout_pages"] += 1
        counts.update(t.type for t in made)
    if not tests:
        raise UserError(f"pages: no held-out page of {cfg.pages} gave a test (readings without sentences or "
                        "tables); hold out more documents (heldout=…) or check the pages")
    os.makedirs(heldout, exist_ok=True)
    with open(os.path.join(heldout, "heldout.jsonl"), "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(t.to_dict(), ensure_ascii=False) + "\n" for t in tests)
    summary = {"documents": len(documents), "heldout_documents": len(held), **counts}
    log.info("%d documents: %d held out (%d pages, %d tests: %s), %d pages to train on in %s",
             len(documents), len(held), counts["heldout_pages"], len(tests),
             ", ".join(f"{counts[k]} {k}" for k in ("present", "order", "absent", "table")), counts["train_pages"],
             train)
    write_run_info(output_dir, summary=summary)
    return summary


if __name__ == "__main__":
    run.main()
