"""``ReplayConfig``: checked on construction, read from TOML and JSON, written as the report's
``config`` section and read back into the same run, documented field by field."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.cli.config_flags import FLAGS
from dmocker.cli.replay import main as replay_main
from dmocker.engines.interface import EngineArgs
from dmocker.replay import (
    ConfigError,
    PoolConfig,
    ReplayConfig,
    SyntheticSpec,
    TraceFile,
    WorkloadConfig,
    load_config,
    run,
    run_pass_by_pass,
)
from dmocker.replay.config import DEFAULT_SYNTHETIC, NAMES, SCHEMA, SOURCE, field_paths

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "config.md"
CHAT = ROOT / "docs" / "examples" / "chat.jsonl"
SMALL = ["--synthetic", "40", "--rate", "40", "--isl-mean", "800", "--osl-mean", "20", "--quiet"]


def _toml_example() -> str:
    (block,) = re.findall(r"```toml\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    return block


# ---- the documentation -------------------------------------------------------------------------


def test_the_documented_example_loads_and_runs(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(_toml_example(), encoding="utf-8")
    config = load_config(path)
    assert config.cluster.prefill_workers == 3 and config.decode.max_num_seqs == 128
    assert config.prefill.max_num_seqs == 256  # not given: the default
    assert config.router.name == "kv" and config.faults.crashes[0].label() == "decode:0@2500"
    assert config.workload.synthetic_spec.requests == 200 and config.sla.itl_ms == 40.0
    out = tmp_path / "report.json"
    assert replay_main(["--config", str(path), "--out", str(out), "--quiet"]) == 0
    assert json.loads(out.read_text())["config"]["cluster"]["prefill_workers"] == 3


def _rows() -> dict[str, tuple[str, str]]:
    """Each documented field path -> (default cell, flag cell) of the reference tables."""
    rows: dict[str, tuple[str, str]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`"):
            continue
        for path in re.findall(r"`([^`]+)`", cells[0]):
            rows[path] = (cells[1], cells[2])
    return rows


def _cli_flags() -> dict[str, str]:
    flags = {f.dest: f.flag for _, group in FLAGS for f in group}
    return {**flags, "trace": "TRACE", "per_request": "--per-request", "events": "--events"}


def _expected_default(path: str) -> str:
    if path == "workload.trace.path":
        return "(required)"
    config = ReplayConfig(workload=WorkloadConfig(synthetic=DEFAULT_SYNTHETIC))
    if path.startswith("workload.trace."):
        config = ReplayConfig(workload=WorkloadConfig(trace=TraceFile("x")))
    value: object = SCHEMA.dump(config)
    for part in path.split("."):
        assert isinstance(value, dict)
        value = value[part]
    return f"`{json.dumps(value)}`"


def _expected_flags(path: str) -> set[str]:
    names = [n for n, paths in NAMES.items()
             if path in paths or any(p.startswith(SOURCE) and path.endswith("." + p[len(SOURCE):])
                                     and path.startswith(("workload.trace.", "workload.synthetic.")) for p in paths)]
    cli = _cli_flags()
    with_flag = {cli[n] for n in names if n in cli}
    return with_flag or set(names) or {"—"}


def test_every_field_is_documented_with_its_default_and_flag() -> None:
    rows = _rows()
    assert set(field_paths()) <= set(rows), sorted(set(field_paths()) - set(rows))
    assert set(rows) <= set(field_paths()), sorted(set(rows) - set(field_paths()))
    for path in field_paths():
        default, flag = rows[path]
        assert default == _expected_default(path), path
        assert set(re.findall(r"`([^`]+)`", flag) or [flag]) == _expected_flags(path), path


def test_pool_config_mirrors_the_engine_arguments() -> None:
    """Every EngineArgs field is a pool field (same name, same default), except the engine, the
    pool's role and the link's settings (the ``transfer`` table)."""
    pool = {f.name: f.default for f in dataclasses.fields(PoolConfig)}
    args = {f.name: f.default for f in dataclasses.fields(EngineArgs)}
    elsewhere = {"engine", "worker_type", "kv_bytes_per_token", "kv_transfer_bandwidth", "kv_transfer_timing_mode"}
    # a pool's num_gpu_blocks is None until resolved: the engine's default, or from model.gpu_memory_gb
    assert pool.pop("num_gpu_blocks") is None
    assert ReplayConfig().resolved().prefill.num_gpu_blocks == args["num_gpu_blocks"]
    assert pool == {k: v for k, v in args.items() if k not in elsewhere and k != "num_gpu_blocks"}


# ---- round trips -------------------------------------------------------------------------------


def _replay_cli(tmp: Path, tag: str, args: list[str]) -> tuple[dict[str, object], bytes, bytes]:
    out, rec, ev = tmp / f"{tag}.json", tmp / f"{tag}.jsonl", tmp / f"{tag}-events.jsonl"
    code = replay_main([*args, "--out", str(out), "--per-request", str(rec), "--events", str(ev), "--quiet"])
    assert code == 0
    return json.loads(out.read_text()), rec.read_bytes(), ev.read_bytes()


@pytest.mark.parametrize("args", [
    [*SMALL, "--engine", "sglang", "--block-size", "64", "--turns", "2", "--router", "kv", "--seed", "5",
     "--kv-transfer-bandwidth", "20", "--kv-bytes-per-token", "131072", "--fault-cancel-rate", "0.05",
     "--worker-crash", "decode:1@400", "--worker-restart-s", "0.2", "--sla-ttft-ms", "300"],
    [*SMALL, "--planner", "load", "--load-interval-s", "0.5", "--prefill-workers", "1", "--max-in-flight", "6",
     "--max-sim-time-ms", "1500", "--router-queue-threshold", "0.5"],
    [str(CHAT), "--quiet", "--arrival-speedup-ratio", "2", "--max-num-seqs", "4", "--decode-workers", "1"],
], ids=["sglang-kv-faults", "planner-capped", "trace"])
def test_the_report_config_reruns_the_same_replay(tmp_path: Path, args: list[str]) -> None:
    first, records, events = _replay_cli(tmp_path, "first", args)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(first["config"]), encoding="utf-8")
    again, records2, events2 = _replay_cli(tmp_path, "again", ["--config", str(config)])
    assert again == first and records2 == records and events2 == events
    # A whole report is accepted as a configuration too.
    whole, records3, _ = _replay_cli(tmp_path, "whole", ["--config", str(tmp_path / "first.json")])
    assert whole == first and records3 == records


_FIELD_VALUES: dict[str, st.SearchStrategy[object]] = {
    "engine": st.sampled_from(["vllm", "sglang"]),
    "prefill_workers": st.integers(2, 4),  # the crashes drawn below name worker 1
    "decode.max_num_seqs": st.integers(1, 512),
    "prefill.num_gpu_blocks": st.integers(1, 10**6),
    "block_size": st.sampled_from([None, 16, 64]),
    "kv_transfer_bandwidth": st.none() | st.floats(0, 1000),
    "kv_transfer_timing_mode": st.sampled_from(["full-prompt", "destination-missing"]),
    "router": st.sampled_from(["round-robin", "kv", "mypkg.routers:Mine"]),
    "router_temperature": st.floats(0, 5),
    "router_queue_threshold": st.none() | st.floats(0, 10),
    "planner": st.sampled_from([None, "load", "throughput", "mypkg.plan:P"]),
    "fault_cancel_rate": st.floats(0, 1),
    "worker_crash": st.lists(st.sampled_from(["decode:0@5", "prefill:1@2.5"]), max_size=2),
    "rate": st.floats(0.1, 1000),
    "turns": st.sampled_from([1, 2, 4]),
    "seed": st.integers(0, 2**31),
    "sla_itl_ms": st.none() | st.floats(0.5, 100),
    "max_in_flight": st.none() | st.integers(1, 50),
    "arrival_speedup_ratio": st.floats(0.1, 10),
}


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({}, optional=_FIELD_VALUES))
def test_the_file_form_reads_back_to_the_same_configuration(values: dict[str, object]) -> None:
    if "turns" in values:
        values["synthetic"] = 4 * 15  # a multiple of every turn count drawn
    config = ReplayConfig.from_values(values)
    text = json.dumps(config.to_json())
    back = ReplayConfig.from_json(json.loads(text))
    assert back == config.resolved()
    assert json.dumps(back.to_json()) == text


def test_run_takes_a_config_only() -> None:
    with pytest.raises(TypeError):
        run(synthetic=5)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="ReplayConfig"):
        run("trace.jsonl")  # type: ignore[arg-type]


def test_pass_by_pass_gives_the_same_report() -> None:
    config = ReplayConfig.from_values({"synthetic": 40, "rate": 40.0, "isl_mean": 600, "osl_mean": 40})
    assert run(config).to_json() == run_pass_by_pass(config).to_json()


# ---- names ---------------------------------------------------------------------------------------


def test_names_set_every_field_they_stand_for() -> None:
    c = ReplayConfig.from_values({"max_num_seqs": 7, "seed": 9})
    assert c.prefill.max_num_seqs == c.decode.max_num_seqs == 7
    assert c.router.seed == 9 and c.workload.synthetic_spec.seed == 9
    c = c.with_values({"decode.max_num_seqs": 8, "trace_block_size": 64})
    assert (c.prefill.max_num_seqs, c.decode.max_num_seqs) == (7, 8)
    assert c.workload.synthetic_spec.trace_block_size == 64
    t = c.with_values({"trace": "t.jsonl", "trace_block_size": 16, "seed": 2})
    assert t.workload.trace == TraceFile("t.jsonl", trace_block_size=16) and t.workload.synthetic is None
    assert t.router.seed == 2
    assert t.with_values({"trace": "u.jsonl"}).workload.trace == TraceFile("u.jsonl", trace_block_size=16)
    back = t.with_values({"synthetic": 10})
    assert back.workload.trace is None and back.workload.synthetic_spec == dataclasses.replace(DEFAULT_SYNTHETIC,
                                                                                               requests=10)


@pytest.mark.parametrize(("values", "field", "words"), [
    ({"trace": "t.jsonl", "rate": 3.0}, "workload.synthetic.rate", "do not apply"),
    ({"trace": "t.jsonl", "synthetic": 5}, "workload", "give one workload"),
    ({"prefill_workers": 0}, "cluster.prefill_workers", "0 only with a planner"),
    ({"decode.max_num_seqs": True}, "decode.max_num_seqs", "must be an integer"),
    ({"rate": float("inf")}, "workload.synthetic.rate", "finite"),
    ({"engine": "trtllm"}, "cluster.engine", "not supported"),
    ({"router": "kv-aware"}, "router.name", "unknown router"),
    ({"planner": "nope"}, "planner.policy", "MODULE:CLASS"),
    ({"worker_crash": ["decode:2@10"]}, "faults.crashes", "decode pool has 2 worker"),
    ({"worker_crash": ["decode@10"]}, "faults.crashes[0]", "POOL:INDEX@T_MS"),
    ({"prefill.block_size": 16}, "decode.block_size", "block sizes must match"),
    ({"fixed_prefill_ms": 3.0}, "prefill.fixed_decode_ms", "both"),
    ({"turns": 7}, "workload.synthetic.requests", "multiple of turns"),
    ({"kv_transfer_timing_mode": "sometimes"}, "transfer.timing_mode", "'full-prompt'"),
    ({"no_such": 1}, "no_such", "no such configuration field"),
])
def test_bad_values_name_the_field(values: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        ReplayConfig.from_values(values)
    assert err.value.field == field and words in str(err.value), str(err.value)


def test_sections_are_frozen_and_checked_when_the_config_is_built() -> None:
    c = ReplayConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.cluster.prefill_workers = 3  # type: ignore[misc]
    with pytest.raises(ConfigError, match="field 'decode.max_num_seqs': must be >= 1"):
        ReplayConfig(decode=PoolConfig(max_num_seqs=0))
    with pytest.raises(ConfigError, match="field 'workload.synthetic.spread'"):
        ReplayConfig(workload=WorkloadConfig(synthetic=SyntheticSpec(spread=1.5)))
    with pytest.raises(ConfigError, match="field 'workload': give one workload"):
        ReplayConfig(workload=WorkloadConfig(trace=TraceFile("t"), synthetic=SyntheticSpec()))


# ---- files ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "text", "words"), [
    ("c.toml", "[decode]\nmax_num_seqz = 3\n", ":2: field 'decode.max_num_seqz': unknown field"),
    ("c.toml", "[cluster]\nengine = 'vllm'\nprefill_workers = 'two'\n", ":3: field 'cluster.prefill_workers': must be an integer"),
    ("c.toml", "[faults]\ncancel_rate = 1.5\n", ":2: field 'faults.cancel_rate': must be <= 1"),
    ("c.toml", "[bogus]\nx = 1\n", ":1: field 'bogus': unknown field"),
    ("c.toml", "[cluster\nengine = 'vllm'\n", ":1: not valid TOML"),
    ("c.toml", "[cluster]\ndecode_workers = 1\n\n[faults]\ncrashes = ['decode:3@10']\n",
     ":5: field 'faults.crashes': worker_crash decode:3@10"),
    ("c.toml", "[workload]\nexplicit = 'mypkg:Workload'\n", ":2: field 'workload.explicit': must be a Python object"),
    ("c.toml", "[workload.synthetic]\nturns = 7\n", ":1: field 'workload.synthetic.requests': requests (300)"),
    ("c.json", '{"cluster": {"engine": }}', ":1: not valid JSON"),
    ("c.json", '{\n  "decode": {\n    "max_num_seqs": -1\n  }\n}\n', ":3: field 'decode.max_num_seqs': must be >= 1"),
    ("c.json", '[1, 2]', "must be a table, got a list"),
    ("config", '{\n  "sla": {"ttft_ms": 0}\n}', ":2: field 'sla.ttft_ms': must be > 0"),
    ("config", '[sla]\nttft_ms = "fast"\n', ":2: field 'sla.ttft_ms': must be a number or null"),
])
def test_bad_files_exit_2_naming_file_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, words: str
) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    out, rec = tmp_path / "report.json", tmp_path / "records.jsonl"
    code = replay_main(["--config", str(path), "--out", str(out), "--per-request", str(rec), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"dmocker replay: error: {path}") and words in err and err.count("\n") == 1, err
    assert not out.exists() and not rec.exists()


def test_a_missing_file_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay_main(["--config", str(tmp_path / "nope.toml"), "--quiet"]) == 2
    assert "nope.toml: cannot read" in capsys.readouterr().err


def test_flags_override_the_file_and_name_themselves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[cluster]\ndecode_workers = 1\n\n[workload.synthetic]\nrequests = 30\nrate = 40.0\n",
                    encoding="utf-8")
    report, _, _ = _replay_cli(tmp_path, "r", ["--config", str(path), "--decode-workers", "3", "--osl-mean", "8"])
    config = report["config"]
    assert isinstance(config, dict)
    assert config["cluster"]["decode_workers"] == 3
    assert config["workload"]["synthetic"]["requests"] == 30 and config["workload"]["synthetic"]["osl_mean"] == 8
    # A bad flag is named as the flag; a problem with the file's own values names the file.
    assert replay_main(["--config", str(path), "--worker-crash", "decode:2@5", "--quiet"]) == 2
    assert "--worker-crash: field 'faults.crashes'" in capsys.readouterr().err
    assert replay_main(["--config", str(path), "--prefill-workers", "0", "--quiet"]) == 2
    assert "--prefill-workers: field 'cluster.prefill_workers'" in capsys.readouterr().err
    assert replay_main(["--config", str(path), "--worker-crash", "decode@5", "--quiet"]) == 2
    assert (err := capsys.readouterr().err).startswith("dmocker replay: error: --worker-crash: field 'faults.crashes[0]'")
    assert replay_main(["--config", str(path), "--turns", "7", "--quiet"]) == 2
    assert "--turns" not in (err := capsys.readouterr().err) and f"{path}:5: field 'workload.synthetic.requests'" in err


def test_an_explicit_workload_is_written_but_not_read_back(tmp_path: Path) -> None:
    from dmocker.fuzz.scenario import Request, ScenarioWorkload

    config = ReplayConfig(workload=WorkloadConfig(explicit=ScenarioWorkload((Request(0.0, 64, 2),))))
    report = run(config)
    assert report.config["workload"]["explicit"] == "dmocker.fuzz.scenario:ScenarioWorkload"  # type: ignore[index]
    with pytest.raises(ConfigError, match="field 'workload.explicit': must be a Python object"):
        ReplayConfig.from_json(report.config)
