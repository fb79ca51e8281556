"""The ``servesim`` command line (SPEC.md R32, R33, R37 and R39).

Exit codes: 0 success; 2 invalid input or usage (nothing written); 1 an internal error, which is
a bug in servesim and is reported as such, never as a Python traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path

from servesim import __version__
from servesim.canonical import write_all_atomically, write_atomically
from servesim.describe import description
from servesim.documents import load_document, read_document
from servesim.errors import InvalidInput, OutOfCoverage, ServesimError
from servesim.importers import READERS, ImportOptions, select, workload_bytes
from servesim.replay import read_inputs, replay_chunks
from servesim.simulation import ProgressCallback

EXIT_OK = 0
EXIT_INTERNAL_ERROR = 1
EXIT_INVALID_INPUT = 2
EXIT_OUT_OF_COVERAGE = 3

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
        "Exit 0: report written. Exit 2: input rejected, nothing written. Exit 3: a step's shape "
        "is outside the measured timing profile's coverage (R43), nothing written.",
    )
    replay_parser.add_argument("--scenario", metavar="FILE", help="scenario document (required)")
    replay_parser.add_argument("--workload", metavar="FILE", help="workload document (required)")
    replay_parser.add_argument(
        "--timing-profile", metavar="FILE", help="timing-profile document (required)"
    )
    replay_parser.add_argument(
        "--output", metavar="FILE", help="where to write the report, atomically (required)"
    )
    replay_parser.add_argument(
        "--trace", action="store_true", help="include every step in the report (R30)"
    )
    replay_parser.add_argument(
        "--describe",
        action="store_true",
        help="print this implementation's description for the conformance harness and exit",
    )

    validate_parser = commands.add_parser(
        "validate",
        help="check documents against their schemas and the specification",
        description="Check each document (its kind is read from its 'document' field) against "
        "R1 to R4. Exit 0 if all are valid, 2 otherwise.",
    )
    validate_parser.add_argument("files", nargs="+", metavar="FILE")

    import_parser = commands.add_parser(
        "import",
        help="turn a public request trace into a workload document",
        description="Import a Mooncake (JSON Lines) or Azure LLM inference (CSV) trace as a "
        "workload. Arrivals are integer microseconds after the first record; request ids are "
        "<format>-L<line>. Exit 2 on a malformed record, naming the file, line and field; "
        "nothing is written then.",
    )
    import_parser.add_argument("format", choices=sorted(READERS), help="the trace's format")
    import_parser.add_argument("trace", metavar="FILE", help="the trace file")
    import_parser.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="the workload to write"
    )
    import_parser.add_argument(
        "--limit", type=_positive_int, metavar="N", help="keep the first N requests"
    )
    import_parser.add_argument(
        "--window",
        nargs=2,
        type=_non_negative_fraction,
        metavar=("START", "END"),
        help="keep arrivals in [START, END) seconds after the first record, re-based to START",
    )
    import_parser.add_argument(
        "--speedup",
        type=_positive_fraction,
        default=Fraction(1),
        metavar="FACTOR",
        help="divide every arrival by FACTOR (rounded down to a microsecond); default 1",
    )

    conform_parser = commands.add_parser(
        "conform",
        help="check an implementation against the conformance suite",
        description="Run the smoke, golden and invalid tiers of the conformance suite against "
        "an implementation (by default this reference). Exit 0 when nothing failed, 1 otherwise, "
        "2 when the implementation or the corpus could not be used.",
    )
    _add_conform_arguments(conform_parser)

    schema_parser = commands.add_parser(
        "schema",
        help="compare schema versions and review schema changes",
        description="servesim schema diff OLD NEW: every change and a compatibility verdict per "
        "direction. servesim schema review: a Markdown review of all schema changes since a git "
        "revision or the last release, gated by the versioning policy.",
    )
    _add_schema_arguments(schema_parser)

    migrate_parser = commands.add_parser(
        "migrate",
        help="upgrade a document to the current schema version",
        description="Upgrade a document from any supported older schema version to the current "
        "one, step by step, and check the result (R1 to R4). Exit 0: written. Exit 2: invalid "
        "input or no migration.",
    )
    _add_migrate_arguments(migrate_parser)

    calibrate_parser = commands.add_parser(
        "calibrate",
        help="fit regression and grid timing profiles to measured steps",
        description="Fit a regression and a grid timing profile (1.1) to measured steps, JSON "
        "Lines of {decode_requests, context_tokens, prefill_tokens, duration_us} (SPEC.md R44), "
        "and print their errors on the held-out lines. Exit 0: done, asked profiles written. "
        "Exit 2: invalid measurements or identity, nothing written.",
    )
    _add_calibrate_arguments(calibrate_parser)
    return parser


def _add_calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    from servesim.calibrate import MIN_GRID_POINTS, MIN_KNOTS

    parser.add_argument("measurements", metavar="MEASUREMENTS", help="measured steps (JSON Lines)")
    parser.add_argument(
        "--identity",
        required=True,
        metavar="FILE",
        help="JSON object: the calibration members but source_sha256 (engine, engine_version, "
        "model, model_revision, gpu, server_config_sha256, limits)",
    )
    parser.add_argument("--regression-output", metavar="FILE", help="write the regression here")
    parser.add_argument("--grid-output", metavar="FILE", help="write the grid here")
    parser.add_argument(
        "--summary-json", metavar="FILE", help="write the summary's figures here as JSON"
    )
    for option, low, high, default, meaning in (
        ("--holdout-percent", 0, 99, 20, "hold a line out when its draw mod 100 is below N"),
        ("--seed", 0, 2**64 - 1, 0, "the SplitMix64 seed of the split"),
        ("--knots", MIN_KNOTS, 64, 4, "at most N prefill knots"),
        ("--grid-points", MIN_GRID_POINTS, 32, 8, "at most N grid points per axis"),
    ):
        parser.add_argument(
            option,
            type=_int_between(low, high),
            default=default,
            metavar="N",
            help=f"{meaning}; {low}..{high}, default {default}",
        )


def _int_between(low: int, high: int) -> Callable[[str], int]:
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


def _add_schema_arguments(parser: argparse.ArgumentParser) -> None:
    from servesim_conformance.evolution.cli import add_schema_arguments

    add_schema_arguments(parser)


def _add_migrate_arguments(parser: argparse.ArgumentParser) -> None:
    from servesim_conformance.evolution.cli import add_migrate_arguments

    add_migrate_arguments(parser)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {text}")
    return value


def _non_negative_fraction(text: str) -> Fraction:
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"expected a number, found {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, found {text}")
    return value


def _positive_fraction(text: str) -> Fraction:
    value = _non_negative_fraction(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a positive number, found 0")
    return value


def _add_conform_arguments(parser: argparse.ArgumentParser) -> None:
    from servesim_conformance.cli import add_arguments

    add_arguments(parser)


def _conform(arguments: argparse.Namespace) -> int:
    from servesim_conformance.cli import run_from_arguments

    return run_from_arguments(arguments)


def _report_invalid(error: ServesimError) -> int:
    print("servesim: invalid input:", file=sys.stderr)
    if isinstance(error, InvalidInput):
        for problem in error.problems:
            print(f"  {problem}", file=sys.stderr)
    else:
        print(f"  {error}", file=sys.stderr)
    return EXIT_INVALID_INPUT


def _progress_on_terminal() -> ProgressCallback | None:
    """Progress on stderr for a person watching a long replay; silence for scripts and logs."""
    if not sys.stderr.isatty():
        return None

    def show(arrived: int, total: int, now_us: int) -> None:
        print(
            f"\rservesim: {arrived:,}/{total:,} requests arrived, "
            f"{now_us / 1_000_000:,.1f} s simulated",
            end="",
            file=sys.stderr,
            flush=True,
        )

    return show


def _same_file(first: str, second: str) -> bool:
    try:
        return os.path.samefile(first, second)
    except OSError:
        return False


def _replay(arguments: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if arguments.describe:
        print(json.dumps(description(__version__), indent=2))
        return EXIT_OK
    missing = [
        option
        for option, value in (
            ("--scenario", arguments.scenario),
            ("--workload", arguments.workload),
            ("--timing-profile", arguments.timing_profile),
            ("--output", arguments.output),
        )
        if value is None
    ]
    if missing:
        parser.error(f"replay needs {', '.join(missing)}")
    inputs = (arguments.scenario, arguments.workload, arguments.timing_profile)
    if any(_same_file(arguments.output, given) for given in inputs):
        print(
            f"servesim: invalid input: the output {arguments.output} is one of the inputs",
            file=sys.stderr,
        )
        return EXIT_INVALID_INPUT
    try:
        report = replay_chunks(
            *read_inputs(arguments.scenario, arguments.workload, arguments.timing_profile),
            trace=arguments.trace,
            progress=_progress_on_terminal(),
        )
    except OutOfCoverage as error:
        print("servesim: a step is outside the timing profile's coverage:", file=sys.stderr)
        for line in error.lines(arguments.timing_profile):
            print(f"  {line}", file=sys.stderr)
        return EXIT_OUT_OF_COVERAGE
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
    if sys.stderr.isatty():
        print(f"\rservesim: report written to {arguments.output}", " " * 30, file=sys.stderr)
    return EXIT_OK


def _import(arguments: argparse.Namespace) -> int:
    window = arguments.window or (Fraction(0), None)
    options = ImportOptions(
        limit=arguments.limit,
        window_start_s=window[0],
        window_end_s=window[1],
        speedup=arguments.speedup,
    )
    try:
        records = select(READERS[arguments.format](Path(arguments.trace)), options)
        data, count = workload_bytes(arguments.format, records)
    except ServesimError as error:
        return _report_invalid(error)
    except OSError as error:
        print(f"servesim: cannot read {arguments.trace}: {error.strerror}", file=sys.stderr)
        return EXIT_INVALID_INPUT
    if count == 0:
        print(f"servesim: {arguments.trace}: no request is left to import", file=sys.stderr)
        return EXIT_INVALID_INPUT
    try:  # values beyond the schema's bounds (R3) are the trace's fault: say so, write nothing
        load_document(data, arguments.output, "workload")
    except ServesimError as error:
        print(f"servesim: {arguments.trace} does not make a valid workload:", file=sys.stderr)
        return _report_invalid(error)
    try:
        write_atomically(arguments.output, data)
    except OSError as error:
        print(f"servesim: cannot write {arguments.output}: {error.strerror}", file=sys.stderr)
        return EXIT_INVALID_INPUT
    if arguments.format == "mooncake":
        print(
            "servesim: note: Mooncake prefix hash_ids were dropped (the v1 workload cannot hold "
            "them yet)",
            file=sys.stderr,
        )
    print(f"{arguments.output}: {count} requests")
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


def _calibrate(arguments: argparse.Namespace) -> int:
    from servesim.calibrate import (
        CalibrateOptions,
        InvalidMeasurements,
        calibrate,
        parse_identity,
    )

    try:
        data = Path(arguments.measurements).read_bytes()
        identity_data = Path(arguments.identity).read_bytes()
    except OSError as error:
        print(f"servesim: cannot read {error.filename}: {error.strerror}", file=sys.stderr)
        return EXIT_INVALID_INPUT
    outputs = [
        (path, kind)
        for path, kind in (
            (arguments.regression_output, "regression"),
            (arguments.grid_output, "grid"),
            (arguments.summary_json, "summary"),
        )
        if path is not None
    ]
    inputs = (arguments.measurements, arguments.identity)
    clashes = [path for path, _ in outputs if any(_same_file(path, given) for given in inputs)]
    if clashes or len({os.path.realpath(path) for path, _ in outputs}) < len(outputs):
        print(
            "servesim: invalid input: an output is an input or another output; each output "
            "needs a file of its own",
            file=sys.stderr,
        )
        return EXIT_INVALID_INPUT
    options = CalibrateOptions(
        holdout_percent=arguments.holdout_percent,
        seed=arguments.seed,
        knots=arguments.knots,
        grid_points=arguments.grid_points,
    )
    try:
        identity = parse_identity(identity_data, arguments.identity)
        result = calibrate(data, arguments.measurements, identity, arguments.identity, options)
    except InvalidMeasurements as error:
        print("servesim: invalid input:", file=sys.stderr)
        for problem in error.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_INVALID_INPUT
    except ServesimError as error:
        return _report_invalid(error)
    contents = {"regression": result.regression, "grid": result.grid}
    contents["summary"] = result.summary_json()
    try:  # R44: every output, or none of them
        write_all_atomically([(path, contents[kind]) for path, kind in outputs])
    except OSError as error:
        print(
            f"servesim: cannot write {error.filename or 'an output'}: {error.strerror}; "
            "nothing written",
            file=sys.stderr,
        )
        return EXIT_INVALID_INPUT
    print(result.summary_text(arguments.measurements), end="")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = _parser()
    arguments = parser.parse_args(argv)
    try:
        if arguments.command == "replay":
            return _replay(arguments, parser)
        if arguments.command == "conform":
            return _conform(arguments)
        if arguments.command == "schema":
            from servesim_conformance.evolution.cli import run_schema

            return run_schema(arguments)
        if arguments.command == "migrate":
            from servesim_conformance.evolution.cli import run_migrate

            return run_migrate(arguments)
        if arguments.command == "import":
            return _import(arguments)
        if arguments.command == "calibrate":
            return _calibrate(arguments)
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
