"""R75: the grid's axes, where points go (more where the estimator's curve bends), and the
feasible shapes the axes are tested on and the accuracy is measured on.

Every choice is a pure function of the limits, the options and the estimator's answers, so the
same estimator gives the same grid byte for byte.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from servesim.contract.model import StepShape
from servesim.engine.routing import SplitMix64

#: The probe values per axis, spaced geometrically between the axis's ends (R75).
_PROBES = 5


@dataclass(frozen=True, slots=True)
class Limits:
    """The scheduler limits the grid covers (R40's ``limits``)."""

    max_num_seqs: int
    max_batched_tokens: int
    max_model_len: int

    @property
    def max_context(self) -> int:
        return self.max_num_seqs * self.max_model_len

    def feasible(self, shape: StepShape) -> bool:
        """Whether a replay under these limits can form a step of this shape (R17 to R22):
        some work; every decoding request with 2 to ``max_model_len`` context tokens; at most
        ``max_batched_tokens`` tokens and ``max_num_seqs`` decodes in all."""
        d, c, p = shape.decode_requests, shape.context_tokens, shape.prefill_tokens
        if d + p == 0 or d + p > self.max_batched_tokens or d > self.max_num_seqs:
            return False
        if d == 0:
            return c == 0
        return 2 * d <= c <= d * self.max_model_len


def geometric(low: int, high: int, count: int) -> list[int]:
    """``count`` integers from ``low`` to ``high`` (both included, low >= 1), spaced evenly on a
    log scale, rounded, without repeats."""
    if high <= low:
        return [low]
    values = {low, high}
    for index in range(1, count - 1):
        values.add(round(low * (high / low) ** (index / (count - 1))))
    return sorted(values)


def _start(name: str, limits: Limits) -> list[int]:
    high = {
        "decode_requests": limits.max_num_seqs,
        "context_tokens": limits.max_context,
        "prefill_tokens": limits.max_batched_tokens,
    }[name]
    least = 2 if name == "context_tokens" else 1
    return sorted({0, min(least, high), high})


def _probes(name: str, limits: Limits) -> list[int]:
    return [0, *geometric(2 if name == "context_tokens" else 1, _start(name, limits)[-1], _PROBES)]


_NAMES = ("decode_requests", "context_tokens", "prefill_tokens")


def _shape(name: str, value: int, others: tuple[int, int]) -> StepShape:
    coordinates = dict(zip((n for n in _NAMES if n != name), others, strict=True))
    coordinates[name] = value
    return StepShape(**coordinates)


def _weight(span: tuple[int, int], found: tuple[float, int]) -> float:
    """How much an interval's miss matters: the miss times the interval's width on a log scale,
    the share of a log-uniform draw it takes (a jump between two adjacent tokens matters less
    than a bend over hundreds)."""
    low, high = span
    return found[0] * math.log((high + 1) / (low + 1))


def refine_axis(
    name: str,
    limits: Limits,
    us: Callable[[StepShape], float],
    tolerance: float,
    most: int,
) -> tuple[int, ...]:
    """R75: one axis's points. Start from 0, the least positive value and the limit. Judge each
    interval by how far its straight line misses the estimator (relative), over every feasible
    probe line (the other two axes at their probe values), at five points: just inside each
    end, and three a quarter apart (off the powers of two, where the estimator's tables have
    their edges). While the axis has fewer than ``most`` points, split, of the intervals that
    miss by more than ``tolerance``, the one whose miss times its width on a log scale is the
    largest: at the point just inside an end when that is where it misses most (a jump next to a
    point: the estimator's tables step at multiples of 512 prefill tokens), else at its
    midpoint."""
    points = _start(name, limits)
    others = [n for n in _NAMES if n != name]
    lines = list(itertools.product(_probes(others[0], limits), _probes(others[1], limits)))

    def miss(low: int, high: int) -> tuple[float, int]:
        worst, where = 0.0, (low + high) // 2
        tested = sorted(
            {low + 1, high - 1, *(low + 1 + (high - low - 2) * q // 4 for q in (1, 2, 3))}
        )
        for line in lines:
            left, right = us(_shape(name, low, line)), us(_shape(name, high, line))
            for at in tested:
                if not low < at < high or not limits.feasible(_shape(name, at, line)):
                    continue
                straight = left + (right - left) * (at - low) / (high - low)
                truth = us(_shape(name, at, line))
                error = abs(straight - truth) / truth
                if error > worst:
                    worst, where = error, at
        if where not in (low + 1, high - 1):
            where = (low + high) // 2
        return worst, where

    misses = {
        (low, high): miss(low, high) for low, high in itertools.pairwise(points) if high - low >= 2
    }
    while len(points) < most and misses:
        over = {span: found for span, found in misses.items() if found[0] > tolerance}
        if not over:
            break
        (low, high), (_, split) = max(over.items(), key=lambda item: (_weight(*item), -item[0][0]))
        del misses[(low, high)]
        points.append(split)
        points.sort()
        for part_low, part_high in ((low, split), (split, high)):
            if part_high - part_low >= 2:
                misses[(part_low, part_high)] = miss(part_low, part_high)
    return tuple(points)


# --- held-out shapes (R75's accuracy) -------------------------------------------------------


def _unit(generator: SplitMix64) -> float:
    return generator.next() / 2**64


def _log_between(generator: SplitMix64, low: int, high: int) -> int:
    """An integer in [low, high] (low >= 1), log-uniform."""
    if high <= low:
        return low
    value = round(math.exp(math.log(low) + _unit(generator) * math.log(high / low)))
    return min(high, max(low, value))


def _pick(generator: SplitMix64, values: Sequence[int]) -> int:
    return values[generator.next() % len(values)]


def held_out(
    axes: tuple[Sequence[int], Sequence[int], Sequence[int]],
    limits: Limits,
    count: int,
    seed: int,
) -> dict[str, list[StepShape]]:
    """R75: ``count`` feasible shapes per set, drawn with SplitMix64 (R14) from ``seed``: for each
    axis, shapes off the grid on that axis only (the other two coordinates grid points), which
    isolates that axis's interpolation; and ``all``, shapes drawn like a replay's steps (a
    decode count log-uniform, a per-request context log-uniform from 2 to ``max_model_len``, a
    quarter without prefill, an eighth without decodes)."""
    generator = SplitMix64(seed)
    found: dict[str, list[StepShape]] = {name: [] for name in (*_NAMES, "all")}

    def draw(name: str) -> StepShape:
        if name == "all":
            d = 0 if generator.next() % 8 == 0 else _log_between(generator, 1, limits.max_num_seqs)
            c = 0 if d == 0 else d * _log_between(generator, 2, limits.max_model_len)
            room = limits.max_batched_tokens - d
            p = (
                0
                if (d and generator.next() % 4 == 0) or room < 1
                else (_log_between(generator, 1, room))
            )
            return StepShape(d, c, p)
        d, c, p = (_pick(generator, axis) for axis in axes)
        if name == "decode_requests":
            d = _log_between(generator, 1, limits.max_num_seqs)
        elif name == "context_tokens":
            c = 0 if d == 0 else _log_between(generator, 2 * d, d * limits.max_model_len)
        else:
            p = _log_between(generator, 1, max(1, limits.max_batched_tokens - d))
        return StepShape(d, c, p)

    for name, shapes in found.items():
        attempts = 0
        while len(shapes) < count and attempts < 1000 * count:
            attempts += 1
            shape = draw(name)
            if limits.feasible(shape):
                shapes.append(shape)
    return found


def all_points(axes: tuple[Sequence[int], Sequence[int], Sequence[int]]) -> Iterator[StepShape]:
    """Every grid point, in R41's order (decode, then context, then prefill)."""
    for d, c, p in itertools.product(*axes):
        yield StepShape(d, c, p)
