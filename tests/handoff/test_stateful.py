"""Our coordinator under the stateful kit (the same kit users point at their own).

Each order runs twice: a short run for the quick loop and the profile's full run, marked slow.
"""

import pytest
from hypothesis import settings

from dmocker.handoff import HandoffCoordinator, HandoffOrder
from dmocker.testing import coordinator_state_machine

SourceFirstMachine = coordinator_state_machine(HandoffCoordinator, HandoffOrder.SOURCE_FIRST)
DestinationFirstMachine = coordinator_state_machine(HandoffCoordinator, HandoffOrder.DESTINATION_FIRST)
_FULL = settings(SourceFirstMachine.TestCase.settings, stateful_step_count=40)
_SHORT = settings(_FULL, max_examples=20)


@pytest.mark.slow
class TestSourceFirst(SourceFirstMachine.TestCase):
    settings = _FULL


@pytest.mark.slow
class TestDestinationFirst(DestinationFirstMachine.TestCase):
    settings = _FULL


class TestSourceFirstShort(SourceFirstMachine.TestCase):
    settings = _SHORT


class TestDestinationFirstShort(DestinationFirstMachine.TestCase):
    settings = _SHORT
