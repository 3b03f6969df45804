"""One process at a time in a run dir that a stage resumes into (training's checkpoints, mined pairs).

A command run again while the first still runs (a second terminal, a job submitted twice) would resume from
the same checkpoint and write the same checkpoint names, each removing the other's half-written one. The
first process holds a lock on ``<run dir>/.run.lock`` (``flock``: the operating system lets it go when the
process ends, however it ends, so a killed run never leaves the run dir locked); a second is refused in
one line naming the holder.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import logging
import os
import socket

log = logging.getLogger(__name__)

LOCK = ".run.lock"


@contextlib.contextmanager
def run_dir_held(folder: str):
    """Hold ``folder`` while the block runs; ValueError when another process holds it. A file system without
    locks (some network mounts) is said once and not locked."""
    os.makedirs(folder, exist_ok=True)
    fh = open(os.path.join(folder, LOCK), "a+")
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                log.warning("%s: cannot be locked here (%s): two runs in it at once would overwrite each other's "
                            "checkpoints", folder, exc.strerror)
                yield
                return
            fh.seek(0)
            holder = fh.read().strip() or "a process that has not said which"
            raise ValueError(f"{folder} is in use by another run ({holder}): wait for it to end, or give this one "
                             "its own run_name (or hydra.run.dir)") from None
        fh.seek(0)
        fh.truncate()
        since = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        fh.write(f"pid {os.getpid()} on {socket.gethostname()}, since {since}\n")
        fh.flush()
        yield
    finally:
        fh.close()
