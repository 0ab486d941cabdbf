"""The requests in flight and the actions their coordinators issued, waiting to run.

Why two small objects: the live-request table is read by almost every part of the runtime (a
lifecycle event, a pass admission or a fault names a request by id), and the action queue is
written by the coordinator boundary and drained by the runtime's loop; neither knows what the
other parts do with them.
"""

from __future__ import annotations

from dmocker.handoff import IssuedAction

from ..request_state import Queued, RequestState

__all__ = ["RequestTable", "ActionQueue"]


class RequestTable:
    """Requests that arrived and are not retired yet.

    ``in_flight`` counts those whose decode (or handoff) has not ended; a request stays ``live``
    after that until its coordinator completes.  ``stale_transfers`` counts transfer
    completions still scheduled for requests whose decode ended while the transfer was pending
    (the loop drops them when it meets them).
    """

    __slots__ = ("live", "in_flight", "stale_transfers")

    def __init__(self) -> None:
        self.live: dict[int, RequestState] = {}
        self.in_flight = 0
        self.stale_transfers = 0

    def ids(self) -> list[int]:
        return sorted(self.live)


class ActionQueue:
    """Issued actions to execute, first in first out.

    A list read from ``head``: the loop takes items while new ones are appended behind them,
    then clears the list once it caught up.
    """

    __slots__ = ("items", "head")

    def __init__(self) -> None:
        self.items: list[Queued] = []
        self.head = 0

    def add(self, req: RequestState, actions: list[IssuedAction]) -> None:
        """Queue what a coordinator issued for ``req``."""
        req.queued += len(actions)
        items = self.items
        for a in actions:
            items.append((req, a))

    def extend(self, items: list[Queued]) -> None:
        """Queue actions that waited elsewhere (their requests already count them)."""
        self.items.extend(items)

    def drop(self, req: RequestState) -> None:
        """Forget ``req``'s queued actions (including those the loop already took)."""
        items = self.items
        if self.head:
            del items[:self.head]
            self.head = 0
        items[:] = [item for item in items if item[0] is not req]
