"""Our coordinator under the stateful kit (the same kit users point at their own)."""

from hypothesis import settings

from dmocker.handoff import HandoffCoordinator, HandoffOrder
from dmocker.testing import coordinator_state_machine

SourceFirstMachine = coordinator_state_machine(HandoffCoordinator, HandoffOrder.SOURCE_FIRST)
DestinationFirstMachine = coordinator_state_machine(HandoffCoordinator, HandoffOrder.DESTINATION_FIRST)

TestSourceFirst = SourceFirstMachine.TestCase
TestDestinationFirst = DestinationFirstMachine.TestCase
TestSourceFirst.settings = settings(TestSourceFirst.settings, stateful_step_count=40)
TestDestinationFirst.settings = settings(TestDestinationFirst.settings, stateful_step_count=40)
