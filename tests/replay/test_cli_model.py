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


def test_gpu_memory_sizes_the_kv_blocks_after_the_weights(tmp_path: Path) -> None:
    config = _report(tmp_path, "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu-memory-gb", "80")["config"]
    assert isinstance(config, dict)
    weights = 2 * (32 * (4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 2 * 128256 * 4096)  # bf16
    blocks = (int(80e9 * 0.9) - weights) // (64 * 131072)  # vLLM blocks of 64 tokens
    assert config["prefill"]["num_gpu_blocks"] == config["decode"]["num_gpu_blocks"] == blocks == 6668
    derived = config["derived"]["decode.num_gpu_blocks"]
    assert derived["value"] == blocks and "80 GB x 0.9" in derived["arithmetic"]


def test_an_explicit_block_count_or_weights_size_wins(tmp_path: Path) -> None:
    config = _report(tmp_path, "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu-memory-gb", "80",
                     "--num-gpu-blocks", "1000")["config"]
    assert isinstance(config, dict)
    assert config["prefill"]["num_gpu_blocks"] == 1000 and "decode.num_gpu_blocks" not in config["derived"]
    # a mixture of experts needs its weights' size: 40 GB over TP 8 leaves 72 - 5 GB of an 80 GB GPU
    config = _report(tmp_path, "--model", "openai/gpt-oss-20b", "--gpu-memory-gb", "80", "--weights-gb", "40",
                     "--tensor-parallel-size", "8")["config"]
    assert isinstance(config, dict)
    per_token = 24 * 2 * 1 * 64 * 2  # 8 KV heads over TP 8: one a rank
    assert config["decode"]["num_gpu_blocks"] == (int(80e9 * 0.9) - 5 * 10**9) // (64 * per_token)


@pytest.mark.parametrize(("args", "message"), [
    (["--model", "openai/gpt-oss-20b", "--gpu-memory-gb", "80"], "model.weights_gb"),
    (["--model", "meta-llama/Llama-3.1-70B-Instruct", "--gpu-memory-gb", "80"], "no room for the KV cache"),
    (["--gpu-memory-gb", "80"], "needs a model"),
    (["--model", "Qwen/Qwen3-32B", "--gpu-memory-gb", "80", "--gpu-memory-utilization", "1.5"],
     "model.gpu_memory_utilization"),
])
def test_bad_gpu_memory_settings_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        args: list[str], message: str) -> None:
    out = tmp_path / "report.json"
    assert main([*SMALL, *args, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
