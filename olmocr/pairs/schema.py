"""Schema of ``python -m olmocr.pairs`` (conf/pairs.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from omegaconf import MISSING

import olmocr.models.schema  # noqa: F401 - the model group a started server serves (model=…)
from olmocr.config import Range, StageConfig, store


@dataclass
class PairsConfig(StageConfig):
    run_name: str = MISSING  # the run dir, outputs/pairs/<run_name>: re-running the same name resumes
    bench_dir: str = MISSING  # pages with unit tests (*.jsonl and pdfs/); a .md beside a PDF is its reference
    samples: int = 4  # completions per page
    temperature: Annotated[float, Range(above=0)] = 1.0
    # A page's k-th sample is drawn with the server's seed (a hash of seed and the page) + k, so a run draws
    # the same samples again (vLLM: always; transformers serve: when requests run one at a time,
    # convert.concurrency=1); null: unseeded
    seed: int | None = 0
    margin: Annotated[float, Range(at_least=0)] = 0.1  # chosen reward - rejected reward must be at least this
    rewards: Any = MISSING  # name -> {_target_, weight, options} (conf/rewards/)
    convert: Any = MISSING  # rendering, prompt, client (conf/convert/; its retries are not used here)
    server: Any = MISSING  # conf/server/
    model: Any = MISSING  # what a started server serves (conf/model/)
    progress: bool = True


store("pairs_schema", PairsConfig)
