"""Models: what a model's architecture means for the replay (``--model NAME|PATH``).

:func:`dmocker.models.load.load_model` reads a bundled preset or a Hugging Face style
``config.json``; :func:`dmocker.models.kv_size.kv_size` derives the KV cache bytes per token on
one tensor-parallel rank for a KV cache dtype (:class:`dmocker.models.dtypes.KvCacheDtype`),
with the arithmetic that gave it (docs/models.md).  The submodules are imported where they are
used, so that a replay without ``--model`` does not load the readers.
"""
