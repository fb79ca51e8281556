"""The ``servesim`` command line (SPEC.md R32 and R33).

Exit codes: 0 success; 2 invalid input or usage (nothing written); 1 an internal error, which is
a bug in servesim and is reported as such, never as a Python traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from servesim import __version__
from servesim.canonical import write_atomically
from servesim.documents import read_document
from servesim.errors import InvalidInput, ServesimError
from servesim.replay import replay

EXIT_OK = 0
EXIT_INTERNAL_ERROR = 1
EXIT_INVALID_INPUT = 2

_DESCRIPTION = """\
Replay LLM-serving request traces through a fleet of continuous-batching workers, with a
deterministic logical clock, and write a canonical JSON report. The rules are in SPEC.md.
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="servesim", description=_DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"servesim {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    replay_parser = commands.add_parser(
        "replay",
        help="replay a workload on a scenario's fleet and write the report",
        description="Replay a workload and write the canonical report (SPEC.md R32). "
        "Exit 0: report written. Exit 2: input rejected, nothing written.",
    )
    replay_parser.add_argument(
        "--scenario", required=True, metavar="FILE", help="scenario document"
    )
    replay_parser.add_argument(
        "--workload", required=True, metavar="FILE", help="workload document"
    )
    replay_parser.add_argument(
        "--timing-profile", required=True, metavar="FILE", help="timing-profile document"
    )
    replay_parser.add_argument(
        "--output", required=True, metavar="FILE", help="where to write the report (atomically)"
    )
    replay_parser.add_argument(
        "--trace", action="store_true", help="include every step in the report (R30)"
    )

    validate_parser = commands.add_parser(
        "validate",
        help="check documents against their schemas and the specification",
        description="Check each document (its kind is read from its 'document' field) against "
        "R1 to R4. Exit 0 if all are valid, 2 otherwise.",
    )
    validate_parser.add_argument("files", nargs="+", metavar="FILE")
    return parser


def _report_invalid(error: ServesimError) -> int:
    print("servesim: invalid input:", file=sys.stderr)
    if isinstance(error, InvalidInput):
        for problem in error.problems:
            print(f"  {problem}", file=sys.stderr)
    else:
        print(f"  {error}", file=sys.stderr)
    return EXIT_INVALID_INPUT


def _replay(arguments: argparse.Namespace) -> int:
    try:
        report = replay(
            arguments.scenario, arguments.workload, arguments.timing_profile, trace=arguments.trace
        )
    except ServesimError as error:
        return _report_invalid(error)
    try:
        write_atomically(arguments.output, report)
    except OSError as error:
        print(
            f"servesim: cannot write the report to {arguments.output}: {error.strerror}",
            file=sys.stderr,
        )
        return EXIT_INVALID_INPUT
    return EXIT_OK


def _validate(arguments: argparse.Namespace) -> int:
    status = EXIT_OK
    for file in arguments.files:
        try:
            document = read_document(file)
        except ServesimError as error:
            status = _report_invalid(error)
            continue
        print(f"{file}: valid {document.kind} {document.version}")
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    arguments = _parser().parse_args(argv)
    try:
        if arguments.command == "replay":
            return _replay(arguments)
        return _validate(arguments)
    except KeyboardInterrupt:
        print("servesim: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # a bug in servesim: say so plainly, without a traceback
        print(
            f"servesim: internal error ({type(error).__name__}: {error}); this is a bug in "
            "servesim, please report it with the input files",
            file=sys.stderr,
        )
        return EXIT_INTERNAL_ERROR
