"""Paths that may be local or remote (``s3://``, ``gs://``), through fsspec."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import fsspec

REMOTE_PREFIXES = ("s3://", "gs://", "gcs://", "http://", "https://", "memory://")


def is_remote(path: str) -> bool:
    return str(path).startswith(REMOTE_PREFIXES)


@dataclass(frozen=True)
class Access:
    """How ``s3://`` paths are reached: a named AWS profile (its credentials, region and endpoint from
    ``~/.aws/config``) and an S3 endpoint (MinIO, Ceph, …); either left out is the environment's
    (``AWS_PROFILE``, ``AWS_ENDPOINT_URL``, the default credential chain). A pipeline reaches its workspace
    and its PDFs with one each, as they often live in different accounts."""

    profile: str | None = None
    endpoint: str | None = None

    def s3_options(self) -> dict:
        options: dict = {"profile": self.profile} if self.profile else {}
        endpoint = self.endpoint or os.environ.get("AWS_ENDPOINT_URL")  # else the profile's, if it names one
        if endpoint:
            options["client_kwargs"] = {"endpoint_url": endpoint}
        return options


def filesystem(path: str, access: Access | None = None):
    """The fsspec filesystem for ``path``, reached with ``access`` (default: the environment's)."""
    protocol = fsspec.utils.get_protocol(str(path))
    return fsspec.filesystem(protocol, **((access or Access()).s3_options() if protocol == "s3" else {}))


def read_bytes(path: str, access: Access | None = None) -> bytes:
    if not is_remote(path):
        with open(path, "rb") as fh:
            return fh.read()
    return filesystem(path, access).cat_file(path)


def read_text(path: str, access: Access | None = None) -> str:
    return read_bytes(path, access).decode("utf-8")


@contextlib.contextmanager
def local_path(path: str, data: bytes | None = None) -> Iterator[str]:
    """A local file path for ``path``: itself when it is a local file, else a temporary copy (of ``data``
    when the caller already holds the bytes, so nothing is fetched twice; a document read out of an
    archive has nothing else)."""
    if not is_remote(path) and (data is None or os.path.isfile(path)):
        yield path
        return
    suffix = os.path.splitext(path)[1]
    with tempfile.NamedTemporaryFile(suffix=suffix) as tmp:
        tmp.write(read_bytes(path) if data is None else data)
        tmp.flush()
        yield tmp.name
