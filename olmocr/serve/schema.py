"""Schema of ``python -m olmocr.serve`` (conf/serve.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from omegaconf import MISSING

import olmocr.pipeline.schema  # noqa: F401 - the work, convert, server and model groups the service uses
from olmocr.config import AccessConfig, Positive, Range, StageConfig, store
from olmocr.pipeline.schema import QueueConfig


@dataclass
class ServeConfig(StageConfig):
    # Where submitted documents, jobs and results live: a local folder or s3://bucket/prefix that batch workers
    # (python -m olmocr.pipeline workspace=…) and other replicas of the service may share.
    workspace: str = "outputs/serve/workspace"
    workspace_access: AccessConfig = field(default_factory=AccessConfig)
    host: str = "127.0.0.1"  # another address only with a token (token_env)
    port: Annotated[int, Range(at_least=0, at_most=65535)] = 8000  # 0: a free port, said in the log
    # The environment variable that holds the service's token (never the token itself); null: no token, and
    # the service listens on loopback only.
    token_env: str | None = None
    max_upload_mb: Positive = 100.0  # a larger body is refused as it streams (413)
    max_pages: Annotated[int, Range(at_least=1)] = 2000  # a document with more pages is refused before rendering
    workers: Annotated[int, Range(at_least=0)] = 2  # documents converted at once here; 0: accept only
    work: Any = MISSING  # conf/work/ (ocr)
    filter: Any = None
    convert: Any = MISSING  # conf/convert/
    server: Any = MISSING  # conf/server/
    model: Any = MISSING  # conf/model/
    queue: QueueConfig = field(default_factory=QueueConfig)


store("serve_schema", ServeConfig)
