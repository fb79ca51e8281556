"""R24's one rounding: an exact quotient of integers, rounded once to binary64.

The contract's own copy of the rule, for what computes report members outside the report
writer: the report 5.0 -> 6.0 migration (R86) computes each pool's utilization and throughputs
from a 5.0 report's integers, and must round them exactly as a 6.0 writer does.
"""

from __future__ import annotations


def ratio(numerator: int, denominator: int) -> float | None:
    """R24: the binary64 value nearest to numerator/denominator (ties to even); None for /0.

    Python's int / int is correctly rounded for integers of any size, which is what R24 asks.
    """
    if denominator == 0:
        return None
    return numerator / denominator
