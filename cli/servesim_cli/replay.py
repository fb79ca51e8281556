"""``servesim replay``: three input documents in, one canonical report out (SPEC.md R32)."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping
from typing import Any

from servesim.contract.documents import Document
from servesim.contract.errors import OutOfCoverage, ServesimError
from servesim.describe import description
from servesim.engine.loop import ProgressCallback
from servesim.replay import read_inputs, replay_chunks
from servesim_cli.collector import cyclic_collection_paused
from servesim_cli.command import (
    EXIT_INVALID_INPUT,
    EXIT_OK,
    EXIT_OUT_OF_COVERAGE,
    Command,
)
from servesim_cli.coverage_warnings import limits_outside_coverage
from servesim_cli.figures import FiguresTap
from servesim_cli.messages import STANDARD_OUTPUT, report_invalid, same_file, write_output
from servesim_cli.summary import print_summary


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", metavar="FILE", help="scenario document (required)")
    parser.add_argument("--workload", metavar="FILE", help="workload document (required)")
    parser.add_argument(
        "--timing-profile",
        metavar="FILE|POOL=FILE",
        action="append",
        help="timing-profile document for every pool, or (repeated) POOL=FILE for each pool of "
        "the scenario (R84; a file whose name starts with a pool name and '=' is given as "
        "./NAME) (required)",
    )
    parser.add_argument(
        "--output",
        metavar="FILE",
        help="where to write the report, atomically; '-' for standard output (required)",
    )
    parser.add_argument(
        "--trace", action="store_true", help="include every step in the report (R30)"
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="do not print the report's summary table (see `servesim summary`) on success",
    )
    parser.add_argument(
        "--describe",
        action="store_true",
        help="print this implementation's description for the conformance harness and exit",
    )


#: R77: a pool name; R84: an argument is POOL=FILE when the text before its first '=' is one.
_POOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ProfileArgumentError(str):
    """R84: why the ``--timing-profile`` arguments are invalid input (exit 2)."""


def profile_arguments(values: list[str]) -> str | dict[str, str] | ProfileArgumentError:
    """R84: the single profile's file, or each named pool's file; or what is wrong with them
    (both forms, the single form twice, a pool named twice). Whether the named pools are the
    scenario's is checked with the scenario (``servesim.replay.profile_pool_problems``)."""
    single: list[str] = []
    named: dict[str, str] = {}
    for value in values:
        pool, equals, file = value.partition("=")
        if equals and _POOL_NAME.fullmatch(pool):
            if pool in named:
                return ProfileArgumentError(f"the pool {pool!r} is named twice")
            named[pool] = file
        else:
            single.append(value)
    if single and named:
        return ProfileArgumentError(
            "give either one FILE for every pool or POOL=FILE for each pool, not both"
        )
    if len(single) > 1:
        return ProfileArgumentError(
            f"one FILE for every pool is given {len(single)} times ({', '.join(single)})"
        )
    return single[0] if single else named


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


def _warn_about_coverage(scenario: Document, workload: Document, timing: Document) -> None:
    """Say before a long replay that it may stop at the first step a measured profile lacks."""
    outside = limits_outside_coverage(scenario.value, workload.value, timing.value)
    if not outside:
        return
    print(
        "servesim: warning: the scenario lets steps reach beyond the timing profile's coverage; "
        "the replay stops (exit 3) at the first step outside it (R43):",
        file=sys.stderr,
    )
    for line in outside:
        print(f"  {line}", file=sys.stderr)


def _run(arguments: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if arguments.describe:
        from servesim import __version__  # looked up only here (see servesim.__getattr__)

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
    profiles = profile_arguments(arguments.timing_profile)
    if isinstance(profiles, ProfileArgumentError):
        print(f"servesim: invalid input: --timing-profile: {profiles}", file=sys.stderr)
        return EXIT_INVALID_INPUT
    arguments.timing_profile = profiles
    given = [profiles] if isinstance(profiles, str) else list(profiles.values())
    inputs = (arguments.scenario, arguments.workload, *given)
    if arguments.output != STANDARD_OUTPUT and any(
        same_file(arguments.output, given) for given in inputs
    ):
        print(
            f"servesim: invalid input: the output {arguments.output} is one of the inputs",
            file=sys.stderr,
        )
        return EXIT_INVALID_INPUT
    with cyclic_collection_paused():
        return _replay(arguments)


def _replay(arguments: argparse.Namespace) -> int:
    """Read, simulate, write the report and print its summary; the exit code."""
    pools: list[Any] = []
    try:
        documents = read_inputs(arguments.scenario, arguments.workload, arguments.timing_profile)
        scenario, workload, profiles = documents
        pools = scenario.value["fleet"].get("pools", [])
        for profile in profiles.values() if isinstance(profiles, Mapping) else [profiles]:
            _warn_about_coverage(scenario, workload, profile)
        report = replay_chunks(
            *documents,
            trace=arguments.trace,
            progress=_progress_on_terminal(),
        )
    except OutOfCoverage as error:
        print("servesim: a step is outside the timing profile's coverage:", file=sys.stderr)
        profile_file = _profile_of_worker(arguments.timing_profile, pools, error.worker)
        for line in error.lines(profile_file):
            print(f"  {line}", file=sys.stderr)
        return EXIT_OUT_OF_COVERAGE
    except ServesimError as error:
        return report_invalid(error)
    # The summary is taken from the bytes as they are written: no second read, and the output
    # may be a pipe. Not when the report itself goes to standard output.
    tap = (
        None
        if arguments.quiet or _to_standard_output(arguments.output)
        else FiguresTap(arguments.output)
    )
    written = write_output(
        arguments.output, report if tap is None else tap.passing(report), "the report"
    )
    if written != EXIT_OK:
        return written
    if sys.stderr.isatty():
        print(f"\rservesim: report written to {arguments.output}", " " * 30, file=sys.stderr)
    if tap is not None:
        print_summary(tap.figures())
    return EXIT_OK


def _profile_of_worker(profiles: str | dict[str, str], pools: list[Any], worker: int) -> str:
    """R84: the file of the profile that times ``worker``: its pool's, when named per pool
    (workers are numbered across pools in pool order, R78)."""
    if isinstance(profiles, str):
        return profiles
    first = 0
    for pool in pools or [{"name": "default", "workers": worker + 1}]:
        first += pool["workers"]
        if worker < first:
            return f"{profiles[pool['name']]} (pool {pool['name']})"
    raise AssertionError(f"worker {worker} is in no pool")


def _to_standard_output(path: str) -> bool:
    """Whether the report goes to standard output (``-``, or ``/dev/stdout`` or the like)."""
    if path == STANDARD_OUTPUT:
        return True
    try:
        return os.path.samestat(os.stat(path), os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError):
        return False


COMMAND = Command(
    name="replay",
    description="Replay a workload and write the canonical report (SPEC.md R32). "
    "On success it prints the report's summary table (as `servesim summary` does) unless "
    "--quiet or the report goes to standard output. Exit 0: report written. Exit 2: input "
    "rejected, nothing written. Exit 3: a step's shape is outside the measured timing "
    "profile's coverage (R43), nothing written.",
    add_arguments=_add_arguments,
    run=_run,
)
