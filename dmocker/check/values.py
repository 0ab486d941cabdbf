"""The environment's fixed value set: every payload the adversarial environment may deliver.

The checker explores *all* interleavings, so the state space is the product of the protocol's
control states with the payload values a fact can carry.  The set below is deliberately small
(six timings, three token counts, three fallback values, spread over four roots) yet contains every value class
that has ever broken a coordinator:

Values are grouped into exploration roots (see :class:`InitialConfig`); across the roots:

- timings with a model (finite delay) and without one (the fallback is used);
- bandwidth 0 (no model: fallback), NaN and negative (INVALID_BANDWIDTH);
- a tiny bandwidth, 1e-300, in DESTINATION_MISSING mode with a 0-token prompt: the full-prompt
  delay that SourceHeld validates is 0.0 (finite), but the delay actually scheduled for
  2^60 missing tokens overflows to +inf (INVALID_DELAY at StartTransfer time);
- transferable token counts 0, 8 (small) and 2^60 (huge);
- fallback delays 0.0 and 1.0 given to the constructor, and +inf assigned to the
  ``fallback_transfer_delay_ms`` attribute after construction (the constructor rejects it);
- facts carrying a foreign handoff id;
- outcomes of every kind for every issued action id, and one for an id never issued.

Loss needs no value: the environment may simply never deliver something.  A value set is a
plain frozen value, so a caller may pass a smaller or larger one to :func:`explore`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dmocker.handoff import (
    Canceled,
    DestinationReserved,
    Failed,
    Fact,
    OutcomeKind,
    SourceHeld,
    TimedOut,
    TransferCompleted,
    TransferTiming,
    TransferTimingMode,
)

HUGE_TOKENS = 2**60


@dataclass(frozen=True, slots=True)
class InitialConfig:
    """One exploration root: how the coordinator is built and which payloads facts carry.

    Payloads are bounded per root (each root is one small exploration) because the state
    space is the product of the protocol's control states with the stored payloads: one
    root with every timing and every token count would be ~4x larger than these four roots
    together, for no extra coverage (the token count only matters in DESTINATION_MISSING mode,
    the fallback only without a model).

    ``after_construction`` (when not None) is assigned to ``fallback_transfer_delay_ms`` right
    after construction: the only way to give a coordinator a non-finite fallback, since the
    constructor must reject one.  ``fair_timing`` / ``fair_tokens`` are what a cooperative
    environment delivers when a fact is due (termination check); they must be in the sets.
    """

    label: str
    fallback_transfer_delay_ms: float
    after_construction: float | None
    timings: tuple[TransferTiming, ...]
    tokens: tuple[int, ...]
    fair_timing: TransferTiming
    fair_tokens: int
    #: False where some payload history legitimately makes the transfer impossible (then only
    #: a terminal fact ends the handoff, which cleanup liveness covers).
    termination_required: bool = True

    def __post_init__(self) -> None:
        if self.fair_timing not in self.timings or self.fair_tokens not in self.tokens:
            raise ValueError(f"root {self.label!r}: the fair payloads must be among the root's payloads")

    @property
    def fair_payloads(self) -> dict[str, object]:
        """The fair facts' payload fields by name (the spec's ``facts.X.payload`` names)."""
        return {"transfer_timing": self.fair_timing, "transferable_prompt_tokens": self.fair_tokens}

    @property
    def effective_fallback(self) -> float:
        return self.fallback_transfer_delay_ms if self.after_construction is None else self.after_construction


    def facts(self, handoff_id: str, foreign_id: str) -> tuple[Fact, ...]:
        """Every fact the environment may deliver in this root, own id first, then foreign."""
        own = handoff_id
        out: list[Fact] = [SourceHeld(own, t) for t in self.timings]
        out.extend(DestinationReserved(own, n) for n in self.tokens)
        out.append(TransferCompleted(own))
        out.extend((Failed(own), TimedOut(own), Canceled(own)))
        other = foreign_id
        out.extend(
            (
                SourceHeld(other, self.fair_timing),
                DestinationReserved(other, self.fair_tokens),
                TransferCompleted(other),
                Failed(other),
                TimedOut(other),
                Canceled(other),
            )
        )
        return tuple(out)


@dataclass(frozen=True, slots=True)
class ValueSet:
    """Everything the environment may send; see the module docstring for why each value."""

    handoff_id: str
    foreign_id: str
    configs: tuple[InitialConfig, ...]
    outcome_kinds: tuple[OutcomeKind, ...]

    def describe(self) -> list[str]:
        """Human-readable lines for reports and docs."""
        lines = [f"handoff id {self.handoff_id!r}; foreign id {self.foreign_id!r} (every fact kind)"]
        for c in self.configs:
            lines.append(f"root {c.label}:")
            for t in c.timings:
                lines.append(
                    "  SourceHeld timing: mode={} full_prompt_tokens={} kv_bytes_per_token={} bandwidth_gb_s={}".format(
                        t.mode.value, t.full_prompt_tokens, t.kv_bytes_per_token, t.bandwidth_gb_s
                    )
                )
            lines.append("  DestinationReserved tokens: " + ", ".join(str(n) for n in c.tokens))
        lines.append("outcome kinds (for every issued id, and one never-issued id): " + ", ".join(k.value for k in self.outcome_kinds))
        return lines


_FP = TransferTimingMode.FULL_PROMPT
_DM = TransferTimingMode.DESTINATION_MISSING
NO_MODEL = TransferTiming(_FP, 8)
MODEL = TransferTiming(_FP, 8, kv_bytes_per_token=1_000_000, bandwidth_gb_s=1.0)  # 8.0 ms
BANDWIDTH_ZERO = TransferTiming(_FP, 8, kv_bytes_per_token=1_000_000, bandwidth_gb_s=0.0)  # no model
BANDWIDTH_NAN = TransferTiming(_FP, 8, kv_bytes_per_token=1_000_000, bandwidth_gb_s=math.nan)
BANDWIDTH_NEGATIVE = TransferTiming(_FP, 8, kv_bytes_per_token=1_000_000, bandwidth_gb_s=-1.0)
#: full-prompt delay of a 0-token prompt is 0.0 (finite); 2^60 missing tokens overflow to inf
TINY_BANDWIDTH_DM = TransferTiming(_DM, 0, kv_bytes_per_token=1_000_000, bandwidth_gb_s=1e-300)

DEFAULT_VALUES = ValueSet(
    handoff_id="h",
    foreign_id="other",
    configs=(
        InitialConfig(
            "fallback=0.0; timings with and without a model, NaN and negative bandwidth; tokens 8",
            0.0, None, (NO_MODEL, MODEL, BANDWIDTH_NAN, BANDWIDTH_NEGATIVE), (8,), MODEL, 8,
        ),
        InitialConfig(
            "fallback=1.0; bandwidth 0 (no model); tokens 2^60",
            1.0, None, (BANDWIDTH_ZERO,), (HUGE_TOKENS,), BANDWIDTH_ZERO, HUGE_TOKENS,
        ),
        InitialConfig(
            "fallback=0.0; DESTINATION_MISSING at bandwidth 1e-300; tokens 0 and 2^60 (overflows to inf)",
            0.0, None, (TINY_BANDWIDTH_DM,), (0, HUGE_TOKENS), TINY_BANDWIDTH_DM, 0,
            termination_required=False,  # destination-first may take 2^60 tokens before SourceHeld
        ),
        InitialConfig(
            "fallback=inf assigned after construction; no model; tokens 8",
            0.0, math.inf, (NO_MODEL,), (8,), NO_MODEL, 8,
            termination_required=False,  # no model + infinite fallback: StartTransfer is never valid
        ),
    ),
    outcome_kinds=tuple(OutcomeKind),
)
