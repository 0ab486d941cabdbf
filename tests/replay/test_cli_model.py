"""``dmocker replay --model``: the KV bytes per token from the model, what the report says of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmocker.cli.replay import main
from dmocker.replay import ReplayConfig

SMALL = ["--synthetic", "40", "--rate", "40", "--isl-mean", "800", "--osl-mean", "20", "--quiet",
         "--kv-transfer-bandwidth", "50"]


def _report(tmp_path: Path, *args: str) -> dict[str, object]:
    out = tmp_path / "report.json"
    assert main([*SMALL, *args, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert isinstance(report, dict)
    return report


def test_the_model_sets_the_kv_bytes_and_the_report_says_how(tmp_path: Path) -> None:
    report = _report(tmp_path, "--model", "meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size", "4")
    config = report["config"]
    assert isinstance(config, dict)
    assert config["transfer"]["kv_bytes_per_token"] == 2 * 2 * 128 * 2 * 80
    derived = config["derived"]["transfer.kv_bytes_per_token"]
    assert derived["value"] == 81920 and derived["model"] == "meta-llama/Llama-3.1-70B-Instruct"
    assert "huggingface.co/meta-llama/Llama-3.1-70B-Instruct" in derived["source"]
    assert "8 KV heads / TP 4" in derived["arithmetic"]
    # the same run as giving the number itself
    explicit = _report(tmp_path, "--kv-bytes-per-token", "81920")
    assert explicit["summary"] == report["summary"]


def test_an_explicit_kv_bytes_per_token_wins_and_nothing_is_derived(tmp_path: Path) -> None:
    config = _report(tmp_path, "--model", "deepseek-ai/DeepSeek-V3", "--kv-bytes-per-token", "1000")["config"]
    assert isinstance(config, dict)
    assert config["transfer"]["kv_bytes_per_token"] == 1000 and "derived" not in config


def test_the_reports_config_reads_back(tmp_path: Path) -> None:
    config = _report(tmp_path, "--model", "openai/gpt-oss-20b", "--kv-cache-dtype", "fp8")["config"]
    assert isinstance(config, dict)
    assert "sliding-window layers" in config["derived"]["transfer.kv_bytes_per_token"]["note"]
    again = ReplayConfig.from_json(config)
    assert again.model.name == "openai/gpt-oss-20b" and again.transfer.kv_bytes_per_token == 24 * 2 * 8 * 64


def test_without_a_model_the_config_has_no_derived_entry(tmp_path: Path) -> None:
    config = _report(tmp_path)["config"]
    assert isinstance(config, dict)
    assert "derived" not in config and config["model"]["name"] is None


@pytest.mark.parametrize(("args", "message"), [
    (["--model", "no/such-model"], "'no/such-model' is neither a bundled preset"),
    (["--model", "Qwen/Qwen3-32B", "--tensor-parallel-size", "0"], "model.tensor_parallel_size"),
    (["--model", "Qwen/Qwen3-32B", "--kv-cache-dtype", "int4"], "invalid choice"),
])
def test_bad_model_flags_exit_2_and_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   args: list[str], message: str) -> None:
    out = tmp_path / "report.json"
    with pytest.raises(SystemExit) as info:
        code = main([*SMALL, *args, "--out", str(out)])
        raise SystemExit(code)
    assert info.value.code == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_a_config_file_names_the_model(tmp_path: Path) -> None:
    conf = tmp_path / "cluster.toml"
    conf.write_text('[model]\nname = "Qwen/Qwen2.5-7B-Instruct"\n\n[transfer]\nbandwidth_gb_s = 10.0\n'
                    '[workload.synthetic]\nrequests = 20\n')
    out = tmp_path / "report.json"
    assert main(["--config", str(conf), "--quiet", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["config"]["transfer"]["kv_bytes_per_token"] == 57344
