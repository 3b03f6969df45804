"""``data.local_cache``: remote data roots (s3://, gs://) copied to local disk before they are indexed, so a
cluster job reads local files rather than fetching every page from object storage at every epoch.

A root is copied to ``<local_cache>/<scheme>/<bucket>/<prefix>``, many files at a time. Copying resumes:
a file already there with the remote's size is not fetched again, and files appear whole (written aside,
then renamed), so a job killed while copying continues where it stopped. Files gone from the remote are
removed from the copy, so the copy is what the remote holds. Processes of one machine (the ranks of a
job) take turns through a lock: the first copies, the others find the copy done. Storage that stops
answering while the copy is made (a brownout as a many-node job starts) is waited out like any read of
training data (``data.storage_wait_s``); refused credentials stop the copy at once.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor

from tqdm import tqdm

from olmocr.errors import UserError
from olmocr.utils.io import filesystem, is_remote, patiently

log = logging.getLogger(__name__)


def local_copy_path(root: str, cache_dir: str) -> str:
    scheme, rest = root.rstrip("/").split("://", 1)
    return os.path.join(os.path.abspath(os.path.expanduser(cache_dir)), scheme, *rest.split("/"))


def localize(root: str, cache_dir: str | None, wait_s: float = 0.0, threads: int = 16) -> str:
    """``root`` itself when local or when there is no cache; else its local copy, brought up to date, storage
    that does not answer waited out for up to ``wait_s`` at each listing and file (as
    :func:`olmocr.utils.io.patiently`)."""
    if cache_dir is None or not is_remote(root):
        return root
    dest = local_copy_path(root, cache_dir)
    os.makedirs(dest, exist_ok=True)
    with open(dest + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _sync(root.rstrip("/"), dest, wait_s, threads)
    return dest


def _sync(root: str, dest: str, wait_s: float, threads: int) -> None:
    fs = filesystem(root)
    start = time.perf_counter()
    try:
        listing = patiently(lambda: fs.find(root, detail=True), root, wait_s)
    except OSError as exc:  # what waiting does not mend, a missing bucket say (an outage is Unreachable by now)
        raise UserError(f"data.local_cache: cannot list {root}: {type(exc).__name__}: {exc}") from None
    if not listing:
        raise UserError(f"data root {root}: no files there")
    prefix = root.split("://", 1)[1] + "/"
    remote = {info["name"].split("://", 1)[-1][len(prefix):]: int(info.get("size") or 0)
              for info in listing.values() if info.get("type", "file") == "file"}
    todo = [(rel, size) for rel, size in sorted(remote.items())
            if not os.path.isfile(os.path.join(dest, rel)) or os.path.getsize(os.path.join(dest, rel)) != size]
    for folder, _, files in os.walk(dest):
        for name in files:
            rel = os.path.relpath(os.path.join(folder, name), dest).replace(os.sep, "/")
            if rel not in remote:
                os.remove(os.path.join(folder, name))
    if not todo:
        log.info("data.local_cache: %s is up to date in %s (%d files)", root, dest, len(remote))
        return

    def fetch(item) -> int:
        rel, _ = item
        path = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.partial"
        patiently(lambda: fs.get_file(f"{root}/{rel}", tmp), f"{root}/{rel}", wait_s)
        os.replace(tmp, path)
        return os.path.getsize(path)

    total = sum(size for _, size in todo)
    pool = ThreadPoolExecutor(threads)
    try:
        with tqdm(total=total, unit="B", unit_scale=True, desc=f"copying {root}") as bar:
            for size in pool.map(fetch, todo):
                bar.update(size)
    finally:  # after a file that could not be fetched, the files not yet started are not tried
        pool.shutdown(cancel_futures=True)
    seconds = time.perf_counter() - start
    log.info("data.local_cache: %d of %d files of %s copied to %s (%.1f MB, %.1f MB/s)", len(todo), len(remote),
             root, dest, total / 1e6, total / 1e6 / max(seconds, 1e-9))
