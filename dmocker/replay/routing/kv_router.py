"""The reference's KV-aware router for one pool: prefix overlap credit against active load.

Behaviour of Dynamo 1.6.1's offline ``kv_router`` mode (``ai-dynamo/dynamo``
``lib/kv-router/src/scheduling/selector/default.rs``, ``lib/kv-router/src/sequences/``,
``lib/mocker/src/replay/offline/components/router.rs``):

* **Cost** of a worker ``w`` for a request of ``isl`` prompt tokens:
  ``prefill_load_scale * max(0, raw_prefill_blocks - overlap_credit) + decode_blocks
  + decode_active_request_weight * active_requests`` with
  ``raw_prefill_blocks = (prefill tokens in flight on w + isl) / block_size`` and
  ``overlap_credit = overlap_score_credit * decay * (leading prompt blocks w caches)``;
  ``decay = 1 / (1 + overlap_score_credit_decay * excess / request_blocks)`` where ``excess`` is
  w's in-flight prefill blocks above the least-loaded worker's (1 when the decay is 0).
* **Prefill pool**: overlap from the prefix index fed by the prefill engines' KV events; a
  routed request adds its uncached prompt tokens to its worker's in-flight prefill until
  prefill completes (or it is freed); no active-block tracking, so ``decode_blocks`` is 0.
* **Decode pool** (the reference's forced overrides): no overlap credit, no KV-reuse
  assumption, no prefill-token tracking; ``decode_blocks`` counts the full prompt blocks of
  the requests active on the worker, so the cost is decode load only.
* **Choice**: temperature 0 picks the cheapest worker; ties are broken uniformly at random
  (reservoir sampling over workers in index order).  Temperature > 0 samples
  ``p_i ~ exp(-(c_i - c_min) / ((c_max - c_min) * T))``, uniform when all costs are equal.
  The reference draws from an unseeded generator; here it is ``random.Random`` seeded from the
  replay seed and the pool, so reruns are byte-identical.
* **Queue** (``router_queue_threshold`` set): an arrival is held while a backlog exists or every
  worker has more than ``threshold x max_num_batched_tokens`` prefill tokens in flight; held
  requests keep the overlaps seen at arrival and are released on prefill completion, free and
  topology change (see :mod:`.queue`).  The decode pool tracks no prefill tokens, so it never
  queues.

Per-request work is O(prompt blocks + workers): nothing scans the cached blocks.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Sequence
from typing import cast

from dmocker.engines.interface import EngineRequest, KvEvent

from .config import RouterConfig
from .kv_index import KvIndex
from .base import NO_ADMISSIONS, Admission, BaseRouter
from .context import Pool, RouterContext
from .queue import RouterQueue

__all__ = ["KvRouter"]

_Held = tuple[EngineRequest, dict[int, int]]


class KvRouter(BaseRouter):
    """One pool's KV-aware router (build one per pool with that pool's :class:`RouterContext`)."""

    def __init__(self, context: RouterContext, config: RouterConfig | None = None) -> None:
        super().__init__(context)
        cfg = (config or RouterConfig()).validate()
        self.config = cfg
        prefill = context.pool is Pool.PREFILL
        self._prefill = prefill
        self._credit = cfg.overlap_score_credit if prefill else 0.0
        self._decay = cfg.overlap_score_credit_decay if prefill else 0.0
        self._scale = cfg.prefill_load_scale
        self._request_weight = cfg.decode_active_request_weight
        self._temperature = cfg.router_temperature
        threshold = cfg.router_queue_threshold
        self._busy_tokens = None if threshold is None else threshold * context.max_num_batched_tokens
        self._lag = cfg.kv_event_lag_ms if prefill else 0.0
        self._bs = context.block_size
        self._rng = random.Random(context.seed * 2 + (0 if prefill else 1))
        self._index = KvIndex()
        self._holdings = self._index.holdings()
        self._seen: set[int] = set()
        self._lagged: deque[tuple[float, int, tuple[KvEvent, ...]]] = deque()
        self._prefill_tokens: dict[int, int] = {}
        self._blocks: dict[int, int] = {}
        self._requests: dict[int, int] = {}
        self._active: dict[int, list[int]] = {}  # request id -> [worker, prefill tokens, blocks]
        self._queue: RouterQueue[_Held] = RouterQueue(cfg.router_queue_policy)
        self._overlap: dict[int, int] = {}
        # The common configuration (no queue, temperature 0) routes through one specialised
        # method per pool (see _route_prefill_fast); the general path stays its plain twin.
        # An aggregated pool's workers also decode: its cost adds their active blocks.
        self._agg = context.aggregated
        self._fast = threshold is None and cfg.router_temperature <= 0.0 and not self._agg

    # ------------------------------------------------------------------ protocol

    @property
    def wants_kv_events(self) -> bool:
        """The prefill pool's router reads the engines' KV events; the decode pool's does not."""
        return self._prefill

    def route(self, request: EngineRequest, now_ms: float) -> int | None:
        if self._lagged:
            self._flush_lagged(now_ms)
        if self._fast:
            if self._prefill:
                return self._route_prefill_fast(request)
            return self._route_decode_fast(request)
        overlaps = self._index.overlaps(request.block_hashes) if self._prefill else {}
        if self._busy_tokens is not None and (len(self._queue) or self._all_busy()):
            best = max((overlaps.get(w, 0) for w in self.workers), default=0)
            uncached = max(0, request.input_length - best * self._bs)
            self._queue.push(request.request_id, (request, overlaps), uncached)
            return None
        return self._admit(request, overlaps)

    def on_kv_events(self, worker: int, events: Sequence[KvEvent], now_ms: float) -> None:
        if self._lag > 0.0:
            self._lagged.append((now_ms + self._lag, worker, tuple(events)))
        else:
            self._index.apply(worker, events)

    def on_prefill_complete(self, request_id: int, now_ms: float) -> Sequence[Admission]:
        entry = self._active.get(request_id)
        if entry is not None and entry[1]:
            self._prefill_tokens[entry[0]] -= entry[1]
            entry[1] = 0
        # Only a router with a threshold ever holds requests.
        return self._drain() if self._busy_tokens is not None and len(self._queue) else NO_ADMISSIONS

    def on_free(self, request_id: int, now_ms: float) -> Sequence[Admission]:
        queued = self._busy_tokens is not None
        if queued and self._queue.remove(request_id):
            return NO_ADMISSIONS
        entry = self._active.pop(request_id, None)
        if entry is None:
            return NO_ADMISSIONS
        worker, tokens, blocks = entry
        if tokens:
            self._prefill_tokens[worker] -= tokens
        if blocks:
            self._blocks[worker] -= blocks
        self._requests[worker] -= 1
        return self._drain() if queued and len(self._queue) else NO_ADMISSIONS

    def add_worker(self, worker: int, now_ms: float) -> Sequence[Admission]:
        if worker in self._seen and worker not in self.workers and not self._requests.get(worker):
            self._index.forget_worker(worker)  # a reused index: the old worker's cache is gone
        self._seen.add(worker)
        self._prefill_tokens.setdefault(worker, 0)
        self._blocks.setdefault(worker, 0)
        self._requests.setdefault(worker, 0)
        super().add_worker(worker, now_ms)
        return self._drain() if len(self._queue) else NO_ADMISSIONS

    def remove_worker(self, worker: int, now_ms: float) -> Sequence[Admission]:
        # Only eligibility changes: in-flight requests on it still complete and free.
        super().remove_worker(worker, now_ms)
        return self._drain() if len(self._queue) and self.workers else NO_ADMISSIONS

    def overlap_tokens(self, request_id: int) -> int:
        """The overlap seen on the chosen worker (read once, right after dispatch)."""
        return self._overlap.pop(request_id, 0)

    # ------------------------------------------------------------------ inspection

    @property
    def pending_count(self) -> int:
        return len(self._queue)

    def prefill_tokens_in_flight(self, worker: int) -> int:
        return self._prefill_tokens.get(worker, 0)

    def active_blocks(self, worker: int) -> int:
        return self._blocks.get(worker, 0)

    def cached_overlaps(self, block_hashes: Sequence[int]) -> dict[int, int]:
        return self._index.overlaps(block_hashes)

    # ------------------------------------------------------------------ fast path

    def _route_prefill_fast(self, request: EngineRequest) -> int:
        """:meth:`KvIndex.overlaps` + :meth:`_admit` + :meth:`_choose` for the prefill pool at
        temperature 0, fused: one pass over the workers walks the prompt against each worker's
        cached hashes, computes its cost and keeps the cheapest (reservoir tie-break: the same
        draws in the same order), with no overlap dict, no cost list and no decode terms.  The
        same float operations in the same order as the plain path, so the choice is identical."""
        workers = self.workers
        if not workers:
            return self._admit(request, {})  # raises the plain path's error
        # The prompt's hashes as the objects the tuple holds (a cast, no copy), for the set
        # lookups below.
        hashes = cast("tuple[object, ...]", request.block_hashes)
        holdings = self._holdings
        first = hashes[0] if hashes else None
        bs = self._bs
        isl = request.input_length
        ptoks = self._prefill_tokens
        nreq = self._requests
        floor = min([ptoks[w] for w in workers]) if self._decay > 0.0 else 0
        request_blocks = max(1, -(-isl // bs))
        rng = self._rng
        best = workers[0]
        best_ov = 0
        best_cost = math.inf
        ties = 0
        for w in workers:
            ov = 0
            held = holdings.get(w)
            if held is not None and first in held:
                for h in hashes:  # leading blocks held
                    if h not in held:
                        break
                    ov += 1
            cost = self._prefill_cost(ptoks[w], isl, ov, floor, request_blocks, nreq[w])
            if cost < best_cost:
                best, best_ov, best_cost, ties = w, ov, cost, 1
            elif cost == best_cost:
                ties += 1
                if rng.randrange(ties) == 0:
                    best, best_ov = w, ov
        cached = min(best_ov * bs, isl)
        tokens = isl - cached
        ptoks[best] += tokens
        nreq[best] += 1
        rid = request.request_id
        self._active[rid] = [best, tokens, 0]
        self._overlap[rid] = cached
        return best

    def _route_decode_fast(self, request: EngineRequest) -> int:
        """:meth:`_admit` + :meth:`_choose` for the decode pool at temperature 0, fused (see
        :meth:`_route_prefill_fast`): the cost is the active blocks plus the request weight."""
        workers = self.workers
        if not workers:
            return self._admit(request, {})  # raises the plain path's error
        blocks = self._blocks
        nreq = self._requests
        best = workers[self._choose([self._decode_cost(blocks[w], nreq[w]) for w in workers])]
        nblocks = request.input_length // self._bs
        blocks[best] += nblocks
        nreq[best] += 1
        self._active[request.request_id] = [best, 0, nblocks]
        return best  # overlap 0: overlap_tokens' default

    # ------------------------------------------------------------------ cost

    def _prefill_cost(self, tokens: int, isl: int, overlap: int, floor: int, request_blocks: int,
                      requests: int) -> float:
        """A prefill worker's cost (the one formula both paths use): ``prefill_load_scale x
        max(0, blocks to prefill - overlap credit)`` plus the request weight, where the credit
        of the ``overlap`` leading blocks it holds decays with its load above the least loaded
        worker (``floor`` tokens in flight; ``request_blocks``: the prompt's blocks)."""
        bs = self._bs
        raw = (tokens + isl) / bs
        if overlap:
            factor = 1.0
            decay = self._decay
            if decay > 0.0:
                factor = 1.0 / (1.0 + decay * ((tokens - floor) / bs) / request_blocks)
            raw -= self._credit * factor * overlap
            if raw < 0.0:
                raw = 0.0
        cost = self._scale * raw
        weight = self._request_weight
        if weight:
            cost += weight * requests
        return cost

    def _decode_cost(self, blocks: int, requests: int) -> float:
        """A decode worker's cost: its active blocks plus the request weight."""
        cost = float(blocks)
        weight = self._request_weight
        if weight:
            cost += weight * requests
        return cost

    # ------------------------------------------------------------------ internals

    def _flush_lagged(self, now_ms: float) -> None:
        lagged = self._lagged
        index = self._index
        while lagged and lagged[0][0] <= now_ms:
            _, worker, events = lagged.popleft()
            index.apply(worker, events)

    def _all_busy(self) -> bool:
        limit = self._busy_tokens
        assert limit is not None
        tokens = self._prefill_tokens
        return all(tokens[w] > limit for w in self.workers)

    def _drain(self) -> list[Admission]:
        out: list[Admission] = []
        queue = self._queue
        while len(queue) and self.workers and not self._all_busy():
            rid, (request, overlaps) = queue.pop()
            out.append((rid, self._admit(request, overlaps)))
        return out

    def _admit(self, request: EngineRequest, overlaps: dict[int, int]) -> int:
        workers = self.workers
        if not workers:
            raise ValueError(f"KV router has no {self.context.pool.value if self.context else ''} worker")
        bs = self._bs
        isl = request.input_length
        ptoks = self._prefill_tokens
        prefill = self._prefill
        blocks = self._blocks
        nreq = self._requests
        floor = min(ptoks[w] for w in workers) if (self._decay > 0.0 and prefill) else 0
        request_blocks = max(1, -(-isl // bs))
        if prefill and self._agg:
            costs = [self._prefill_cost(ptoks[w], isl, overlaps.get(w, 0), floor, request_blocks, nreq[w])
                     + blocks[w] for w in workers]
        elif prefill:
            costs = [self._prefill_cost(ptoks[w], isl, overlaps.get(w, 0), floor, request_blocks, nreq[w])
                     for w in workers]
        else:
            costs = [self._decode_cost(blocks[w], nreq[w]) for w in workers]
        worker = workers[self._choose(costs)]
        ov = overlaps.get(worker, 0)
        cached = min(ov * bs, isl)
        tokens = isl - cached if prefill else 0
        nblocks = isl // bs if (self._agg or not prefill) else 0
        ptoks[worker] += tokens
        blocks[worker] += nblocks
        nreq[worker] += 1
        rid = request.request_id
        self._active[rid] = [worker, tokens, nblocks]
        self._overlap[rid] = cached
        return worker

    def _choose(self, costs: list[float]) -> int:
        if self._temperature <= 0.0:
            best = 0
            best_cost = math.inf
            ties = 0
            rng = self._rng
            for i, c in enumerate(costs):
                if c < best_cost:
                    best, best_cost, ties = i, c, 1
                elif c == best_cost:
                    ties += 1
                    if rng.randrange(ties) == 0:
                        best = i
            return best
        lo = min(costs)
        hi = max(costs)
        if lo == hi:
            weights = [1.0] * len(costs)
        else:
            scale = (hi - lo) * self._temperature
            weights = [math.exp(-(c - lo) / scale) for c in costs]
        total = sum(weights)
        sample = self._rng.random()
        acc = 0.0
        for i, wgt in enumerate(weights):
            acc += wgt / total
            if sample <= acc:
                return i
        return len(costs) - 1
