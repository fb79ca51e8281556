"""``servesim conform``: the conformance suite for people who do not use tox or pytest."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path

from servesim import __version__
from servesim.canonical import write_atomically
from servesim_conformance.corpus import CorpusError, load_corpus
from servesim_conformance.expectations import expected_failures_document, load_entries
from servesim_conformance.implementation import DEFAULT_TIMEOUT_S, HarnessError, Implementation
from servesim_conformance.outcomes import CaseResult, Outcome
from servesim_conformance.reporting import markdown_summary, run_report
from servesim_conformance.runner import ADAPTER_BROKEN, run_cases

EXIT_PASSED = 0
EXIT_FAILED = 1
EXIT_UNUSABLE = 2

REFERENCE_COMMAND = shlex.join([sys.executable, "-m", "servesim", "replay"])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``servesim conform``."""
    target = parser.add_mutually_exclusive_group()
    target.add_argument(
        "--impl",
        metavar="COMMAND",
        help="the implementation's command, split like a shell would but never run by one "
        f"(default: this reference, {REFERENCE_COMMAND!r})",
    )
    target.add_argument(
        "--manifest", metavar="FILE", type=Path, help="an implementation manifest (JSON)"
    )
    parser.add_argument("--golden", metavar="DIR", type=Path, help="the corpus folder")
    parser.add_argument(
        "--expected-failures", metavar="FILE", type=Path, help="strict expected-failure manifest"
    )
    parser.add_argument(
        "--case", action="append", default=[], metavar="GLOB", help="only case ids matching GLOB"
    )
    parser.add_argument(
        "--feature", action="append", default=[], metavar="TAG", help="only cases tagged TAG"
    )
    parser.add_argument(
        "--timeout", type=float, metavar="SECONDS", help=f"per case (default {DEFAULT_TIMEOUT_S:g})"
    )
    parser.add_argument("--report-json", metavar="FILE", type=Path, help="write the run report")
    parser.add_argument("--markdown", metavar="FILE", type=Path, help="write a Markdown summary")
    parser.add_argument(
        "--write-expected-failures",
        metavar="FILE",
        type=Path,
        help="write a first expected-failure manifest listing every case that did not pass",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="list passing and expected-failing cases too"
    )


def _implementation(
    arguments: argparse.Namespace,
) -> tuple[Implementation, dict[str, dict[str, str]]]:
    """The implementation to run and its expected failures (case id -> manifest entry): those
    of ``--expected-failures``, else those the implementation manifest names."""
    expected_path: Path | None = arguments.expected_failures
    if arguments.manifest is not None:
        implementation, manifest_expected = Implementation.from_manifest(arguments.manifest)
        expected_path = expected_path or manifest_expected
    else:
        command = REFERENCE_COMMAND if arguments.impl is None else arguments.impl
        implementation = Implementation.from_command_line(command)
    if arguments.timeout is not None:
        implementation = dataclasses.replace(implementation, timeout_s=arguments.timeout)
    expected = load_entries(expected_path) if expected_path else {}
    return implementation, expected


def _print_result(result: CaseResult, *, verbose: bool) -> None:
    if result.outcome in {Outcome.PASS, Outcome.XFAIL} and not verbose:
        return
    line = f"{result.outcome.value.upper():>14}  {result.case_id}"
    if result.message:
        line += f"  {result.message}"
    print(line)
    stderr_tail = result.details.get("stderr_tail")
    if result.outcome.is_problem and stderr_tail:
        print("                stderr: " + stderr_tail.splitlines()[-1][:300])


def run_from_arguments(arguments: argparse.Namespace) -> int:
    """Run the suite as ``arguments`` say; the exit code."""
    try:
        implementation, listed = _implementation(arguments)
        corpus = load_corpus(arguments.golden)
        description = implementation.describe()
    except (HarnessError, CorpusError) as error:
        print(f"servesim conform: {error}", file=sys.stderr)
        return EXIT_UNUSABLE
    cases = corpus.select(patterns=arguments.case, features=arguments.feature)
    print(
        f"servesim conform {__version__}: {description.name} {description.version}, "
        f"corpus {corpus.version}, {len(cases)} cases"
    )
    results, adapter_broken = run_cases(
        cases,
        implementation,
        description,
        expected_failures={case_id: entry["reason"] for case_id, entry in listed.items()},
        on_result=lambda result: _print_result(result, verbose=arguments.verbose),
    )
    if adapter_broken:
        print(ADAPTER_BROKEN, file=sys.stderr)
    report = run_report(
        tool_version=__version__,
        corpus_version=corpus.version,
        implementation=implementation,
        description=description,
        results=results,
    )
    counts = ", ".join(
        f"{count} {outcome}" for outcome, count in report["summary"].items() if count
    )
    print(counts or "no cases selected")
    if arguments.report_json:
        write_atomically(arguments.report_json, (json.dumps(report, indent=2) + "\n").encode())
    if arguments.markdown:
        write_atomically(arguments.markdown, markdown_summary(report).encode())
    if arguments.write_expected_failures:
        document = expected_failures_document(
            implementation.name or description.name, results, listed
        )
        write_atomically(
            arguments.write_expected_failures, (json.dumps(document, indent=2) + "\n").encode()
        )
    failed = adapter_broken or any(result.outcome.is_problem for result in results)
    if not any(result.outcome is not Outcome.SKIP for result in results):
        print("servesim conform: no case ran, so nothing was checked", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_FAILED if failed else EXIT_PASSED
