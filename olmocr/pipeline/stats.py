"""python -m olmocr.pipeline.stats workspace=… — how far a workspace is (local folder or s3://).

Items total / done / being worked on / claims expired (their worker died; the next worker takes them
over) / given up / retired; documents, pages, fallback pages and tokens of the finished items; throughput over the
whole run and over the last ``window_min`` minutes; the projected finish at the recent rate. Reads what the queue's
survey reads (olmocr.pipeline.queue.survey: the live parts' index, claims and done markers, and each finished part's
summary; never the results), each done marker and summary once: what it says is kept in ``<paths.cache>/stats/``,
so a look at a large workspace lists them and reads only those written since the last look.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter

from omegaconf import DictConfig

import olmocr.pipeline.schema  # noqa: F401 - puts this stage's schemas in Hydra's ConfigStore
from olmocr.cli import stage
from olmocr.errors import UserError

log = logging.getLogger("olmocr.pipeline.stats")


def _rate(records: list[dict], key: str, since: float | None = None, now: float | None = None) -> float | None:
    """``key`` per second: over the whole run, or (``since``) over the records finished since then, per
    second of the window that the run has been going for."""
    chosen = [r for r in records if since is None or r["finished"] >= since]
    if not chosen:
        return None
    total = sum(r["counts"].get(key, 0) for r in chosen) if key != "items" else len(chosen)
    first = min(r["claimed"] for r in records)
    span = max(r["finished"] for r in chosen) - first if since is None else now - max(since, first)
    return total / span if span > 0 else None


def workspace_stats(workspace, window_min: float = 15.0, now: float | None = None,
                    cache_dir: str | None = None) -> dict:
    """The figures of ``workspace`` from the queue's survey (index parts, done markers and summaries read are
    remembered in ``cache_dir``)."""
    from olmocr.pipeline.queue import survey

    now = time.time() if now is None else now
    seen = survey(workspace, cache_dir)
    found = seen.done
    live = sum(t["items"] for t in seen.parts.values())
    done = set(found)
    records = [record for record in found.values() if record is not None]
    unreadable = len(found) - len(records)
    claims, given_up, ended = Counter(), [], 0  # ended: pages of items given up or cancelled, none left to convert
    for item, claim in seen.claims.items():  # a damaged claim is as good as expired: the next worker replaces it
        state = ("cancelled" if claim.get("cancelled") else "given_up" if claim.get("given_up")
                 else "active" if claim.get("expires", 0.0) > now
                 else "retrying" if claim.get("retry_at", 0.0) > now else "expired")
        claims[state] += 1
        if state in ("given_up", "cancelled"):
            ended += claim.get("pages") or 0
        if state == "given_up":
            given_up.append({"item": item, "pdfs": claim.get("pdfs"), "failures": claim.get("failures"),
                             "error": claim.get("error")})
    counts = Counter()
    for record in records:
        counts.update(record["counts"])
    estimated_done = live_done = sum(r.get("pages_estimated") or 0 for r in records)
    finished = {"items": 0, "done": 0, "cancelled": 0, "failed": 0}
    retired = {"items": 0, "done": 0, "cancelled": 0, "failed": 0}
    for summary in seen.summaries.values():
        into = retired if summary["retired"] else finished
        into["items"] += summary["items"]
        into["done"] += summary["done_items"]
        into["cancelled"] += summary["cancelled_items"]
        into["failed"] += summary.get("failed_items", 0)  # given up, then compacted by retire_item
        if summary["retired"]:
            counts.update(summary["counts"])
        else:
            records += summary["done"]
            for record in summary["done"]:
                counts.update(record["counts"])
                estimated_done += record.get("pages_estimated") or 0
    remaining = max(sum(t["pages"] for t in seen.parts.values()) - live_done - ended, 0)
    # Item sizes were estimated from a sample; finished items say how far off the estimate runs.
    if estimated_done and counts.get("pages"):
        remaining = remaining * counts["pages"] / estimated_done
    overall = _rate(records, "pages")
    recent = _rate(records, "pages", since=now - 60 * window_min, now=now)
    rate = recent or overall
    total = live + finished["items"] + retired["items"]
    return {
        "workspace": workspace.root, "items": total, "done": len(done) + finished["done"] + retired["done"],
        "active": claims["active"], "expired": claims["expired"], "retrying": claims["retrying"],
        "given_up": claims["given_up"] + finished["failed"], "cancelled": claims["cancelled"] + finished["cancelled"] + retired["cancelled"],
        "given_up_items": sorted(given_up, key=lambda g: g["item"]), "retired": retired["items"],
        "finished_parts": sum(1 for s in seen.summaries.values() if not s["retired"]),
        "live_items": live,
        "waiting": live - len(done) - sum(claims.values()),
        "unreadable_done_markers": unreadable + seen.unreadable_summaries, "unreadable_index_parts": seen.unreadable_parts,
        "counts": dict(counts), "pages_remaining_estimated": round(remaining),
        "pages_per_s": overall, "pages_per_s_recent": recent, "items_per_s": _rate(records, "items"),
        "projected_finish_s": (remaining / rate) if rate and remaining else (0.0 if not remaining else None),
        "window_min": window_min,
    }


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown (no throughput yet)"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m{rest % 60:02d}s"


GIVEN_UP_LISTED = 10


def _by_reason(counts: dict, kind: str, label: str) -> str:
    """``<kind>_documents`` and its ``<kind>_<reason>`` counts, most frequent first."""
    reasons = sorted(((k.removeprefix(f"{kind}_"), v) for k, v in counts.items()
                      if k.startswith(f"{kind}_") and k != f"{kind}_documents"), key=lambda kv: (-kv[1], kv[0]))
    detail = f" ({', '.join(f'{reason} {n}' for reason, n in reasons)})" if reasons else ""
    return f"{counts.get(f'{kind}_documents', 0)} {label}{detail}"


def describe(stats: dict) -> str:
    def rate(value):
        return "-" if value is None else f"{value:.2f}"

    c = stats["counts"]
    lines = [
        f"workspace  {stats['workspace']}",
        f"items      {stats['items']} total: {stats['done']} done, {stats['active']} being worked on, "
        f"{stats['expired']} claims expired, {stats['retrying']} waiting to be tried again after a failure, "
        f"{stats['given_up']} given up, {stats['cancelled']} cancelled, {stats['waiting']} waiting"
        + (f"; {stats['retired']} of the done and cancelled retired (what they left removed)" if stats["retired"] else ""),
        f"documents  {c.get('documents', 0)} done, {_by_reason(c, 'bad', 'unreadable')}, "
        f"{c.get('dropped_documents', 0)} dropped (too many fallback pages), {_by_reason(c, 'filtered', 'filtered')}",
        f"pages      {c.get('pages', 0)} done, {c.get('fallback_pages', 0)} from the text layer (fallback"
        + (f"; {c['refused_pages']} of them refused by the model server" if c.get("refused_pages") else "")
        + f"), ~{stats['pages_remaining_estimated']} to go",
        f"tokens     {c.get('input_tokens', 0)} in, {c.get('output_tokens', 0)} out",
        f"rate       {rate(stats['pages_per_s'])} pages/s overall, {rate(stats['pages_per_s_recent'])} pages/s "
        f"over the last {stats['window_min']:g} min",
        "finish     nothing left: every item is done, given up or cancelled"
        if stats["done"] + stats["given_up"] + stats["cancelled"] >= stats["items"] else f"finish     {_duration(stats['projected_finish_s'])}",
    ]
    listed = [f"{folder}/ ({what})" for folder, what, n in (
        ("bad", "unreadable and dropped", c.get("bad_documents", 0) + c.get("dropped_documents", 0)),
        ("filtered", "filtered", c.get("filtered_documents", 0))) if n]
    if listed:
        lines.append(f"listed     each document with its reason in {stats['workspace'].rstrip('/')}/"
                     f"{' and '.join(listed)}")
    for row in stats["given_up_items"][:GIVEN_UP_LISTED]:
        pdfs = "?" if row["pdfs"] is None else row["pdfs"]  # a claim written before claims said their item's size
        lines.append(f"given up   {row['item']} ({pdfs} PDFs, {row['failures']} failures): {row['error']}")
    if stats["given_up"]:
        more = stats["given_up"] - GIVEN_UP_LISTED
        lines.append(f"           {f'…and {more} more (json=true lists them all); ' if more > 0 else ''}put them back "
                     f"with python -m olmocr.pipeline.requeue workspace={stats['workspace']}")
    if stats["unreadable_done_markers"]:
        lines.append(f"warning    {stats['unreadable_done_markers']} done markers could not be read: python -m "
                     f"olmocr.pipeline.repair workspace={stats['workspace']} puts their items back in the queue")
    return "\n".join(lines)


@stage("pipeline_stats")
def run(cfg: DictConfig, output_dir: str | None = None) -> dict:
    from olmocr.faults import gist, outside, storage_fault, store_errors
    from olmocr.pipeline.workspace import Workspace
    from olmocr.utils.io import Access

    try:
        workspace = Workspace(cfg.workspace, Access(**cfg.workspace_access))
        stats = workspace_stats(workspace, window_min=cfg.window_min, cache_dir=os.path.join(cfg.paths.cache, "stats"))
        if not stats["items"]:
            workspace.store.confirm_root()
    except store_errors() as exc:
        raise storage_fault(exc, f"workspace {cfg.workspace}: {outside(exc) or gist(exc)}") from exc
    if not stats["items"]:
        raise UserError(f"workspace: {cfg.workspace} has no work index (add PDFs with python -m olmocr.pipeline "
                        "workspace=… pdfs=[…])")
    print(json.dumps(stats, indent=2) if cfg.json else describe(stats))
    return stats


if __name__ == "__main__":
    run.main()
