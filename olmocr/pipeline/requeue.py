"""python -m olmocr.pipeline.requeue workspace=… — put given-up items back in the queue.

An item is given up after ``queue.max_failures`` failures of its own (``python -m olmocr.pipeline.stats``
lists them with their last error). Once the cause is fixed, this clears their failure counts so that a
worker, running or started next, takes them at once; the last error stays in the claim as
``previous_error``. ``items=[…]`` puts back only those (ids as stats lists them).
"""

from __future__ import annotations

import logging

from omegaconf import DictConfig

import olmocr.pipeline.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.cli import stage

log = logging.getLogger("olmocr.pipeline.requeue")


@stage("pipeline_requeue")
def run(cfg: DictConfig, output_dir: str | None = None) -> list[str]:
    from olmocr.pipeline import queue
    from olmocr.pipeline.queue import requeue
    from olmocr.faults import gist, outside, storage_fault, store_errors
    from olmocr.pipeline.workspace import Workspace
    from olmocr.utils.io import Access

    try:
        workspace = Workspace(cfg.workspace, Access(**cfg.workspace_access))
        queue.check(workspace)
        back = requeue(workspace, list(cfg["items"]) or None)  # cfg.items is the mapping's method
    except store_errors() as exc:
        raise storage_fault(exc, f"workspace {cfg.workspace}: {outside(exc) or gist(exc)}") from exc
    print(f"{len(back)} given-up item(s) back in the queue of {cfg.workspace}" + (f": {', '.join(back)}" if back else ""))
    return back


if __name__ == "__main__":
    run.main()
