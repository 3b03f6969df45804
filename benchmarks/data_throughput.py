"""Data throughput: the production step list per sample, rendering alone, and dataset indexing.

    python benchmarks/data_throughput.py [--pages 24] [--repeats 3] [--workers 2] [--index-pairs 10000]

Figures are medians over --repeats runs. The baseline renderer, measured in the same run, is the
common three-call approach: ``pdfinfo`` for the page size, ``pdftoppm -png`` at the dpi that gives the
target longest side, then a PNG decode. Ours is one ``pdftoppm -r`` call (same dpi) with PPM on stdout.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from PIL import Image, ImageChops
from torch.utils.data import DataLoader

from olmocr.data.dataset import build_datasets
from olmocr.data.index import index_root
from olmocr.formats.render import render_page
from olmocr.models import TinyModel
from olmocr.synth.generator import LAYOUTS, generate


def production_steps(longest_side: int) -> dict:
    """The v4 step list exactly as configured (conf/data/steps/v4.yaml), at the given render size."""
    from omegaconf import OmegaConf

    from olmocr.config import compose

    cfg = compose("check_data", ["data/steps=v4", f"data.steps.render.longest_side={longest_side}"])
    return OmegaConf.to_container(cfg.data.steps, resolve=True)


def baseline_render(pdf: str, longest_side: int, workdir: str) -> Image.Image:
    info = subprocess.run(["pdfinfo", pdf], capture_output=True, text=True, check=True).stdout
    width, height = map(float, re.search(r"Page size:\s+([\d.]+) x ([\d.]+)", info).groups())
    dpi = longest_side * 72 / max(width, height)
    root = os.path.join(workdir, "page")
    subprocess.run(["pdftoppm", "-png", "-f", "1", "-l", "1", "-r", str(dpi), "-singlefile", pdf, root], check=True)
    image = Image.open(root + ".png")
    image.load()
    return image.convert("RGB")


def median_rate(fn, items, repeats: int) -> float:
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        count = fn(items)
        rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates)


def consume(loader) -> int:
    return sum(1 for sample in loader if sample is not None)


def _first(batch):
    return batch[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--index-pairs", type=int, default=10_000)
    parser.add_argument("--longest-side", type=int, default=1288)
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="olmocr-bench-")
    try:
        pages = os.path.join(work, "pages")
        generate(pages, args.pages, seed=11, layout_weights={k: 1.0 for k in LAYOUTS if k != "blank"})
        pdfs = sorted(os.path.join(pages, "pdfs", f) for f in os.listdir(os.path.join(pages, "pdfs")) if f.endswith(".pdf"))

        # Same pixels: the default renderer and the baseline agree exactly at the same output size.
        same = 0
        for pdf in pdfs:
            ours, base = render_page(pdf, 1, args.longest_side), baseline_render(pdf, args.longest_side, work)
            same += ours.size == base.size and ImageChops.difference(ours, base).getbbox() is None
        print(f"pixel-identical renders (ours vs baseline, {args.longest_side} px): {same}/{len(pdfs)}")

        ours_rate = median_rate(lambda ps: sum(1 for p in ps if render_page(p, 1, args.longest_side)), pdfs, args.repeats)
        base_rate = median_rate(lambda ps: sum(1 for p in ps if baseline_render(p, args.longest_side, work)), pdfs,
                                args.repeats)
        print(f"render only     : ours {1000 / ours_rate:7.1f} ms/page   baseline {1000 / base_rate:7.1f} ms/page"
              f"   speed-up {ours_rate / base_rate:.2f}x")

        processor = TinyModel(cache_dir=os.path.join(work, "models")).load_processor()
        steps = production_steps(args.longest_side)
        train, _, report = build_datasets({"synth": {"roots": [os.path.join(pages, "pdfs")]}}, {}, steps,
                                          processor=processor)
        single = median_rate(lambda ds: sum(1 for i in range(len(ds)) if ds[i] is not None), train, args.repeats)
        baseline_steps = {**steps, "render": {"_target_": "benchmarks.data_throughput.BaselineRenderStep",
                                              "longest_side": args.longest_side, "workdir": work}}
        base_train, _, _ = build_datasets({"synth": {"roots": [os.path.join(pages, "pdfs")]}}, {}, baseline_steps,
                                          processor=processor)
        base_single = median_rate(lambda ds: sum(1 for i in range(len(ds)) if ds[i] is not None), base_train,
                                  args.repeats)
        print(f"production steps: {single:6.2f} samples/s single process "
              f"(baseline renderer: {base_single:6.2f}, ratio {single / base_single:.2f}x)")
        if report.counts:
            print(f"  rejected: {dict(report.counts)}")
        for workers in sorted({1, args.workers}):
            loader = DataLoader(train, batch_size=1, num_workers=workers, collate_fn=_first, persistent_workers=True)
            consume(loader)  # start the workers before timing
            rate = median_rate(consume, loader, args.repeats)
            print(f"production steps: {rate:6.2f} samples/s with {workers} DataLoader worker(s)")

        index_dir = os.path.join(work, "index")
        os.makedirs(index_dir)
        template_pdf, template_md = pdfs[0], pdfs[0][:-4] + ".md"
        rng = random.Random(0)
        for i in range(args.index_pairs):
            sub = os.path.join(index_dir, f"{i // 1000:03d}")
            os.makedirs(sub, exist_ok=True)
            os.link(template_pdf, os.path.join(sub, f"p{i:06d}.pdf"))
            shutil.copyfile(template_md, os.path.join(sub, f"p{i:06d}.md"))
            if rng.random() < 0.01:
                os.remove(os.path.join(sub, f"p{i:06d}.pdf"))
        cold, warm = [], []
        for r in range(args.repeats):
            cache = os.path.join(work, f"cache{r}")
            start = time.perf_counter()
            first = index_root(index_dir, cache)
            cold.append(time.perf_counter() - start)
            start = time.perf_counter()
            second = index_root(index_dir, cache)
            warm.append(time.perf_counter() - start)
            assert second.reused == len(first.pairs) + len(first.problems)
        print(f"index {args.index_pairs} pairs: cold {statistics.median(cold):.2f}s, warm {statistics.median(warm):.2f}s "
              f"({len(first.pairs)} pairs, {len(first.problems)} problems; "
              f"{1e3 * statistics.median(cold) / args.index_pairs:.3f} ms/pair cold)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


class BaselineRenderStep:
    """The baseline renderer as a pipeline step, to compare whole step lists."""

    def __init__(self, longest_side: int = 1288, workdir: str = "/tmp"):
        self.longest_side = longest_side
        self.workdir = workdir

    def __call__(self, sample):
        sample["image"] = baseline_render(sample["pdf_path"], self.longest_side, self.workdir)
        return sample


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    main()
