"""Mutant coordinators: each one plausible bug, each must be caught by `dmocker check`.

``dmocker check --mutants`` loads ``MUTANTS`` from here and prints the kill table.  The first
five are the documented historical bugs of the reference coordinator.  ``expected`` names the
property that catches the mutant first (in at least one order).
"""

from __future__ import annotations

from dmocker.check.mutants import Mutant

from ._base import WrappedCoordinator
from .historical import (
    DestinationMissingDelayNotValidated,
    InvalidOutcomeJournalled,
    ReopenOnlyForCanceled,
    StartAfterTerminalSubmits,
    TransferLatchedBeforeValidation,
)
from .plausible import (
    ActivateBeforeTransferCompleted,
    CancelDestinationWaitsForReserveAck,
    CancelFailedAsApplied,
    CleanupForgetsUnansweredReserve,
    CleanupIgnoresOutstandingSubmit,
    CompleteBeforeSourceReleased,
    DuplicateHeldReReserves,
    FallbackNotValidated,
    IdsRestartAfterComplete,
    IgnoresTransferCompleted,
    NoCancelDestination,
    NoForeignCheck,
    ReleaseBeforeActivation,
    ReopenCancelsSource,
    ReserveBeforeHeld,
    SilentAfterFailedSubmit,
    StartTransferOnEveryDuplicate,
    StartTransferTwice,
    SubmitBeforeReserved,
)

MUTANTS: tuple[Mutant, ...] = (
    Mutant("start_after_terminal_submits", StartAfterTerminalSubmits,
           "start() after a terminal fact completed the handoff still issues the first action",
           "nothing_after_cancel", historical=True),
    Mutant("reopen_only_for_canceled", ReopenOnlyForCanceled,
           "after success only Canceled reopens cleanup; Failed and TimedOut are ignored",
           "reopen_cancels_destination", historical=True),
    Mutant("invalid_outcome_journalled", InvalidOutcomeJournalled,
           "an invalid outcome is journalled before it is validated",
           "rejection_changes_nothing", historical=True),
    Mutant("dm_delay_not_validated", DestinationMissingDelayNotValidated,
           "the scheduled DESTINATION_MISSING delay is not validated",
           "finite_delay", historical=True),
    Mutant("transfer_latched_before_validation", TransferLatchedBeforeValidation,
           "the transfer is latched as issued before its delay is validated",
           "rejection_changes_nothing", historical=True),
    Mutant("no_cancel_destination", NoCancelDestination,
           "cleanup never issues CancelDestination", "reopen_cancels_destination"),
    Mutant("cancel_destination_waits_for_reserve_ack", CancelDestinationWaitsForReserveAck,
           "CancelDestination deferred until the reserve is acknowledged (a lost ack never cleans up)",
           "cleanup_liveness"),
    Mutant("cleanup_forgets_unanswered_reserve", CleanupForgetsUnansweredReserve,
           "no CancelDestination when a reserve was issued but not acknowledged", "canceled_means_clean"),
    Mutant("cleanup_ignores_outstanding_submit", CleanupIgnoresOutstandingSubmit,
           "no CancelSource for an unacknowledged submit", "canceled_means_clean"),
    Mutant("complete_before_source_released", CompleteBeforeSourceReleased,
           "Complete when ReleaseSource is issued, not when it is acknowledged", "only_cleanup_after_success"),
    Mutant("start_transfer_twice", StartTransferTwice,
           "StartTransfer issued twice", "each_action_once_per_epoch"),
    Mutant("start_transfer_on_every_duplicate", StartTransferOnEveryDuplicate,
           "StartTransfer re-issued on every duplicate fact (infinite state space)", "each_action_once_per_epoch"),
    Mutant("duplicate_held_re_reserves", DuplicateHeldReReserves,
           "duplicate SourceHeld not suppressed: reserves again", "each_action_once_per_epoch"),
    Mutant("release_before_activation", ReleaseBeforeActivation,
           "ReleaseSource issued with ActivateDestination, before it is applied", "release_after_activation"),
    Mutant("activate_before_transfer_completed", ActivateBeforeTransferCompleted,
           "ActivateDestination issued with StartTransfer", "activate_after_transfer"),
    Mutant("reserve_before_held", ReserveBeforeHeld,
           "source-first reserves when the prefill is submitted, not held", "reserve_after_held"),
    Mutant("submit_before_reserved", SubmitBeforeReserved,
           "destination-first submits at start, before the reservation", "submit_after_reserved"),
    Mutant("no_foreign_check", NoForeignCheck,
           "facts for another handoff id are taken as ours", "reserve_after_held"),
    Mutant("cancel_failed_as_applied", CancelFailedAsApplied,
           "a FAILED cancel counts as done instead of CLEANUP_FAILED", "canceled_means_clean"),
    Mutant("fallback_not_validated", FallbackNotValidated,
           "a non-finite fallback delay is scheduled unvalidated", "finite_delay"),
    Mutant("reopen_cancels_source", ReopenCancelsSource,
           "the post-success reopen also cancels the released source", "only_cleanup_after_success"),
    Mutant("ids_restart_after_complete", IdsRestartAfterComplete,
           "action ids restart at 0 after Complete", "api_contract"),
    Mutant("silent_after_failed_submit", SilentAfterFailedSubmit,
           "a FAILED submit swallows cleanup and the coordinator goes quiet", "no_deadlock"),
    Mutant("ignores_transfer_completed", IgnoresTransferCompleted,
           "TransferCompleted dropped: the destination is never activated", "termination"),
)

__all__ = ["MUTANTS", "WrappedCoordinator"]
