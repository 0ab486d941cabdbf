"""Mock vLLM and SGLang workers: the engine side of the handoff, shared by replay and conformance;
the contract is ``interface``, the engines by name are ``registry``."""
