"""python -m olmocr.utils.sync SRC DST — copy a run directory to a local or remote (s3://, gs://) prefix.

Cluster jobs call it when they end, also when they fail, so a run's outputs outlive the container.
Files already at the destination with the same size are skipped, so repeated syncs are cheap.
"""

from __future__ import annotations

import os
import sys

from olmocr.utils.io import filesystem


def sync(src: str, dst: str) -> tuple[int, int]:
    """Copy every file under ``src`` to ``dst``; returns (copied, skipped)."""
    if not os.path.isdir(src):
        raise ValueError(f"sync: {src} is not a folder")
    fs = filesystem(dst)
    copied = skipped = 0
    for root, _, files in os.walk(src):
        for name in files:
            local = os.path.join(root, name)
            remote = dst.rstrip("/") + "/" + os.path.relpath(local, src).replace(os.sep, "/")
            try:
                if fs.size(remote) == os.path.getsize(local):
                    skipped += 1
                    continue
            except FileNotFoundError:
                pass
            fs.makedirs(os.path.dirname(remote), exist_ok=True)
            fs.put_file(local, remote)
            copied += 1
    return copied, skipped


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m olmocr.utils.sync SRC DST", file=sys.stderr)
        return 2
    try:
        copied, skipped = sync(*argv)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"synced {argv[0]} -> {argv[1]}: {copied} copied, {skipped} unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
