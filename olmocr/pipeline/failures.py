"""What goes wrong with a work item, by whose fault: the item's own (its processing raised; counted
against it), or something outside it (:class:`Unavailable`, the store, a missing tool: never counted,
tried again later), or cancelled (:class:`Cancelled`: given up, nothing written), or something no item can get past (:class:`StopWork`: the run stops)."""

from __future__ import annotations

from olmocr.formats.pdf import MissingTool
from olmocr.faults import store_errors


class StopWork(RuntimeError):
    """Raised by a processor that cannot go on with any item (its model server is gone): the claim is
    given back without counting a failure against the item, every worker stops, the run fails."""


class Cancelled(RuntimeError):
    """Raised by a processor whose item was cancelled (``cancelled/<item>.json`` in the workspace, as the service
    writes it): the item is given up at once, its result never written."""


class OutputRefused(RuntimeError):
    """The workspace took other writes in the same folder but not one of the item's own outputs (a name too long
    for it, or a name one of the item's other outputs stands in the way of): the item's fault, counted against
    it, never waited out as an outage."""


class Unavailable(RuntimeError):
    """What an item needs is not available now, for a reason outside the item (a PDF's storage, a server
    answering 503, credentials): the item goes back to the queue as it was and is tried again later."""


class ServerFailed(Unavailable):
    """The model server, not the model, failed a page: the item goes back uncounted."""


def transient(exc: BaseException) -> bool:
    """Is ``exc`` a failure from outside the item rather than of the item's own?"""
    return isinstance(exc, (Unavailable, MissingTool, TimeoutError, *store_errors()))
