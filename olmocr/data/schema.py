"""Schemas of the ``data`` group (SFT sources, GRPO benches) and of ``python -m olmocr.data``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Optional

from omegaconf import MISSING, DictConfig, OmegaConf

import olmocr.models.schema  # noqa: F401 - the data stage composes the model group
from olmocr.config import TYPED_MAP_ENTRIES, NonNegative, Range, StageConfig, store
# How long a read of training data waits out remote storage that does not answer before the run stops (it
# resumes from its newest checkpoint); a page is never dropped for it (olmocr.utils.io.read_bytes).
from olmocr.utils.io import STORAGE_WAIT_S


@dataclass
class SourceConfig:
    roots: list[str] = MISSING
    weight: float = 1.0
    # part train / held_out: the pairs outside / inside a stable `holdout` share of the roots
    holdout: float = 0.0
    part: str = "all"


@dataclass
class DataConfig:
    """``data`` group: named train sources (weights are repeat factors), named eval sources (one eval
    loss each) and the per-sample steps (name → ``_target_`` config, null disables a step, an optional
    ``_after_: <step>`` places it after another step)."""

    # Typed as Any because OmegaConf cannot add an entry to a dict of dataclasses from the command line
    # (+data.train.mine={roots: [...]}); validate() checks each entry against SourceConfig instead.
    train: dict[str, Any] = field(default_factory=dict)
    eval: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, Any] = field(default_factory=dict)
    local_cache: Optional[str] = None  # copy remote roots here once before indexing (olmocr/data/cache.py)
    # keep rendered pages here: every later read of a page (epochs, reruns) skips poppler (data/render_cache.py)
    render_cache: Optional[str] = None
    storage_wait_s: NonNegative = STORAGE_WAIT_S


@dataclass
class FolderDataConfig:
    """``data=folder``: train on your own folders of pairs, in one override (``data.roots=[…]``); eval
    on ``eval_roots``, or on a held-out ``eval_fraction`` of the same pairs."""

    roots: list[str] = MISSING
    eval_roots: list[str] = field(default_factory=list)
    eval_fraction: float = 0.05
    steps: dict[str, Any] = field(default_factory=dict)
    local_cache: Optional[str] = None  # copy remote roots here once before indexing (olmocr/data/cache.py)
    # keep rendered pages here: every later read of a page (epochs, reruns) skips poppler (data/render_cache.py)
    render_cache: Optional[str] = None
    storage_wait_s: NonNegative = STORAGE_WAIT_S


@dataclass
class BenchSourceConfig:
    root: str = MISSING  # a bench folder: test files (*.jsonl) and pdfs/ (with .md truth beside, optional)
    types: list[str] = field(default_factory=list)  # keep only these test types (empty: all)
    files: list[str] = field(default_factory=list)  # keep only these test files, by stem (empty: all)
    reference: bool = True  # pass <pdf>.md, where present, to rewards as the reference page


@dataclass
class BenchDataConfig:
    """``data`` group for GRPO: prompts are bench pages (a PDF page with its unit tests). Named train
    benches, optional named eval benches (reward means on held-out pages) and the prompt steps."""

    train: dict[str, Any] = field(default_factory=dict)
    eval: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, Any] = field(default_factory=dict)
    local_cache: Optional[str] = None  # copy remote bench roots here before reading them
    storage_wait_s: NonNegative = STORAGE_WAIT_S  # how long that copy waits out storage that does not answer


@dataclass
class CheckDataConfig(StageConfig):
    model: Any = MISSING
    data: Any = MISSING  # DataConfig or FolderDataConfig, by the data group
    seed: int = 0
    max_samples: Annotated[Optional[int], Range(at_least=1, null="every page")] = None
    num_workers: Annotated[int, Range(at_least=0)] = 0  # DataLoader processes


def _entry_schema(cfg: DictConfig) -> tuple[type, str, str]:
    """Sources of an SFT data config have ``roots``; benches of a GRPO one have a ``root``."""
    if OmegaConf.select(cfg, "algo.name") == "grpo":
        return (BenchSourceConfig, "a bench {root, types, files, reference}; algo=grpo takes bench data: "
                "data=synth_bench, data=synthmix or your own", "{root: ...}")
    return SourceConfig, "SourceConfig", "{roots: [...], weight: 1.0}"


TYPED_MAP_ENTRIES.update({"data.train": _entry_schema, "data.eval": _entry_schema})
@dataclass
class PairsDataConfig:
    """``data`` group for DPO: preference pairs (``python -m olmocr.pairs`` output: a page reference, a
    chosen and a rejected answer), the page rendered and prompted by ``steps`` when a pair is read."""

    train: list[str] = MISSING  # pairs.jsonl files (lines without a pair are skipped)
    eval: list[str] = field(default_factory=list)  # held-out pairs: eval loss, reward margin and accuracy
    steps: dict[str, Any] = field(default_factory=dict)


store("check_data_schema", CheckDataConfig)
store("pairs_data_schema", PairsDataConfig, group="data")
store("data_schema", DataConfig, group="data")
store("bench_data_schema", BenchDataConfig, group="data")
store("folder_data_schema", FolderDataConfig, group="data")
