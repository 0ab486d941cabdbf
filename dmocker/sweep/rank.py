"""Rank sweep results: goodput per GPU, SLA attainment, the cheapest configuration that holds.

Definitions (printed in the table's legend and in ``docs/planning.md``):

* *goodput* -- requests per second that completed within every given SLA bound (the replay's
  ``goodput_request_throughput_rps``; with no bound given, every completed request counts);
* *GPUs* -- ``prefill_workers + decode_workers`` (one GPU per mock worker);
* *attainment* -- the share of arrived requests that completed within every bound; a
  configuration *meets the SLA* when its attainment is at least the target (``--sla-attainment``,
  0.99 by default: a p99 bound);
* *cheapest meeting the SLA* -- fewest GPUs among those that meet it, then the highest goodput
  per GPU, then the earliest in sweep order.  With ``--max-rate`` the ranking is by capacity
  (the highest rate found) per GPU and the mark goes to the best of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dmocker.replay.report import JsonValue

from .grid import ConfigValue, config_label
from .task import TaskResult, attainment

__all__ = ["Row", "build_rows", "rank", "cheapest", "render_table", "sweep_document", "rows_from_document"]


@dataclass(frozen=True, slots=True)
class Row:
    index: int
    config: dict[str, ConfigValue]
    summary: dict[str, JsonValue] | None
    error: str | None
    search: dict[str, JsonValue] | None
    gpus: int
    goodput_rps: float
    attainment: float
    meets_sla: bool
    label: str = ""  # config_label with the base P/D split filled in (see build_rows)

    @property
    def name(self) -> str:
        return self.label or config_label(self.config)

    @property
    def ok(self) -> bool:
        return self.error is None and self.summary is not None

    @property
    def goodput_per_gpu(self) -> float:
        return self.goodput_rps / self.gpus if self.gpus > 0 else 0.0

    @property
    def capacity(self) -> float | None:
        if self.search is None:
            return None
        v = self.search.get("value")
        return float(v) if isinstance(v, (int, float)) else None

    @property
    def capacity_per_gpu(self) -> float | None:
        c = self.capacity
        return c / self.gpus if c is not None and self.gpus > 0 else None

    def metric(self, key: str) -> float | None:
        v = None if self.summary is None else self.summary.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _num(summary: dict[str, JsonValue], key: str) -> float:
    v = summary.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


def build_rows(results: Sequence[TaskResult], configs: Sequence[dict[str, ConfigValue]], gpus_of: Sequence[int],
               base: dict[str, JsonValue], target: float) -> list[Row]:
    """The rows of a sweep: each result with its swept values, GPU count and label (the P/D
    split of the base configuration ``base``, in its file form, filled in)."""
    rows = []
    for r, cfg, gpus in zip(results, configs, gpus_of):
        label = _label(base, cfg)
        if r.summary is None or r.error is not None:  # failed (a broken run keeps its summary)
            rows.append(Row(r.index, cfg, r.summary, r.error, r.search, gpus, 0.0, 0.0, False, label))
            continue
        s = r.summary
        good = _num(s, "goodput_request_throughput_rps") if "goodput_request_throughput_rps" in s else _num(s, "request_throughput_rps")
        a = attainment(s)
        meets = a >= target if r.search is None else r.search.get("value") is not None
        rows.append(Row(r.index, cfg, s, None, r.search, gpus, good, a, meets, label))
    return rows


def _label(base: dict[str, JsonValue], config: dict[str, ConfigValue]) -> str:
    """The row's name: its swept values, with the cluster's shape always shown (``9P+1D``, or
    ``4 agg`` for an aggregated one)."""
    cluster = base.get("cluster")
    sizes = cluster if isinstance(cluster, dict) else base  # (sweep.json files before the config had sections)
    pd: dict[str, ConfigValue] = {}
    for k in ("mode", "workers", "prefill_workers", "decode_workers"):
        v = sizes.get(k)
        if isinstance(v, (int, str)) and not isinstance(v, bool):
            pd[k] = v
    return config_label({**pd, **config})


def rank(rows: Sequence[Row]) -> list[Row]:
    """Successful rows best first (goodput per GPU, or capacity per GPU), then failed ones."""
    def key(row: Row) -> tuple[int, float, int]:
        if not row.ok:
            return (1, 0.0, row.index)
        if row.search is not None:
            return (0, -(row.capacity_per_gpu or 0.0), row.index)
        return (0, -row.goodput_per_gpu, row.index)

    return sorted(rows, key=key)


def cheapest(rows: Sequence[Row]) -> Row | None:
    """The marked row (see the module docstring), or None when no row meets the SLA."""
    candidates = [r for r in rows if r.ok and r.meets_sla]
    if not candidates:
        return None
    if any(r.search is not None for r in candidates):
        return min(candidates, key=lambda r: (-(r.capacity_per_gpu or 0.0), r.gpus, r.index))
    return min(candidates, key=lambda r: (r.gpus, -r.goodput_per_gpu, r.index))


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _g(value: float | None) -> str:
    """Four significant digits (capacities span orders of magnitude), "-" for none."""
    return "-" if value is None else f"{value:.4g}"


def render_table(rows: Sequence[Row], *, target: float, max_rate: bool) -> str:
    """The ranked table printed on stdout (plain text, fixed columns)."""
    mark = cheapest(rows)
    head = ["rank", "configuration", "GPUs"]
    if max_rate:
        head += ["capacity", "bracket", "capacity/GPU"]
    head += ["goodput/GPU (req/s)", "goodput (req/s)", "SLA att.", "p99 TTFT (ms)", "p99 ITL (ms)", ""]
    table: list[list[str]] = []
    for i, row in enumerate(rank(rows), start=1):
        line = [str(i) if row.ok else "-", row.name, str(row.gpus)]
        if max_rate:
            bracket = row.search.get("bracket") if row.search is not None else None
            if isinstance(bracket, list) and len(bracket) == 2:
                lo, hi = (_g(v if isinstance(v, (int, float)) else None) for v in bracket)
                btxt = f"[{lo}, {hi}]"
            else:
                btxt = "-"
            line += [_g(row.capacity), btxt, _g(row.capacity_per_gpu)]
        if row.ok:
            line += [
                _f(row.goodput_per_gpu, 3), _f(row.goodput_rps), f"{row.attainment:.4f}",
                _f(row.metric("p99_ttft_ms"), 1), _f(row.metric("p99_itl_ms"), 2),
                "*" if mark is not None and row.index == mark.index else "",
            ]
        else:
            line += ["FAILED: " + (row.error or "no result")]
        table.append(line)
    widths = [
        max([len(head[c])] + [len(t[c]) for t in table if c < len(t) - 1]) for c in range(len(head))
    ]
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths)).rstrip()]
    out.append("-" * len(out[0]))
    for t in table:
        cells = [c.ljust(w) if k < len(t) - 1 else c for k, (c, w) in enumerate(zip(t, widths))]
        out.append("  ".join(cells).rstrip())
    if max_rate:
        legend = (f"* best capacity per GPU; capacity: the highest load at which >= {target:g} of "
                  "requests meet every SLA bound")
    elif mark is not None:
        legend = f"* cheapest configuration (fewest GPUs) with SLA attainment >= {target:g}"
    else:
        legend = f"no configuration reaches SLA attainment >= {target:g}"
    out.append(legend)
    failed = sum(1 for r in rows if not r.ok)
    if failed:
        out.append(f"{failed} configuration(s) failed")
    return "\n".join(out) + "\n"


def sweep_document(
    rows: Sequence[Row],
    *,
    base: dict[str, JsonValue],
    axes: dict[str, tuple[ConfigValue, ...]],
    sla: dict[str, float | None],
    target: float,
    max_rate: bool,
) -> dict[str, JsonValue]:
    """The ``sweep.json`` object (no wall times or backend: identical for every backend)."""
    mark = cheapest(rows)
    runs: list[JsonValue] = []
    for row in rows:
        entry: dict[str, JsonValue] = {
            "config": dict(row.config),
            "summary": row.summary,
            "gpus": row.gpus,
        }
        if row.ok:
            entry["goodput_rps"] = row.goodput_rps
            entry["goodput_per_gpu"] = row.goodput_per_gpu
            entry["sla_attainment"] = row.attainment
            entry["meets_sla"] = row.meets_sla
        else:
            entry["error"] = row.error
        if row.search is not None:
            entry["max_rate"] = row.search
        runs.append(entry)
    return {
        "dmocker_sweep": "1.0",
        "base": base,
        "axes": {k: list(v) for k, v in axes.items()},
        "sla": {**{k: v for k, v in sla.items()}, "attainment": target},
        "max_rate": max_rate,
        "runs": runs,
        "ranking": [r.index for r in rank(rows) if r.ok],
        "cheapest_meeting_sla": mark.index if mark is not None else None,
        "failed": sum(1 for r in rows if not r.ok),
    }


def rows_from_document(doc: dict[str, JsonValue]) -> tuple[list[Row], float, dict[str, JsonValue]]:
    """Rows, SLA target and SLA bounds back from a ``sweep.json`` object (to re-rank or re-plot).

    Raises ``ValueError`` naming what is missing or malformed.
    """
    if doc.get("dmocker_sweep") != "1.0":
        raise ValueError("not a dmocker sweep.json (no \"dmocker_sweep\": \"1.0\")")
    runs, sla = doc.get("runs"), doc.get("sla")
    if not isinstance(runs, list) or not isinstance(sla, dict):
        raise ValueError("sweep.json: \"runs\" must be a list and \"sla\" an object")
    target = sla.get("attainment")
    if not isinstance(target, (int, float)) or isinstance(target, bool):
        raise ValueError("sweep.json: sla.attainment must be a number")
    base = doc.get("base")
    pd: dict[str, JsonValue] = dict(base) if isinstance(base, dict) else {}
    rows: list[Row] = []
    for i, run in enumerate(runs):
        if not isinstance(run, dict) or not isinstance(run.get("config"), dict) or not isinstance(run.get("gpus"), int):
            raise ValueError(f"sweep.json: runs[{i}] needs \"config\" (object) and \"gpus\" (integer)")
        config = {k: v for k, v in run["config"].items() if isinstance(v, (bool, int, float, str))}  # type: ignore[union-attr]
        summary = run.get("summary")
        search = run.get("max_rate")
        error = run.get("error")
        gpus = run["gpus"]
        assert isinstance(gpus, int)
        if not isinstance(summary, dict) or error is not None:
            rows.append(Row(i, config, summary if isinstance(summary, dict) else None, str(error),
                            search if isinstance(search, dict) else None, gpus, 0.0, 0.0, False, _label(pd, config)))
            continue
        good, att, meets = run.get("goodput_rps"), run.get("sla_attainment"), run.get("meets_sla")
        rows.append(Row(i, config, summary, None, search if isinstance(search, dict) else None, gpus,
                        float(good) if isinstance(good, (int, float)) else 0.0,
                        float(att) if isinstance(att, (int, float)) else 0.0, meets is True, _label(pd, config)))
    return rows, float(target), sla
