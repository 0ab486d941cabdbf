"""``dmocker serve``: a live mock prefill/decode cluster on localhost (docs/serve.md).

The building blocks that need no clock and no network:

* the OpenAI-compatible front as pure functions: :mod:`dmocker.serve.openai_api` parses and
  checks request bodies the way vLLM's server checks them and counts text as tokens without a
  tokenizer; :mod:`dmocker.serve.openai_errors` holds the errors in vLLM's (or SGLang's) shape;
  :mod:`dmocker.serve.openai_responses` builds response bodies and SSE chunks;
* :mod:`dmocker.serve.live_check`: every event-log line checked against the spec as it is written;
* :mod:`dmocker.serve.metrics`: the Prometheus metrics a worker exposes, vLLM's names and
  buckets plus dmocker's handoff metrics, as data, and a registry built from them with
  ``prometheus_client`` (the optional ``serve`` extra).

The submodules are imported where they are used: importing this package loads neither.
"""
