"""Mock vLLM and SGLang workers: the engine side of the handoff, shared by replay and conformance; the contract is ``interface``."""

# First: decides whether the compiled (mypyc) modules or their sources load (see _accel.py).
from .._accel import accelerated as accelerated
