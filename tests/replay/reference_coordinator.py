"""The independent reference model (tests/handoff/reference_model.py) as a replay coordinator.

It takes ``fallback_transfer_delay_ms`` as a keyword like any coordinator ``dmocker check`` and
``dmocker replay --coordinator`` accept.
"""

from __future__ import annotations

from dmocker.handoff import HandoffOrder

from tests.handoff.reference_model import ReferenceModel


class ReferenceCoordinator(ReferenceModel):
    def __init__(self, handoff_id: object, order: HandoffOrder, *, fallback_transfer_delay_ms: float = 0.0) -> None:
        super().__init__(handoff_id, order, fallback_transfer_delay_ms)
