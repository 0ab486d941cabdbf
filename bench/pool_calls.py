"""The block pool's own cost, measured on the calls a real replay makes.

``record`` runs one replay and keeps every top-level call the first pools receive (arguments,
result, and the pool's ``available`` / ``num_active_blocks`` after it); ``replay`` runs those
calls alone against a pool implementation, checks every result against the recording, then
prints the best-of-N CPU seconds of the bare calls.  Pools are independent, so a recorded
pool's calls are a faithful workload; replaying them alone takes the rest of the simulation
(and most of the noise of a shared machine) out of the number.

    python bench/pool_calls.py record TRACE.jsonl OUT.pkl --pools 0,4 --engine vllm \\
        --prefill-workers 4 --decode-workers 4            # Mooncake trace: pools 0 and 4
    python bench/pool_calls.py replay OUT.pkl             # dmocker.engines.block_pool
    python bench/pool_calls.py replay OUT.pkl --pool OTHER/block_pool.py   # another version

(``--router kv`` records pools that log KV events, whose drained events are then checked too.)

The recording holds every hash list passed, so keep ``--pools`` to a few pools (two Mooncake
pools: ~45 MB).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import pickle
import sys
import time
from typing import Any

METHODS = ("match_prefix", "acquire", "claim", "take", "take_undoable", "untake", "give_back",
           "promote", "release", "drain_events", "ref_count", "refs_of")


def _frozen(x: Any) -> Any:
    if isinstance(x, list):
        return tuple(x)
    if isinstance(x, tuple):
        return tuple(_frozen(y) for y in x)
    return x


def record(args: argparse.Namespace) -> None:
    from dmocker.engines import block_pool
    from dmocker.replay import ReplayConfig, run

    cls = block_pool.BlockPool
    keep = {int(x) for x in args.pools.split(",")}
    logs: list[Any] = []
    index: dict[int, int] = {}
    depth = [0]
    init = cls.__init__

    def new_init(self: Any, total: int, *, record: bool = False) -> None:
        init(self, total, record=record)
        index[id(self)] = len(logs)
        logs.append([total, record, []] if len(logs) in keep else None)

    def wrap(name: str) -> Any:
        f = getattr(cls, name)

        def call(self: Any, *a: Any) -> Any:
            log = logs[index[id(self)]]
            if log is None or depth[0]:  # not kept, or called from inside another method
                return f(self, *a)
            frozen = _frozen(a)  # before the call: callers mutate their lists later
            depth[0] += 1
            try:
                result = f(self, *a)
            finally:
                depth[0] -= 1
            log[2].append((name, frozen, _frozen(result), self.available, self.num_active_blocks))
            return result
        return call

    cls.__init__ = new_init  # type: ignore[method-assign]
    for name in METHODS:
        if hasattr(cls, name):  # (ref_count: pools before the run-start index; refs_of: after)
            setattr(cls, name, wrap(name))
    options = dict(engine=args.engine, prefill_workers=args.prefill_workers,
                   decode_workers=args.decode_workers, router=args.router)
    if args.block_size:
        options["block_size"] = args.block_size
    run(ReplayConfig.from_values({"trace": args.trace, **options}))
    kept = [log for log in logs if log is not None]
    with open(args.out, "wb") as f:
        pickle.dump(kept, f, protocol=5)
    print(f"{len(logs)} pools, kept {[(len(log[2])) for log in kept]} calls -> {args.out}")


def replay(args: argparse.Namespace) -> None:
    if args.pool:
        spec = importlib.util.spec_from_file_location("pool_under_test", args.pool)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        cls = module.BlockPool
    else:
        from dmocker.engines.block_pool import BlockPool as cls
    with open(args.recording, "rb") as f:
        logs = pickle.load(f)
    for total, rec, calls in logs:  # correctness first
        pool = cls(total, record=rec)
        for i, (name, a, want, available, active) in enumerate(calls):
            got = _frozen(getattr(pool, name)(*a))
            if got != want or pool.available != available or pool.num_active_blocks != active:
                sys.exit(f"call {i} ({name}) differs from the recording: {got!r:.200} != {want!r:.200}")
        pool.check()
    times = []
    for _ in range(args.repeat):
        spent = 0.0
        for total, rec, calls in logs:
            pool = cls(total, record=rec)
            gc.disable()
            t = time.process_time()
            for name, a, _want, _available, _active in calls:
                getattr(pool, name)(*a)
            spent += time.process_time() - t
            gc.enable()
        times.append(spent)
    print(f"{sum(len(log[2]) for log in logs)} calls, results as recorded; "
          f"cpu s best {min(times):.3f} (of {', '.join(f'{t:.3f}' for t in times)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("trace")
    r.add_argument("out")
    r.add_argument("--pools", default="0", help="comma-separated pool indices, in creation order")
    r.add_argument("--engine", default="vllm")
    r.add_argument("--block-size", type=int, default=0)
    r.add_argument("--prefill-workers", type=int, default=2)
    r.add_argument("--decode-workers", type=int, default=2)
    r.add_argument("--router", default="round-robin", help="kv: pools record KV events too")
    p = sub.add_parser("replay")
    p.add_argument("recording")
    p.add_argument("--pool", help="a block_pool.py to load instead of dmocker's")
    p.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    record(args) if args.cmd == "record" else replay(args)


if __name__ == "__main__":
    main()
