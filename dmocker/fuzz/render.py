"""A scenario and its run, printed step by step for a person (arrivals, faults, crashes, actions)."""

from __future__ import annotations

from .scenario import Outcome, Scenario

__all__ = ["render"]


def _t(ms: float) -> str:
    return f"{ms:9.3f} ms"


def render(scenario: Scenario, outcome: Outcome) -> str:
    lines = [
        f"scenario: {scenario.engine} ({scenario.order.value}), {scenario.prefill_workers} prefill + "
        f"{scenario.decode_workers} decode worker(s), {scenario.num_gpu_blocks} KV blocks of 16 tokens each, "
        f"max {scenario.max_num_seqs} running, transfer "
        + (f"{scenario.kv_transfer_bandwidth} GB/s at {scenario.kv_bytes_per_token} B/token"
           if scenario.kv_transfer_bandwidth is not None else "instant"),
        f"  {len(scenario.requests)} request(s), {len(scenario.faults)} fault(s), {len(scenario.crashes)} crash(es)"
        + (f", restart after {scenario.restart_s} s" if scenario.restart_s is not None else ""),
        "",
        "timeline:",
    ]
    # (time, rank, seq, text): scenario inputs first at equal times, then what the run did.
    rows: list[tuple[float, int, int, str]] = []
    for i, r in enumerate(scenario.requests):
        rows.append((r.arrival_ms, 0, i, f"request {i} arrives (input {r.input_length} tokens, "
                                          f"output {r.output_length}, prefix group {r.prefix_group})"))
    for i, f in enumerate(scenario.faults):
        rows.append((f.t_ms, 1, i, f"fault: {f.kind.value} request {f.request_id}"))
    for i, c in enumerate(scenario.crashes):
        rows.append((c.t_ms, 1, 100 + i, f"crash: {c.pool.value} worker {c.index}"))
        if scenario.restart_s is not None:
            rows.append((c.t_ms + scenario.restart_s * 1000.0, 1, 200 + i, f"restart: {c.pool.value} worker {c.index}"))
    for seq, (t, rid, text) in enumerate(outcome.steps):
        rows.append((t, 2, seq, f"  request {rid} {text}"))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))  # at equal times: arrivals, faults, then the run's steps
    for t, _, _, text in rows:
        lines.append(f"  {_t(t)}  {text}")
    lines.append("")
    if outcome.failed:
        lines.append("broken:")
        lines.extend(f"  {p}" for p in outcome.problems)
    else:
        lines.append("nothing broke")
    return "\n".join(lines) + "\n"
