"""Schema of ``python -m olmocr.serve`` (conf/serve.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from omegaconf import MISSING

import olmocr.pipeline.schema  # noqa: F401 - the work, convert, server and model groups the service uses
from olmocr.config import AccessConfig, Positive, Range, StageConfig, schema_for, store
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
    max_upload_mb: Positive = 100.0  # a larger body is refused as it streams (413); a fetched document too
    # a job converting more pages is refused before rendering (read from the page tree, after page_range)
    max_pages: Annotated[int, Range(at_least=1)] = 2000
    # an uploaded or fetched tar archive (.tar, .tar.gz): refused past this many files or unpacked size
    max_archive_members: Annotated[int, Range(at_least=1)] = 1000
    max_unpacked_mb: Positive = 2000.0
    # jobs waiting for a worker (in the whole workspace) past which a submission is refused (429, Retry-After)
    max_waiting: Annotated[int, Range(at_least=1)] = 1000
    # finished jobs' documents and results are removed this long after they finished (the record says expired: 410)
    keep_results_h: Positive = 168.0
    sync_timeout_s: Positive = 60.0  # POST /v1/convert: the page's result within this, or 504 and its work cancelled
    # a request's headers must arrive within this of the connection (or of its last answer), else 408 and closed
    header_timeout_s: Positive = 10.0
    body_timeout_s: Positive = 30.0  # a body from which nothing arrives for this long is answered 408
    # submissions read and checked (page trees, archives) and page images drawn at once, each holding a document in
    # memory; more wait up to 10 s, then 503 with Retry-After
    concurrent_checks: Annotated[int, Range(at_least=1)] = 4
    # documents a job names by URL: olmocr.serve.fetch.Fetcher's keys (timeout_s, max_redirects, allow_networks,
    # s3_prefixes, concurrency)
    fetch: Any = field(default_factory=schema_for("olmocr.serve.fetch.Fetcher"))
    workers: Annotated[int, Range(at_least=0)] = 2  # documents converted at once here; 0: accept only
    work: Any = MISSING  # conf/work/ (ocr)
    filter: Any = None
    convert: Any = MISSING  # conf/convert/
    server: Any = MISSING  # conf/server/
    model: Any = MISSING  # conf/model/
    queue: QueueConfig = field(default_factory=QueueConfig)


store("serve_schema", ServeConfig)
