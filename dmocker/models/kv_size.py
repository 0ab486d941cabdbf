"""KV cache bytes per token of a model, from its Hugging Face style ``config.json``.

What a serving engine keeps per token and layer (vLLM ``vllm/config/model.py``
``get_num_kv_heads`` / ``get_head_size``, and its MLA attention backends; SGLang
``python/sglang/srt/model_executor/model_runner.py``, ``cell_size``):

* standard attention (MHA, GQA, MQA): a key and a value vector per KV head,
  ``2 x kv_heads x head_dim`` elements.  Tensor parallelism splits the KV heads across ranks;
  with fewer KV heads than ranks each rank keeps one (the heads are replicated), so a rank holds
  ``max(1, kv_heads // tp)`` heads;
* multi-head latent attention (DeepSeek V2/V3, ``kv_lora_rank`` in the config): one compressed
  latent of ``kv_lora_rank`` elements plus the decoupled rotary key of ``qk_rope_head_dim``,
  shared by all heads, with no separate value (no x2), and the same on every rank (not split by
  tensor parallelism).

Layers with a sliding window (``sliding_window`` for every layer, or ``layer_types`` naming
``sliding_attention`` layers) keep at most ``sliding_window`` tokens each; :class:`KvSize`
says how many bytes a request of ``n`` tokens holds (:meth:`KvSize.bytes_for`), and splits the
per-token bytes into full-attention and windowed layers.

The element size is the KV cache dtype: ``auto`` is the model's own ``torch_dtype`` (or
``dtype``), as in vLLM's ``--kv-cache-dtype auto``; ``fp8`` (``fp8_e4m3``, ``fp8_e5m2``) is one
byte.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from .dtypes import KvCacheDtype

__all__ = ["AttentionKind", "KvSize", "ModelArch", "ModelConfigError", "Weights", "kv_size", "weights_size"]


class ModelConfigError(ValueError):
    """A model configuration that cannot be read: the message names its source and the field."""


class AttentionKind(enum.Enum):
    """How a layer's KV cache is laid out."""

    STANDARD = "standard"  # MHA / GQA / MQA: K and V per KV head
    MLA = "mla"  # multi-head latent attention: one latent + rotary key per token


#: Bytes per element of the dtypes a config's ``torch_dtype`` and ``--kv-cache-dtype`` name.
_DTYPE_BYTES: Mapping[str, int] = {
    "bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
}


@dataclass(frozen=True)
class ModelArch:
    """What the KV cache size depends on, read from a config (:meth:`from_config`)."""

    name: str
    source: str  # where it was read: a file path or a preset's published config
    attention: AttentionKind
    num_layers: int
    num_kv_heads: int  # standard attention: KV heads of the whole model
    head_dim: int  # standard attention
    kv_lora_rank: int  # MLA: the latent's width
    qk_rope_head_dim: int  # MLA: the rotary key's width
    dtype: str  # the model's own dtype (torch_dtype)
    sliding_window: int | None  # tokens a windowed layer keeps
    sliding_layers: int  # how many of num_layers are windowed
    experts: bool = False  # a mixture of experts (its weights are not estimated)
    # the other sizes weights_size needs (0: the config does not give them)
    num_attention_heads: int = 0
    hidden_size: int = 0
    intermediate_size: int = 0
    vocab_size: int = 0
    tie_word_embeddings: bool = False

    @staticmethod
    def from_config(config: Mapping[str, object], *, name: str, source: str) -> ModelArch:
        """Read the fields the KV size needs; :class:`ModelConfigError` names a missing or bad
        one.  A multimodal config's ``text_config`` is read for the language model."""
        text = config.get("text_config")
        if isinstance(text, Mapping):
            merged = dict(config)
            merged.update(text)
            config = merged

        def integer(field: str, *, default: int | None = None, minimum: int = 1) -> int:
            value = config.get(field, default)
            if value is None:
                raise ModelConfigError(f"{source}: field {field!r} is missing")
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ModelConfigError(f"{source}: field {field!r} must be an integer >= {minimum}, not {value!r}")
            return value

        layers = integer("num_hidden_layers")
        dtype_value = config.get("torch_dtype", config.get("dtype", "bfloat16"))
        if not isinstance(dtype_value, str) or dtype_value not in _DTYPE_BYTES:
            raise ModelConfigError(f"{source}: field 'torch_dtype' must be one of "
                                   f"{', '.join(sorted(_DTYPE_BYTES))}, not {dtype_value!r}")
        window, windowed = _windows(config, layers, source)
        experts = any(config.get(k) for k in _EXPERT_FIELDS)
        if config.get("kv_lora_rank") is not None:
            return ModelArch(name, source, AttentionKind.MLA, layers, 0, 0, integer("kv_lora_rank"),
                             integer("qk_rope_head_dim", minimum=0), dtype_value, window, windowed,
                             experts=experts)
        heads = integer("num_attention_heads")
        kv_heads = integer("num_key_value_heads", default=heads)
        if config.get("head_dim") is not None:
            head_dim = integer("head_dim")
        else:
            hidden = integer("hidden_size")
            if hidden % heads:
                raise ModelConfigError(f"{source}: no 'head_dim', and hidden_size {hidden} is not a multiple "
                                       f"of num_attention_heads {heads}")
            head_dim = hidden // heads
        def size(field: str) -> int:
            return integer(field) if config.get(field) is not None else 0

        return ModelArch(name, source, AttentionKind.STANDARD, layers, kv_heads, head_dim, 0, 0, dtype_value,
                         window, windowed, experts, num_attention_heads=heads, hidden_size=size("hidden_size"),
                         intermediate_size=size("intermediate_size"), vocab_size=size("vocab_size"),
                         tie_word_embeddings=bool(config.get("tie_word_embeddings", False)))


#: Config fields whose presence marks a mixture of experts (Mixtral, Qwen-MoE, DeepSeek, gpt-oss).
_EXPERT_FIELDS = ("num_local_experts", "num_experts", "n_routed_experts")


def _windows(config: Mapping[str, object], layers: int, source: str) -> tuple[int | None, int]:
    """(the sliding window, how many layers use it) as the config says.

    ``layer_types`` (one entry per layer) names the windowed layers; without it a
    ``sliding_window`` applies to every layer, unless ``use_sliding_window`` is false (Qwen2
    configs carry a window they do not use)."""
    window = config.get("sliding_window")
    if window is None or config.get("use_sliding_window") is False:
        return None, 0
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ModelConfigError(f"{source}: field 'sliding_window' must be a positive integer or null, not {window!r}")
    types = config.get("layer_types")
    if types is None:
        return window, layers
    if not isinstance(types, list) or len(types) != layers or not all(isinstance(t, str) for t in types):
        raise ModelConfigError(f"{source}: field 'layer_types' must list one string per layer ({layers})")
    windowed = sum(1 for t in types if t == "sliding_attention")
    return (window, windowed) if windowed else (None, 0)


@dataclass(frozen=True)
class KvSize:
    """A model's KV cache per token on one tensor-parallel rank, with how it was computed."""

    full_bytes_per_token: int  # the layers that keep every token
    window_bytes_per_token: int  # the windowed layers, for the tokens they keep
    window: int | None
    arithmetic: str  # the computation, for the report and the docs

    @property
    def bytes_per_token(self) -> int:
        """Per token of a sequence no longer than the window (every layer holds it)."""
        return self.full_bytes_per_token + self.window_bytes_per_token

    def bytes_for(self, tokens: int) -> int:
        """KV bytes a sequence of ``tokens`` holds: windowed layers keep the last ``window``."""
        kept = tokens if self.window is None else min(tokens, self.window)
        return self.full_bytes_per_token * tokens + self.window_bytes_per_token * kept


def kv_size(arch: ModelArch, kv_cache_dtype: KvCacheDtype = KvCacheDtype.AUTO, tp: int = 1) -> KvSize:
    """The KV cache bytes per token of ``arch`` on one of ``tp`` tensor-parallel ranks."""
    if tp < 1:
        raise ModelConfigError(f"tensor parallel size must be >= 1, not {tp}")
    dtype = arch.dtype if kv_cache_dtype is KvCacheDtype.AUTO else kv_cache_dtype.value
    elem = _DTYPE_BYTES[dtype]
    if arch.attention is AttentionKind.MLA:
        per_layer = (arch.kv_lora_rank + arch.qk_rope_head_dim) * elem
        how = (f"({arch.kv_lora_rank} latent + {arch.qk_rope_head_dim} rotary key) x {elem} B ({dtype})"
               " per layer, not split by tensor parallelism")
    else:
        heads = max(1, arch.num_kv_heads // tp)
        per_layer = 2 * heads * arch.head_dim * elem
        split = f"{arch.num_kv_heads} KV heads / TP {tp}" if tp > 1 else f"{arch.num_kv_heads} KV heads"
        how = f"2 (K, V) x {heads} ({split}) x {arch.head_dim} head dim x {elem} B ({dtype}) per layer"
    full_layers = arch.num_layers - arch.sliding_layers
    full = full_layers * per_layer
    windowed = arch.sliding_layers * per_layer
    arithmetic = f"{how} = {per_layer} B; x {full_layers} layers = {full} B per token"
    if arch.sliding_layers:
        arithmetic += (f"; {arch.sliding_layers} sliding-window layers x {per_layer} B = {windowed} B per token"
                       f" for the last {arch.sliding_window} tokens")
    return KvSize(full, windowed, arch.sliding_window, arithmetic)


@dataclass(frozen=True)
class Weights:
    """A model's weights on one tensor-parallel rank, with how the size was computed."""

    params: int  # of the whole model
    bytes_per_rank: int
    arithmetic: str


def weights_size(arch: ModelArch, tp: int = 1) -> Weights:
    """The weights of a dense transformer (standard attention, gated MLP, as Llama, Qwen and
    Mistral are) from its config, in its own dtype, split evenly over ``tp`` ranks.  Norms and
    biases (a few millionths of the total) are left out.  A mixture of experts, MLA and
    quantized checkpoints are not estimated: :class:`ModelConfigError` asks for the size."""
    if tp < 1:
        raise ModelConfigError(f"tensor parallel size must be >= 1, not {tp}")
    if arch.experts or arch.attention is not AttentionKind.STANDARD or not (
            arch.hidden_size and arch.intermediate_size and arch.vocab_size):
        why = ("a mixture of experts" if arch.experts else "multi-head latent attention"
               if arch.attention is AttentionKind.MLA else "a config without hidden_size, intermediate_size and vocab_size")
        raise ModelConfigError(f"{arch.source}: the weights of {why} are not estimated: give their size "
                               "(--weights-gb)")
    hidden, inter, vocab = arch.hidden_size, arch.intermediate_size, arch.vocab_size
    q = arch.num_attention_heads * arch.head_dim
    kv = arch.num_kv_heads * arch.head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden  # q, k, v, o projections
    mlp = 3 * hidden * inter  # gate, up, down
    embeddings = vocab * hidden * (1 if arch.tie_word_embeddings else 2)  # input, and output unless tied
    params = arch.num_layers * (attention + mlp) + embeddings
    elem = _DTYPE_BYTES[arch.dtype]
    per_rank = -(-params * elem // tp)
    arithmetic = (f"{arch.num_layers} layers x ({attention:,} attention + {mlp:,} MLP) + {embeddings:,} embeddings "
                  f"= {params:,} parameters x {elem} B ({arch.dtype})" + (f" / TP {tp}" if tp > 1 else "")
                  + f" = {per_rank:,} B")
    return Weights(params, per_rank, arithmetic)
