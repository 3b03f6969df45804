"""Paths that may be local or remote (``s3://``, ``gs://``), through fsspec."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import fsspec

from olmocr.faults import Unreachable, causes, gist, misplaced, refused, store_errors

REMOTE_PREFIXES = ("s3://", "gs://", "gcs://", "http://", "https://", "memory://")
MAX_PAUSE_S = 30.0  # the longest pause between looks at storage that does not answer
# How long a stage waits out remote storage that does not answer before it stops, unless its config says.
STORAGE_WAIT_S = 600.0
# One S3 request: connect and read timeouts, and botocore's attempts (it retries 5xx, throttling, resets and
# timeouts with backoff); s3fs's own retries of the same errors are turned off (filesystem(), S3Store), or they
# multiply. A request on a hung endpoint thus gives up after about S3_CALL_S.
S3_CONNECT_S, S3_READ_S, S3_ATTEMPTS = 5, 5, 2
S3_CALL_S = S3_ATTEMPTS * (S3_CONNECT_S + S3_READ_S)

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
        # Each request is bounded (S3_CALL_S at most, on an endpoint that accepts connections and never answers):
        # the waits that matter (a worker's queue.give_up_after_s, a stage's storage_wait_s) are ours, made of
        # such requests, so they hold. s3fs's and botocore's defaults together waited 420 s for one request.
        # botocore's own settings in the environment (AWS_MAX_ATTEMPTS, AWS_RETRY_MODE) still win: a config given
        # here would override them.
        retries = {"max_attempts": int(os.environ.get("AWS_MAX_ATTEMPTS") or S3_ATTEMPTS),
                   "mode": os.environ.get("AWS_RETRY_MODE") or "standard"}
        options: dict = {"config_kwargs": {"connect_timeout": S3_CONNECT_S, "read_timeout": S3_READ_S,
                                           "retries": retries}}
        if self.profile:
            options["profile"] = self.profile
        endpoint = self.endpoint or os.environ.get("AWS_ENDPOINT_URL")  # else the profile's, if it names one
        if endpoint:
            options["client_kwargs"] = {"endpoint_url": endpoint}
        return options


def filesystem(path: str, access: Access | None = None, wait_s: float = 0.0):
    """The fsspec filesystem for ``path``, reached with ``access`` (default: the environment's); remote and with
    ``wait_s``, one whose calls wait out storage that does not answer (:class:`PatientFileSystem`)."""
    protocol = fsspec.utils.get_protocol(str(path))
    fs = fsspec.filesystem(protocol, **((access or Access()).s3_options() if protocol == "s3" else {}))
    if protocol == "s3":
        fs.retries = 1  # botocore retries (Access.s3_options); s3fs's retries on top multiplied the wait
    return PatientFileSystem(fs, wait_s) if wait_s and is_remote(path) else fs


class PatientFileSystem:
    """A remote filesystem whose calls wait out storage that does not answer for up to ``wait_s`` each, and end
    at once on refused credentials (:func:`patiently`). A call is made again whole, so only calls that may be
    are offered: reads, listings, whole-file gets and puts, removals; a file opened for reading reads again from
    where it was. Writing a file in parts is not: write it locally and ``put_file`` it."""

    RETRIED = ("ls", "exists", "info", "isdir", "isfile", "find", "glob", "cat_file", "get_file", "put_file",
               "pipe_file", "rm", "makedirs")

    def __init__(self, fs, wait_s: float):
        self.fs, self.wait_s = fs, wait_s

    def __getattr__(self, name: str):
        if name == "unstrip_protocol":
            return self.fs.unstrip_protocol
        if name not in self.RETRIED:
            raise AttributeError(f"PatientFileSystem offers no {name} (only calls that can be made again whole)")
        call = getattr(self.fs, name)

        def retried(path, *args, **kwargs):
            where = args[0] if name == "put_file" else path  # put_file(local, remote)
            return patiently(lambda: call(path, *args, **kwargs), str(where), self.wait_s)

        return retried

    def open(self, path: str, mode: str = "rb") -> PatientReader:
        assert mode == "rb", mode  # writes: put_file
        return PatientReader(self.fs, path, self.wait_s)


class PatientReader(io.RawIOBase):
    """A remote file open for reading whose reads wait out storage that does not answer: a read that fails is
    made again at the same offset, through a new handle (the old one may hold a broken connection). A raw
    stream: ``io.BufferedReader`` over it reads lines (:func:`open_text`)."""

    def __init__(self, fs, path: str, wait_s: float):
        super().__init__()
        self.fs, self.path, self.wait_s = fs, path, wait_s
        self.position, self.handle, self.size = 0, None, None

    def readable(self) -> bool:
        return True

    def _again(self, read):
        def attempt():
            if self.handle is None:
                self.handle = self.fs.open(self.path, "rb")
            try:
                self.handle.seek(self.position)
                return read(self.handle)
            except BaseException:
                self._drop()
                raise

        return patiently(attempt, self.path, self.wait_s)

    def seekable(self) -> bool:
        return True

    def seek(self, position: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_END and self.size is None:  # a parquet reader starts at the end
            self.size = patiently(lambda: self.fs.size(self.path), self.path, self.wait_s)
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = position + base
        return self.position

    def tell(self) -> int:
        return self.position

    def read(self, size: int = -1) -> bytes:
        data = self._again(lambda handle: handle.read(size))
        self.position += len(data)
        return data

    def readinto(self, buffer) -> int:
        count = self._again(lambda handle: handle.readinto(buffer))
        self.position += count
        return count

    def _drop(self) -> None:
        handle, self.handle = self.handle, None
        if handle is not None:
            with contextlib.suppress(*store_errors()):
                handle.close()

    def close(self) -> None:
        self._drop()
        super().close()


def irregular(path: str) -> str | None:
    """What a local path holds when it is not a regular file (or a link to one), in words, or None: a directory,
    FIFO, socket or device, which no read should meet (a FIFO's read blocks for ever). FileNotFoundError when
    nothing is there, a link to nothing included."""
    mode = os.stat(path).st_mode
    if stat.S_ISREG(mode):
        return None
    return {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket",
            stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device"}.get(stat.S_IFMT(mode), "not a file")


def open_text(path: str, access: Access | None = None, wait_s: float = 0.0):
    """``path`` open for reading as UTF-8 text, a line at a time; remote, with ``wait_s``, its reads wait out
    storage that does not answer (:class:`PatientReader`)."""
    if not is_remote(path):
        return open(path, encoding="utf-8")
    fs = filesystem(path, access, wait_s)
    raw = fs.open(path, "rb")
    return io.TextIOWrapper(io.BufferedReader(raw) if isinstance(raw, PatientReader) else raw, encoding="utf-8")


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


def patiently(call, path: str, wait_s: float, also: tuple[type[BaseException], ...] = (), what: str = "the storage",
              progress=None):
    """``call()`` (an operation on remote ``path``), storage that does not answer waited out for up to ``wait_s``
    (0: not at all) and refused credentials at once, as :func:`read_bytes` does; FileNotFoundError passes.
    ``also``: errors raised for a storage error, which is what is judged and said; ``what``: the service, as said.
    ``progress()``: how far a long call (a download of many files, taken up where it stopped) has come; a call
    that came further before it failed again meets a new outage, and the wait starts again."""
    since, pause, came = None, 1.0, None
    while True:
        try:
            found = call()
        except FileNotFoundError:
            raise
        except (*store_errors(), *also) as exc:
            seen = next((cause for cause in causes(exc) if isinstance(cause, store_errors())), exc)
            if refused(seen):
                raise Unreachable(f"{path}: {what} refused the credentials ({gist(seen)})") from None
            if misplaced(seen):
                raise
            now, far = time.monotonic(), progress() if progress is not None else None
            if since is None or far != came:
                since, pause, came = now, 1.0, far
                log.warning("%s: %s does not answer (%s); waiting up to %.0f s", path, what, gist(seen), wait_s)
            if now - since >= wait_s:
                raise Unreachable(f"{path}: {what} did not answer for {now - since:.0f} s ({gist(seen)})") from None
            time.sleep(min(pause, wait_s - (now - since)))
            pause = min(2 * pause, MAX_PAUSE_S)
            continue
        if since is not None:
            log.warning("%s: %s answers again, after %.0f s", path, what, time.monotonic() - since)
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
