"""Two leaky coordinators for the fuzz tests: each skips one cleanup yet still completes.

Both pretend the skipped action was acknowledged, so the handoff completes as if all were well
and only the cluster's end state shows the leak: KV still reserved on a decode worker, or a
source still held on a prefill worker.  Built on the mutant wrapper (public API only).
"""

from __future__ import annotations

from dmocker.handoff import CancelDestination, IssuedAction, Outcome, OutcomeKind, ReleaseSource

from dmocker.check.mutant_catalogue import WrappedCoordinator


class NeverCancelsDestination(WrappedCoordinator):
    """Cleanup never cancels the destination; it answers its own CancelDestination Noop."""

    def _translate(self, ia: IssuedAction) -> list[IssuedAction]:
        if isinstance(ia.action, CancelDestination):
            return self._ack_inner(ia.id, Outcome(OutcomeKind.NOOP))
        return super()._translate(ia)


class SkipsReleaseSource(WrappedCoordinator):
    """Never releases the source after a successful handoff; answers its own ReleaseSource Applied."""

    def _translate(self, ia: IssuedAction) -> list[IssuedAction]:
        if isinstance(ia.action, ReleaseSource):
            return self._ack_inner(ia.id, Outcome(OutcomeKind.APPLIED))
        return super()._translate(ia)
