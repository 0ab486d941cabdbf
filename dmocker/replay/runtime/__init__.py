"""The replay runtime: the parts of a prefill/decode cluster that execute each request's handoff,
composed by :class:`DisaggRuntime` and driven by its event loop (see :mod:`.loop`)."""

from ..request_state import Phase, Stage
from .agg import AggRuntime
from .control import ClusterControl
from .executor import ActionExecutor
from .handoffs import CoordinatorFactory
from .loop import DisaggRuntime, RuntimeResult

__all__ = ["ActionExecutor", "AggRuntime", "ClusterControl", "CoordinatorFactory", "DisaggRuntime", "Phase", "RuntimeResult", "Stage"]
