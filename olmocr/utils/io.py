"""Paths that may be local or remote (``s3://``, ``gs://``), through fsspec."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator

import fsspec

REMOTE_PREFIXES = ("s3://", "gs://", "gcs://", "http://", "https://", "memory://")


def is_remote(path: str) -> bool:
    return str(path).startswith(REMOTE_PREFIXES)


def filesystem(path: str):
    """The fsspec filesystem for ``path``; S3 honours ``AWS_ENDPOINT_URL`` for MinIO-style endpoints."""
    protocol = fsspec.utils.get_protocol(str(path))
    options = {}
    if protocol == "s3" and os.environ.get("AWS_ENDPOINT_URL"):
        options["client_kwargs"] = {"endpoint_url": os.environ["AWS_ENDPOINT_URL"]}
    return fsspec.filesystem(protocol, **options)


def read_bytes(path: str) -> bytes:
    if not is_remote(path):
        with open(path, "rb") as fh:
            return fh.read()
    return filesystem(path).cat_file(path)


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8")


@contextlib.contextmanager
def local_path(path: str, data: bytes | None = None) -> Iterator[str]:
    """A local file path for ``path``: itself when local, else a temporary copy (of ``data`` when the
    caller already holds the bytes, so nothing is fetched twice)."""
    if not is_remote(path):
        yield path
        return
    suffix = os.path.splitext(path)[1]
    with tempfile.NamedTemporaryFile(suffix=suffix) as tmp:
        tmp.write(read_bytes(path) if data is None else data)
        tmp.flush()
        yield tmp.name
