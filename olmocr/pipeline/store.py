"""Objects of a workspace with the conditional writes an exactly-once queue needs.

Every object has a *tag* that changes whenever it is rewritten: its ETag on S3, a digest of its bytes
in a local folder. Besides plain reads and overwrites, a store offers

* ``create(name, data)``: write only if ``name`` does not exist (S3 ``If-None-Match: *``; a hard link
  locally, which fails on an existing name), and
* ``replace(name, data, tag)``: write only if ``name`` still has ``tag`` (S3 ``If-Match``; a
  compare-and-swap under a POSIX byte-range lock locally, which the kernel drops when its holder dies).

Both answer None when their condition fails: another writer got there first. Writes are atomic: a
reader sees the old object or the new one, never a part (S3 PUT; a temporary file renamed into place).
S3 goes through s3fs only, reached with an :class:`olmocr.utils.io.Access` (a profile, an endpoint for
MinIO, Ceph, moto or any other S3 API).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import threading
import uuid
import zlib
from dataclasses import dataclass

from olmocr.errors import UserError
from olmocr.faults import NoSuchBucket, no_space
from olmocr.utils.io import Access


@dataclass(frozen=True)
class Versioned:
    data: bytes
    tag: str


class Store:
    """A flat namespace of objects under one root; names use ``/`` as in ``claims/<id>.json``."""

    root: str

    def url(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    def read(self, name: str) -> Versioned | None:
        raise NotImplementedError

    def read_many(self, names: list[str]) -> dict[str, bytes]:
        """The objects that exist among ``names``."""
        raise NotImplementedError

    def version(self, name: str) -> str | None:
        """Something that changes whenever the object does (cheaper than reading it); None if absent."""
        raise NotImplementedError

    def exists(self, name: str) -> bool:
        raise NotImplementedError

    def list(self, folder: str) -> list[str]:
        """Names of the objects directly in ``folder`` (not their paths)."""
        raise NotImplementedError

    def tags(self, folder: str, after: str = "") -> dict[str, str]:
        """The objects directly in ``folder`` (names, as :meth:`list`) that sort after ``after``, each with what
        changes whenever it is written again, from a listing (no request an object)."""
        raise NotImplementedError

    def list_after(self, folder: str, after: str = "") -> list[str]:
        """The names in ``folder`` that sort after ``after``, in order: what was added to a folder of names
        that only grow (an index's parts) since the last look, for one request a thousand new names."""
        raise NotImplementedError

    def write(self, name: str, data: bytes) -> None:
        raise NotImplementedError

    def create(self, name: str, data: bytes) -> str | None:
        raise NotImplementedError

    def replace(self, name: str, data: bytes, tag: str) -> str | None:
        raise NotImplementedError

    def delete(self, name: str) -> None:
        """Remove ``name`` (nothing when it is not there): the queue (a finished part compacted, a part retired),
        pipeline.repair and the service's sweep remove objects."""
        raise NotImplementedError

    def confirm_root(self) -> None:
        """Raise when the place the store lives in cannot exist as named (an S3 bucket that is not there)."""

    def takes(self, folder: str) -> bool:
        """Whether the store takes a write in ``folder`` now: a small object of its own written there and removed.
        A write that failed while this one lands failed for its name, not for the store."""
        from olmocr.faults import store_errors

        name = f"{folder}/.write-check-{uuid.uuid4().hex}"
        try:
            self.write(name, b"")
        except store_errors():
            return False
        try:
            self.delete(name)
        except store_errors():
            pass  # left behind: a dot name, which listings skip
        return True


def _digest(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


class LocalStore(Store):
    """A folder on a disk every worker sees (local, NFS, Lustre): needs hard links and POSIX locks."""

    STRIPES = 4096
    _threads = threading.Lock()  # POSIX locks belong to the process; threads of one process take this

    def __init__(self, root: str):
        self.root = os.path.abspath(root)  # created by the first write: reading never makes folders
        self._lock_path = os.path.join(self.root, ".locks")

    def _path(self, name: str) -> str:
        return os.path.join(self.root, *name.split("/"))

    def _staged(self, name: str, data: bytes) -> str:
        """``data`` in a temporary file beside ``name``, flushed to disk (a done marker must never reach
        the disk before the results it vouches for)."""
        path = self._path(name)
        folder = os.path.dirname(path)
        # A name of its own, not the object's: an object whose name is as long as a file name may be still stages
        tmp = os.path.join(folder, f".{uuid.uuid4().hex}.tmp")
        try:
            os.makedirs(folder, exist_ok=True)
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:  # a full disk: its retries must not fill it further with what they left
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            full = no_space(exc, path)
            if full is None:
                raise
            raise full from exc
        return tmp

    def read(self, name: str) -> Versioned | None:
        try:
            with open(self._path(name), "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            return None
        return Versioned(data, _digest(data))

    def read_many(self, names: list[str]) -> dict[str, bytes]:
        out = {}
        for name in names:
            found = self.read(name)
            if found is not None:
                out[name] = found.data
        return out

    def version(self, name: str) -> str | None:
        try:
            st = os.stat(self._path(name))
        except FileNotFoundError:
            return None
        return f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}"

    def exists(self, name: str) -> bool:
        return os.path.exists(self._path(name))

    def list(self, folder: str) -> list[str]:
        try:
            return [n for n in os.listdir(self._path(folder)) if not n.startswith(".")]
        except FileNotFoundError:
            return []

    def tags(self, folder: str, after: str = "") -> dict[str, str]:
        try:
            with os.scandir(self._path(folder)) as entries:
                found = {}
                for entry in entries:
                    if not entry.name.startswith(".") and entry.name > after:
                        st = entry.stat()
                        found[entry.name] = f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}"  # as version()
                return found
        except FileNotFoundError:
            return {}

    def list_after(self, folder: str, after: str = "") -> list[str]:
        return sorted(n for n in self.list(folder) if n > after)

    def write(self, name: str, data: bytes) -> None:
        tmp = self._staged(name, data)
        try:
            os.replace(tmp, self._path(name))
        except OSError:  # a name the folder cannot take: its staged copy goes too
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def create(self, name: str, data: bytes) -> str | None:
        tmp = self._staged(name, data)
        try:
            os.link(tmp, self._path(name))
        except FileExistsError:
            return None
        finally:
            os.unlink(tmp)
        return _digest(data)

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(name))

    @contextlib.contextmanager
    def _locked(self, name: str):
        """Hold the lock of ``name``'s stripe: a byte of ``.locks``, so one file serves every object."""
        stripe = zlib.crc32(name.encode()) % self.STRIPES
        with self._threads:
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX, 1, stripe)
                yield
            finally:
                os.close(fd)  # closing drops the process's locks on the file

    def replace(self, name: str, data: bytes, tag: str) -> str | None:
        tmp = self._staged(name, data)
        try:
            with self._locked(name):
                current = self.read(name)
                if current is None or current.tag != tag:
                    return None
                os.replace(tmp, self._path(name))
                tmp = None
        finally:
            if tmp is not None:
                os.unlink(tmp)
        return _digest(data)


def _condition_failed(exc: OSError) -> bool:
    """Did S3 refuse a conditional write (412 Precondition Failed, 409 ConditionalRequestConflict, or the
    object gone under an If-Match)? Anything else is a real error."""
    if isinstance(exc, (FileExistsError, FileNotFoundError)):
        return True
    return exc.errno in (errno.EINVAL, errno.EBUSY) and "condition" in str(exc).lower()


class S3Store(Store):
    def __init__(self, root: str, access: Access | None = None):
        import s3fs

        self.root = root.rstrip("/")
        # No listing cache: a queue must see other workers' objects at once.
        self.fs = s3fs.S3FileSystem(use_listings_cache=False, skip_instance_cache=True,
                                    **(access or Access()).s3_options())
        self.fs.retries = 1  # botocore retries (Access.s3_options); s3fs's retries on top multiplied the wait

    def _key(self, name: str) -> tuple[str, str]:
        bucket, _, key = self.url(name).removeprefix("s3://").partition("/")
        return bucket, key

    async def _get(self, name: str) -> Versioned | None:
        # One GET: its answer carries the body and the ETag of that body. (s3fs's open asks HEAD first, and its
        # cat asks HEAD for a size; either, the object not there, also lists the name as a folder: three requests
        # where S3 bills one.)
        bucket, key = self._key(name)
        try:  # fsspec's async form of the public call_s3 (its async methods are the underscored names)
            answer = await self.fs._call_s3("get_object", Bucket=bucket, Key=key)
        except FileNotFoundError:
            return None
        try:
            return Versioned(await answer["Body"].read(), answer["ETag"])
        finally:
            answer["Body"].close()

    def read(self, name: str) -> Versioned | None:
        from fsspec.asyn import sync

        return sync(self.fs.loop, self._get, name)

    def read_many(self, names: list[str]) -> dict[str, bytes]:
        import asyncio

        from fsspec.asyn import sync

        async def get_all() -> list[Versioned | None]:
            at_once = asyncio.Semaphore(32)

            async def one(name: str) -> Versioned | None:
                async with at_once:
                    return await self._get(name)

            # A refused read, or no answer, raises: never taken for an object not there.
            return await asyncio.gather(*(one(n) for n in names))

        if not names:
            return {}
        return {n: got.data for n, got in zip(names, sync(self.fs.loop, get_all)) if got is not None}

    def version(self, name: str) -> str | None:
        try:
            return self.fs.info(self.url(name))["ETag"]
        except FileNotFoundError:
            return None

    def exists(self, name: str) -> bool:
        # One HEAD: s3fs's exists, the object not there, lists the name as a folder too (a second request; on a
        # server that lists by scanning the bucket, as moto does, one that grows with the bucket).
        bucket, key = self._key(name)
        try:
            self.fs.call_s3("head_object", Bucket=bucket, Key=key)
        except FileNotFoundError:
            return False
        return True

    def list(self, folder: str) -> list[str]:
        try:
            names = (p.rsplit("/", 1)[-1] for p in self.fs.ls(self.url(folder), detail=False))
            return [n for n in names if not n.startswith(".")]  # as a local folder's: dot names are the store's own
        except FileNotFoundError:
            return []

    def tags(self, folder: str, after: str = "") -> dict[str, str]:
        return self._listed(folder, after)

    def list_after(self, folder: str, after: str = "") -> list[str]:
        return list(self._listed(folder, after))

    def _listed(self, folder: str, after: str) -> dict[str, str]:
        """The objects directly in ``folder`` that sort after ``after``, in order, each with its ETag."""
        bucket, key = self._key(folder)
        prefix = f"{key.rstrip('/')}/" if key.strip("/") else ""
        found, token = {}, None
        while True:  # S3 lists in key order from StartAfter: only what sorts after ``after``
            asked = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/", "StartAfter": prefix + after}
            try:
                page = self.fs.call_s3("list_objects_v2", **asked, **({"ContinuationToken": token} if token else {}))
            except FileNotFoundError as exc:
                self._no_bucket(exc)
                raise
            found.update((o["Key"][len(prefix):], o["ETag"]) for o in page.get("Contents", []))
            token = page.get("NextContinuationToken")
            if not token:
                return {n: tag for n, tag in found.items() if n and not n.startswith(".")}

    def _no_bucket(self, exc: OSError) -> None:
        """Raise NoSuchBucket when ``exc`` says the bucket is not there (s3fs says so as FileNotFoundError, which
        a conditional write must not take for a condition that failed: adding would retry for ever)."""
        from olmocr.faults import causes

        if any(type(seen).__name__ == "NoSuchBucket" or "bucket does not exist" in str(seen) for seen in causes(exc)):
            self.confirm_root()  # says so (a bucket deleted and made again since: the write goes on as it fails)

    def confirm_root(self) -> None:
        bucket = self.root[len("s3://"):].split("/", 1)[0]
        try:
            self.fs.call_s3("head_bucket", Bucket=bucket)
        except FileNotFoundError as exc:
            client = getattr(self.fs, "s3", None)  # made by the call: its endpoint, from the access or a profile
            endpoint = getattr(getattr(client, "meta", None), "endpoint_url", None) or "S3"
            raise NoSuchBucket(f"bucket {bucket!r} does not exist at {endpoint} (create it, or name one that "
                               "exists)") from exc

    def write(self, name: str, data: bytes) -> None:
        try:
            self.fs.pipe_file(self.url(name), data)
        except FileNotFoundError as exc:
            self._no_bucket(exc)
            raise

    def create(self, name: str, data: bytes) -> str | None:
        try:
            return self.fs.pipe_file(self.url(name), data, mode="create")["ETag"]
        except OSError as exc:
            self._no_bucket(exc)
            if _condition_failed(exc):
                return None
            raise

    def replace(self, name: str, data: bytes, tag: str) -> str | None:
        try:
            return self.fs.pipe_file(self.url(name), data, IfMatch=tag)["ETag"]
        except OSError as exc:
            self._no_bucket(exc)
            if _condition_failed(exc):
                return None
            raise

    def delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(self.url(name))


def open_store(root: str, access: Access | None = None) -> Store:
    """The store for a workspace: a local folder or ``s3://bucket/prefix`` (reached with ``access``)."""
    if root.startswith("s3://"):
        if len(root) <= len("s3://") or root[len("s3://"):].startswith("/"):
            raise UserError(f"workspace: {root!r} names no bucket (expected s3://bucket/prefix)")
        return S3Store(root, access)
    if "://" in root:
        raise UserError(f"workspace: {root!r} is neither a local folder nor s3://bucket/prefix "
                        "(the queue needs S3's conditional writes)")
    return LocalStore(root)
