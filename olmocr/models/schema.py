"""Schemas of the ``model`` group, generated from the model sources' constructors."""

from olmocr.config import schema_for, store
from olmocr.models import HubModel, TinyModel

store("tiny_schema", schema_for(TinyModel), group="model")
store("hub_schema", schema_for(HubModel), group="model")
