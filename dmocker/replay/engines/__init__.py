"""Mock vLLM and SGLang engines for the disaggregated replay; the contract is ``interface``."""
