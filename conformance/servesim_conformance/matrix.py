"""The conformance matrix: several run reports as one static HTML page.

Implementations are columns, cases are rows (sorted by case id), each cell is coloured by its
outcome, and every cell with something to say (a failure, an error, a skip's reason) links to
an entry below the table with the report's message and first difference. The page is one
self-contained file (no script, no external asset), every string from a report is escaped, and
the same reports in the same order give the same bytes, so a page can be committed or diffed.

Reports are read by the fields every released run-report schema has; members a newer harness
adds are ignored, so reports of older and newer harness versions can share a page.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jsonschema

from servesim.contract.errors import InputProblem, InvalidInput, pointer
from servesim.contract.json_reading import parse_json
from servesim.contract.schemas import schema_root
from servesim_conformance.outcomes import Outcome
from servesim_conformance.schemas import harness_schema

DEFAULT_TITLE = "servesim conformance matrix"

#: Background colour of a cell per outcome; chosen to be told apart, and labelled with the
#: outcome's name in every cell so that colour is never the only sign.
OUTCOME_COLOURS: Mapping[str, str] = {
    Outcome.PASS: "#8fd19e",
    Outcome.FAIL: "#f28b82",
    Outcome.INVALID_REPORT: "#f6ae6b",
    Outcome.ERROR: "#e57fb0",
    Outcome.TIMEOUT: "#b39ddb",
    Outcome.SKIP: "#d9d9d9",
    Outcome.XFAIL: "#ffe08a",
    Outcome.XPASS: "#ff6f61",
}
#: A cell whose outcome this version of the page does not know (a newer harness's).
OTHER_COLOUR = "#a7c7e7"
#: A case that one report holds and another does not (another corpus, a --case filter).
NOT_RUN_COLOUR = "#ffffff"

_MEANINGS: Mapping[str, str] = {
    Outcome.PASS: "the report's bytes equal the expected report, or the input was rejected "
    "(exit 2) or stopped outside coverage (exit 3) as expected",
    Outcome.FAIL: "a schema-valid report with other bytes, an invalid input accepted, or an "
    "out-of-coverage case answered wrongly",
    Outcome.INVALID_REPORT: "a report that is not valid under the report schema",
    Outcome.ERROR: "a crash, a signal, an unexpected exit code, or exit 0 without a report",
    Outcome.TIMEOUT: "the run took longer than the timeout",
    Outcome.SKIP: "the case needs a feature, an input version or a protocol the implementation "
    "does not declare",
    Outcome.XFAIL: "failed, and listed in the implementation's expected failures",
    Outcome.XPASS: "passed, but listed in the expected failures (the list needs fixing)",
}


@dataclass(frozen=True)
class CaseEntry:
    """One case of one run report, as the page shows it."""

    id: str
    tier: str
    outcome: str
    message: str
    first_difference: Mapping[str, Any] | None
    stderr_tail: str

    @property
    def has_details(self) -> bool:
        """Whether the cell links to an entry below the table."""
        return bool(self.message or self.first_difference or self.stderr_tail)


@dataclass(frozen=True)
class RunReport:
    """What the page needs of one run report: who ran, and each case's outcome by id."""

    file_name: str
    name: str
    version: str
    protocol_version: str
    corpus_version: str
    tool_version: str
    argv: tuple[str, ...]
    cases: Mapping[str, CaseEntry]

    @property
    def counts(self) -> Counter[str]:
        """Cases per outcome."""
        return Counter(case.outcome for case in self.cases.values())


# --- reading ------------------------------------------------------------------------------


@cache
def _validators() -> tuple[jsonschema.Draft202012Validator, ...]:
    """The working run-report schema first, then each released protocol's, newest first."""
    candidates = (schema_root() / "released" / "harness").glob("*/run-report.schema.json")
    numbered = [path for path in candidates if path.parent.name.isdigit()]
    released = sorted(numbered, key=lambda path: int(path.parent.name), reverse=True)
    schemas = [harness_schema("run-report")]
    schemas += [json.loads(path.read_text(encoding="utf-8")) for path in released]
    return tuple(jsonschema.Draft202012Validator(schema) for schema in schemas)


def _schema_problems(value: Any, file: str) -> list[InputProblem]:
    """None when any run-report schema accepts ``value``; else the working schema's problems."""
    validators = _validators()
    if any(validator.is_valid(value) for validator in validators):
        return []
    return sorted(
        InputProblem(file, pointer(error.absolute_path), error.message)
        for error in validators[0].iter_errors(value)
    )


def _consistency_problems(value: Mapping[str, Any], file: str) -> list[InputProblem]:
    """Duplicate case ids, and a summary that does not count the cases the report lists."""
    problems = []
    first_seen: dict[str, int] = {}
    for index, case in enumerate(value["cases"]):
        if case["id"] in first_seen:
            message = (
                f"case {case['id']!r} appears twice (first at "
                f"{pointer(['cases', first_seen[case['id']], 'id'])})"
            )
            problems.append(InputProblem(file, pointer(["cases", index, "id"]), message))
        first_seen.setdefault(case["id"], index)
    counted = Counter(case["outcome"] for case in value["cases"])
    known = {outcome.value for outcome in Outcome}  # a newer summary may hold other figures
    for outcome in sorted(set(counted) | (set(value["summary"]) & known)):
        said, listed = value["summary"].get(outcome, 0), counted.get(outcome, 0)
        if said != listed:
            message = f"says {said} but the report lists {listed} cases with outcome {outcome}"
            problems.append(InputProblem(file, pointer(["summary", outcome]), message))
    return problems


def _case_entry(case: Mapping[str, Any]) -> CaseEntry:
    difference = case.get("first_difference")
    stderr_tail = case.get("stderr_tail")  # newer harnesses may keep it; older ones do not
    return CaseEntry(
        id=case["id"],
        tier=case["tier"],
        outcome=case["outcome"],
        message=case["message"],
        first_difference=difference if isinstance(difference, dict) else None,
        stderr_tail=stderr_tail if isinstance(stderr_tail, str) else "",
    )


def _text(value: Any) -> str:
    """A description member as text: strings as they are, anything else as JSON, absent ''."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def load_run_report(data: bytes, file: str) -> RunReport:
    """A run report from its bytes; ``InvalidInput`` naming ``file`` and the pointer if not one."""
    value = parse_json(data, file)
    problems = _schema_problems(value, file) or _consistency_problems(value, file)
    if problems:
        raise InvalidInput(problems)
    described = value["implementation"]["description"]
    return RunReport(
        file_name=Path(file).name,
        name=_text(described.get("name")) or "(unnamed)",
        version=_text(described.get("version")),
        protocol_version=_text(described.get("protocol_version")),
        corpus_version=value["corpus_version"],
        tool_version=value["tool"]["version"],
        argv=tuple(value["implementation"]["argv"]),
        cases={case["id"]: _case_entry(case) for case in value["cases"]},
    )


def read_run_report(path: str | Path) -> RunReport:
    """``load_run_report`` of a file; a file that cannot be read is ``InvalidInput`` too."""
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise InvalidInput(
            [InputProblem(str(path), "", f"cannot read: {error.strerror}")]
        ) from None
    return load_run_report(data, str(path))


# --- rendering ----------------------------------------------------------------------------

_STYLE = """\
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px; color: #1a1a1a; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 24px 0 8px; }
p.sources, p.warning { margin: 0 0 12px; color: #444; }
p.warning { color: #8a4b00; }
table.matrix { border-collapse: separate; border-spacing: 2px; }
table.matrix th { text-align: left; font-weight: 600; padding: 4px 8px; vertical-align: bottom; }
table.matrix th.impl { width: 10em; }
table.matrix thead tr:first-child th { position: sticky; top: 0; background: #fff; }
table.matrix th.impl .file { display: block; font-weight: 400; color: #555; font-size: 12px; }
table.matrix tr.summary th, table.matrix tr.summary td { font-weight: 400; font-size: 12px;
  padding: 2px 8px 8px; vertical-align: top; }
table.matrix td.cell { width: 10em; height: 22px; padding: 2px 8px; white-space: nowrap; }
table.matrix td.cell a { color: inherit; }
table.matrix td.tier { color: #555; padding: 2px 8px; }
table.matrix tbody th { white-space: nowrap; }
table.matrix th code { font-weight: 400; }
table.matrix th.impl .name { white-space: nowrap; }
.chip { display: inline-block; width: 10px; height: 10px; margin-right: 4px;
  border: 1px solid #888; vertical-align: baseline; }
table.legend td { padding: 2px 8px; vertical-align: top; }
table.legend td:first-child { white-space: nowrap; }
section.entry { border-top: 1px solid #ddd; padding: 8px 0; }
section.entry h3 { font-size: 14px; margin: 0 0 4px; }
section.entry:target { background: #fff6d5; }
section.entry h3 span[class^="o-"] { padding: 0 4px; }
section.entry dl { margin: 4px 0; display: grid; grid-template-columns: 10em auto; gap: 2px 12px; }
section.entry dt { color: #555; }
section.entry dd { margin: 0; }
pre { margin: 0; white-space: pre-wrap; word-break: break-all; }
"""


def _colour(outcome: str) -> str:
    return OUTCOME_COLOURS.get(outcome, OTHER_COLOUR)


def _css_class(outcome: str) -> str:
    known = outcome in OUTCOME_COLOURS
    return f"o-{outcome}" if known else "o-other"


def _outcome_style() -> str:
    rules = [
        f".o-{outcome} {{ background: {colour}; }}" for outcome, colour in OUTCOME_COLOURS.items()
    ]
    rules.append(f".o-other {{ background: {OTHER_COLOUR}; }}")
    rules.append(f".o-none {{ background: {NOT_RUN_COLOUR}; color: #999; }}")
    return "\n".join(rules) + "\n"


def entry_anchor(column: int, case_id: str) -> str:
    """The id of the details entry of ``case_id`` in the report of ``column`` (from 1)."""
    return f"r{column}-{case_id}"


def _href(anchor: str) -> str:
    return "#" + quote(anchor, safe="/-_.~")


def _e(text: str) -> str:
    return escape(text, quote=True)


def _json(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _ordered_outcomes(outcomes: Iterable[str]) -> list[str]:
    """Known outcomes in the harness's order, then any unknown ones by name."""
    known = [outcome.value for outcome in Outcome]
    return sorted(set(outcomes), key=lambda o: (known.index(o) if o in known else len(known), o))


def _header(reports: Sequence[RunReport]) -> list[str]:
    lines = ["<thead>", '<tr><th scope="col">case</th><th scope="col">tier</th>']
    for report in reports:
        title = _e(" ".join(report.argv))
        protocol = f", protocol {_e(report.protocol_version)}" if report.protocol_version else ""
        name = f'<span class="name">{_e(report.name)} {_e(report.version)}</span>'
        file = f'<span class="file">{_e(report.file_name)}{protocol}</span>'
        lines.append(f'<th scope="col" class="impl" title="{title}">{name}{file}</th>')
    lines.append("</tr>")
    lines.append('<tr class="summary"><th scope="row">summary</th><td></td>')
    for report in reports:
        counts = report.counts
        parts = [
            f'<span class="chip {_css_class(outcome)}"></span>{counts[outcome]} {_e(outcome)}'
            for outcome in _ordered_outcomes(counts)
        ]
        lines.append(f"<td>{'<br>'.join(parts) or 'no cases'}</td>")
    lines += ["</tr>", "</thead>"]
    return lines


def _cell(column: int, case: CaseEntry | None) -> str:
    if case is None:
        return '<td class="cell o-none" title="not in this report">&#8212;</td>'
    label = _e(case.outcome)
    if case.has_details:
        label = f'<a href="{_href(entry_anchor(column, case.id))}">{label}</a>'
    title = f' title="{_e(case.message)}"' if case.message else ""
    return f'<td class="cell {_css_class(case.outcome)}"{title}>{label}</td>'


def _body(reports: Sequence[RunReport]) -> list[str]:
    case_ids = sorted({case_id for report in reports for case_id in report.cases})
    lines = ["<tbody>"]
    for case_id in case_ids:
        tier = next(report.cases[case_id].tier for report in reports if case_id in report.cases)
        cells = "".join(
            _cell(column, report.cases.get(case_id))
            for column, report in enumerate(reports, start=1)
        )
        lines.append(
            f'<tr id="{_e("case-" + case_id)}"><th scope="row"><code>{_e(case_id)}</code></th>'
            f'<td class="tier">{_e(tier)}</td>{cells}</tr>'
        )
    lines.append("</tbody>")
    return lines


def _legend() -> list[str]:
    lines = ["<h2>Legend</h2>", '<table class="legend">']
    for outcome, meaning in _MEANINGS.items():
        lines.append(
            f'<tr><td><span class="chip {_css_class(outcome)}"></span>{_e(outcome)}</td>'
            f"<td>{_e(meaning)}</td></tr>"
        )
    lines.append(
        '<tr><td><span class="chip o-none"></span>&#8212;</td>'
        "<td>the case is not in this report (another corpus, or cases selected)</td></tr>"
    )
    lines.append("</table>")
    return lines


def _difference_lines(difference: Mapping[str, Any]) -> list[str]:
    where = difference.get("pointer")
    lines = [f"<dt>first difference at</dt><dd><code>{_e(str(where) or '(root)')}</code></dd>"]
    for key in ("expected", "actual"):
        if key in difference:
            lines.append(f"<dt>{key}</dt><dd><code>{_e(_json(difference[key]))}</code></dd>")
    if "count" in difference:
        lines.append(f"<dt>differing values</dt><dd>{_e(_json(difference['count']))}</dd>")
    return lines


def _entry(column: int, report: RunReport, case: CaseEntry) -> list[str]:
    lines = [
        f'<section class="entry" id="{_e(entry_anchor(column, case.id))}">',
        f"<h3><code>{_e(case.id)}</code> &#8212; {_e(report.name)} {_e(report.version)} "
        f'<span class="file">({_e(report.file_name)})</span>: '
        f'<span class="{_css_class(case.outcome)}">{_e(case.outcome)}</span></h3>',
        "<dl>",
    ]
    if case.message:
        lines.append(f"<dt>message</dt><dd>{_e(case.message)}</dd>")
    if case.first_difference:
        lines += _difference_lines(case.first_difference)
    if case.stderr_tail:
        lines.append(f"<dt>stderr</dt><dd><pre>{_e(case.stderr_tail)}</pre></dd>")
    lines += ["</dl>", f'<a href="{_href("case-" + case.id)}">back to the table</a>', "</section>"]
    return lines


def _details(reports: Sequence[RunReport]) -> list[str]:
    lines = ['<h2 id="details">Details</h2>']
    entries = 0
    for column, report in enumerate(reports, start=1):
        for case_id in sorted(report.cases):
            case = report.cases[case_id]
            if case.has_details:
                lines += _entry(column, report, case)
                entries += 1
    if not entries:
        lines.append("<p>Nothing to report: no case has a message.</p>")
    return lines


def _sources(reports: Sequence[RunReport]) -> list[str]:
    corpora = sorted({report.corpus_version for report in reports})
    harnesses = sorted({report.tool_version for report in reports})
    lines = [
        f'<p class="sources">{len(reports)} run report{"" if len(reports) == 1 else "s"}; '
        f"corpus {_e(', '.join(corpora))}; harness {_e(', '.join(harnesses))}.</p>"
    ]
    if len(corpora) > 1:
        lines.append(
            '<p class="warning">The reports come from different corpus versions: a case with '
            "the same id may not ask the same thing of each implementation.</p>"
        )
    return lines


def render_matrix(reports: Sequence[RunReport], *, title: str = DEFAULT_TITLE) -> str:
    """The page: the matrix, its legend and the details each linked cell points to."""
    lines = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title>",
        "<style>",
        _STYLE + _outcome_style(),
        "</style>",
        "</head>",
        "<body>",
        f"<h1>{_e(title)}</h1>",
        *_sources(reports),
        '<table class="matrix">',
        *_header(reports),
        *_body(reports),
        "</table>",
        *_legend(),
        *_details(reports),
        "</body>",
        "</html>",
    ]
    return "\n".join(lines) + "\n"
