"""Models: where a model comes from (a Hugging Face folder or hub id, or the tiny model built here from a config), the
families it may be (Qwen2-VL, Qwen2.5-VL, …), the one loader every stage uses (full, partly frozen or LoRA, with a
resumed run's weights) and the projector settings of a model trained from random weights."""

from olmocr.models.source import HubModel, ModelSource
from olmocr.models.tiny import TinyModel

__all__ = ["HubModel", "ModelSource", "TinyModel"]
