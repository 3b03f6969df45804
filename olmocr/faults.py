"""Faults outside the code that end a stage, each said in one line by every stage (:func:`olmocr.cli.fail`):
a write refused for want of space (a full disk, a spent quota), recognised whichever library did the
writing; storage or a service that refused the credentials or did not answer for as long as the stage
waits for it (:class:`Unreachable`); and what storage and network errors are (:func:`store_errors`,
:func:`refused`, :func:`outside`, :func:`gist`)."""

from __future__ import annotations

import errno
import os
import shutil

NO_SPACE = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}
TORCH_WRITE_FAILED = ("unexpected pos", "basic_ios::clear", "PytorchStreamWriter failed writing")


class NoSpace(OSError):
    """A write refused for want of space (a full disk or a spent quota), in one line: where, how much is
    free there, and what became of the work (``outcome``)."""

    def __init__(self, code: int, path: str | None, outcome: str = ""):
        super().__init__(code, NO_SPACE[code], path)
        self.outcome = outcome

    def __str__(self) -> str:
        where = f" writing {self.filename}" if self.filename else ""
        free = free_space(self.filename) if self.filename else None
        return (f"{self.strerror}{where}" + (f" ({free} free there)" if free else "")
                + (f"; {self.outcome}" if self.outcome else ""))


def no_space(exc: BaseException, path: str | None = None) -> NoSpace | None:
    """The full disk or spent quota behind ``exc`` (itself or what led to it), or None. Libraries that
    write in native code lose the OS error: safetensors keeps only its message ("(os error 28)"), and
    torch's file writer reports a short write as a position mismatch and a failed close as a stream error
    (TORCH_WRITE_FAILED), which on a regular file mean the disk refused the rest. ``path``: where the write
    went, when the error does not say."""
    for seen in causes(exc):
        if isinstance(seen, NoSpace):
            return seen
        text = str(seen)
        if isinstance(seen, OSError) and seen.errno in NO_SPACE:
            return NoSpace(seen.errno, seen.filename or path)
        for code in NO_SPACE:
            if f"(os error {code})" in text:
                return NoSpace(code, path)
        if isinstance(seen, RuntimeError) and any(sign in text for sign in TORCH_WRITE_FAILED):
            return NoSpace(errno.ENOSPC, path)
    return None


def free_space(path: str) -> str | None:
    """The free space of the file system holding ``path`` (or its nearest existing parent), readable."""
    if "://" in path:
        return None
    try:
        free = float(shutil.disk_usage(existing_parent(path)).free)
    except OSError:
        return None
    if free < 1000:
        return f"{free:.0f} B"
    for unit in ("KB", "MB", "GB", "TB"):
        free /= 1000
        if free < 1000 or unit == "TB":
            break
    return f"{free:.1f} {unit}"


def existing_parent(path: str) -> str:
    """``path`` made absolute, or its nearest parent that exists (where a file written there would go)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


class Stopped(RuntimeError):
    """A run ended early on a signal, at a point it can resume from (its message says where)."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum


class Unreachable(RuntimeError):
    """Storage or a service that refused this process's credentials, or did not answer for as long as the stage
    waits: what is done is kept (a training run resumes from its newest checkpoint) and the stage stops."""

    def __init__(self, message: str):
        # Raised in a DataLoader worker, it is built again in the main process from "Caught Unreachable in
        # DataLoader worker process N.\nOriginal Traceback …" ending in "olmocr.faults.Unreachable: <message>".
        name = f"{type(self).__module__}.{type(self).__qualname__}: "
        last = message.rstrip().rsplit("\n", 1)[-1]
        super().__init__(last[len(name):] if message.startswith("Caught ") and last.startswith(name) else message)


def store_errors() -> tuple[type[BaseException], ...]:
    """What storage (a local folder, S3 through s3fs) raises when it cannot do its work: a full disk, a missing
    bucket, no credentials, an endpoint that does not answer."""
    try:
        from botocore.exceptions import BotoCoreError
    except ImportError:
        return (OSError,)
    return (OSError, BotoCoreError)


def refused(exc: BaseException) -> bool:
    """Is a storage error a refusal of this process's credentials (none found, or not allowed), which waiting
    does not mend, rather than the storage not answering now?"""
    if isinstance(exc, PermissionError):
        return True
    try:
        from botocore.exceptions import NoCredentialsError, PartialCredentialsError
    except ImportError:
        return False
    return isinstance(exc, (NoCredentialsError, PartialCredentialsError))


# A path that cannot be what it is asked to be (a file where a folder must be, or the reverse, a name too long,
# a loop of links, a read-only file system): a wrong path, which waiting does not mend.
MISPLACED = frozenset({errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG, errno.ELOOP, errno.EROFS})


class NoSuchBucket(FileNotFoundError):
    """An S3 bucket that does not exist: a wrong name or a missing setup step, which waiting does not mend."""


def named(exc: BaseException) -> str:
    """A storage error for a one-line message: its type and message, or only the message where that says it all."""
    return str(exc) if isinstance(exc, NoSuchBucket) else f"{type(exc).__name__}: {exc}"


def misplaced(exc: BaseException) -> bool:
    return isinstance(exc, NoSuchBucket) or (isinstance(exc, OSError) and exc.errno in MISPLACED)


def outside(exc: BaseException) -> str | None:
    """``exc`` (or what led to it) as a fault of storage or the network, in words, or None: credentials refused,
    a local permission denied, or no answer (refused or reset connections, timeouts, a client giving up)."""
    for seen in causes(exc):
        if isinstance(seen, NoSuchBucket):
            return str(seen)
        if isinstance(seen, PermissionError) and seen.filename:
            return f"permission denied: {seen.filename}"
        if isinstance(seen, store_errors()) and refused(seen):
            return f"the storage refused the credentials ({gist(seen)})"
        if isinstance(seen, (ConnectionError, TimeoutError)) or (
                isinstance(seen, store_errors()) and not isinstance(seen, OSError)):
            return f"the storage or a service did not answer ({gist(seen)})"
    return None


def storage_fault(exc: BaseException, message: str) -> Exception:
    """A storage error said as ``message``, as the error it is: a bucket or path that does not exist or cannot be what
    it is asked to be is the user's to fix (:class:`~olmocr.errors.UserError`); anything else is storage that refused
    the credentials or did not answer (:class:`Unreachable`). Raise it ``from exc``: the trace keeps the storage's."""
    from olmocr.errors import UserError

    wrong_place = any(misplaced(seen) or isinstance(seen, FileNotFoundError) for seen in causes(exc))
    return UserError(message) if wrong_place else Unreachable(message)


def gist(exc: BaseException) -> str:
    """An error in one line: its type and the first line of its message."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else 'no message'}"


def causes(exc: BaseException):
    """``exc`` and what led to it (its cause, else its context), each once."""
    seen: BaseException | None = exc
    visited = set()
    while seen is not None and id(seen) not in visited:
        visited.add(id(seen))
        yield seen
        seen = seen.__cause__ or seen.__context__
