"""``servesim matrix``: several ``servesim conform`` run reports as one HTML page.

A command of its own rather than a mode of ``conform``: ``conform`` runs an implementation and
takes only options, while this reads finished reports and runs nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from servesim_cli.command import EXIT_INVALID_INPUT, EXIT_OK, Command

if TYPE_CHECKING:
    from servesim_conformance.matrix import RunReport


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "reports",
        nargs="+",
        metavar="REPORT",
        type=Path,
        help="a run report written by servesim conform --report-json; one column each, in "
        "this order",
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        type=Path,
        help="write the page to FILE (default: standard output)",
    )
    parser.add_argument(
        "--title", metavar="TEXT", help="the page's title (default: servesim conformance matrix)"
    )


def _read_reports(paths: list[Path]) -> list[RunReport]:
    """Every report, or ``InvalidInput`` naming every bad one (not only the first)."""
    from servesim.contract.errors import InputProblem, InvalidInput
    from servesim_conformance.matrix import read_run_report

    reports: list[RunReport] = []
    problems: list[InputProblem] = []
    for path in paths:
        try:
            reports.append(read_run_report(path))
        except InvalidInput as error:
            problems += error.problems
    if problems:
        raise InvalidInput(problems)
    return reports


def _run(arguments: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    from servesim.contract.canonical import write_atomically
    from servesim.contract.errors import InvalidInput
    from servesim_cli.messages import report_invalid, same_file
    from servesim_conformance.matrix import DEFAULT_TITLE, render_matrix

    try:
        reports = _read_reports(arguments.reports)
    except InvalidInput as error:
        return report_invalid(error)
    output: Path | None = arguments.output
    if output is not None and any(same_file(str(output), str(path)) for path in arguments.reports):
        print(
            f"servesim matrix: {output} is one of the reports; not overwriting it", file=sys.stderr
        )
        return EXIT_INVALID_INPUT
    title = DEFAULT_TITLE if arguments.title is None else arguments.title
    page = render_matrix(reports, title=title).encode()
    if output is None:
        sys.stdout.buffer.write(page)
        sys.stdout.flush()
    else:
        write_atomically(output, page)
    return EXIT_OK


COMMAND = Command(
    name="matrix",
    description="Render the run reports of several implementations (servesim conform "
    "--report-json) as one self-contained HTML page: implementations as columns, cases as "
    "rows sorted by id, outcome colours, and each failing cell linked to its message and "
    "first difference. Exit 0: written. Exit 2: a report is unreadable or not a valid run "
    "report (the file and JSON pointer are named); nothing is written.",
    add_arguments=_add_arguments,
    run=_run,
)
