"""A workspace: the shared place where any number of workers on any number of machines convert documents.

    <workspace>/                       a local folder or s3://bucket/prefix
      work_index.jsonl.gz              the work items: {"id", "pdfs": [...], "pages": estimated}
      claims/<id>.json                 who works on an item and until when (created only if absent,
                                       renewed and taken over only by conditional writes)
      done/<id>.json                   the item is finished: who, when, and its counts (created once)
      results/output_<id>.jsonl        the item's output, written before its done marker
      markdown/…                       optional per-document markdown (page processing), and each
                                       document's blocks (.blocks.json) where the model writes blocks
      filtered/<id>.jsonl              documents work=ocr's filter kept from the model, and why
      bad/<id>.jsonl                   documents work=ocr could not read (bad) or dropped, and why
      progress/<id>.json               pages of an item converted so far, while a worker converts it
      cancelled/<id>.json              the item is cancelled: a worker converting it stops between pages
      workers/<host>_<pid>.json        one per worker process started: where and when (and proof that
                                       it could write here before it claimed anything)

An item's id is the SHA-1 of its sorted PDF paths, so the same PDFs always make the same item.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
import random
import socket
import time
from dataclasses import dataclass

from olmocr.errors import UserError
from olmocr.pipeline.inputs import group, sample_page_counts
from olmocr.pipeline.store import Store, open_store
from olmocr.utils.io import Access

INDEX = "work_index.jsonl.gz"
CLAIMS = "claims"
DONE = "done"
RESULTS = "results"
WORKERS = "workers"
PROGRESS = "progress"
CANCELLED = "cancelled"


@dataclass(frozen=True)
class Item:
    id: str
    pdfs: tuple[str, ...]
    pages: int  # estimated when the item was added


def item_id(paths) -> str:
    return hashlib.sha1("\n".join(sorted(paths)).encode()).hexdigest()


@dataclass
class Added:
    """What one ``add`` did."""

    pdfs_new: int
    pdfs_known: int
    items_new: int
    items_total: int
    pages_estimated: int  # of the new items
    sampled: int
    unreadable_in_sample: int
    attempts: int  # index writes tried (more than one: another machine added at the same time)


class Workspace:
    def __init__(self, root: str, access: Access | None = None, store: Store | None = None):
        self.root = root
        self.store = store or open_store(root, access)

    @staticmethod
    def claim_name(item: str) -> str:
        return f"{CLAIMS}/{item}.json"

    @staticmethod
    def done_name(item: str) -> str:
        return f"{DONE}/{item}.json"

    @staticmethod
    def result_name(item: str) -> str:
        return f"{RESULTS}/output_{item}.jsonl"

    def read_index(self) -> tuple[list[Item], str | None]:
        found = self.store.read(INDEX)
        if found is None:
            return [], None
        try:
            lines = gzip.decompress(found.data).decode("utf-8").splitlines()
            items = [Item(row["id"], tuple(row["pdfs"]), int(row["pages"])) for row in map(json.loads, lines)]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UserError(f"{self.store.url(INDEX)}: not a work index ({exc})") from None
        return items, found.tag

    def items(self) -> list[Item]:
        return self.read_index()[0]

    def check(self, writable: bool = False) -> None:
        """That the workspace has work and, with ``writable``, that this process can write to it (it leaves
        ``workers/<host>_<pid>.json``): UserError saying what is wrong, before a server starts or an item is
        claimed. The store's own errors (no credentials, unreachable) pass through."""
        if not self.items():
            self.store.confirm_root()
            raise UserError(f"workspace: {self.root} has no work index (add PDFs: python -m olmocr.pipeline "
                            f"workspace={self.root} pdfs=[…])")
        if writable:
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

    def add(self, pdfs: list[str], pages_per_group: int = 500, sample: int = 100, seed: int = 0,
            max_attempts: int = 50, pdf_access: Access | None = None, wait_out=None) -> Added:
        """Queue the PDFs not queued yet, grouped into items of about ``pages_per_group`` pages (page counts
        sampled from PDFs read with ``pdf_access``). ``wait_out(call)``: each read and write of the index
        through it (a worker's patience with a store that does not answer); the PDFs are sampled once.

        The index is replaced only if nobody changed it since it was read (created only if absent); on a
        conflict the PDFs are checked against the new index and the write is tried again, so two
        machines adding at once both keep their PDFs, and adding the same PDFs twice changes nothing."""
        if pages_per_group < 1:
            raise UserError(f"pages_per_group: must be at least 1, got {pages_per_group}")
        if sample < 0:
            raise UserError(f"sample: must be 0 or more (PDFs whose pages are counted to size the items), got {sample}")
        counts: dict[str, int | None] | None = None
        rng = random.Random()
        wait_out = wait_out or (lambda call: call())
        for attempt in range(1, max_attempts + 1):
            items, tag = wait_out(self.read_index)
            known = {path for item in items for path in item.pdfs}
            new = [p for p in pdfs if p not in known]
            if not new:
                return Added(0, len(pdfs), 0, len(items), 0, 0, 0, attempt)
            if counts is None:  # sampled once: the PDFs do not change between attempts
                counts = sample_page_counts(new, sample, seed, access=pdf_access)
            groups = [Item(item_id(paths), tuple(paths), pages)
                      for paths, pages in group(new, counts, pages_per_group)]
            body = gzip.compress("".join(json.dumps({"id": i.id, "pdfs": list(i.pdfs), "pages": i.pages}) + "\n"
                                         for i in items + groups).encode("utf-8"))
            # A write that landed though its answer was lost is a conflict when tried again: the next attempt
            # finds the PDFs queued.
            write = (functools.partial(self.store.create, INDEX, body) if tag is None
                     else functools.partial(self.store.replace, INDEX, body, tag))
            written = wait_out(write)
            if written is not None:
                fresh = set(new)
                sampled = [p for p in counts if p in fresh]
                return Added(len(new), len(pdfs) - len(new), len(groups), len(items) + len(groups),
                             sum(i.pages for i in groups), len(sampled),
                             sum(1 for p in sampled if counts[p] is None), attempt)
            time.sleep(rng.uniform(0.05, 0.2) * min(attempt, 10))  # someone else wrote it: read again
        raise RuntimeError(f"{self.store.url(INDEX)}: still changing after {max_attempts} attempts to add")
