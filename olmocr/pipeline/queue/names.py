"""The names of the queue's objects in a workspace: the one place that spells them (no other module does)."""

from __future__ import annotations

LEGACY_INDEX = "work_index.jsonl.gz"  # the whole index as one object, as workspaces made before parts kept it
INDEX = "index"  # index/<part>.jsonl.gz: the items one addition queued, written once
CLAIMS = "claims"
DONE = "done"
PARTS = "parts"  # parts/<part>.json: the part is finished (compacted), then retired
TOTALS = "totals"  # totals/<part>.<items>.<pages>: a live part's size in its name, so stats lists it, never reads it
PROGRESS = "progress"
CANCELLED = "cancelled"
PART_DIGITS = 12


def part_name(part: int) -> str:
    return f"{INDEX}/{part:0{PART_DIGITS}d}.jsonl.gz"


def part_of(name: str) -> int | None:
    """The part an ``index/`` or ``parts/`` listing's name stands for; None for a name that is not one."""
    stem = name.split(".", 1)[0]
    return int(stem) if len(stem) == PART_DIGITS and stem.isdigit() else None


def summary_name(part: int) -> str:
    return f"{PARTS}/{part:0{PART_DIGITS}d}.json"


def totals_name(part: int, items: int, pages: int) -> str:
    """An empty object whose name holds a live part's totals (written by its adder, removed when it is compacted)."""
    return f"{TOTALS}/{part:0{PART_DIGITS}d}.{items}.{pages}"


def totals_of(name: str) -> tuple[int, int, int] | None:
    """(part, items, pages) of a ``totals/`` listing's name; None for a name that is not one."""
    fields = name.split(".")
    if len(fields) != 3 or not all(f.isdigit() for f in fields) or len(fields[0]) != PART_DIGITS:
        return None
    return int(fields[0]), int(fields[1]), int(fields[2])


def claim_name(item: str) -> str:
    return f"{CLAIMS}/{item}.json"


def done_name(item: str) -> str:
    return f"{DONE}/{item}.json"


def progress_name(item: str) -> str:
    return f"{PROGRESS}/{item}.json"


def cancel_name(item: str) -> str:
    return f"{CANCELLED}/{item}.json"


def ids(names: list[str]) -> set[str]:
    """The item ids of a ``claims/`` or ``done/`` listing."""
    return {n[:-5] for n in names if n.endswith(".json")}
