"""``servesim compare A B``: two reports' figures side by side, with what changed flagged.

Every figure of ``servesim summary`` is shown for A and B with B - A and (B - A) / |A|, computed
exactly and rounded only for display. A figure is flagged when its relative difference exceeds
the threshold; like ``diff``, the exit code says whether anything was flagged.

Which reports can be compared: any two readable reports of a version this package reads (1.0
to 5.0; an older report's figures mean what a 5.0 report's do, R37: no cut-off request, no
goodput). Reports of different
inputs are compared too, since comparing fleets, timing profiles or workloads is the point, but
the input digests that differ are named first; ``--require-same`` turns a difference into a
refusal.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from servesim.contract.errors import InputProblem, InvalidInput, ServesimError
from servesim_cli.command import EXIT_INVALID_INPUT, EXIT_OK, Command
from servesim_cli.figures import Figure, ReportFigures, Value, flat_figures, read_figures
from servesim_cli.messages import non_negative_fraction, report_invalid
from servesim_cli.summary import decimal, json_number, shown

#: Exit code when some figure differs by more than the threshold (as ``diff`` exits 1).
EXIT_DIFFERENT = 1

#: The inputs, by the name ``--require-same`` uses, and how to read each one's identity.
_INPUTS: dict[str, Callable[[ReportFigures], str | None]] = {
    "scenario": lambda figures: figures.inputs.scenario_sha256,
    "workload": lambda figures: figures.inputs.workload_sha256,
    "timing-profile": lambda figures: figures.inputs.timing_profile_sha256,
    "calibration": lambda figures: figures.inputs.calibration,
}

DEFAULT_THRESHOLD_PERCENT = Fraction(5)


@dataclass(frozen=True)
class Difference:
    """One figure of both reports."""

    key: str
    label: str
    unit: str
    a: Value
    b: Value
    #: B - A; ``None`` when either is missing.
    difference: Value
    #: (B - A) / |A|; ``None`` when either is missing or A is 0 (then B is "new" if it is not 0).
    relative: Value
    flagged: bool


def differences(
    a: ReportFigures, b: ReportFigures, threshold_percent: Fraction
) -> tuple[Difference, ...]:
    """Every figure of A and B, with its differences, flagged above the threshold."""
    return tuple(
        _difference(first, second, threshold_percent / 100)
        for first, second in zip(flat_figures(a), flat_figures(b), strict=True)
    )


def _difference(first: Figure, second: Figure, threshold: Fraction) -> Difference:
    a, b = first.value, second.value
    difference = relative = None
    if a is None or b is None:
        flagged = (a is None) != (b is None)  # a figure appeared or vanished
    else:
        difference = b - a
        relative = difference / abs(a) if a else None
        flagged = abs(relative) > threshold if relative is not None else difference != 0
    return Difference(first.key, first.label, first.unit, a, b, difference, relative, flagged)


def input_differences(a: ReportFigures, b: ReportFigures) -> dict[str, bool]:
    """Input name -> whether both reports were made from the same one (by digest)."""
    return {name: identity(a) == identity(b) for name, identity in _INPUTS.items()}


def _relative(item: Difference) -> str:
    if item.relative is None:
        return "new" if item.a == 0 and item.b else "-"
    return ("+" if item.relative > 0 else "") + decimal(item.relative * 100, 2) + "%"


def render(
    a: ReportFigures,
    b: ReportFigures,
    items: Sequence[Difference],
    threshold: Fraction,
    *,
    flagged_only: bool = False,
) -> str:
    """The side-by-side table; only the flagged figures' rows with ``flagged_only``."""
    same = input_differences(a, b)
    described = [
        f"{name} {'same' if equal else 'DIFFERS'}"
        + ("" if equal else f" ({_digest(a, name)} -> {_digest(b, name)})")
        for name, equal in same.items()
    ]
    lines = [
        f"A  {a.file} (report {a.schema_version})",
        f"B  {b.file} (report {b.schema_version})",
        f"inputs: {', '.join(described)}",
        f"flagged (*): |B - A| / |A| above {decimal(threshold, 2)}%; "
        "ms to the microsecond, ties to even",
        "",
        f"{'figure':<42}{'A':>16}{'B':>16}{'B - A':>16}{'rel':>10}",
    ]
    for item in items:
        if flagged_only and not item.flagged:
            continue
        change = "-" if item.difference is None else shown(item.difference, item.unit)
        lines.append(
            f"{item.label + _unit_note(item.unit):<42}{shown(item.a, item.unit):>16}"
            f"{shown(item.b, item.unit):>16}{change:>16}{_relative(item):>10}"
            + ("  *" if item.flagged else "")
        )
    flagged = sum(item.flagged for item in items)
    lines += [
        "",
        f"{flagged} of {len(items)} figures differ by more than {decimal(threshold, 2)}%"
        + (" (marked *)" if flagged else ""),
    ]
    return "\n".join(lines)


def _digest(figures: ReportFigures, name: str) -> str:
    """An input's identity in a few characters: its digest's start, or the calibration."""
    if name == "calibration":
        return figures.inputs.calibration_label()
    identity = _INPUTS[name](figures)
    return "none" if identity is None else identity[:12]


def _unit_note(unit: str) -> str:
    return {"ms": " (ms)", "s": " (s)", "per_s": " (/s)", "percent": " (%)", "h": " (h)"}.get(
        unit, ""
    )


def as_json(
    a: ReportFigures, b: ReportFigures, items: Sequence[Difference], threshold: Fraction
) -> dict[str, Any]:
    """The machine-readable comparison."""
    return {
        "a": a.file,
        "b": b.file,
        "threshold_percent": json_number(threshold),
        "same_inputs": input_differences(a, b),
        "figures": [
            {
                "key": item.key,
                "a": json_number(item.a),
                "b": json_number(item.b),
                "difference": json_number(item.difference),
                "relative": json_number(item.relative),
                "flagged": item.flagged,
            }
            for item in items
        ],
        "flagged": [item.key for item in items if item.flagged],
    }


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("a", metavar="A", help="the report compared against (the baseline)")
    parser.add_argument("b", metavar="B", help="the report compared with it")
    parser.add_argument(
        "--threshold",
        metavar="PERCENT",
        type=non_negative_fraction,
        default=DEFAULT_THRESHOLD_PERCENT,
        help="flag a figure when |B - A| / |A| exceeds this many percent (default 5; 0 flags "
        "every difference); a figure that is 0 in A is flagged when it is not 0 in B",
    )
    parser.add_argument(
        "--require-same",
        metavar="INPUT",
        action="append",
        choices=sorted(_INPUTS),
        default=[],
        help="refuse (exit 2) unless both reports were made from the same INPUT, by its sha256 "
        "(scenario, workload, timing-profile) or calibration; repeat for several",
    )
    parser.add_argument(
        "--flagged-only",
        action="store_true",
        help="show only the rows of the flagged figures (the table; --json lists them all)",
    )
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")


def _read_both(first: str, second: str) -> tuple[ReportFigures, ReportFigures]:
    """Both reports' figures, or one ``InvalidInput`` with the problems of both."""
    figures: list[ReportFigures] = []
    problems: list[InputProblem] = []
    for file in (first, second):
        try:
            figures.append(read_figures(file))
        except InvalidInput as error:
            problems.extend(error.problems)
    if problems:
        raise InvalidInput(problems)
    return figures[0], figures[1]


def _run(arguments: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    try:
        a, b = _read_both(arguments.a, arguments.b)
    except ServesimError as error:
        return report_invalid(error)
    same = input_differences(a, b)
    refused = [name for name in arguments.require_same if not same[name]]
    if refused:
        print(
            "servesim: cannot compare: the reports were made from different "
            + ", ".join(f"{name} ({_digest(a, name)} vs {_digest(b, name)})" for name in refused)
            + " (--require-same)",
            file=sys.stderr,
        )
        return EXIT_INVALID_INPUT
    items = differences(a, b, arguments.threshold)
    if arguments.json:
        print(json.dumps(as_json(a, b, items, arguments.threshold), indent=2))
    else:
        print(render(a, b, items, arguments.threshold, flagged_only=arguments.flagged_only))
    return EXIT_DIFFERENT if any(item.flagged for item in items) else EXIT_OK


COMMAND = Command(
    name="compare",
    description="Show every figure of `servesim summary` for reports A and B with B - A and "
    "(B - A) / |A|, computed exactly and shown rounded (ties to even), and flag (*) each one "
    "whose relative difference exceeds --threshold. The input digests are compared first and "
    "each input that differs is named: reports of different scenarios, workloads or timing "
    "profiles are still compared (that is usually the point), unless --require-same says "
    "otherwise. Reports 1.0 to 5.0 can be compared with each other (an older report has no "
    "cut-off request and no goodput). "
    "Exit 0: no figure flagged. Exit 1: some figure flagged. Exit 2: a file is not a readable "
    "report, or an input that --require-same names differs.",
    add_arguments=_add_arguments,
    run=_run,
)
