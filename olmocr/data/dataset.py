"""Map-style datasets over indexed pairs, weighted mixtures of them, and the builder the stages call."""

from __future__ import annotations

import hashlib
import logging
import os
import random
from collections.abc import Mapping

from torch.utils.data import Dataset

from olmocr.data.index import PairRecord, index_root
from olmocr.data.chain import Pipeline, RejectReport, build_pipeline
from olmocr.data.steps import Reject
from olmocr.errors import UserError

log = logging.getLogger(__name__)


class PageDataset(Dataset):
    """One source's pairs run through the step pipeline. A rejected sample comes back as ``None``
    (collators drop it) and is recorded in the report; it never raises."""

    def __init__(self, name: str, records: list[PairRecord], pipeline: Pipeline,
                 report: RejectReport | None = None, seed: int = 0):
        self.name = name
        self.records = records
        self.pipeline = pipeline
        self.report = report or RejectReport()
        self.seed = seed
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.records)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def item(self, index: int) -> dict:
        record = self.records[index]
        return {"md_path": record.md_path, "pdf_path": record.pdf_path, "source": self.name,
                "meta": record.meta, "index": index,
                "rng": random.Random(f"{self.seed}/{self.epoch}/{self.name}/{index}")}

    def __getitem__(self, index: int) -> dict | None:
        sample = self.item(index)
        try:
            return self.pipeline(sample)
        except Reject as reject:
            self.report.add(sample, reject)
            return None


class MixtureDataset(Dataset):
    """Several sources with weights. A weight is a repeat factor per epoch: 2.0 shows each page of
    that source twice, 0.25 a seeded quarter of them (a different quarter each epoch)."""

    def __init__(self, sources: Mapping[str, tuple[PageDataset, float]], seed: int = 0):
        self.sources = dict(sources)
        self.seed = seed
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.index: list[tuple[str, int]] = []
        for name, (dataset, weight) in self.sources.items():
            dataset.set_epoch(epoch)
            whole, fraction = divmod(weight, 1.0)
            ids = list(range(len(dataset)))
            self.index += [(name, i) for _ in range(int(whole)) for i in ids]
            extra = round(fraction * len(ids))
            if extra:
                rng = random.Random(f"{self.seed}/{epoch}/{name}")
                self.index += [(name, i) for i in sorted(rng.sample(ids, extra))]

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> dict | None:
        name, index = self.index[i]
        return self.sources[name][0][index]


PARTS = ("all", "train", "held_out")


def held_out(record: PairRecord, root: str, fraction: float) -> bool:
    """Whether a pair is in a source's held-out share: a stable hash of its path under the root, so the
    split is the same on every run and machine, and adding files does not move the others."""
    rel = os.path.relpath(record.md_path or record.pdf_path, root) if "://" not in root else \
        (record.md_path or record.pdf_path)[len(root):]
    draw = int.from_bytes(hashlib.sha1(rel.replace(os.sep, "/").encode()).digest()[:8], "big") / 2 ** 64
    return draw < fraction


def sources(data: Mapping) -> tuple[dict, dict]:
    """(train sources, eval sources) of a ``data`` config: named maps, or the ``data=folder`` form
    (``roots``, then ``eval_roots`` or a held-out ``eval_fraction`` of the same roots). With
    ``local_cache``, remote roots are replaced by their local copies, made or brought up to date here."""
    from olmocr.data.cache import localize

    def local(roots) -> list[str]:
        return [localize(root, data.get("local_cache"), data.get("storage_wait_s", 0.0)) for root in roots]

    if "roots" not in data:
        return ({name: {**src, "roots": local(src["roots"])} for name, src in data["train"].items()},
                {name: {**src, "roots": local(src["roots"])} for name, src in data["eval"].items()})
    roots, eval_roots, fraction = local(data["roots"]), local(data.get("eval_roots") or []), data["eval_fraction"]
    if eval_roots:
        return {"folder": {"roots": roots}}, {"folder": {"roots": eval_roots}}
    if fraction == 0:  # no held-out loss (a held-out bench, eval.bench, may still score the run)
        return {"folder": {"roots": roots}}, {}
    if not 0 < fraction < 1:
        raise UserError(f"data.eval_fraction: expected a fraction between 0 and 1, or 0 for no held-out pages, got "
                        f"{fraction} (or give data.eval_roots)")
    return ({"folder": {"roots": roots, "holdout": fraction, "part": "train"}},
            {"folder": {"roots": roots, "holdout": fraction, "part": "held_out"}})


def build_datasets(train: Mapping, eval: Mapping, steps: Mapping, cache_dir: str | None = None,
                   report_path: str | None = None, seed: int = 0, **runtime) -> tuple[MixtureDataset, dict[str, PageDataset], RejectReport]:
    """Index every root, build the step pipeline once, and return the train mixture, one eval dataset
    per named eval source, and the shared reject report (problems found while indexing included)."""
    pipeline = build_pipeline(steps, **runtime)
    report = RejectReport(report_path)
    reported: set[str] = set()  # roots whose problems are in the report: a root read for two parts is said once

    def source_dataset(name: str, src: Mapping) -> PageDataset:
        roots, holdout, part = list(src["roots"]), float(src.get("holdout", 0.0)), src.get("part", "all")
        if part not in PARTS or not 0 <= holdout < 1 or (part != "all") != (holdout > 0):
            raise UserError(f"data source {name!r}: part {part!r} with holdout {holdout}: expected part all with "
                            "holdout 0, or part train / held_out with a holdout fraction between 0 and 1")
        records, usable = [], 0
        for root in roots:
            index = index_root(root, cache_dir, runtime.get("storage_wait_s", 0.0))
            log.info("indexed %s: %d pairs, %d problems, %d pdfs without .md (%d cached, %d parsed) in %.2fs",
                     root, len(index.pairs), len(index.problems), index.stats["pdf_without_md"], index.reused,
                     index.parsed, index.seconds)
            if root not in reported:
                reported.add(root)
                for bad in index.problems:
                    report.add({"md_path": bad.md_path, "pdf_path": bad.pdf_path, "source": name},
                               Reject(bad.problem, bad.detail))
                for pdf in index.unpaired:
                    report.add({"md_path": None, "pdf_path": pdf, "source": name},
                               Reject("missing_md", f"{pdf} has no .md beside it"))
            usable += len(index.pairs)
            records += [r for r in index.pairs if part == "all" or held_out(r, root, holdout) == (part == "held_out")]
        if not records and part == "held_out" and usable:
            raise UserError(f"data source {name!r}: its held-out share ({holdout:g}) of the {usable} pairs under "
                            f"{list(roots)} holds none; raise data.eval_fraction, give data.eval_roots, or "
                            "data.eval_fraction=0 for no eval")
        if not records:
            raise UserError(f"data source {name!r} has no usable md+pdf pairs under {list(roots)}")
        return PageDataset(name, records, pipeline, report, seed)

    mixture = MixtureDataset({name: (source_dataset(name, src), float(src.get("weight", 1.0)))
                              for name, src in train.items()}, seed)
    evals = {name: source_dataset(name, src) for name, src in eval.items()}
    return mixture, evals, report
