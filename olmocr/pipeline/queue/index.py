"""The work index: parts that are only ever added, each written once.

Each addition writes new parts, ``index/<part>.jsonl.gz`` (at most ``ITEMS_PER_PART`` items each: id, PDFs,
estimated pages), each created only if absent at the number after the highest part there is; a writer that loses
that race to another machine reads the part it lost to (its PDFs are queued now) and queues the rest from the next
number. A writer creates part ``n + 1`` only once it has seen part ``n``, so parts appear in order, and a reader that
lists the names after the last it read (one request for a thousand new parts) never skips one. Adding N items costs
O(N) whatever is queued already; a reader keeps what it has read, reads each part once, and a worker reads a part
only when it needs its items (the lowest live parts first), so what it reads on joining is a part, not the index. A
workspace made before parts kept its whole index in ``work_index.jsonl.gz``: that is part 0, read as it is and never
written again."""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import logging
import random
import time
from dataclasses import dataclass, field

from olmocr.errors import UserError
from olmocr.pipeline.inputs import group, sample_page_counts
from olmocr.pipeline.queue.names import INDEX, LEGACY_INDEX, part_name, part_of, totals_name
from olmocr.utils.io import Access

log = logging.getLogger("olmocr.pipeline")


@dataclass(frozen=True)
class Item:
    id: str
    pdfs: tuple[str, ...]
    pages: int  # estimated when the item was added
    part: int = 0  # the index part that queued it (0: the whole index of a workspace made before parts)


def of(item: Item) -> dict:
    """What a claim says of its item, so that stats need not read the index for it: its part, pages, PDFs."""
    return {"part": item.part, "pages": item.pages, "pdfs": len(item.pdfs)}


def item_id(paths) -> str:
    """The SHA-1 of the sorted PDF paths: the same PDFs always make the same item."""
    return hashlib.sha1("\n".join(sorted(paths)).encode()).hexdigest()


def _decode(data: bytes, part: int, url: str) -> list[Item]:
    try:
        lines = gzip.decompress(data).decode("utf-8").splitlines()
        return [Item(row["id"], tuple(row["pdfs"]), int(row["pages"]), part) for row in map(json.loads, lines)]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{url}: not a work index ({exc})") from None


def _encode(items: list[Item]) -> bytes:
    return gzip.compress("".join(json.dumps({"id": i.id, "pdfs": list(i.pdfs), "pages": i.pages}) + "\n"
                                 for i in items).encode("utf-8"))


ITEMS_PER_PART = 1000  # an addition of more items writes consecutive parts of this many (the last fewer)


@dataclass
class Index:
    """What a reader has read of a workspace's index. :meth:`refresh` lists the parts added since its last look and
    reads them (``read=False``: lists them only, for :meth:`load` to read when they are needed); a part in ``skip``
    (finished: its summary says all a reader needs) is listed but not read. With ``pdfs``, the PDF paths of every
    part read are kept (what an adder checks new PDFs against); with ``names_only``, parts are listed and none read
    (an adder of PDFs known new: where the next part goes is all it needs)."""

    store: object
    pdfs: set[str] | None = None
    names_only: bool = False
    parts: dict[int, list[Item]] = field(default_factory=dict)
    top: int = 0  # the highest part listed
    last: str = ""  # the last name listed in index/
    legacy: bool | None = None  # whether part 0 exists (None: not looked yet)
    listed: bool = False  # whether the parts have been listed once
    read_bytes: int = 0  # index bytes read so far (what a reader joining late pays)

    def refresh(self, skip=frozenset(), read: bool = True) -> list[int]:
        """List the parts added since the last look (reading them, with ``read``); the numbers of those new and not
        in ``skip``, in order."""
        new, self.listed = [], True
        if self.legacy is None and not self.names_only:
            self.legacy = self.store.exists(LEGACY_INDEX)
            if self.legacy and 0 not in skip:
                new.append(0)
        for name in self.store.list_after(INDEX, self.last):
            part = part_of(name)
            if not part:  # not a part's name (part 0 is the old whole index, never in index/)
                continue
            self.last, self.top = name, max(self.top, part)
            if part not in skip and not self.names_only:
                new.append(part)
        if read:
            new = [part for part in new if self.load(part) is not None]
        return new

    def load(self, part: int) -> list[Item] | None:
        """Read ``part`` (once: a part is never written again); None when it is gone (retired since it was
        listed: finished, nothing to read)."""
        if part in self.parts:
            return self.parts[part]
        name = LEGACY_INDEX if part == 0 else part_name(part)
        found = self.store.read(name)
        if found is None:
            return None
        self._keep(part, _decode(found.data, part, self.store.url(name)), len(found.data))
        return self.parts[part]

    def _keep(self, part: int, items: list[Item], size: int) -> None:
        self.parts[part] = items
        self.read_bytes += size
        if self.pdfs is not None:
            self.pdfs.update(p for item in items for p in item.pdfs)

    def forget(self, part: int) -> None:
        """Drop a part's items (it is finished): a reader's memory stays bounded by live work."""
        self.parts.pop(part, None)

    def items(self) -> list[Item]:
        return [item for part in sorted(self.parts) for item in self.parts[part]]

    def __len__(self) -> int:
        return sum(len(items) for items in self.parts.values())


def items(workspace) -> list[Item]:
    """Every item of ``workspace`` whose part is still there, in the order they were queued."""
    index = Index(workspace.store)
    index.refresh()
    return index.items()


def queued_anything(workspace) -> bool:
    """Whether anything was ever queued in ``workspace``: one listing (and one look for a workspace made before
    parts), nothing read."""
    return workspace.store.exists(LEGACY_INDEX) or bool(workspace.store.list_after(INDEX))


def check(workspace, writable: bool = False) -> None:
    """That ``workspace`` has work and, with ``writable``, that this process can write to it: UserError saying what
    is wrong, before a server starts or an item is claimed. The store's own errors pass through."""
    if not queued_anything(workspace):
        workspace.store.confirm_root()
        raise UserError(f"workspace: {workspace.root} has no work index (add PDFs: python -m olmocr.pipeline "
                        f"workspace={workspace.root} pdfs=[…])")
    if writable:
        workspace.check_writable()


@dataclass
class Added:
    """What one ``add`` did."""

    pdfs_new: int
    pdfs_known: int
    items_new: int
    items_total: int  # items in the parts the adder has read (every part, for an adder that read them all)
    pages_estimated: int  # of the new items
    sampled: int
    unreadable_in_sample: int
    attempts: int  # index parts tried (more than one: another machine added at the same time)
    items: list[Item] = field(default_factory=list)  # the new ones


def _write_totals(store, part: int, chunk: list[Item], wait_out) -> None:
    """The new part's totals, in a name stats lists (so a first look reads no index part). The part is queued
    already: a store that refuses this is said, and stats reads that part instead."""
    from olmocr.faults import store_errors

    try:
        wait_out(functools.partial(store.write, totals_name(part, len(chunk), sum(i.pages for i in chunk)), b""))
    except store_errors() as exc:
        log.warning("part %d is queued, but its totals were not written (%s): pipeline.stats reads the part", part, exc)


def add(workspace, pdfs: list[str], pages_per_group: int = 500, sample: int = 100, seed: int = 0,
        max_attempts: int = 50, pdf_access: Access | None = None, wait_out=None, index: Index | None = None,
        unique: bool = False) -> Added:
    """Queue the PDFs not queued yet as new index parts (of at most ``ITEMS_PER_PART`` items), grouped into items of about ``pages_per_group`` pages
    (page counts sampled from PDFs read with ``pdf_access``). ``wait_out(call)``: each read and write of the index
    through it (a worker's patience with a store that does not answer); the PDFs are sampled once. ``index``: an
    adder's own, kept between additions so that each reads only the parts added since. ``unique``: the PDFs are
    known never to have been queued (a service's uploads, each named by its job): the parts are listed, not read,
    so an addition costs the same at the millionth part as at the first.

    Two machines adding at once both keep their PDFs (the one that loses a part number reads the winner's part and
    queues what is left in the next), and adding the same PDFs twice changes nothing."""
    if pages_per_group < 1:
        raise UserError(f"pages_per_group: must be at least 1, got {pages_per_group}")
    if sample < 0:
        raise UserError(f"sample: must be 0 or more (PDFs whose pages are counted to size the items), got {sample}")
    if index is None:
        index = Index(workspace.store, names_only=True) if unique else Index(workspace.store, pdfs=set())
    known = set() if unique else index.pdfs
    if known is None:
        raise ValueError("add needs an Index that keeps the PDFs it read (Index(store, pdfs=set())) or unique=True")
    counts: dict[str, int | None] | None = None
    rng = random.Random()
    wait_out = wait_out or (lambda call: call())
    written: list[Item] = []  # by this addition, over its attempts
    for attempt in range(1, max_attempts + 1):
        # An adder of PDFs known new lists the parts once, and again only when a number it tried was taken; else it
        # writes the number after its last, so an addition is one request, not a listing that grows with the parts
        # (a local folder lists every name).
        if not (index.names_only and index.listed):
            wait_out(index.refresh)
        ours = {p for item in written for p in item.pdfs}
        new = list(dict.fromkeys(p for p in pdfs if p not in known and p not in ours))
        if new and counts is None:  # sampled once: the PDFs do not change between attempts
            counts = sample_page_counts(new, sample, seed, access=pdf_access)
        groups = [Item(item_id(paths), tuple(paths), pages) for paths, pages in group(new, counts, pages_per_group)
                  ] if new else []
        for at in range(0, len(groups), ITEMS_PER_PART):
            part = index.top + 1
            chunk = [Item(i.id, i.pdfs, i.pages, part) for i in groups[at:at + ITEMS_PER_PART]]
            # A create that landed though its answer was lost is refused when tried again: the next attempt
            # reads the part and finds the PDFs queued.
            if wait_out(functools.partial(workspace.store.create, part_name(part), _encode(chunk))) is None:
                index.listed = False  # others added parts since: the next attempt lists what they added
                break  # another machine took that number: read what it queued, queue what is left
            index.top, index.last = part, part_name(part).split("/", 1)[1]
            _write_totals(workspace.store, part, chunk, wait_out)
            if not index.names_only:
                index._keep(part, chunk, 0)
            written += chunk
        else:
            ours = {p for item in written for p in item.pdfs}
            sampled = [p for p in counts or {} if p in ours]
            return Added(len(ours), len(pdfs) - len(ours), len(written), len(index), sum(i.pages for i in written),
                         len(sampled), sum(1 for p in sampled if counts[p] is None), attempt, written)
        time.sleep(rng.uniform(0.01, 0.05) * min(attempt, 10))  # another machine took that number: read it, go on
    raise RuntimeError(f"{workspace.store.url(INDEX)}: still changing after {max_attempts} attempts to add")
