"""python -m olmocr.datasets dataset=<release> — a published dataset in the layout the stages read.

    python -m olmocr.datasets                                   # olmOCR-mix-1025 → paths.olmocr_mix
    python -m olmocr.datasets dataset=olmocr_bench              # → paths.olmocr_bench (olmocr.bench)
    python -m olmocr.datasets dataset=olmocr_synthmix_1025      # → paths.synthmix (data=synthmix)
    python -m olmocr.datasets subsets=[01_books] splits=[eval] limit=50   # a small slice
    python -m olmocr.datasets source=s3://bucket/olmOCR-mix-1025   # a snapshot copied there before

Run it again after a kill: finished tarballs and subsets are not redone. What could not be converted is
listed in ``<out>/.prepare/rejected.jsonl``; ``<out>/prepared.json`` says what the folder holds and where from.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil

from omegaconf import DictConfig

import olmocr.datasets.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.cli import stage
from olmocr.config import build
from olmocr.errors import UserError

log = logging.getLogger("olmocr.datasets")


@contextlib.contextmanager
def removed_if_left_empty(folders: list[str]):
    """On a failure, each of ``folders`` that holds no file (empty folders aside) is removed."""
    try:
        yield
    except BaseException:
        for folder in folders:
            if not any(names for _, _, names in os.walk(folder)):
                shutil.rmtree(folder, ignore_errors=True)
        raise


@stage("datasets")
def run(cfg: DictConfig, output_dir: str) -> dict:
    from olmocr.datasets.files import STATE, Source, State, by_reason, reasons_text, write_atomic
    from olmocr.faults import Unreachable, storage_fault, store_errors
    from olmocr.utils.io import Access, is_remote
    from olmocr.utils.runinfo import write_run_info

    if is_remote(cfg.out):
        raise UserError(f"out: {cfg.out} is remote; prepare into a local folder, then copy it (aws s3 sync) and "
                        "train with data.local_cache")
    release = build(cfg.dataset)
    out = os.path.abspath(os.path.expanduser(cfg.out))
    download_dir = os.path.abspath(cfg.download_dir)
    # Folders this run makes and leaves empty when it fails are removed: an empty one would later read as a
    # dataset with no files ("no test files in …") instead of one never fetched.
    made = [folder for folder in (out, download_dir) if not os.path.exists(folder)]
    os.makedirs(out, exist_ok=True)
    state = State(out)
    if state.clear_partial():
        log.info("removed the half-written files of a killed run; its unfinished work is redone")
    try:
        with removed_if_left_empty(made):
            source = Source(cfg.source, release.repo_id, release.revision, download_dir,
                            Access(**cfg.source_access), cfg.storage_wait_s)
            parts = release.prepare(source, out, list(cfg.subsets) if cfg.subsets else None,
                                    list(cfg.splits) if cfg.splits else None, cfg.limit, cfg.workers)
    except Unreachable as exc:  # a source silent past storage_wait_s, or refusing the credentials
        raise Unreachable(f"source {cfg.source or release.repo_id} → {out}: {exc}; finished parts are kept, "
                          "run again to continue") from exc
    except store_errors() as exc:  # a full disk; a local source that cannot be read
        detail = str(exc).splitlines()[0] if str(exc) else ""
        raise storage_fault(exc, f"source {cfg.source or release.repo_id} → {out}: {type(exc).__name__}: {detail}; "
                                 "finished parts are kept, run again to continue") from exc

    # The folder may hold parts prepared by earlier runs with another selection: the summary is of all.
    rejected = state.rejected()
    listing = os.path.join(out, STATE, "rejected.jsonl")  # not beside a bench's test files: it would be read as one
    write_atomic(listing,
                 "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rejected).encode())
    held = {unit.split("/", 1)[1]: {k: info[k] for k in ("limit", "pages", "bytes", "rejected")}
            for unit, info in state.markers().items() if unit.startswith(("part/", "tests/"))}
    reasons = by_reason(rejected)
    origin = source.describe()
    previous = _read_json(os.path.join(out, "prepared.json")) or {}
    if "commit" in origin and origin["commit"] is None:  # nothing fetched this time: the folder's commit stands
        origin["commit"] = previous.get("commit")
    summary = {"dataset": release.repo_id, **origin, "parts": held,
               "pages": sum(p["pages"] for p in held.values()), "bytes": sum(p["bytes"] for p in held.values()),
               "rejected": reasons}
    write_atomic(os.path.join(out, "prepared.json"), json.dumps(summary, indent=1, sort_keys=True).encode())
    write_run_info(output_dir, summary=summary)
    lines = [f"{key}: {p['pages']} pages" for key, p in parts.items()]
    log.info("%s → %s: %s; %d pages, %.1f MB in all; %d rejected%s", release.repo_id, out, ", ".join(lines),
             summary["pages"], summary["bytes"] / 1e6, len(rejected),
             f"{reasons_text(reasons)}, listed in {listing}" if reasons else "")
    return summary


def _read_json(path: str) -> dict | None:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


if __name__ == "__main__":
    run.main()
