"""The work queue of a workspace: the one API through which the worker, the service, stats, requeue and repair read
and change its state. No other module names a queue object.

    <workspace>/
      index/<part>.jsonl.gz     the items one addition queued (id, PDFs, estimated pages), created once (index.py)
      work_index.jsonl.gz       part 0: the whole index of a workspace made before parts, read as it is
      claims/<id>.json          who works on an item and until when (created only if absent, renewed and taken over
                                only by conditional writes; claims.py)
      done/<id>.json            the item is finished: who, when, its counts and the objects it wrote (created once)
      parts/<part>.json         the part is finished: its done records in one object, its claims and done markers
                                removed; once retired, its totals only (parts.py)
      progress/<id>.json        pages of an item converted so far, while a worker converts it
      cancelled/<id>.json       the item is cancelled: a worker converting it stops between pages

What a worker's look, stats and the service read grows with the live parts (not yet finished), not with every item
ever queued: a finished part is one summary a listing names, and a retired one leaves only its totals.
"""

from olmocr.pipeline.queue.claims import Claim, LeaseKeeper, WorkQueue, anything_left, check_queue, worker_name
from olmocr.pipeline.queue.index import ITEMS_PER_PART, Added, Index, Item, add, check, item_id, items, queued_anything
from olmocr.pipeline.queue.parts import Retired, claim_body, retire, retire_item
from olmocr.pipeline.queue.state import ItemState, Waiting, cancel, cancel_asked, item_state, note_progress, requeue
from olmocr.pipeline.queue.state import done_items, put_back, unclaimed
from olmocr.pipeline.queue.survey import Survey, done_record, survey

__all__ = ["ITEMS_PER_PART", "Added", "Claim", "Index", "Item", "ItemState", "LeaseKeeper", "Retired", "Survey", "Waiting",
           "WorkQueue", "add", "anything_left", "cancel", "check", "cancel_asked", "check_queue", "claim_body", "done_items", "done_record",
           "item_id", "item_state", "items", "note_progress", "put_back", "queued_anything", "requeue", "retire", "retire_item", "survey",
           "unclaimed", "worker_name"]
