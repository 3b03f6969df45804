"""One process at a time in a folder that a stage resumes into (training's checkpoints, mined pairs,
synthetic pages).

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

from olmocr.errors import UserError

log = logging.getLogger(__name__)

LOCK = ".run.lock"


RUN_DIR_ADVICE = "give this one its own run_name (or hydra.run.dir)"


def _refusal(folder: str, fh, advice: str = RUN_DIR_ADVICE) -> UserError:
    fh.seek(0)
    holder = fh.read().strip() or "a process that has not said which"
    return UserError(f"{folder} is in use by another run ({holder}): wait for it to end, or {advice}")


def _try_lock(fh) -> bool | None:
    """True: locked; False: another process holds it; None: this file system has no locks."""
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        return False if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN) else None


@contextlib.contextmanager
def run_dir_held(folder: str, advice: str = RUN_DIR_ADVICE):
    """Hold ``folder`` while the block runs; UserError when another process holds it (the line ends with
    ``advice``: what to do instead). A file system without locks (some network mounts) is said once and not
    locked."""
    os.makedirs(folder, exist_ok=True)
    fh = open(os.path.join(folder, LOCK), "a+")
    try:
        locked = _try_lock(fh)
        if locked is False:
            raise _refusal(folder, fh, advice)
        if locked is None:
            log.warning("%s: cannot be locked here: two runs in it at once would overwrite each other's "
                        "files", folder)
            yield
            return
        fh.seek(0)
        fh.truncate()
        since = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        fh.write(f"pid {os.getpid()} on {socket.gethostname()}, since {since}\n")
        fh.flush()
        yield
    finally:
        fh.close()


def check_free(folder: str) -> None:
    """UserError when a run holds ``folder`` now: asked before a command writes anything there (the command
    line does, before Hydra writes the run's ``.hydra/`` and log), so a refused second invocation leaves the
    running one's files as they were. Takes nothing: the stage itself holds the folder when it runs."""
    try:
        fh = open(os.path.join(folder, LOCK))
    except OSError:  # no lock file (no run has held it) or no folder yet: nothing to refuse
        return
    with fh:
        if _try_lock(fh) is False:
            raise _refusal(folder, fh)
