"""The ``servesim`` command line (SPEC.md R32, R33, R37 and R39): the parser and the dispatch.

Exit codes: 0 success; 2 invalid input or usage (nothing written); 3 a step outside a measured
profile's coverage; 1 an internal error, which is a bug in servesim and is reported as such,
never as a Python traceback. Each subcommand is a ``Command`` in a module of its own.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from servesim import __version__
from servesim_cli import (
    calibrate,
    compare,
    matrix,
    plot,
    replay,
    suite,
    summary,
    sweep,
    trace_import,
    validate,
)
from servesim_cli.command import (
    EXIT_INTERNAL_ERROR,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    Command,
)

_DESCRIPTION = """\
Replay LLM-serving request traces through a fleet of continuous-batching workers, with a
deterministic logical clock, and write a canonical JSON report. The rules are in SPEC.md.
"""

#: Every subcommand, in the order ``servesim --help`` lists them.
COMMANDS: tuple[Command, ...] = (
    replay.COMMAND,
    summary.COMMAND,
    compare.COMMAND,
    validate.COMMAND,
    trace_import.COMMAND,
    suite.CONFORM,
    matrix.COMMAND,
    suite.SCHEMA,
    suite.MIGRATE,
    calibrate.COMMAND,
    plot.COMMAND,
    sweep.COMMAND,
)


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser, and each subcommand's own parser by name."""
    parser = argparse.ArgumentParser(prog="servesim", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"servesim {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parsers: dict[str, argparse.ArgumentParser] = {}
    for command in COMMANDS:
        parsers[command.name] = subparsers.add_parser(
            command.name, help=command.help, description=command.description
        )
        command.add_arguments(parsers[command.name])
    return parser, parsers


class Terminated(BaseException):
    """SIGTERM arrived (``timeout``, a CI cancelling a job). A ``BaseException``, as
    ``KeyboardInterrupt`` is, so that it unwinds through every ``finally`` and the atomic
    writer removes its temporary file, instead of the process dying where it stands."""


def _raise_terminated(_signal: int, _frame: FrameType | None) -> None:
    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser, parsers = build_parser()
    arguments = parser.parse_args(argv)
    command = next(command for command in COMMANDS if command.name == arguments.command)
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return command.run(arguments, parsers[command.name])
    except KeyboardInterrupt:
        print("servesim: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print("servesim: terminated", file=sys.stderr)
        return EXIT_TERMINATED
    except BrokenPipeError:  # the reader went away (``servesim ... | head``): not our bug
        sys.stderr.close()
        return EXIT_INTERNAL_ERROR
    except Exception as error:  # a bug in servesim: say so plainly, without a traceback
        print(
            f"servesim: internal error ({type(error).__name__}: {error}); this is a bug in "
            "servesim, please report it with the input files",
            file=sys.stderr,
        )
        return EXIT_INTERNAL_ERROR
    finally:
        signal.signal(signal.SIGTERM, previous)
