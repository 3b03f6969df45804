from olmocr.models.source import HubModel, ModelSource
from olmocr.models.tiny import TinyModel

__all__ = ["HubModel", "ModelSource", "TinyModel"]
