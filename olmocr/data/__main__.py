"""python -m olmocr.data — index the configured sources, run samples through the steps, report.

Use it on a new folder before training: it lists what was rejected and why (``rejected.jsonl`` in the
run dir), the make-up of each source (languages, tables, rotation) and the steps' throughput.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter

from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

import olmocr.data.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.cli import stage
from olmocr.config import build

log = logging.getLogger("olmocr.data")


def _first(batch):
    return batch[0]


@stage("check_data")
def run(cfg: DictConfig, output_dir: str) -> dict:
    from torch.utils.data import DataLoader, Subset

    from olmocr.data.dataset import build_datasets, sources
    from olmocr.utils.runinfo import write_run_info

    model = build(cfg.model)
    processor = model.load_processor()
    data = OmegaConf.to_container(cfg.data, resolve=True)
    train, evals, report = build_datasets(
        *sources(data), data["steps"], cache_dir=os.path.join(cfg.paths.cache, "index"),
        report_path=os.path.join(output_dir, "rejected.jsonl"), seed=cfg.seed, processor=processor,
        storage_wait_s=data["storage_wait_s"], render_cache=data["render_cache"],
    )
    log.info("steps:\n%s", train.sources[next(iter(train.sources))][0].pipeline)
    summary: dict = {"sources": {}}
    for split, datasets in (("train", {n: d for n, (d, _) in train.sources.items()}), ("eval", evals)):
        for name, dataset in datasets.items():
            meta = [r.meta for r in dataset.records]
            summary["sources"][f"{split}/{name}"] = {
                "pairs": len(dataset), "languages": dict(Counter(m.primary_language for m in meta).most_common(8)),
                "tables": sum(m.is_table for m in meta), "diagrams": sum(m.is_diagram for m in meta),
                "rotated": sum(not m.is_rotation_valid for m in meta),
            }
    limit = len(train) if cfg.max_samples is None else min(cfg.max_samples, len(train))
    loader = DataLoader(Subset(train, range(limit)), batch_size=1, num_workers=cfg.num_workers, collate_fn=_first)
    ok, tokens = 0, 0
    start = time.perf_counter()
    with tqdm(total=limit, desc="samples", unit="sample") as bar:
        for sample in loader:
            if sample is not None:
                ok += 1
                tokens += int(sample["input_ids"].numel())
            bar.update(1)
    seconds = time.perf_counter() - start
    summary.update(samples=limit, loaded=ok, rejected=dict(report.file_counts()), tokens=tokens,
                   samples_per_second=round(limit / max(seconds, 1e-9), 2), report=report.path)
    write_run_info(output_dir, summary=summary)
    with open(os.path.join(output_dir, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    log.info("%d/%d samples loaded, rejected by reason: %s (%.2f samples/s); details in %s", ok, limit,
             summary["rejected"] or "none", summary["samples_per_second"], report.path)
    return summary


if __name__ == "__main__":
    run.main()
