"""KV bytes per token from model configs: each bundled preset against the arithmetic by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmocker.models.dtypes import KvCacheDtype
from dmocker.models.kv_size import ModelConfigError, kv_size, weights_size
from dmocker.models.load import load_model, preset_names

# Each preset's value worked out by hand from its config (bfloat16: 2 bytes an element).
BY_HAND = {
    # 2 (K, V) x 8 KV heads x (4096 hidden / 32 heads = 128) x 2 B = 4096 B a layer, x 32 layers
    "meta-llama/Llama-3.1-8B-Instruct": 2 * 8 * 128 * 2 * 32,  # 131072
    # 2 x 8 x (8192 / 64 = 128) x 2 B = 4096 B a layer, x 80 layers
    "meta-llama/Llama-3.1-70B-Instruct": 2 * 8 * 128 * 2 * 80,  # 327680
    # 2 x 4 x (3584 / 28 = 128) x 2 B = 2048 B a layer, x 28 layers (its window is off)
    "Qwen/Qwen2.5-7B-Instruct": 2 * 4 * 128 * 2 * 28,  # 57344
    # 2 x 8 x 128 (head_dim) x 2 B = 4096 B a layer, x 64 layers
    "Qwen/Qwen3-32B": 2 * 8 * 128 * 2 * 64,  # 262144
    # 2 x 8 x (4096 / 32 = 128) x 2 B = 4096 B a layer, x 32 layers
    "mistralai/Mistral-7B-Instruct-v0.3": 2 * 8 * 128 * 2 * 32,  # 131072
    # MLA: (512 latent + 64 rotary key) x 2 B = 1152 B a layer, no x2, x 61 layers
    "deepseek-ai/DeepSeek-V3": (512 + 64) * 2 * 61,  # 70272
    # 2 x 8 x 64 x 2 B = 2048 B a layer; 12 full-attention layers keep every token, the 12
    # sliding ones (window 128) only the last 128: per token of a short sequence, all 24
    "openai/gpt-oss-20b": 2 * 8 * 64 * 2 * 24,  # 49152
}


def test_every_preset_is_worked_out_by_hand() -> None:
    assert set(BY_HAND) == set(preset_names())


@pytest.mark.parametrize("name", sorted(BY_HAND))
def test_preset_kv_bytes_per_token(name: str) -> None:
    size = kv_size(load_model(name))
    assert size.bytes_per_token == BY_HAND[name]
    assert str(size.full_bytes_per_token) in size.arithmetic


def test_sliding_window_layers_keep_only_the_window() -> None:
    size = kv_size(load_model("openai/gpt-oss-20b"))
    assert (size.full_bytes_per_token, size.window_bytes_per_token, size.window) == (12 * 2048, 12 * 2048, 128)
    assert size.bytes_for(100) == 100 * 24 * 2048
    assert size.bytes_for(10_000) == 10_000 * 12 * 2048 + 128 * 12 * 2048


def test_tensor_parallelism_splits_kv_heads_and_replicates_below_one_per_rank() -> None:
    llama = load_model("meta-llama/Llama-3.1-70B-Instruct")  # 8 KV heads
    assert kv_size(llama, tp=4).bytes_per_token == 2 * 2 * 128 * 2 * 80
    assert kv_size(llama, tp=8).bytes_per_token == 2 * 1 * 128 * 2 * 80
    assert kv_size(llama, tp=16).bytes_per_token == 2 * 1 * 128 * 2 * 80  # one head a rank at least


def test_mla_is_not_split_by_tensor_parallelism_and_fp8_halves_it() -> None:
    v3 = load_model("deepseek-ai/DeepSeek-V3")
    assert kv_size(v3, tp=8).bytes_per_token == 70272
    assert kv_size(v3, KvCacheDtype.FP8).bytes_per_token == 576 * 1 * 61


def test_a_users_config_json_works_like_a_preset(tmp_path: Path) -> None:
    config = {"_name_or_path": "my/model", "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "hidden_size": 4096, "torch_dtype": "float16", "vocab_size": 1}
    (tmp_path / "config.json").write_text(json.dumps(config))
    for given in (tmp_path, tmp_path / "config.json"):
        arch = load_model(str(given))
        assert arch.name == "my/model"
        assert kv_size(arch).bytes_per_token == 131072
    assert kv_size(arch, KvCacheDtype.FLOAT32).bytes_per_token == 2 * 131072


def test_a_multimodal_configs_text_config_is_read(tmp_path: Path) -> None:
    config = {"model_type": "vlm", "torch_dtype": "bfloat16",
              "text_config": {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                              "head_dim": 16}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert kv_size(load_model(str(path))).bytes_per_token == 2 * 2 * 16 * 2 * 2


@pytest.mark.parametrize(("config", "message"), [
    ({"num_attention_heads": 8, "hidden_size": 64}, "field 'num_hidden_layers' is missing"),
    ({"num_hidden_layers": 2, "num_attention_heads": 0, "hidden_size": 64}, "'num_attention_heads' must be an integer >= 1"),
    ({"num_hidden_layers": 2, "num_attention_heads": 3, "hidden_size": 64}, "not a multiple"),
    ({"num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 64, "torch_dtype": "int3"}, "'torch_dtype'"),
    ({"num_hidden_layers": 2, "num_attention_heads": 8, "hidden_size": 64, "sliding_window": 8,
      "layer_types": ["full_attention"]}, "one string per layer"),
])
def test_bad_configs_name_the_file_and_the_field(tmp_path: Path, config: dict[str, object], message: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(ModelConfigError, match=message) as info:
        load_model(str(path))
    assert str(path) in str(info.value)


def test_unknown_names_list_the_presets(tmp_path: Path) -> None:
    with pytest.raises(ModelConfigError, match="neither a bundled preset.*DeepSeek-V3"):
        load_model("no/such-model")
    bad = tmp_path / "config.json"
    bad.write_text("{\n  oops\n}")
    with pytest.raises(ModelConfigError, match=r"config.json:2: not JSON"):
        load_model(str(bad))


# Published parameter counts (the model cards): the dense presets' weights estimate agrees to 0.5 %.
PUBLISHED_PARAMS = {
    "meta-llama/Llama-3.1-8B-Instruct": 8.03e9,
    "meta-llama/Llama-3.1-70B-Instruct": 70.6e9,
    "Qwen/Qwen2.5-7B-Instruct": 7.61e9,
    "Qwen/Qwen3-32B": 32.8e9,
    "mistralai/Mistral-7B-Instruct-v0.3": 7.25e9,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_dense_weights_match_the_published_parameter_counts(name: str) -> None:
    w = weights_size(load_model(name))
    assert abs(w.params / PUBLISHED_PARAMS[name] - 1) < 0.005, w.params
    assert w.bytes_per_rank == 2 * w.params  # bfloat16
    assert weights_size(load_model(name), tp=4).bytes_per_rank == -(-2 * w.params // 4)


def test_llama_8b_weights_by_hand() -> None:
    # 32 x (4096*4096 q + 2*4096*1024 k, v + 4096*4096 o + 3*4096*14336 MLP) + 2*128256*4096 embeddings
    assert weights_size(load_model("meta-llama/Llama-3.1-8B-Instruct")).params == (
        32 * (4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 2 * 128256 * 4096)


@pytest.mark.parametrize("name", ["deepseek-ai/DeepSeek-V3", "openai/gpt-oss-20b"])
def test_experts_and_mla_weights_are_not_guessed(name: str) -> None:
    with pytest.raises(ModelConfigError, match="not estimated: give their size"):
        weights_size(load_model(name))
