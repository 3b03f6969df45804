"""Keep a run directory in a persistent place (s3://, gs://, or another folder) so that a run on a
machine that can disappear (a preemptible cluster job) resumes elsewhere.

    python -m olmocr.utils.sync pull REMOTE RUN_DIR          restore a run dir before the stage starts
    python -m olmocr.utils.sync push RUN_DIR REMOTE          copy it out (once)
    python -m olmocr.utils.sync push RUN_DIR REMOTE --every 60   ... and again every minute until stopped
    python -m olmocr.utils.sync check REMOTE                 can this machine write (and remove) there?

Pulling and checking wait out remote storage that does not answer for up to ``--wait-s`` (600 s); refused
credentials end them at once.

Checkpoints are the directories under ``<run>/checkpoints/``. A checkpoint counts as complete when its
marker is there (``trainer_state.pt`` for this project's trainer, ``trainer_state.json`` for a
Hugging Face Trainer's), the same rule the trainers resume by. Pushing uploads a checkpoint only once it
is complete here, its marker last, and never again once complete there; pulling restores only
complete checkpoints, so an upload cut short (a killed job) is never taken for a checkpoint. Staging
directories (``*.partial``) never leave the machine. A checkpoint pruned here (``keep_last``) is
removed there too. Other files are copied when their size differs.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from olmocr.errors import UserError
from olmocr.faults import Unreachable, gist
from olmocr.utils.io import STORAGE_WAIT_S, filesystem

MARKERS = ("trainer_state.pt", "trainer_state.json")
# In every checkpoint: the run's best eval when it was written (metric, step, value; checkpoint.keep_best).
BEST = "best.json"
CHECKPOINTS = "checkpoints"


def _is_staging(rel: str) -> bool:
    return any(part.endswith(".partial") for part in rel.split("/"))


def _checkpoint_of(rel: str) -> str | None:
    """``checkpoints/<name>`` for a path inside a checkpoint directory, else None."""
    parts = rel.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 and parts[0] == CHECKPOINTS else None


def _local_files(root: str) -> dict[str, str]:
    out = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            if not _is_staging(rel):
                out[rel] = path
    return out


def _complete(names: set[str]) -> bool:
    return any(marker in names for marker in MARKERS)


def push(src: str, dst: str) -> tuple[int, int]:
    """Copy ``src`` out to ``dst`` by the rules above; returns (files copied, files left as they were)."""
    if not os.path.isdir(src):
        raise UserError(f"sync: {src} is not a folder")
    fs, dst = filesystem(dst), dst.rstrip("/")
    local = _local_files(src)
    by_checkpoint: dict[str, list[str]] = {}
    for rel in local:
        checkpoint = _checkpoint_of(rel)
        if checkpoint is not None:
            by_checkpoint.setdefault(checkpoint, []).append(rel)
    copied = unchanged = 0

    def put(rel: str) -> None:
        target = f"{dst}/{rel}"
        fs.makedirs(os.path.dirname(target), exist_ok=True)
        fs.put_file(local[rel], target)

    for rel, path in local.items():
        if _checkpoint_of(rel) is not None:
            continue
        try:
            if fs.size(f"{dst}/{rel}") == os.path.getsize(path):
                unchanged += 1
                continue
        except FileNotFoundError:
            pass
        put(rel)
        copied += 1
    for checkpoint, files in sorted(by_checkpoint.items()):
        names = {rel.rsplit("/", 1)[1] for rel in files if rel.count("/") == 2}
        if not _complete(names):
            continue  # still being written here
        if any(fs.exists(f"{dst}/{checkpoint}/{marker}") for marker in MARKERS):
            unchanged += len(files)  # complete there: checkpoints do not change
            continue
        for rel in sorted(files, key=lambda r: r.rsplit("/", 1)[1] in MARKERS):  # the marker goes last
            put(rel)
            copied += 1
    try:
        remote = {p.rstrip("/").rsplit("/", 1)[1] for p in fs.ls(f"{dst}/{CHECKPOINTS}", detail=False)}
    except FileNotFoundError:
        remote = set()
    here = {c.split("/", 1)[1] for c in by_checkpoint}
    for gone in sorted(remote - here):
        if here:  # pruned here, by keep_last, after a newer one was written
            fs.rm(f"{dst}/{CHECKPOINTS}/{gone}", recursive=True)
    return copied, unchanged


def pull(src: str, dst: str, wait_s: float = 0.0) -> tuple[int, int]:
    """Restore ``dst`` from ``src`` (nothing there is fine: a first run); only complete checkpoints. A remote
    ``src`` that does not answer is waited out for up to ``wait_s`` at each call (a preempted job that comes
    back in a brownout resumes late, rather than failing or starting over)."""
    fs, src = filesystem(src, wait_s=wait_s), src.rstrip("/")
    try:
        found = fs.find(src, detail=True)
    except FileNotFoundError:
        found = {}
    prefix = src.split("://", 1)[-1].rstrip("/") + "/"
    remote = {path.split("://", 1)[-1][len(prefix):]: info for path, info in found.items()
              if path.split("://", 1)[-1].startswith(prefix) and info.get("type") != "directory"}
    names: dict[str, set[str]] = {}
    for rel in remote:
        checkpoint = _checkpoint_of(rel)
        if checkpoint is not None and rel.count("/") == 2:
            names.setdefault(checkpoint, set()).add(rel.rsplit("/", 1)[1])
    copied = unchanged = 0
    for rel, info in sorted(remote.items()):
        checkpoint = _checkpoint_of(rel)
        if _is_staging(rel) or (checkpoint is not None and not _complete(names.get(checkpoint, set()))):
            continue
        target = os.path.join(dst, *rel.split("/"))
        if os.path.exists(target) and os.path.getsize(target) == info.get("size"):
            unchanged += 1
            continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fs.get_file(f"{src}/{rel}", target + ".download")
        os.replace(target + ".download", target)
        copied += 1
    return copied, unchanged


CHECK = ".olmocr_sync_check"


def check(dst: str, wait_s: float = 0.0) -> None:
    """Write one small object under ``dst`` and remove it, as pushing does (checkpoints written, pruned ones
    removed): a job checks this before its stage starts, so credentials that may read but not write fail it
    at once, not after days of training that no copy kept; storage that does not answer is waited out for up
    to ``wait_s``."""
    import socket

    fs, dst = filesystem(dst, wait_s=wait_s), dst.rstrip("/")
    fs.makedirs(dst, exist_ok=True)
    fs.pipe_file(f"{dst}/{CHECK}", f"{socket.gethostname()} {time.time()}\n".encode())
    fs.rm(f"{dst}/{CHECK}")


def watch(src: str, dst: str, every: float) -> None:
    """Push every ``every`` seconds until SIGTERM/SIGINT, then push once more."""
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.append(True))
    while not stop:
        if os.path.isdir(src):
            try:
                push(src, dst)
            except Exception as exc:  # noqa: BLE001 - a network blip or credentials that expired mid-run must
                # not end the watcher: the next round tries again
                print(f"olmocr sync: push to {dst} failed, trying again in {every:g} s: {gist(exc)}", file=sys.stderr)
        deadline = time.monotonic() + every
        while not stop and time.monotonic() < deadline:
            time.sleep(0.2)
    if os.path.isdir(src):
        copied, unchanged = push(src, dst)
        print(f"push {src} -> {dst}: {copied} copied, {unchanged} unchanged", flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m olmocr.utils.sync", description=__doc__.splitlines()[0])
    parser.add_argument("direction", choices=("push", "pull", "check"))
    parser.add_argument("src")
    parser.add_argument("dst", nargs="?")
    parser.add_argument("--every", type=float, default=None, help="push: repeat every N seconds until stopped")
    parser.add_argument("--wait-s", type=float, default=STORAGE_WAIT_S,
                        help="pull, check: how long remote storage that does not answer is waited out")
    args = parser.parse_args(argv)
    try:
        if args.direction == "check":
            if args.dst is not None or args.every is not None:
                raise UserError("check takes one place (REMOTE) and no --every")
            try:
                check(args.src, args.wait_s)
            except Exception as exc:  # noqa: BLE001 - whatever refused the write, in one line
                said = str(exc) if isinstance(exc, Unreachable) else gist(exc)
                raise OSError(f"cannot write to {args.src} (and remove what was written): {said}") from exc
            return 0
        if args.dst is None:
            raise UserError(f"{args.direction} takes two places (from, to)")
        if args.every is not None:
            if args.direction != "push":
                raise UserError("--every goes with push")
            watch(args.src, args.dst, args.every)
            return 0
        copied, unchanged = (push(args.src, args.dst) if args.direction == "push"
                             else pull(args.src, args.dst, args.wait_s))
    except (ValueError, OSError, Unreachable) as exc:
        sys.stderr.write(f"error: {exc}\n")  # one write: a task's ranks share this stderr (olmocr.cli.say_error)
        return 1
    print(f"{args.direction} {args.src} -> {args.dst}: {copied} copied, {unchanged} unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
