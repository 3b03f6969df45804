"""python -m olmocr.utils.guard -- COMMAND … — run COMMAND, and end it with everything it started when the
process that started the guard is gone.

A model server started by a pipeline worker must not outlive it: a worker killed with SIGKILL runs no
cleanup, and its server (vLLM, with engine processes of its own) would keep the GPU memory that the
restarted worker needs. Started in a session of its own (``start_new_session``), the guard runs COMMAND in
that session and looks every half second whether its parent is still there (its parent process id
changes when the parent dies). When the parent is gone, or the guard is told to stop (SIGTERM, SIGINT),
every other process of the session gets SIGTERM, and SIGKILL after ``GRACE_S``. When COMMAND exits, the
guard ends what is left of the session and exits with COMMAND's code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

GRACE_S = 5.0
POLL_S = 0.5


def session_members() -> list[int]:
    """The other live processes of this session (read from /proc; this process's group elsewhere)."""
    sid, me = os.getsid(0), os.getpid()
    if not os.path.isdir("/proc"):
        return []
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        except OSError:
            continue  # gone meanwhile
        # state, ppid, pgrp, session; a zombie has ended (only its exit status is left for its parent to read)
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            members.append(int(entry))
    return members


def end_session() -> None:
    """SIGTERM to every other process of the session, SIGKILL to those still there after the grace period."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        os.killpg(os.getpgid(0), signal.SIGTERM)  # the group, also where /proc is not
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + GRACE_S
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in session_members():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        while session_members() and time.monotonic() < deadline:
            time.sleep(0.1)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--":
        print("usage: python -m olmocr.utils.guard -- COMMAND …", file=sys.stderr)
        return 2
    parent = os.getppid()
    child = subprocess.Popen(argv[1:])

    def stop(signum, frame):
        end_session()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while True:
        code = child.poll()
        if code is not None:
            end_session()
            return code
        if os.getppid() != parent:  # the parent died: this process was handed to init (or a subreaper)
            end_session()
            return 128 + signal.SIGTERM
        time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
