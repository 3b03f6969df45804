"""python -m olmocr.pipeline.repair workspace=… [check_only=true] — find finished items whose record is
damaged and put exactly those back in the queue.

A workspace is damaged from outside now and then: a disk or a sync tool cuts a file short, a hand edit
leaves a line that is not JSON, a copy loses a file. The queue trusts its done markers, so a damaged item
would stay "done" for ever. This reads every done marker of the index's items and every result they
stand for, and finds:

- a done marker that is not one (not JSON, another item's, fields missing);
- a done item whose ``results/output_<id>.jsonl`` is missing;
- a result that is not what its worker wrote: its size and SHA-1 differ from those its done marker keeps
  (markers written before they kept them: a line that is not a JSON object, or a last line cut short).

Each such item is put back through the queue (``olmocr.pipeline.queue.put_back``: its done marker removed
and its claim made free at once, rewritten only on the tag read so a worker's write is never lost; an item of a
finished part brings its part back to life first); a damaged result is kept as ``damaged/output_<id>.jsonl`` beside the
others and then removed, so nothing reads its torn lines as documents. The same pipeline command then
converts those items, and nothing else. ``check_only=true`` says what it finds and changes nothing.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from omegaconf import DictConfig

import olmocr.pipeline.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.cli import stage

DAMAGED = "damaged"
READ_AT_ONCE = 64  # results read in one request batch: a bound on memory, not on speed


@dataclass
class Damage:
    item: str
    part: int  # the index part that queued it
    why: str
    result: bytes | None = None  # the damaged result, kept aside before it is removed


def _marker(data: bytes, item: str) -> dict | str:
    """The done marker's record, or why it is not one (read as stats reads it: :func:`done_record`)."""
    from olmocr.pipeline.queue import done_record

    read = done_record(data)
    if read is None:
        return f"done marker unreadable ({data[:40]!r})"
    if read["id"] != item:
        return f"done marker names another item ({str(read['id'])[:60]!r})"
    return json.loads(data)


def _result_damage(data: bytes, record: dict) -> str | None:
    """Why the result is not what its worker wrote, or None."""
    if "result_sha1" in record:
        if len(data) != record.get("result_bytes") or hashlib.sha1(data).hexdigest() != record["result_sha1"]:
            return (f"result is not as written ({len(data)} bytes, written {record.get('result_bytes')}; "
                    f"SHA-1 differs)")
        return None
    if data and not data.endswith(b"\n"):
        return "result's last line is cut short"
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        try:
            if not isinstance(json.loads(line), dict):
                raise ValueError("not a JSON object")
        except ValueError:
            return f"result line {number} is not a JSON object"
    return None


def find_damage(workspace) -> tuple[list[Damage], int]:
    """The damaged done items of ``workspace`` (in id order) and how many done items were checked."""
    from olmocr.pipeline.queue import done_items

    done = done_items(workspace)
    damage, readable = [], {}
    for item in sorted(done):
        part, data = done[item]
        record = _marker(data, item)
        if isinstance(record, str):
            damage.append(Damage(item, part, record))
        else:
            readable[item] = record
    ids = list(readable)
    for start in range(0, len(ids), READ_AT_ONCE):
        batch = ids[start:start + READ_AT_ONCE]
        results = workspace.store.read_many([workspace.result_name(i) for i in batch])
        for item in batch:
            data = results.get(workspace.result_name(item))
            why = "result missing" if data is None else _result_damage(data, readable[item])
            if why:
                damage.append(Damage(item, done[item][0], why, data))
    return sorted(damage, key=lambda d: d.item), len(done)


def put_back(workspace, damage: Damage) -> None:
    """The item's damaged result kept aside and removed, then the item put back in the queue (free at once)."""
    from olmocr.pipeline.queue import put_back as free

    if damage.result is not None:
        workspace.store.write(f"{DAMAGED}/output_{damage.item}.jsonl", damage.result)
        workspace.store.delete(workspace.result_name(damage.item))
    free(workspace, damage.item, damage.part, damage.why)


@stage("pipeline_repair")
def run(cfg: DictConfig, output_dir: str | None = None) -> list[str]:
    from olmocr.faults import gist, outside, storage_fault, store_errors
    from olmocr.pipeline import queue
    from olmocr.pipeline.workspace import Workspace
    from olmocr.utils.io import Access

    try:
        workspace = Workspace(cfg.workspace, Access(**cfg.workspace_access))
        queue.check(workspace)
        damage, checked = find_damage(workspace)
        for found in damage:
            print(f"damaged  {found.item}: {found.why}")
            if not cfg.check_only:
                put_back(workspace, found)
    except store_errors() as exc:
        raise storage_fault(exc, f"workspace {cfg.workspace}: {outside(exc) or gist(exc)}") from exc
    if not damage:
        print(f"{checked} done item(s) of {cfg.workspace} checked: none damaged")
    elif cfg.check_only:
        print(f"{checked} done item(s) of {cfg.workspace} checked: {len(damage)} damaged (check_only=true: nothing "
              "changed; run without it to put them back in the queue)")
    else:
        print(f"{checked} done item(s) of {cfg.workspace} checked: {len(damage)} damaged, back in the queue (their "
              f"results kept in {DAMAGED}/); the same pipeline command converts them")
    return [found.item for found in damage]


if __name__ == "__main__":
    run.main()
