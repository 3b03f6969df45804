"""A workspace: the shared place where any number of workers on any number of machines convert documents.

    <workspace>/                       a local folder or s3://bucket/prefix
      index/, claims/, done/, parts/,  the work queue's own objects (olmocr.pipeline.queue: only it names them)
      progress/, cancelled/
      results/output_<id>.jsonl        the item's output, written before its done marker
      markdown/…                       optional per-document markdown (page processing), and each
                                       document's blocks (.blocks.json) where the model writes blocks
      pages/output_<id>.jsonl          the item's pages, each with its text (page processing)
      filtered/<id>.jsonl              documents work=ocr's filter kept from the model, and why
      bad/<id>.jsonl                   documents work=ocr could not read (bad) or dropped, and why
      workers/<host>_<pid>.json        one per worker process started: where and when (and proof that
                                       it could write here before it claimed anything)

An item's id is the SHA-1 of its sorted PDF paths, so the same PDFs always make the same item.
"""

from __future__ import annotations

import json
import os
import socket
import time

from olmocr.errors import UserError
from olmocr.pipeline.store import Store, open_store
from olmocr.utils.io import Access

RESULTS = "results"
WORKERS = "workers"


class Workspace:
    def __init__(self, root: str | os.PathLike, access: Access | None = None, store: Store | None = None):
        self.root = root = os.fspath(root)
        self.store = store or open_store(root, access)

    @staticmethod
    def result_name(item: str) -> str:
        return f"{RESULTS}/output_{item}.jsonl"

    def check_writable(self) -> None:
        """That this process can write to the workspace (it leaves ``workers/<host>_<pid>.json``): UserError saying
        what is wrong, before a server starts or an item is claimed. The store's own errors (no credentials,
        unreachable) pass through."""
        name, data = self.sign_in()
        found = self.store.read(name)
        if found is None or found.data != data:
            raise UserError(f"workspace: {self.store.url(name)} did not read back as written")

    def sign_in(self) -> tuple[str, bytes]:
        """Write this process's ``workers/<host>_<pid>.json`` (again): a write that costs the workspace nothing."""
        name = f"{WORKERS}/{socket.gethostname()}_{os.getpid()}.json"
        data = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}).encode()
        self.store.write(name, data)
        return name, data
