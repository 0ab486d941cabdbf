"""Where sweep tasks run: in this process, in a local process pool, or as Ray tasks.

Every backend hands each :class:`~dmocker.sweep.task.SweepTask` to the same
:func:`~dmocker.sweep.task.execute` and returns the results ordered by task index, never by
completion, so the sweep's output is byte-identical whatever the backend and job count.

The trace travels once per machine, not once per task: pool workers get its local path once,
in their initializer; for Ray the driver ``ray.put``s the file's bytes once, each task receives
the object reference (inside a tuple, so Ray does not copy the bytes into every call) and a
worker writes them to a node-local file named by their SHA-256 the first time it needs them --
later tasks on that node find the file and fetch nothing.
"""

from __future__ import annotations

import concurrent.futures
import enum
import hashlib
import importlib
import multiprocessing
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from dmocker._atomic import write_atomic

from .task import SweepTask, TaskResult, execute

__all__ = ["Backend", "BackendUnavailable", "run_tasks", "RAY_INSTALL_HINT"]

RAY_INSTALL_HINT = 'the Ray backend needs Ray: pip install "dmocker[ray]"'


class Backend(enum.Enum):
    LOCAL = "local"
    RAY = "ray"


class BackendUnavailable(RuntimeError):
    """The chosen backend cannot start (Ray missing, cluster unreachable)."""


OnDone = Callable[[TaskResult], None]


def run_tasks(
    tasks: Sequence[SweepTask],
    *,
    trace: str | None,
    jobs: int,
    backend: Backend = Backend.LOCAL,
    ray_address: str | None = None,
    on_done: OnDone | None = None,
) -> list[TaskResult]:
    """Run every task; results in task order.  ``on_done`` sees each result as it arrives."""
    if backend is Backend.RAY:
        results = _run_ray(tasks, trace, jobs, ray_address, on_done)
    elif jobs <= 1 or len(tasks) <= 1:
        results = []
        for task in tasks:
            r = execute(task, trace)
            if on_done is not None:
                on_done(r)
            results.append(r)
    else:
        results = _run_pool(tasks, trace, jobs, on_done)
    results.sort(key=lambda r: r.index)
    return results


# ------------------------------------------------------------------ local process pool

_WORKER_TRACE: str | None = None


def _init_worker(trace: str | None) -> None:
    global _WORKER_TRACE
    _WORKER_TRACE = trace


def _pool_execute(task: SweepTask) -> TaskResult:
    return execute(task, _WORKER_TRACE)


def _run_pool(tasks: Sequence[SweepTask], trace: str | None, jobs: int, on_done: OnDone | None) -> list[TaskResult]:
    methods = multiprocessing.get_all_start_methods()
    # fork: workers start in milliseconds with the replay already imported.
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    results: list[TaskResult] = []
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=min(jobs, len(tasks)), mp_context=ctx, initializer=_init_worker, initargs=(trace,)
    ) as pool:
        futures = [pool.submit(_pool_execute, t) for t in tasks]
        for fut in concurrent.futures.as_completed(futures):
            r = fut.result()
            if on_done is not None:
                on_done(r)
            results.append(r)
    return results


# ------------------------------------------------------------------ Ray

def import_ray() -> Any:
    """The ``ray`` module, or :class:`BackendUnavailable` saying how to install it."""
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise BackendUnavailable(RAY_INSTALL_HINT) from None


_NODE_TRACES: dict[str, str] = {}  # sha256 -> local path, per worker process


def _node_trace(digest: str, holder: tuple[Any, ...]) -> str:
    """The node-local copy of the shipped trace, written once per node (named by its hash)."""
    path = _NODE_TRACES.get(digest)
    if path is not None and os.path.exists(path):
        return path
    path = os.path.join(tempfile.gettempdir(), f"dmocker-trace-{digest}.jsonl")
    if not os.path.exists(path):
        data: bytes = import_ray().get(holder[0])
        if hashlib.sha256(data).hexdigest() != digest:  # pragma: no cover - object store corruption
            raise RuntimeError("shipped trace does not match its digest")
        write_atomic(path, data)  # concurrent writers on one node write the same bytes
    _NODE_TRACES[digest] = path
    return path


def _ray_execute(task: SweepTask, digest: str | None, holder: tuple[Any, ...]) -> TaskResult:
    trace = _node_trace(digest, holder) if digest is not None else None
    return execute(task, trace)


def _run_ray(
    tasks: Sequence[SweepTask], trace: str | None, jobs: int, address: str | None, on_done: OnDone | None
) -> list[TaskResult]:
    ray = import_ray()
    started = False
    if not ray.is_initialized():
        try:
            if address:
                ray.init(address=address, logging_level="ERROR", log_to_driver=False)
            else:
                ray.init(num_cpus=max(jobs, 1), include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        except Exception as exc:  # noqa: BLE001 - connection problems come in many types
            raise BackendUnavailable(f"cannot start or reach the Ray cluster: {exc}") from exc
        started = True
    try:
        digest: str | None = None
        holder: tuple[Any, ...] = ()
        if trace is not None:
            with open(trace, "rb") as fh:
                data = fh.read()
            digest = hashlib.sha256(data).hexdigest()
            holder = (ray.put(data),)  # once; tasks get the reference
        remote = ray.remote(num_cpus=1, max_retries=0)(_ray_execute)
        refs = [remote.remote(t, digest, holder) for t in tasks]
        index_of = {ref: t.index for ref, t in zip(refs, tasks)}
        pending = list(refs)
        results: list[TaskResult] = []
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                try:
                    r: TaskResult = ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a lost worker or node fails one task
                    r = TaskResult(index_of[ref], None, f"{type(exc).__name__}: {exc}")
                if on_done is not None:
                    on_done(r)
                results.append(r)
        return results
    finally:
        if started:
            ray.shutdown()
