"""Paths that may be local or remote (``s3://``, ``gs://``), through fsspec."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import fsspec

from olmocr.faults import Unreachable, gist, refused, store_errors

REMOTE_PREFIXES = ("s3://", "gs://", "gcs://", "http://", "https://", "memory://")
MAX_PAUSE_S = 30.0  # the longest pause between looks at storage that does not answer

log = logging.getLogger("olmocr.io")


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


def read_bytes(path: str, access: Access | None = None, wait_s: float = 0.0) -> bytes:
    """``path``'s bytes. Remote, with ``wait_s``: storage that does not answer (an outage, resets, timeouts,
    5xx past the client's own retries) is waited out for up to ``wait_s``, looking again with growing pauses,
    and refused credentials end the wait at once, both as :class:`olmocr.faults.Unreachable`; a missing file is
    FileNotFoundError either way."""
    if not is_remote(path):
        with open(path, "rb") as fh:
            return fh.read()
    if not wait_s:
        return filesystem(path, access).cat_file(path)
    return patiently(lambda: filesystem(path, access).cat_file(path), path, wait_s)


def read_text(path: str, access: Access | None = None, wait_s: float = 0.0) -> str:
    return read_bytes(path, access, wait_s).decode("utf-8")


def patiently(call, path: str, wait_s: float):
    """``call()`` (an operation on remote ``path``), storage that does not answer waited out for up to ``wait_s``
    (0: not at all) and refused credentials at once, as :func:`read_bytes` does; FileNotFoundError passes."""
    since, pause = None, 1.0
    while True:
        try:
            found = call()
        except FileNotFoundError:
            raise
        except store_errors() as exc:
            if refused(exc):
                raise Unreachable(f"{path}: the storage refused the credentials ({gist(exc)})") from None
            now = time.monotonic()
            if since is None:
                since = now
                log.warning("%s: the storage does not answer (%s); waiting up to %.0f s", path, gist(exc), wait_s)
            if now - since >= wait_s:
                raise Unreachable(f"{path}: the storage did not answer for {now - since:.0f} s ({gist(exc)})") from None
            time.sleep(min(pause, wait_s - (now - since)))
            pause = min(2 * pause, MAX_PAUSE_S)
            continue
        if since is not None:
            log.warning("%s: the storage answers again, after %.0f s", path, time.monotonic() - since)
        return found


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
