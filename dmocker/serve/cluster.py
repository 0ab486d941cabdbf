"""The live cluster on an asyncio loop: the wall clock that moves a
:class:`~dmocker.replay.live.LiveCluster`, and a stream of tokens per request for the HTTP front.

One task (:meth:`ServeCluster.run`) sleeps until the cluster's next due time or until a request
arrives or leaves, then advances the cluster to the wall clock; what the cluster reports during
that call (tokens, ends) goes to the requests' streams, stamped with the cluster's times.  Time
is the loop's monotonic clock in ms since start: the cluster runs in real time (its engines'
``speedup_ratio`` shortens every pass, as Dynamo's mocker does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from dmocker.engines.hashing import block_hashes_from_tokens
from dmocker.replay.collector import TerminalStatus
from dmocker.replay.live import LiveCluster

__all__ = ["End", "RequestEnded", "RequestStream", "ServeCluster", "Sinks", "prompt_hash_ids"]


@dataclass(frozen=True, slots=True)
class End:
    """A request left the cluster: how, and when (cluster ms)."""

    status: TerminalStatus
    t_ms: float


class RequestEnded(LookupError):
    """What a wait for a request's held KV raises when the request ended first."""

    def __init__(self, request_id: int, end: End) -> None:
        super().__init__(f"request {request_id} ended {end.status.label} before its KV was held")
        self.end = end


class RequestStream:
    """What the front reads of one request: token times (cluster ms) as they come, then an
    :class:`End`; and, for a prefill worker's answer, when its source KV came to be held."""

    __slots__ = ("request_id", "queue", "ended", "held")

    def __init__(self, request_id: int) -> None:
        self.request_id = request_id
        self.queue: asyncio.Queue[float | End] = asyncio.Queue()
        self.ended = False
        self.held: asyncio.Future[float] = asyncio.get_running_loop().create_future()


@dataclass(frozen=True)
class Sinks:
    """Where the cluster's reports go (the arguments :class:`LiveCluster` takes)."""

    on_tokens: Callable[[list[int], float], None]
    on_end: Callable[[int, TerminalStatus, float], None]
    on_held: Callable[[int, float], None]


def prompt_hash_ids(token_ids: tuple[int, ...], block_size: int) -> tuple[int, ...]:
    """One id per ``block_size`` tokens of a prompt (the partial last block included), equal for
    equal prefixes: the trace ids the cluster derives its prefix-cache hashes from."""
    full = block_hashes_from_tokens(token_ids, block_size)
    return full + ((0,) if len(token_ids) % block_size else ())


class ServeCluster:
    """A :class:`LiveCluster` moved by the loop's clock (module docstring)."""

    def __init__(self, make: Callable[[Sinks], LiveCluster], clock: Callable[[], float]) -> None:
        """``make(sinks)`` builds the cluster; ``clock()`` is the loop's time in s."""
        self._clock = clock
        self._t0 = clock()
        self.cluster = make(Sinks(self._on_tokens, self._on_end, self._on_held))
        self.block_size = self.cluster.runtime.handoffs.block_size
        self.streams: dict[int, RequestStream] = {}
        #: called with a request's id when it has left the cluster (after its stream's End)
        self.end_listeners: list[Callable[[int], None]] = []
        self._wake = asyncio.Event()
        self._stopping = False

    def now_ms(self) -> float:
        return (self._clock() - self._t0) * 1000.0

    def submit(self, token_ids: tuple[int, ...], max_tokens: int, prefill_worker: int | None = None) -> RequestStream:
        """A request arrives now (at ``prefill_worker`` of a pinned cluster); its stream.
        Raises LiveError for one the cluster cannot take."""
        now = self._now()
        rid = self.cluster.submit(len(token_ids), max_tokens, prompt_hash_ids(token_ids, self.block_size), now,
                                  prefill_worker)
        stream = self.streams[rid] = RequestStream(rid)
        self._wake.set()
        return stream

    def stream_of(self, request_id: int) -> RequestStream | None:
        """The stream of a request still in the cluster."""
        return self.streams.get(request_id)

    def attach_prefill(self, stream: RequestStream, worker: int) -> bool:
        """A pinned cluster: the request's prefill request came to ``worker`` (see LiveCluster)."""
        ok = self.cluster.attach_prefill(stream.request_id, worker, self._now())
        self._wake.set()
        return ok

    def attach_decode(self, stream: RequestStream, worker: int, max_tokens: int) -> bool:
        """A pinned cluster: the request's decode request came to ``worker`` (see LiveCluster)."""
        ok = self.cluster.attach_decode(stream.request_id, worker, self._now(), max_tokens)
        self._wake.set()
        return ok

    def cancel(self, stream: RequestStream) -> None:
        """The client went away: cancel its request (nothing if it ended)."""
        if stream.ended or self._stopping:
            return
        self.cluster.cancel(stream.request_id, self._now())
        self._wake.set()

    def _now(self) -> float:
        return max(self.now_ms(), self.cluster.now_ms)

    async def run(self) -> None:
        """Advance the cluster with the clock until :meth:`stop`."""
        cluster = self.cluster
        while not self._stopping:
            due = cluster.next_due_ms()
            wait = None if due is None else (due - self.now_ms()) / 1000.0
            if wait is None or wait > 0:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), wait)
                except asyncio.TimeoutError:
                    pass
            if self._stopping:
                break
            cluster.advance(max(self.now_ms(), cluster.now_ms))
            await asyncio.sleep(0)  # let the streams write what this step produced

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()

    # ------------------------------------------------------------------ the cluster's callbacks

    def _on_tokens(self, ids: list[int], t_ms: float) -> None:
        streams = self.streams
        for rid in ids:
            stream = streams.get(rid)
            if stream is not None:
                stream.queue.put_nowait(t_ms)

    def _on_end(self, rid: int, status: TerminalStatus, t_ms: float) -> None:
        stream = self.streams.pop(rid, None)
        if stream is not None:
            stream.ended = True
            stream.queue.put_nowait(End(status, t_ms))
            if not stream.held.done():
                stream.held.set_exception(RequestEnded(rid, End(status, t_ms)))
                stream.held.exception()  # (retrieved: a request nobody waits on logs nothing)
        for listener in self.end_listeners:
            listener(rid)

    def _on_held(self, rid: int, t_ms: float) -> None:
        stream = self.streams.get(rid)
        if stream is not None and not stream.held.done():
            stream.held.set_result(t_ms)
