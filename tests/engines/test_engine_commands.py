"""Random command/pass interleavings on both engines: conservation holds, nothing leaks.

The machine plays a careless driver: it submits, reserves, activates, releases and cancels in
any order the engines must tolerate (unknown ids are NOOP), runs passes in between, and at the
end cancels everything; both workers must then be drained with every block back in the pool.
"""

from __future__ import annotations

import dataclasses

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, precondition

from dmocker.handoff import DestinationReserved, SourceHeld
from dmocker.engines.hashing import block_hashes_from_tokens
from dmocker.engines.interface import (
    CommandEffects,
    CommandResult,
    EngineArgs,
    EngineCommandError,
    EngineRequest,
    WorkerType,
)
from dmocker.engines.registry import engine_names, make_worker

BASE = EngineArgs(block_size=4, num_gpu_blocks=24, max_num_batched_tokens=16, max_num_seqs=3)


class EngineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.engine = "vllm"
        self.p = make_worker(dataclasses.replace(BASE, worker_type=WorkerType.PREFILL))
        self.d = make_worker(dataclasses.replace(BASE, worker_type=WorkerType.DECODE))
        self.reqs: dict[int, EngineRequest] = {}
        self.submitted: set[int] = set()
        self.reserve_sent: set[int] = set()
        self.held: set[int] = set()
        self.reserved: set[int] = set()
        self.now = 0.0

    @rule(engine=st.sampled_from(engine_names()))
    def choose_engine(self, engine: str) -> None:
        if self.reqs:
            return  # only before anything happened
        self.engine = engine
        self.p = make_worker(dataclasses.replace(BASE, engine=engine, worker_type=WorkerType.PREFILL))
        self.d = make_worker(dataclasses.replace(BASE, engine=engine, worker_type=WorkerType.DECODE))

    def _effects(self, e: CommandEffects) -> None:
        for f in e.lifecycle:
            self._fact(f)

    def _fact(self, f: object) -> None:
        if isinstance(f, SourceHeld):
            self.held.add(int(f.handoff_id))  # type: ignore[call-overload]
        elif isinstance(f, DestinationReserved):
            self.reserved.add(int(f.handoff_id))  # type: ignore[call-overload]

    @rule(n=st.integers(1, 40), out=st.integers(0, 6), group=st.integers(0, 2))
    def submit(self, n: int, out: int, group: int) -> None:
        rid = len(self.reqs)
        r = EngineRequest(rid, n, out, block_hashes_from_tokens([group * 100 + i for i in range(n)], 4))
        self.reqs[rid] = r
        self.submitted.add(rid)
        assert self.p.submit_handoff_prefill(rid, r).result is CommandResult.SUBMITTED

    @precondition(lambda self: bool(self.reqs))
    @rule(data=st.data())
    def reserve(self, data: st.DataObject) -> None:
        rid = data.draw(st.sampled_from(sorted(self.reqs)))
        if rid in self.reserve_sent:
            return
        self.reserve_sent.add(rid)
        try:
            self._effects(self.d.reserve_destination(rid, self.reqs[rid]))
        except EngineCommandError:
            self.reserve_sent.discard(rid)  # too large for the pool

    @rule(which=st.sampled_from(["p", "d"]), dt=st.floats(0, 5))
    def run_pass(self, which: str, dt: float) -> None:
        w = self.p if which == "p" else self.d
        self.now += dt
        plan = w.start_pass(self.now)
        if plan is None:
            return
        assert plan.end_ms >= plan.start_ms
        c = w.finish_pass()
        for f in c.lifecycle:
            self._fact(f)
        assert set(c.finished) | set(c.rejected) <= set(self.reqs)

    @precondition(lambda self: bool(self.reqs))
    @rule(data=st.data(), cmd=st.sampled_from(["release", "cancel_src", "activate", "cancel_dst"]))
    def command(self, data: st.DataObject, cmd: str) -> None:
        rid = data.draw(st.sampled_from(sorted(self.reqs)))
        if cmd == "release":
            e = self.p.release_source(rid)
        elif cmd == "cancel_src":
            e = self.p.cancel_source(rid)
        elif cmd == "activate":
            e = self.d.activate_destination(rid)
            if rid in self.reserved:
                assert e.result is CommandResult.APPLIED
                self.reserved.discard(rid)
            else:
                assert e.result is CommandResult.NOOP
        else:
            e = self.d.cancel_destination(rid)
            self.reserved.discard(rid)
        assert e.result in (CommandResult.APPLIED, CommandResult.NOOP)
        self._effects(e)

    @invariant()
    def conserved(self) -> None:
        self.p.check_invariants()  # type: ignore[attr-defined]
        self.d.check_invariants()  # type: ignore[attr-defined]

    def teardown(self) -> None:
        for _round in range(3):
            for rid in sorted(self.reqs):
                self.p.cancel_source(rid)
                self.d.cancel_destination(rid)
            # released-while-pending prefills finish (and free themselves) on their own
            for w in (self.p, self.d):
                for _ in range(200):
                    if w.start_pass(self.now) is None:
                        break
                    self.now = w.finish_pass().end_ms
        for w in (self.p, self.d):
            assert w.is_drained(), w
            pool = w.pool  # type: ignore[attr-defined]
            assert pool.free + pool.num_inactive == pool.total
            w.check_invariants()  # type: ignore[attr-defined]


TestEngineMachine = EngineMachine.TestCase
TestEngineMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
