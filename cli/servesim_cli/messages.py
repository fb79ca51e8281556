"""How the command line tells a person what went wrong, and the argument types it shares."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from fractions import Fraction

from servesim.errors import InvalidInput, ServesimError
from servesim_cli.command import EXIT_INVALID_INPUT


def report_invalid(error: ServesimError) -> int:
    """Print every problem of an invalid input (R5); the exit code for invalid input."""
    print("servesim: invalid input:", file=sys.stderr)
    if isinstance(error, InvalidInput):
        for problem in error.problems:
            print(f"  {problem}", file=sys.stderr)
    else:
        print(f"  {error}", file=sys.stderr)
    return EXIT_INVALID_INPUT


def same_file(first: str, second: str) -> bool:
    """Whether two paths name one existing file (an output must never overwrite an input)."""
    try:
        return os.path.samefile(first, second)
    except OSError:
        return False


def int_between(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a plain decimal integer in ``low..high``."""

    def parse(text: str) -> int:
        if not text.isascii() or not text.isdigit():  # no sign, space, "_" or non-ASCII digit
            raise argparse.ArgumentTypeError(f"expected an integer, found {text!r}")
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, found {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {low}..{high}, found {value}")
        return value

    return parse


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {text}")
    return value


def non_negative_fraction(text: str) -> Fraction:
    """An argparse type: an exact non-negative number (``0.5``, ``3/2``, ``600``)."""
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"expected a number, found {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, found {text}")
    return value


def positive_fraction(text: str) -> Fraction:
    """An argparse type: an exact number above zero."""
    value = non_negative_fraction(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a positive number, found 0")
    return value
