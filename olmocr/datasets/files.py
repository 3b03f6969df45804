"""Reading a dataset snapshot (local folder, ``s3://`` prefix, or a Hub download) and writing the prepared
tree so that a killed run can always continue: files appear whole (written aside, then renamed), a file
already holding the same bytes is left alone, and each finished unit of work leaves a marker with its
rejections beside it."""

from __future__ import annotations

import contextlib
import errno
import glob
import io
import json
import logging
import os
import socket
import threading
from collections import Counter

from olmocr.errors import UserError
from olmocr.faults import Unreachable, causes, gist
from olmocr.utils.io import Access, filesystem, is_remote, patiently

STATE = ".prepare"  # markers and per-unit rejections, inside the output folder
PARTIAL = ".partial"  # a file being written; one left over was cut short by a kill

log = logging.getLogger("olmocr.datasets")


class Snapshot:
    """The files of a dataset as published (the Hub repo's layout), under a local folder or an s3:// prefix."""

    def __init__(self, root: str, access: Access | None = None, wait_s: float = 0.0):
        self.remote = is_remote(root)
        self.root = root.rstrip("/") if self.remote else os.path.abspath(os.path.expanduser(root))
        if self.remote:  # its calls and reads wait out storage that does not answer for up to wait_s each
            self.fs = filesystem(self.root, access, wait_s)
            try:  # a listing: exists() on a bucket takes a refusal of the credentials for absence
                there = bool(self.fs.ls(self.root, detail=False))
            except FileNotFoundError:
                there = False
            if not there:
                raise UserError(f"source {root}: nothing there (expected a snapshot of the dataset's files)")
        elif not os.path.isdir(self.root):
            raise UserError(f"source {root}: not a folder (expected a snapshot of the dataset's files)")

    def glob(self, pattern: str) -> list[str]:
        """Paths relative to the root matching ``pattern`` (``*`` within a folder, ``**`` across), sorted."""
        if self.remote:
            found = self.fs.glob(f"{self.root}/{pattern}")
            prefix = self.root.split("://", 1)[1] + "/"
            rels = [p.split("://", 1)[-1][len(prefix):] for p in found]
        else:
            found = glob.glob(os.path.join(glob.escape(self.root), pattern), recursive=True)
            rels = [os.path.relpath(p, self.root).replace(os.sep, "/") for p in found if os.path.isfile(p)]
        return sorted(rels)

    def open(self, rel: str):
        if not self.remote:
            return open(os.path.join(self.root, rel), "rb")
        # Larger reads than a tarball stream asks for: a third less time per tarball from S3.
        return io.BufferedReader(self.fs.open(f"{self.root}/{rel}", "rb"), 1 << 20)

    def read(self, rel: str) -> bytes:
        with self.open(rel) as fh:
            return fh.read()

    def exists(self, rel: str) -> bool:
        return self.fs.exists(f"{self.root}/{rel}") if self.remote else os.path.isfile(os.path.join(self.root, rel))


def hub_snapshot(repo_id: str, revision: str, patterns: list[str], local_dir: str,
                 wait_s: float = 0.0) -> tuple[str, str]:
    """Download the files of ``repo_id`` at ``revision`` that match ``patterns`` into ``local_dir``
    (resumable: files already there are not fetched again). Returns (folder, commit). The Hub not answering
    (no connection, timeouts, 5xx or 429 past the client's own retries) is waited out for up to ``wait_s``,
    looking again with growing pauses; each look takes the download up where it stopped, and one that got further
    before the Hub went silent again waits anew. The token is the environment's (``HF_TOKEN``), never a config
    value."""
    import httpx
    from huggingface_hub import HfApi, snapshot_download

    def attempt() -> tuple[str, str]:
        try:
            commit = HfApi().dataset_info(repo_id, revision=revision).sha
            return snapshot_download(repo_id=repo_id, repo_type="dataset", revision=commit,
                                     allow_patterns=patterns, local_dir=local_dir), commit
        except Exception as exc:
            unroutable = no_route(exc)
            if unroutable is not None:  # not an outage: waiting ten minutes would not mend it
                raise UserError(f"dataset {repo_id}: the Hub cannot be reached from this machine ({unroutable}: "
                                "offline, or no DNS); give source=<a local snapshot folder or s3:// prefix>") from None
            silent = _hub_silent(exc)
            if silent is not None:
                raise silent from None  # what `patiently` waits out
            raise _hub_refusal(repo_id, revision, exc) from None

    def fetched() -> int:  # bytes under local_dir, unfinished downloads included
        total = 0
        for folder, _, names in os.walk(local_dir):
            for name in names:
                with contextlib.suppress(OSError):
                    total += os.path.getsize(os.path.join(folder, name))
        return total

    try:
        return patiently(attempt, f"dataset {repo_id}", wait_s, also=(httpx.TransportError,), what="the Hub",
                         progress=fetched)
    except Unreachable as exc:
        raise Unreachable(f"{exc}; give source=<a local snapshot folder or s3:// prefix>") from exc


def _hub_refusal(repo_id: str, revision: str, exc: Exception) -> Exception:
    """What the Hub said, or could not be asked, that waiting does not mend: a UserError in one line (``exc``
    itself when it is none of these)."""
    import httpx
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    if isinstance(exc, GatedRepoError):
        return UserError(f"dataset {repo_id}: access refused; accept its terms on the Hub and set HF_TOKEN")
    if isinstance(exc, RevisionNotFoundError):
        return UserError(f"dataset {repo_id}: no revision {revision!r} (dataset.revision)")
    if isinstance(exc, RepositoryNotFoundError):
        return UserError(f"dataset {repo_id}: not found on the Hub, or private without HF_TOKEN set")
    if isinstance(exc, HfHubHTTPError):  # a refused token (401), a request the Hub will not take (4xx)
        status = exc.response.status_code if exc.response is not None else "an error"
        return UserError(f"dataset {repo_id}: the Hub answered {status}"
                         + (" (HF_TOKEN refused)" if status == 401 else "") + f": {str(exc).splitlines()[0]}")
    if isinstance(exc, (OSError, httpx.HTTPError)):  # offline mode, a full disk under the download folder
        return UserError(f"dataset {repo_id}: the Hub cannot be reached ({gist(exc)}); give source=<a local "
                         "snapshot folder or s3:// prefix>")
    return exc


# The host's name does not resolve, or no network leads to it: this machine is offline (or has no DNS), which
# waiting does not end. (A name server that times out is EAI_AGAIN, "Temporary failure": also not an outage of
# the Hub's.)
NO_ROUTE_ERRNOS = {socket.EAI_NONAME, socket.EAI_AGAIN, getattr(socket, "EAI_NODATA", -5), errno.ENETUNREACH,
                   errno.EHOSTUNREACH}
NO_ROUTE_TEXT = ("Name or service not known", "Temporary failure in name resolution", "nodename nor servname",
                 "No address associated with hostname", "Network is unreachable", "No route to host")


def no_route(exc: BaseException) -> str | None:
    """What in ``exc`` (or what led to it) says the host cannot be reached from here at all, or None."""
    for seen in causes(exc):
        if isinstance(seen, OSError) and seen.errno in NO_ROUTE_ERRNOS:
            return f"{type(seen).__name__}: {seen.strerror or seen}"
        text = str(seen)
        for phrase in NO_ROUTE_TEXT:
            if phrase in text:
                return phrase
    return None


def _hub_silent(exc: BaseException) -> BaseException | None:
    """What in ``exc`` (or what led to it) says the Hub does not answer now, or None: no connection, a timeout, a
    cut transfer, a 5xx or a 429. Offline mode (``HF_HUB_OFFLINE``) is not: waiting does not end it."""
    import httpx
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    for seen in causes(exc):
        if isinstance(seen, OfflineModeIsEnabled):
            return None
        if isinstance(seen, (httpx.TransportError, ConnectionError, TimeoutError)) or (
                isinstance(seen, HfHubHTTPError) and seen.response is not None
                and (seen.response.status_code >= 500 or seen.response.status_code == 429)):
            return seen
    return None


def write_atomic(path: str, data: bytes) -> bool:
    """Write ``data`` to ``path`` whole; leave a file that already holds it untouched. True if written."""
    try:
        if os.path.getsize(path) == len(data):
            with open(path, "rb") as fh:
                if fh.read() == data:
                    return False
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}{PARTIAL}"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)
    return True


def safe_relative(name: str) -> str | None:
    """``name`` as a path inside the output folder, or None when it would leave it (absolute, ``..``)."""
    name = name.replace("\\", "/")
    while name.startswith("./"):
        name = name[2:]
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in name.split("/")):
        return None
    return name


class State:
    """Finished units of work of one output folder: ``<out>/.prepare/<unit>.json`` (what the unit found)
    and ``<out>/.prepare/<unit>.rejected.jsonl`` (what it could not convert, and why)."""

    def __init__(self, out: str):
        self.out = out
        self.dir = os.path.join(out, STATE)

    def _path(self, unit: str, suffix: str) -> str:
        return os.path.join(self.dir, unit.replace("/", "__") + suffix)

    def done(self, unit: str) -> dict | None:
        try:
            with open(self._path(unit, ".json")) as fh:
                return json.load(fh)
        except (OSError, ValueError):
            return None

    def finish(self, unit: str, info: dict, rejected: list[dict]) -> None:
        """Record a unit as done: its rejections first, its marker last (the marker is what counts)."""
        lines = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rejected)
        write_atomic(self._path(unit, ".rejected.jsonl"), lines.encode())
        write_atomic(self._path(unit, ".json"), json.dumps({**info, "unit": unit}, indent=1, sort_keys=True).encode())

    def finish_part(self, unit: str, label: str, limit: int | None, pages: int, size: int, rejected: list[dict]) -> dict:
        """Record a part of the dataset (a subset/split, a test file) as done, and say what it holds."""
        counts = by_reason(rejected)
        info = {"limit": limit, "pages": pages, "bytes": size, "rejected": counts}
        self.finish(unit, info, rejected)
        log.info("%s: %d pages (%.1f MB), %d rejected%s", label, pages, size / 1e6, len(rejected), reasons_text(counts))
        return info

    def clear_partial(self) -> int:
        """Remove the half-written files a killed run left (the units they belonged to are redone)."""
        removed = 0
        for folder, dirs, files in os.walk(self.out):
            dirs[:] = [d for d in dirs if d != ".download"]  # the Hub client's own resumable downloads
            for name in files:
                if name.endswith(PARTIAL):
                    os.remove(os.path.join(folder, name))
                    removed += 1
        return removed

    def markers(self) -> dict[str, dict]:
        """Every finished unit of the folder (this run's and earlier runs'), by name."""
        found = {}
        for name in sorted(os.listdir(self.dir)) if os.path.isdir(self.dir) else []:
            if name.endswith(".json"):
                with open(os.path.join(self.dir, name)) as fh:
                    info = json.load(fh)
                found[info["unit"]] = info
        return found

    def rejected(self) -> list[dict]:
        """Every finished unit's rejections, in the order of the units' names."""
        out = []
        for name in sorted(os.listdir(self.dir)) if os.path.isdir(self.dir) else []:
            if name.endswith(".rejected.jsonl") and os.path.isfile(os.path.join(self.dir, name[:-15] + ".json")):
                with open(os.path.join(self.dir, name)) as fh:
                    out += [json.loads(line) for line in fh if line.strip()]
        return out

class Source:
    """Where a dataset's files come from: the Hub (``spec`` None: ``repo_id`` at ``revision``, downloaded
    into ``download_dir`` only as far as a step needs them), or a local snapshot folder or s3:// prefix. The Hub
    or the storage not answering is waited out for up to ``wait_s`` at each request."""

    def __init__(self, spec: str | None, repo_id: str, revision: str, download_dir: str, access: Access | None = None,
                 wait_s: float = 0.0):
        self.spec, self.repo_id, self.revision, self.download_dir = spec, repo_id, revision, download_dir
        self.commit: str | None = None
        self.wait_s = wait_s
        self.snapshot = Snapshot(spec, access, wait_s) if spec is not None else None

    def fetch(self, patterns: list[str]) -> Snapshot:
        """The snapshot, holding at least the files matching ``patterns``."""
        if self.snapshot is not None:
            return self.snapshot
        folder, self.commit = hub_snapshot(self.repo_id, self.commit or self.revision, patterns, self.download_dir,
                                           self.wait_s)
        return Snapshot(folder)

    def describe(self) -> dict:
        if self.spec is not None:
            return {"source": self.spec}
        return {"source": f"hf://datasets/{self.repo_id}", "revision": self.revision, "commit": self.commit}


def covers(done_limit: int | None, limit: int | None) -> bool:
    """Whether work done with ``done_limit`` rows per part holds what ``limit`` asks for."""
    return done_limit is None or (limit is not None and done_limit >= limit)


def remove(path: str, root: str) -> None:
    """Remove ``path`` and the folders it leaves empty, up to ``root``."""
    if os.path.isfile(path):
        os.remove(path)
    folder = os.path.dirname(path)
    while os.path.abspath(folder).startswith(os.path.abspath(root) + os.sep) and not os.listdir(folder):
        os.rmdir(folder)
        folder = os.path.dirname(folder)


def by_reason(rejected: list[dict]) -> dict[str, int]:
    return dict(sorted(Counter(r["reason"] for r in rejected).items()))


def reasons_text(counts: dict[str, int]) -> str:
    """`` (bad_response 2, row_without_pdf 1)``, or nothing when there are none."""
    return f" ({', '.join(f'{k} {v}' for k, v in counts.items())})" if counts else ""
