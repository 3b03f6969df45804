"""Schema of ``python -m olmocr.datasets``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Optional

from omegaconf import MISSING

from olmocr.config import AccessConfig, NonNegative, Range, StageConfig, store
from olmocr.utils.io import STORAGE_WAIT_S


@dataclass
class DatasetsConfig(StageConfig):
    dataset: Any = MISSING  # a release (conf/dataset/): its Hub repo, pinned revision and file names
    out: str = MISSING  # where the layout goes; each dataset's default is the path training or bench reads
    # null: the Hub (HF_TOKEN from the environment); else a local snapshot folder or an s3:// prefix
    source: Optional[str] = None
    source_access: AccessConfig = field(default_factory=AccessConfig)
    # seconds the Hub or an s3:// source may not answer (an outage, resets, 5xx) before the run stops
    storage_wait_s: NonNegative = STORAGE_WAIT_S
    subsets: Optional[list[str]] = None  # null: all (a bench's subsets are its test files)
    splits: Optional[list[str]] = None  # null: all
    # rows (pages) per subset/split, or pages per test file: a small slice
    limit: Annotated[Optional[int], Range(at_least=1, null="every row")] = None
    workers: Annotated[int, Range(at_least=1)] = 8  # tarballs read, files fetched and PDFs checked at once
    download_dir: str = "${out}/.download"  # Hub downloads (resumable; delete it once the layout is done)


store("datasets_schema", DatasetsConfig)
