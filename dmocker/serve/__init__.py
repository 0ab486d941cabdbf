"""``dmocker serve``: a live mock prefill/decode cluster on localhost (docs/serve.md).

The building blocks that need no clock and no network:

* :mod:`dmocker.serve.openai_api`: the OpenAI-compatible front as pure functions: request
  bodies parsed and checked the way vLLM's server checks them, errors in vLLM's (or SGLang's)
  shape, text counted as tokens without a tokenizer, response bodies and SSE chunks built;
* :mod:`dmocker.serve.metrics`: the Prometheus metrics a worker exposes, vLLM's names and
  buckets plus dmocker's handoff metrics, as data, and a registry built from them with
  ``prometheus_client`` (the optional ``serve`` extra).

The submodules are imported where they are used: importing this package loads neither.
"""
