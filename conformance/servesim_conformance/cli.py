"""``servesim conform``: the conformance suite for people who do not use tox or pytest."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import tempfile
from pathlib import Path

from servesim import __version__
from servesim.contract.canonical import write_atomically
from servesim_conformance.agreement_run import (
    DEFAULT_GENERATED,
    DEFAULT_SEED,
    CaseAgreement,
    Status,
    agreement_section,
    generated_cases,
    golden_cases,
    input_cases,
    run_agreement,
)
from servesim_conformance.corpus import Case, Corpus, CorpusError, load_corpus
from servesim_conformance.expectations import expected_failures_document, load_entries
from servesim_conformance.features import unknown_features_message
from servesim_conformance.implementation import (
    DEFAULT_TIMEOUT_S,
    Description,
    HarnessError,
    Implementation,
)
from servesim_conformance.outcomes import CaseResult, Outcome
from servesim_conformance.properties import reads_kv_cache
from servesim_conformance.reporting import markdown_summary, metric_rows, run_report
from servesim_conformance.runner import ADAPTER_BROKEN, run_cases

#: R73: the exit codes of ``servesim conform``.
EXIT_PASSED = 0
EXIT_FAILED = 1
EXIT_UNUSABLE = 2

REFERENCE_COMMAND = shlex.join([sys.executable, "-m", "servesim_cli", "replay"])


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
        help="write an expected-failure manifest listing every case that did not pass (the "
        "cases already listed keep their reason and link)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="list passing and expected-failing cases too"
    )
    agreement = parser.add_argument_group(
        "agreement",
        "for simulators with other conventions: instead of judging bytes, measure how far the "
        "implementation's times are from the reference's (conformance/README.md, Agreement)",
    )
    agreement.add_argument(
        "--agreement",
        action="store_true",
        help="compare arrival, first-token, completion and token times and the summary's "
        "percentiles with the reference's, per metric, per case and overall",
    )
    agreement.add_argument(
        "--generated",
        type=_count,
        metavar="N",
        help=f"also compare N generated cases (default {DEFAULT_GENERATED}; 0 for none)",
    )
    agreement.add_argument(
        "--seed",
        type=_count,
        metavar="S",
        help=f"the seed of the generated cases (default {DEFAULT_SEED})",
    )
    agreement.add_argument(
        "--inputs",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="also compare the case in DIR (scenario.json, workload.json, timing-profile.json); "
        "repeatable",
    )


def _count(text: str) -> int:
    """A non-negative integer option."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


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
        unknown = unknown_features_message(arguments.feature, where="--feature")
        if unknown is not None:
            raise HarnessError(unknown)
        _check_agreement_options(arguments)
        implementation, listed = _implementation(arguments)
        corpus = load_corpus(arguments.golden)
        description = implementation.describe()
    except (HarnessError, CorpusError) as error:
        print(f"servesim conform: {error}", file=sys.stderr)
        return EXIT_UNUSABLE
    cases = corpus.select(patterns=arguments.case, features=arguments.feature)
    if arguments.agreement:
        return _run_agreement(arguments, implementation, description, corpus, cases)
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


def _check_agreement_options(arguments: argparse.Namespace) -> None:
    """The agreement options make sense only with --agreement, and not with an expected-failure
    list (an agreement run judges no case)."""
    given = [
        option
        for option, value in (
            ("--generated", arguments.generated),
            ("--seed", arguments.seed),
            ("--inputs", arguments.inputs or None),
        )
        if value is not None
    ]
    if given and not arguments.agreement:
        raise HarnessError(f"{', '.join(given)}: only with --agreement")
    if arguments.agreement and arguments.write_expected_failures:
        raise HarnessError(
            "--write-expected-failures needs a conformance run: an agreement run judges no case"
        )


def _print_agreement(result: CaseAgreement) -> None:
    if result.status is Status.COMPARED:
        return
    print(f"{result.status.value.upper():>17}  {result.id}  {result.message}")


def _run_agreement(
    arguments: argparse.Namespace,
    implementation: Implementation,
    description: Description,
    corpus: Corpus,
    cases: list[Case],
) -> int:
    """``--agreement``: the selected golden cases, generated ones and ``--inputs`` folders."""
    generated = DEFAULT_GENERATED if arguments.generated is None else arguments.generated
    seed = DEFAULT_SEED if arguments.seed is None else arguments.seed
    with tempfile.TemporaryDirectory(prefix="servesim-generated-") as temporary:
        try:
            selected = [
                *golden_cases(cases),
                *generated_cases(
                    generated, seed, Path(temporary), kv_cache=reads_kv_cache(description)
                ),
                *input_cases(arguments.inputs),
            ]
        except HarnessError as error:
            print(f"servesim conform: {error}", file=sys.stderr)
            return EXIT_UNUSABLE
        print(
            f"servesim conform {__version__} --agreement: {description.name} "
            f"{description.version}, {len(selected)} cases (corpus {corpus.version}, "
            f"{generated} generated with seed {seed}, {len(arguments.inputs)} from --inputs)"
        )
        results = run_agreement(selected, implementation, description, on_result=_print_agreement)
    section = agreement_section(results)
    report = run_report(
        tool_version=__version__,
        corpus_version=corpus.version,
        implementation=implementation,
        description=description,
        results=[],
        agreement=section,
    )
    overall = section["overall"]
    print(", ".join(f"{n} {status}" for status, n in overall["statuses"].items() if n))
    for line in metric_rows(overall["metrics"]):
        print(line)
    if arguments.report_json:
        write_atomically(arguments.report_json, (json.dumps(report, indent=2) + "\n").encode())
    if arguments.markdown:
        write_atomically(arguments.markdown, markdown_summary(report).encode())
    if overall["cases"] == 0:
        print("servesim conform: no case was compared, so nothing was measured", file=sys.stderr)
        return EXIT_FAILED
    errors = overall["statuses"][Status.ERROR.value]
    return EXIT_FAILED if errors else EXIT_PASSED
