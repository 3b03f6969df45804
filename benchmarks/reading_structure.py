"""The reader writes a page's structure: blocks with labels and boxes, measured on held-out structured pages beside
its text, against a reader of the same pages that writes markdown and a blind control, with intervals.

    python benchmarks/reading_structure.py [--out outputs/reading_structure] [--steps 3600] [--rows …]

Pages (scripts/reading_pages.sh): the grid reading pages and structured pages (a running header, one or two sections
of a heading and a paragraph, a page number, on the token grid; each page's blocks with labels and boxes beside its
truth), and a held-out bench of structured pages of another seed (the bank's words). Rows, each by its stage's own
command (a run dir under --out, resumed or skipped when done):

- blocks: +experiment=read_structure, SFT from random weights, every page answered as blocks (prompt brief_blocks);
- plain: the same recipe and pages answered as markdown (prompt brief: the truth without header and page number):
  the reader trained to leave the furniture out;
- blind: blocks with every image blanked: what the text alone teaches of where blocks go (boxes a prior can
  guess: the header at the top, the page number at the bottom);
- grpo: +experiment=read_structure_grpo from the blocks release (olmOCR 2's rewards and the structure rewards);
- control: the same GRPO with each batch's rewards shuffled (algo.shuffle_rewards).

Every model is released and greedy-decodes every held-out page through the pipeline (python -m olmocr.pipeline.bench,
transformers serve), and is scored on what it wrote itself: per row, the layout figures of olmocr.bench (mean IoU,
label accuracy, F1 and order accuracy, each over pages whose answer had blocks or not: a page without blocks finds
nothing) and the text figures of benchmarks/learning_to_read.py (strict present %, CER), plus the share of header
and page-number absent tests passed; each with a 95% interval by bootstrap over pages, and each stage's difference
from the row it is set against on the same pages with the paired interval.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.learning_to_read import BLIND, GREEDY, Factory, fmt  # noqa: E402
from olmocr.bench.intervals import bootstrap, paired  # noqa: E402

ROWS = ("blocks", "plain", "blind", "grpo", "control")
HELDOUT = os.path.join("structure", "heldout")
MAX_TOKENS = 512  # as read_structure's eval: a structured page's answer is ~250 to 400 of the reader's tokens
# Each row's difference from the row it is set against, page by page.
AGAINST = {"plain": "blocks", "blind": "blocks", "grpo": "blocks", "control": "blocks"}


def page_figures(bench_dir: str, candidates: str) -> dict[str, dict[str, float]]:
    """Per page: present tests passed and run, absent tests passed and run, CER, and its layout (IoU summed over
    truth blocks, labelled, truth blocks, in order, pairs), strictly, on what the model wrote itself."""
    from olmocr.bench.layout import read_blocks, score_page, truth_blocks
    from olmocr.bench.score import candidate_files, load_bench, run_tests
    from olmocr.formats.structure import SUFFIX, StructureError

    bench = load_bench(bench_dir)
    out: dict[str, dict[str, float]] = {}
    for r in run_tests(bench, candidates, scoring="strict"):
        page = out.setdefault(r.test.pdf, {"present": 0.0, "presents": 0, "absent": 0.0, "absents": 0, "cer": 1.0})
        o = r.outputs
        own = o is not None and o.answered == o.outputs > 0
        if r.test.type in ("present", "absent"):
            page[r.test.type] += r.score if own else 0.0
            page[r.test.type + "s"] += 1
        page["cer"] = min(o.cer, 1.0) if own and o.cer is not None else 1.0
    for pdf, page in out.items():
        truth = truth_blocks(bench_dir, pdf, 1) or []
        files = candidate_files(candidates, pdf, 1)
        answer = None
        if files:
            try:
                answer = read_blocks(files[0][:-3] + SUFFIX)
            except StructureError:
                answer = None
        scored = score_page(truth, answer)
        page.update(iou=scored.iou, labelled=scored.labelled, blocks=scored.truth, in_order=scored.in_order,
                    pairs=scored.pairs, found2=2 * scored.found, f1_weight=scored.truth + scored.answered)
    return out


FIGURES = {  # name: (numerator, denominator or None, scale)
    "mean IoU": ("iou", "blocks", 1), "label accuracy %": ("labelled", "blocks", 100),
    "layout F1 %": ("found2", "f1_weight", 100),
    "order accuracy %": ("in_order", "pairs", 100), "present %": ("present", "presents", 100),
    "absent %": ("absent", "absents", 100), "CER": ("cer", None, 1),
}


def interval(pages: dict, name: str):
    top, bottom, scale = FIGURES[name]
    keys = sorted(pages)
    values = [pages[k][top] for k in keys]
    weights = [pages[k][bottom] for k in keys] if bottom else None
    if weights is not None and not sum(weights):
        return None
    return bootstrap(values, weights).scaled(scale)


def difference(base: dict, row: dict, name: str):
    top, bottom, scale = FIGURES[name]
    keys = sorted(base)
    weights = [base[k][bottom] for k in keys] if bottom else None
    if weights is not None and not sum(weights):
        return None
    return paired([base[k][top] for k in keys], [row[k][top] for k in keys], weights).scaled(scale)


class Structure(Factory):
    def pages(self) -> None:
        os.environ["STRUCTURE_PAGES"] = str(self.args.structure_pages)
        super().pages()

    def convert_structure(self, row: str, model: list[str]) -> str:
        candidates = self.path("candidates", row)
        self.module(f"{row} bench", "olmocr.pipeline.bench", [
            *model, "server=transformers", f"bench_dir={self.path('pages', HELDOUT)}", f"candidates={candidates}",
            "convert=tiny", *GREEDY, f"convert.max_tokens={MAX_TOKENS}",
            f"hydra.run.dir={self.path('runs', 'bench_mode_' + row)}"])
        return candidates


def chain(f: Structure, rows: set[str], steps: int | None) -> dict[str, str]:
    sft = ["+experiment=read_structure"]
    if steps:
        every = steps // 3 if steps % 3 == 0 else steps
        sft += [f"trainer.max_duration.value={steps}", f"trainer.eval_interval={every}", f"checkpoint.interval={every}"]
    candidates = {}

    def trained(row: str, args: list[str]) -> str:
        f.train(row, args)
        return f.convert_structure(row, ["model=reader_trained", f"model.name_or_path={f.release(row, [f.path(row)])}"])

    if rows & {"blocks", "grpo", "control"}:
        candidates["blocks"] = trained("blocks", [*sft, "run_name=read_structure"])
    if "plain" in rows:
        candidates["plain"] = trained("plain", [*sft, "data.steps.prompt.version=brief",
                                                "run_name=read_structure_plain"])
    if "blind" in rows:
        candidates["blind"] = trained("blind", [*sft, BLIND, "run_name=read_structure_blind"])
    grpo = ["+experiment=read_structure_grpo", "model=reader_trained",
            f"model.name_or_path={f.path('release', 'blocks')}", f"paths.reading={f.path('pages')}",
            "trainer.eval_interval=null", "checkpoint.keep_best=null"]
    if f.args.grpo_steps:
        grpo += [f"trainer.max_duration.value={f.args.grpo_steps}", f"checkpoint.interval={f.args.grpo_steps}"]
    if "grpo" in rows:
        candidates["grpo"] = trained("grpo", [*grpo, "seed=1"])
    if "control" in rows:
        candidates["control"] = trained("control", [*grpo, "seed=1", "algo.shuffle_rewards=true",
                                                    "run_name=read_structure_grpo_control"])
    return candidates


def report(f: Structure, candidates: dict[str, str]) -> dict:
    heldout = f.path("pages", HELDOUT)
    pages = {row: page_figures(heldout, folder) for row, folder in candidates.items()}
    table = {row: {name: interval(p, name) for name in FIGURES} for row, p in pages.items()}
    deltas = {row: {name: difference(pages[base], pages[row], name) for name in FIGURES}
              for row, base in AGAINST.items() if row in pages and base in pages}
    print(f"\n{'row':10s} " + " ".join(f"{name:>26s}" for name in FIGURES))
    for row, cells in table.items():
        print(f"{row:10s} " + " ".join(f"{fmt(c, 3 if n in ('mean IoU', 'CER') else 1) if c else 'n/a':>26s}"
                                       for n, c in cells.items()))
    for row, cells in deltas.items():
        print(f"{row + ' - ' + AGAINST[row]:10s} " + " ".join(
            f"{fmt(c, 3 if n in ('mean IoU', 'CER') else 1) if c else 'n/a':>26s}" for n, c in cells.items()))
    lines = goals(table, pages)
    for line in lines:
        print(line)
    result = {"pages": len(next(iter(pages.values()))) if pages else 0, "goals": lines,
              "table": {row: {n: c and vars(c) for n, c in cells.items()} for row, cells in table.items()},
              "differences": {row: {n: c and vars(c) for n, c in cells.items()} for row, cells in deltas.items()},
              "seconds": f.times}
    with open(f.path("reading_structure.json"), "w") as fh:
        json.dump(result, fh, indent=2)
    return result


def goals(table: dict, pages: dict) -> list[str]:
    """Each goal of the structure issue, met or not, with the figures it is judged on."""
    def mean(row: str, name: str):
        cell = table.get(row, {}).get(name)
        return None if cell is None else cell.mean

    out = []
    iou, labels = mean("blocks", "mean IoU"), mean("blocks", "label accuracy %")
    if iou is not None:
        out.append(f"blocks: mean IoU {iou:.3f} (goal >= 0.8), label accuracy {labels:.1f}% (goal >= 95): "
                   f"{'met' if iou >= 0.8 and labels >= 95 else 'not met'}")
    if mean("plain", "present %") is not None and mean("blocks", "present %") is not None:
        gap = mean("blocks", "present %") - mean("plain", "present %")
        out.append(f"blocks present % {gap:+.1f} points from plain's (goal: within 2): "
                   f"{'met' if gap >= -2 else 'not met'}")
        blocks_absent, plain_absent = mean("blocks", "absent %"), mean("plain", "absent %")
        out.append(f"absent tests passed: blocks {blocks_absent:.1f}%, plain {plain_absent:.1f}% (goal: at least "
                   f"as often): {'met' if blocks_absent >= plain_absent else 'not met'}")
    if "grpo" in pages and "control" in pages:
        beyond = difference(pages["control"], pages["grpo"], "mean IoU")
        out.append(f"GRPO mean IoU minus its control's {fmt(beyond, 3)} (goal: above 0): "
                   f"{'met' if beyond.low > 0 else 'not met'}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "outputs", "reading_structure"))
    parser.add_argument("--steps", type=int, help="SFT steps of 8 pages (default: +experiment=read_structure's)")
    parser.add_argument("--train-pages", type=int, default=3000, help="grid training pages of each kind")
    parser.add_argument("--structure-pages", type=int, default=4000, help="structured training pages")
    parser.add_argument("--heldout-pages", type=int, default=256, help="held-out pages of each category")
    parser.add_argument("--grpo-steps", type=int, help="default: +experiment=read_structure_grpo's")
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    args = parser.parse_args()
    args.typeset_pages, args.dpo_pages = 0, 8  # no typeset pages; the few pairs pages the page script makes
    f = Structure(os.path.abspath(args.out), args)
    f.pages()
    report(f, chain(f, set(args.rows), args.steps))


if __name__ == "__main__":
    main()
