"""How the command line tells a person what went wrong, and the argument types it shares."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction

from servesim.contract.canonical import write_all_atomically, write_atomically
from servesim.contract.errors import InvalidInput, ServesimError
from servesim_cli.command import EXIT_CANNOT_WRITE, EXIT_INVALID_INPUT, EXIT_OK

#: The output path that means standard output.
STANDARD_OUTPUT = "-"


def report_invalid(error: ServesimError) -> int:
    """Print every problem of an invalid input (R5); the exit code for invalid input."""
    print("servesim: invalid input:", file=sys.stderr)
    if isinstance(error, InvalidInput):
        for problem in error.problems:
            print(f"  {problem}", file=sys.stderr)
    else:
        print(f"  {error}", file=sys.stderr)
    return EXIT_INVALID_INPUT


def write_output(path: str, data: bytes | Iterable[bytes], what: str) -> int:
    """Write ``data`` to ``path`` (atomically) or, for ``-``, to standard output.

    A failure to write is the environment's, not the input's: it gets its own exit code, so a
    script can tell "fix the input" from "fix the disk or the path".
    """
    try:
        if path == STANDARD_OUTPUT:
            stream = sys.stdout.buffer
            stream.writelines([data] if isinstance(data, bytes) else data)
            stream.flush()
        else:
            write_atomically(path, data)
    except OSError as error:
        print(f"servesim: cannot write {what} to {path}: {error.strerror}", file=sys.stderr)
        return EXIT_CANNOT_WRITE
    return EXIT_OK


def same_file(first: str, second: str) -> bool:
    """Whether two paths name one existing file (an output must never overwrite an input)."""
    try:
        return os.path.samefile(first, second)
    except OSError:
        return False


def write_every_output(files: Sequence[tuple[str, bytes | Iterable[bytes]]]) -> int:
    """Write several files as one (R44: every output, or none of them): ``EXIT_OK``, or
    ``EXIT_CANNOT_WRITE`` with the reason on standard error and nothing left behind."""
    try:
        write_all_atomically(files)
    except OSError as error:
        print(
            f"servesim: cannot write {error.filename or 'an output'}: {error.strerror}; "
            "nothing written",
            file=sys.stderr,
        )
        return EXIT_CANNOT_WRITE
    return EXIT_OK


def outputs_clash(outputs: Sequence[str], inputs: Sequence[str]) -> bool:
    """Whether an output file is one of the inputs or another output, and says so on standard
    error: a command that writes several files must never overwrite what it reads, nor write
    two results to one file."""
    clashes = [path for path in outputs if any(same_file(path, given) for given in inputs)]
    if not clashes and len({os.path.realpath(path) for path in outputs}) == len(outputs):
        return False
    print(
        "servesim: invalid input: an output is an input or another output; each output "
        "needs a file of its own",
        file=sys.stderr,
    )
    return True


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


def _fraction(text: str) -> Fraction:
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"expected a number, found {text!r}") from None


def non_negative_fraction(text: str) -> Fraction:
    """An argparse type: an exact non-negative number (``0.5``, ``3/2``, ``600``)."""
    value = _fraction(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of at least 0, found {text}")
    return value


def positive_fraction(text: str) -> Fraction:
    """An argparse type: an exact number above zero (one message for 0 and for -1)."""
    value = _fraction(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number above 0, found {text}")
    return value
