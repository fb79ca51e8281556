"""The validated input documents, as plain immutable data.

These classes are built only by ``servesim.documents`` after a document has passed its schema and
the semantic checks of SPEC.md R4, so the simulator never re-checks them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

RoutingPolicyName = Literal["round_robin", "random"]
PrefillMode = Literal["whole", "chunked"]


@dataclass(frozen=True, slots=True)
class Request:
    """One workload request (SPEC.md section 3)."""

    id: str
    arrival_us: int
    prompt_tokens: int
    max_output_tokens: int


@dataclass(frozen=True, slots=True)
class Workload:
    """The requests in document order; ``position`` in the report means the index here."""

    requests: tuple[Request, ...]


@dataclass(frozen=True, slots=True)
class Routing:
    """The routing policy; ``seed`` is set exactly when ``policy`` is ``"random"``."""

    policy: RoutingPolicyName
    seed: int | None = None


@dataclass(frozen=True, slots=True)
class SchedulerLimits:
    """Per-worker continuous-batching limits (SPEC.md section 5).

    ``max_chunk_tokens`` is set exactly when ``prefill_mode`` is ``"chunked"``.
    """

    max_num_seqs: int
    max_batched_tokens: int
    max_model_len: int
    prefill_mode: PrefillMode
    max_chunk_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Scenario:
    """The fleet, its routing policy and its scheduler limits."""

    workers: int
    routing: Routing
    scheduler: SchedulerLimits


@dataclass(frozen=True, slots=True)
class SyntheticLinearTiming:
    """The v1 timing model: a linear cost in nanoseconds, rounded up to microseconds (R22)."""

    step_overhead_ns: int
    prefill_token_ns: int
    decode_token_ns: int

    def step_duration_us(self, *, decode_requests: int, prefill_tokens: int) -> int:
        """R22: ``ceil((overhead + prefill * per_prefill + decode * per_decode) / 1000)``."""
        total_ns = (
            self.step_overhead_ns
            + prefill_tokens * self.prefill_token_ns
            + decode_requests * self.decode_token_ns
        )
        return -(-total_ns // 1000)


@dataclass(frozen=True, slots=True)
class TimingProfile:
    """A timing profile document; v1 knows one model kind."""

    model: SyntheticLinearTiming
