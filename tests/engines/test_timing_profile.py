"""Pass timing from a measured profile: the interpolation, both file forms, a replay at the points."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.cli.replay import main
from dmocker.engines.engine_args import EngineArgs
from dmocker.engines.profile import ProfileError, TimingProfile, load_profile
from dmocker.engines.timing import PassTiming

CSV = """phase,tokens,context_length,ms
prefill,1000,,60
prefill,2000,,100
prefill,8000,,340
decode,1000,100,8
decode,1000,4000,10
decode,64000,100,14
decode,64000,4000,22
"""


def _csv(tmp_path: Path, text: str = CSV) -> str:
    path = tmp_path / "profile.csv"
    path.write_text(text)
    return str(path)


def test_points_are_reproduced_and_between_them_it_is_linear(tmp_path: Path) -> None:
    p = load_profile(_csv(tmp_path))
    assert [p.prefill_ms(t) for t in (1000, 2000, 8000)] == [60.0, 100.0, 340.0]
    assert p.prefill_ms(1500) == 80.0 and p.prefill_ms(5000) == 220.0
    assert p.prefill_ms(500) == 40.0 and p.prefill_ms(10_000) == 420.0  # along the end segments
    assert p.prefill_ms(1) > 0 and p.prefill_ms(0) == 20.0
    assert p.decode_ms(1000, 100) == 8.0 and p.decode_ms(64000, 4000) == 22.0
    assert p.decode_ms(32500, 2050) == (8 + 10 + 14 + 22) / 4  # the cell's centre


def test_it_never_goes_below_zero_or_one_ms(tmp_path: Path) -> None:
    p = TimingProfile("t", [1, 2], [5, 1], [1, 2], [1, 2], [[3, 2], [2, 0.5]])
    assert p.prefill_ms(10) == 0.0
    assert p.decode_ms(10, 10) == 1.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 200_000), min_size=1, max_size=40), st.integers(1, 300))
def test_the_array_form_gives_the_same_floats(active: list[int], batch: int) -> None:
    p = TimingProfile("t", [1000, 8000], [60, 340], [1000, 9000, 64000], [100, 900, 4000],
                      [[8, 9, 10], [9.5, 11, 13.25], [14, 17, 22]])
    a = np.array(active, dtype=np.int64)
    many = p.decode_ms_many(a, a // batch)
    assert many.tolist() == [p.decode_ms(x, x // batch) for x in active]


def test_bulk_runs_and_single_passes_agree(tmp_path: Path) -> None:
    timing = PassTiming(EngineArgs(timing_profile=_csv(tmp_path), decode_speedup_ratio=2.0))
    for passes in (3, 300):  # the scalar loop and the numpy path
        ends = timing.run_ends(100.0, 7, 5000, passes)
        end, want = 100.0, []
        for k in range(passes):
            end += timing.decode_ms(7, 5000 + 7 * k)
            want.append(end)
        assert ends.tolist() == want


def test_the_mocker_npz_form(tmp_path: Path) -> None:
    path = tmp_path / "perf_data.npz"
    np.savez(path, prefill_isl=np.array([1000.0, 8000.0]), prefill_ttft_ms=np.array([60.0, 340.0]),
             decode_active_kv_tokens=np.array([1000.0, 64000.0]), decode_context_length=np.array([100.0, 4000.0]),
             decode_itl=np.array([[8.0, 10.0], [14.0, 22.0]]))
    p = load_profile(path)
    assert p.prefill_ms(4500) == 200.0 and p.decode_ms(64000, 100) == 14.0
    np.savez(tmp_path / "bad.npz", prefill_isl=np.array([1.0, 2.0]))
    with pytest.raises(ProfileError, match="not a mocker profile: no prefill_ttft_ms"):
        load_profile(tmp_path / "bad.npz")


@pytest.mark.parametrize(("text", "message"), [
    ("phase,tokens,ms\n", ":1: the header must be phase,tokens,context_length,ms"),
    (CSV + "prefill,lots,,3\n", ":9: field 'tokens': must be a non-negative number"),
    (CSV + "warmup,1,,3\n", ":9: field 'phase': must be prefill or decode"),
    (CSV.replace("decode,64000,4000,22\n", ""), "not a full grid: none at tokens 64000, context_length 4000"),
    (CSV + "decode,1000,100,9\n", ":9: a second decode point"),
    ("phase,tokens,context_length,ms\nprefill,1,,2\n", "the prefill tokens need at least 2 points"),
])
def test_bad_profiles_name_the_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        load_profile(_csv(tmp_path, text))


def test_a_replay_at_the_profiles_points_reproduces_them(tmp_path: Path) -> None:
    """Requests far apart, alone on their workers: TTFT is the prefill point of their prompt,
    each decode pass a point of the grid."""
    # decode grid linear in both axes, so every pass between points is exact as well
    rows = ["phase,tokens,context_length,ms", "prefill,512,,30", "prefill,4096,,150", "prefill,8192,,330"]
    for kv in (0, 20_000):
        for ctx in (0, 20_000):
            rows.append(f"decode,{kv},{ctx},{8 + kv * 0.0001 + ctx * 0.0002}")
    profile = _csv(tmp_path, "\n".join(rows) + "\n")
    trace = tmp_path / "trace.jsonl"
    lines = [{"timestamp": i * 100_000, "input_length": isl, "output_length": 50,
              "hash_ids": list(range(i * 100, i * 100 + isl // 512))} for i, isl in enumerate((512, 4096, 8192))]
    trace.write_text("".join(json.dumps(line) + "\n" for line in lines))
    records = tmp_path / "records.jsonl"
    assert main([str(trace), "--timing-profile", profile, "--quiet", "--out", str(tmp_path / "r.json"),
                 "--per-request", str(records)]) == 0
    got = [json.loads(line) for line in records.read_text().splitlines()]
    for rec, prefill in zip(got, (30.0, 150.0, 330.0)):
        isl = rec["input_length"]
        # batch of one: active KV = context = the prompt and the tokens so far (0.0001 + 0.0002 a
        # token); the first token comes from the decode worker's first pass, after the prefill
        assert rec["ttft_ms"] == pytest.approx(prefill + 8 + isl * 0.0003, rel=0.01)
        want_itl = np.mean([8 + (isl + k) * 0.0003 for k in range(1, 50)])
        assert rec["itl_ms"] == pytest.approx(want_itl, rel=0.01)


def test_bad_profile_flag_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    assert main(["--synthetic", "10", "--quiet", "--timing-profile", str(tmp_path / "none.csv"),
                 "--out", str(out)]) == 2
    assert "no such profile file" in capsys.readouterr().err
    assert not out.exists()
