"""Schemas of the checkpoint stages: ``python -m olmocr.prepare``, ``olmocr.compress``, ``olmocr.compare``
(conf/prepare.yaml, conf/compress.yaml, conf/compare.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from omegaconf import MISSING

from olmocr.config import NonNegative, OneOf, Range, StageConfig, store
from olmocr.utils.io import STORAGE_WAIT_S

# What decodes the candidate in compare: auto is vLLM where it is installed and a GPU is present
ENGINES = ("auto", "vllm", "transformers")
# llmcompressor's preset schemes in the pinned compressed-tensors, named here so that a launcher or a dry run
# refuses an unknown one without importing it (7 s); a test keeps the list equal to the library's.
SCHEMES = ("FP8", "FP8_BLOCK", "FP8_DYNAMIC", "INT8", "MXFP4", "MXFP4A16", "MXFP8", "MXFP8A16", "NVFP4", "NVFP4A16",
           "UNQUANTIZED", "W2A16", "W2A4", "W2A8", "W3A16", "W3A4", "W3A8", "W4A16", "W4A16_ASYM", "W4A4", "W4A8",
           "W4AFP8", "W5A16", "W5A8", "W6A16", "W6A8", "W7A16", "W7A8", "W8A16", "W8A8")


@dataclass
class PagesConfig:
    root: str = MISSING  # a bench folder (its pages with tests) or a folder of PDFs (one page of each)
    count: Annotated[int, Range(at_least=1)] = 16
    seed: int = 0


@dataclass
class PrepareConfig(StageConfig):
    sources: list[str] = MISSING  # run dirs, checkpoints or Hugging Face folders; local or s3://
    output: str = MISSING  # a Hugging Face folder to write; local or s3://
    weights: list[float] | None = None  # one per source (soup); null: plain mean
    # The checkpoint of every run dir source: a step, best (checkpoint.keep_best's), or null: its newest.
    step: Any = None
    base: str | None = None  # the base model of LoRA sources; null: as their adapter_config.json says
    processor: str | None = None  # where to take processor files from when the sources have none
    overwrite: bool = False
    # how long a remote read or write waits out storage that does not answer before the stage stops
    storage_wait_s: NonNegative = STORAGE_WAIT_S


@dataclass
class CompressConfig(StageConfig):
    source: str = MISSING  # as a prepare source: run dir, checkpoint or Hugging Face folder; local or s3://
    output: str = MISSING
    step: Any = None  # as prepare's: a step, best, or null
    scheme: Annotated[str, OneOf(*SCHEMES)] = "FP8_DYNAMIC"  # an llmcompressor preset; static-activation ones (FP8) calibrate on pages
    ignore: list[str] = field(default_factory=list)
    calibration: PagesConfig = field(default_factory=PagesConfig)
    steps: dict[str, Any] = field(default_factory=dict)  # how calibration pages are rendered and prompted
    overwrite: bool = False
    storage_wait_s: NonNegative = STORAGE_WAIT_S  # as prepare's


@dataclass
class VllmConfig:
    gpu_memory_utilization: Annotated[float, Range(above=0, at_most=1)] = 0.5
    max_model_len: Annotated[int | None, Range(at_least=1, null="the model's own")] = 16384


@dataclass
class CompareConfig(StageConfig):
    reference: str = MISSING
    candidate: str = MISSING
    engine: Annotated[str, OneOf(*ENGINES)] = "auto"  # the candidate's
    pages: PagesConfig = field(default_factory=PagesConfig)
    steps: dict[str, Any] = field(default_factory=dict)
    max_new_tokens: Annotated[int, Range(at_least=1)] = 128
    # a page whose probability gap at its first mismatch exceeds this is flagged
    threshold: Annotated[float, Range(at_least=0)] = 0.2
    max_flagged: Annotated[int, Range(at_least=0)] = 0  # more flagged pages than this: exit code 1
    device: str = "auto"  # of the transformers models: cuda when available, else cpu
    dtype: str = "auto"  # of the transformers models: as stored
    vllm: VllmConfig = field(default_factory=VllmConfig)
    storage_wait_s: NonNegative = STORAGE_WAIT_S  # as prepare's, for reads of remote models


store("prepare_schema", PrepareConfig)
store("compress_schema", CompressConfig)
store("compare_schema", CompareConfig)
