"""The KV cache element types ``--kv-cache-dtype`` takes (a module of its own: the replay's
configuration reads it without loading the model readers)."""

from __future__ import annotations

import enum

__all__ = ["KvCacheDtype"]


class KvCacheDtype(enum.Enum):
    """The KV cache element type (vLLM's ``--kv-cache-dtype`` names)."""

    AUTO = "auto"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT32 = "float32"
    FP8 = "fp8"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"
