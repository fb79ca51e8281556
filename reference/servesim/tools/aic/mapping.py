"""R74: a servesim step shape (D decoding requests with C context tokens in all, P prefill
tokens; R22) as calls to aiconfigurator's step estimator, and its answer as a duration.

aiconfigurator times a step from the tokens it prefills, the requests it decodes and one
sequence length ``isl`` that it uses both for the prefill's attention and, as
``isl + osl div 2 + 1``, for every decoding request's attention. A servesim shape has two
lengths (a prefill of P tokens; decoding requests of C / D context tokens on average), so R74
asks twice and keeps each part from the call that has its length:

- P tokens are one sequence with no cached prefix: ``isl = P``;
- a decoding request attends to its context: ``osl = 1`` and ``isl = s - 1`` so that the
  estimator's length is ``s``, the mean context rounded (halves up) and at least 2.
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.contract.errors import ServesimError
from servesim.contract.model import StepShape
from servesim.tools.aic.estimator import StepEstimator, finite_positive

#: ``osl`` in every call: with it the estimator's decode length is ``isl + 1``.
_OSL = 1
#: The shortest context of a decoding request: a prompt token and one produced token (R22).
_LEAST_CONTEXT = 2


class NoEstimate(ServesimError):
    """The estimator raised, or answered something that is not a duration, for a shape."""


def mean_context(shape: StepShape) -> int:
    """R74: a decoding request's context, ``C / D`` rounded (halves up), at least 2."""
    d, c = shape.decode_requests, shape.context_tokens
    return max(_LEAST_CONTEXT, (2 * c + d) // (2 * d))


def step_ms(estimator: StepEstimator, shape: StepShape) -> float:
    """R74: the estimator's step time in milliseconds. With P = 0 it is the decode-only step;
    with D = 0 the mixed step without decodes; with both, the mixed step's non-attention and
    prefill-attention parts at ``isl = P`` plus its decode-attention part at the requests'
    length. A shape with no work (D = P = 0, never a step) is timed as P = 1."""
    d, p = shape.decode_requests, shape.prefill_tokens
    try:
        if d == 0:
            tokens = max(p, 1)
            total, *_ = estimator.mixed_step_breakdown(tokens, 0, tokens, _OSL)
            value = total
        elif p == 0:
            value = estimator.decode_step_latency(d, mean_context(shape) - 1, _OSL)
        else:
            _, shared, prefill, _ = estimator.mixed_step_breakdown(p, d, p, _OSL)
            *_, decode = estimator.mixed_step_breakdown(p, d, mean_context(shape) - 1, _OSL)
            value = shared + prefill + decode
    except (ValueError, RuntimeError, OverflowError) as error:
        raise NoEstimate(
            f"aiconfigurator-core has no estimate for {_shown(shape)}: {error}"
        ) from None
    if not finite_positive(value):
        raise NoEstimate(
            f"aiconfigurator-core's estimate for {_shown(shape)} is {value} ms, not a duration"
        )
    return value


def duration_us(milliseconds: float) -> int:
    """R74: milliseconds as whole microseconds, rounded (halves up), at least 1."""
    return max(1, int(milliseconds * 1000 + 0.5))


@dataclass
class ShapeTimer:
    """R74 with its answers kept: the grid and its accuracy ask for many shapes twice."""

    estimator: StepEstimator
    calls: int = 0

    def __post_init__(self) -> None:
        self._known: dict[StepShape, float] = {}

    def us(self, shape: StepShape) -> float:
        """The estimate in (fractional) microseconds."""
        found = self._known.get(shape)
        if found is None:
            self.calls += 1
            found = self._known[shape] = step_ms(self.estimator, shape) * 1000
        return found


def _shown(shape: StepShape) -> str:
    return (
        f"decode_requests {shape.decode_requests}, context_tokens {shape.context_tokens}, "
        f"prefill_tokens {shape.prefill_tokens}"
    )
