"""The ``servesim`` command line (SPEC.md R32, R33, R37 and R39): the parser and the dispatch.

Exit codes: 0 success; 2 invalid input or usage (nothing written); 3 a step outside a measured
profile's coverage; 1 an internal error, which is a bug in servesim and is reported as such,
never as a Python traceback. Each subcommand is a ``Command`` in a module of its own.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType

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


@dataclass(frozen=True)
class Entry:
    """A subcommand as ``servesim --help`` lists it, and where its ``Command`` lives."""

    name: str
    help: str
    module: str
    attribute: str = "COMMAND"

    def load(self) -> Command:
        """The command itself: its module is imported only now."""
        command: Command = getattr(importlib.import_module(self.module), self.attribute)
        return command


#: Every subcommand, in the order ``servesim --help`` lists them.
COMMANDS: tuple[Entry, ...] = (
    Entry(
        "replay",
        "replay a workload on a scenario's fleet and write the report",
        "servesim_cli.replay",
    ),
    Entry("summary", "print a report's headline figures", "servesim_cli.summary"),
    Entry("compare", "compare two reports' figures side by side", "servesim_cli.compare"),
    Entry(
        "validate",
        "check documents against their schemas and the specification",
        "servesim_cli.validate",
    ),
    Entry(
        "import",
        "turn a public request trace into a workload document",
        "servesim_cli.trace_import",
    ),
    Entry(
        "conform",
        "check an implementation against the conformance suite",
        "servesim_cli.suite",
        "CONFORM",
    ),
    Entry(
        "matrix", "render conformance run reports as one HTML matrix page", "servesim_cli.matrix"
    ),
    Entry(
        "schema",
        "compare schema versions and review schema changes",
        "servesim_cli.suite",
        "SCHEMA",
    ),
    Entry(
        "migrate",
        "upgrade a document to the current schema version",
        "servesim_cli.suite",
        "MIGRATE",
    ),
    Entry(
        "calibrate",
        "fit regression and grid timing profiles to measured steps",
        "servesim_cli.calibrate",
    ),
    Entry(
        "profile",
        "freeze an estimator's step times into a timing profile (aic: needs servesim[aic])",
        "servesim_cli.profile",
    ),
    Entry(
        "plot",
        "draw latency CDFs and over-time figures of reports (needs servesim[plot])",
        "servesim_cli.plot",
    ),
    Entry(
        "sweep",
        "replay a grid of scenario settings and speed-ups; find the smallest fleet for a target",
        "servesim_cli.sweep",
    ),
)


class _ShowVersion(argparse.Action):
    """``--version``, as argparse's own action prints it, but the version is looked up only
    when asked: ``importlib.metadata`` would add a fifth to the imports of every command."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS) -> None:
        super().__init__(
            option_strings,
            dest,
            default=argparse.SUPPRESS,
            nargs=0,
            help="show program's version number and exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from servesim import __version__

        print(f"servesim {__version__}")
        parser.exit()


def build_parser(
    chosen: str | None = None,
) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top-level parser, and the parser of the ``chosen`` subcommand (every one if None).

    Only the chosen subcommand's module is imported and its arguments added; the others are
    listed by name and help, which is all ``servesim --help`` shows of them.
    """
    parser = argparse.ArgumentParser(prog="servesim", description=_DESCRIPTION)
    parser.add_argument("--version", action=_ShowVersion)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parsers: dict[str, argparse.ArgumentParser] = {}
    for entry in COMMANDS:
        if chosen is not None and entry.name != chosen:
            subparsers.add_parser(entry.name, help=entry.help)
            continue
        command = entry.load()
        parsers[entry.name] = subparsers.add_parser(
            entry.name, help=entry.help, description=command.description
        )
        command.add_arguments(parsers[entry.name])
    return parser, parsers


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option."""
    names = {entry.name for entry in COMMANDS}
    first = next((word for word in argv if not word.startswith("-")), None)
    return first if first in names else None


class Terminated(BaseException):
    """SIGTERM arrived (``timeout``, a CI cancelling a job). A ``BaseException``, as
    ``KeyboardInterrupt`` is, so that it unwinds through every ``finally`` and the atomic
    writer removes its temporary file, instead of the process dying where it stands."""


def _raise_terminated(_signal: int, _frame: FrameType | None) -> None:
    raise Terminated


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    words = sys.argv[1:] if argv is None else list(argv)
    parser, parsers = build_parser(_chosen(words))
    arguments = parser.parse_args(words)
    entry = next(entry for entry in COMMANDS if entry.name == arguments.command)
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return entry.load().run(arguments, parsers[entry.name])
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
