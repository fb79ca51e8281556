"""``servesim matrix``: run reports as one HTML page, read strictly, rendered deterministically,
and checked in a real headless browser (its DOM and a screenshot of the table)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from PIL import Image

from servesim.contract.errors import InvalidInput
from servesim_cli.main import main
from servesim_conformance import matrix
from servesim_conformance.matrix import OUTCOME_COLOURS, load_run_report, render_matrix
from servesim_conformance.outcomes import Outcome
from servesim_conformance.schemas import harness_schema, validate_harness_document
from tests.helpers import REPO, run_servesim

FAKE = REPO / "tests" / "fakes" / "fake_sim.py"

DIFFERENCE = {"pointer": "/requests/0/token_times_us/3", "expected": 5, "actual": 6, "count": 2}


def run_report(name: str, cases: list[tuple[str, str, str]], **extra: Any) -> dict[str, Any]:
    """A run report of ``name`` with ``(id, outcome, message)`` cases; fails get a difference."""
    counts = Counter(outcome for _, outcome, _ in cases)
    return {
        "tool": {"name": "servesim-conformance", "version": "0.1.0"},
        "corpus_version": "1.1.0",
        "implementation": {
            "argv": [name, "replay"],
            "description": {"name": name, "version": "1.0", "protocol_version": 2},
        },
        "summary": {outcome.value: counts.get(outcome.value, 0) for outcome in Outcome},
        "cases": [
            {
                "id": case_id,
                "tier": "invalid" if case_id.startswith("invalid/") else "golden",
                "outcome": outcome,
                "duration_s": 0.25,
                "message": message,
                "first_difference": DIFFERENCE if outcome == "fail" else None,
            }
            for case_id, outcome, message in cases
        ],
        **extra,
    }


ALPHA = run_report(
    "alpha",
    [("valid/b", "pass", ""), ("valid/a", "pass", ""), ("invalid/bad", "pass", "")],
)
BETA = run_report(
    "beta <b>",
    [
        ("valid/b", "xfail", "known: <img src=x onerror=alert(1)> & more"),
        ("valid/a", "fail", "first difference at /requests/0/token_times_us/3"),
        ("invalid/bad", "error", "exit code 1 on invalid input (expected 2)"),
    ],
)


def write(tmp_path: Path, name: str, value: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")
    return path


def page_of(*reports: dict[str, Any]) -> str:
    return render_matrix(
        [load_run_report(json.dumps(r).encode(), f"r{i}.json") for i, r in enumerate(reports)]
    )


class Dom(HTMLParser):
    """The parts of a page the tests look at: every element, the matrix rows and their cells."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.rows: list[tuple[str, list[tuple[str, str, str]]]] = []
        self._in_matrix = self._in_body = False
        self._cell: list[Any] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {key: value or "" for key, value in attrs}
        self.elements.append((tag, attributes))
        if tag == "table":
            self._in_matrix = attributes.get("class") == "matrix"
        elif tag == "tbody" and self._in_matrix:
            self._in_body = True
        elif self._in_body and tag == "tr":
            self.rows.append((attributes.get("id", ""), []))
        elif self._in_body and tag == "td" and "cell" in attributes.get("class", ""):
            self._cell = [attributes["class"], "", ""]
        elif self._cell is not None and tag == "a":
            self._cell[2] = attributes["href"]

    def handle_endtag(self, tag: str) -> None:
        if tag in {"tbody", "table"}:
            self._in_body = False
        elif tag == "td" and self._cell is not None:
            self.rows[-1][1].append((self._cell[0], self._cell[1], self._cell[2]))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell[1] += data

    def ids(self) -> set[str]:
        return {attributes["id"] for _, attributes in self.elements if "id" in attributes}

    def tags(self) -> set[str]:
        return {tag for tag, _ in self.elements}


def test_the_report_helper_writes_valid_run_reports() -> None:
    assert validate_harness_document("run-report", ALPHA) == []
    assert validate_harness_document("run-report", BETA) == []


def test_columns_in_the_given_order_rows_sorted_by_case_id() -> None:
    dom = Dom(page_of(ALPHA, BETA))
    assert [row_id for row_id, _ in dom.rows] == [
        "case-invalid/bad",
        "case-valid/a",
        "case-valid/b",
    ]
    outcomes = [[text for _, text, _ in cells] for _, cells in dom.rows]
    assert outcomes == [["pass", "error"], ["pass", "fail"], ["pass", "xfail"]]
    classes = [[css.split()[-1] for css, _, _ in cells] for _, cells in dom.rows]
    assert classes == [["o-pass", "o-error"], ["o-pass", "o-fail"], ["o-pass", "o-xfail"]]


def test_a_case_one_report_lacks_is_shown_as_not_run() -> None:
    partial = run_report("gamma", [("valid/a", "pass", "")])
    dom = Dom(page_of(ALPHA, partial))
    cells = {row_id: [css for css, _, _ in row] for row_id, row in dom.rows}
    assert cells["case-valid/a"] == ["cell o-pass", "cell o-pass"]
    assert cells["case-valid/b"] == ["cell o-pass", "cell o-none"]


def test_summary_row_counts_each_implementation() -> None:
    page = page_of(ALPHA, BETA)
    summary = page.split('<tr class="summary">')[1].split("</tr>")[0]
    assert "3 pass" in summary
    assert "1 fail" in summary
    assert "1 error" in summary
    assert "1 xfail" in summary
    assert "0 " not in summary  # outcomes nobody had are left out


def test_failing_cells_link_to_their_details() -> None:
    page = page_of(ALPHA, BETA)
    dom = Dom(page)
    links = [href for _, cells in dom.rows for _, _, href in cells if href]
    assert links == ["#r2-invalid/bad", "#r2-valid/a", "#r2-valid/b"]
    assert {href[1:] for href in links} <= dom.ids()
    entry = page.split('id="r2-valid/a"')[1].split("</section>")[0]
    assert "<code>/requests/0/token_times_us/3</code>" in entry
    assert "<dt>expected</dt><dd><code>5</code></dd>" in entry
    assert "<dt>actual</dt><dd><code>6</code></dd>" in entry
    assert "<dt>differing values</dt><dd>2</dd>" in entry
    assert 'href="#case-valid/a"' in entry  # and back


def test_every_string_from_a_report_is_escaped() -> None:
    page = page_of(ALPHA, BETA)
    dom = Dom(page)
    assert "img" not in dom.tags()
    assert "b" not in dom.tags()
    assert "known: &lt;img src=x onerror=alert(1)&gt; &amp; more" in page
    assert "beta &lt;b&gt; 1.0" in page


def test_self_contained_without_script() -> None:
    dom = Dom(page_of(ALPHA, BETA))
    assert "script" not in dom.tags()
    assert "link" not in dom.tags()
    sources = [a.get("src", "") for _, a in dom.elements] + [
        a.get("href", "") for _, a in dom.elements
    ]
    assert all(not source or source.startswith("#") for source in sources)


def test_same_reports_give_the_same_bytes_whatever_their_case_order() -> None:
    shuffled = dict(BETA, cases=list(reversed(BETA["cases"])))
    assert page_of(ALPHA, BETA) == page_of(ALPHA, BETA)
    assert page_of(ALPHA, BETA) == page_of(ALPHA, shuffled)
    assert page_of(ALPHA, BETA) != page_of(BETA, ALPHA)


def test_different_corpus_versions_are_pointed_out() -> None:
    older = dict(ALPHA, corpus_version="1.0.0")
    assert "different corpus versions" in page_of(older, BETA)
    assert "different corpus versions" not in page_of(ALPHA, BETA)


def test_members_a_newer_harness_adds_are_read_when_its_schema_allows_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A newer run-report schema may add members (here a stderr tail, an agreement section and a
    summary figure): the page shows the stderr tail and ignores what it does not know."""
    permissive = jsonschema.Draft202012Validator({"type": "object"})
    monkeypatch.setattr(matrix, "_validators", lambda: (permissive,))
    newer = run_report("delta", [("valid/a", "error", "exit code 1")], agreement={"x": 1})
    newer["cases"][0]["stderr_tail"] = "Traceback ...\nZeroDivisionError: <modulo>"
    newer["summary"]["agreements"] = 7  # a figure that is not an outcome: not a count to check
    page = page_of(newer)
    assert "<pre>Traceback ...\nZeroDivisionError: &lt;modulo&gt;</pre>" in page


def test_a_report_of_an_older_harness_is_read_by_its_released_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When the working run-report schema asks for more (a newer protocol), a report written by
    an older harness still renders through the released schema it was written under; a report
    no schema accepts is told what the working schema wants."""
    newer = json.loads(json.dumps(harness_schema("run-report")))
    newer["required"].append("agreement")
    newer["properties"]["agreement"] = {"type": "object"}
    monkeypatch.setattr(matrix, "harness_schema", lambda kind: newer)
    matrix._validators.cache_clear()
    try:
        assert "alpha 1.0" in page_of(ALPHA)
        assert "alpha 1.0" in page_of(dict(ALPHA, agreement={}))
        broken = dict(ALPHA, corpus_version=7)
        assert problems_of(broken) == [
            "run.json: at (document root): 'agreement' is a required property",
            "run.json: at /corpus_version: 7 is not of type 'string'",
        ]
    finally:
        matrix._validators.cache_clear()


# --- reading errors ---------------------------------------------------------------------------


def problems_of(value: Any) -> list[str]:
    with pytest.raises(InvalidInput) as caught:
        load_run_report(json.dumps(value).encode(), "run.json")
    return [str(problem) for problem in caught.value.problems]


def test_an_invalid_report_names_the_file_and_pointer() -> None:
    broken = json.loads(json.dumps(ALPHA))
    broken["cases"][1]["outcome"] = "great"
    (problem,) = problems_of(broken)
    assert problem.startswith("run.json: at /cases/1/outcome: 'great' is not one of")


def test_a_summary_that_does_not_count_the_cases_is_rejected() -> None:
    broken = json.loads(json.dumps(ALPHA))
    broken["summary"]["pass"] = 2
    assert problems_of(broken) == [
        "run.json: at /summary/pass: says 2 but the report lists 3 cases with outcome pass"
    ]


def test_a_case_listed_twice_is_rejected() -> None:
    twice = run_report("alpha", [("valid/a", "pass", ""), ("valid/a", "pass", "")])
    assert problems_of(twice) == [
        "run.json: at /cases/1/id: case 'valid/a' appears twice (first at /cases/0/id)"
    ]


def test_not_json_is_rejected() -> None:
    with pytest.raises(InvalidInput, match=r"run.json: at \(document root\): not valid JSON"):
        load_run_report(b"{", "run.json")


# --- the command --------------------------------------------------------------------------


def test_command_writes_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    alpha, beta = write(tmp_path, "alpha.json", ALPHA), write(tmp_path, "beta.json", BETA)
    page = tmp_path / "page.html"
    assert main(["matrix", str(alpha), str(beta), "-o", str(page), "--title", "Nightly"]) == 0
    text = page.read_text(encoding="utf-8")
    assert "<title>Nightly</title>" in text
    assert 'alpha 1.0</span><span class="file">alpha.json, protocol 2</span>' in text
    assert main(["matrix", str(alpha), str(beta), "--title", "Nightly"]) == 0
    assert capsys.readouterr().out == text  # standard output by default


def test_command_rejects_an_invalid_report_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = json.loads(json.dumps(BETA))
    del broken["cases"][0]["tier"]
    alpha, bad = write(tmp_path, "alpha.json", ALPHA), write(tmp_path, "bad.json", broken)
    page = tmp_path / "page.html"
    assert main(["matrix", str(alpha), str(bad), "-o", str(page)]) == 2
    error = capsys.readouterr().err
    assert f"{bad}: at /cases/0: 'tier' is a required property" in error
    assert "Traceback" not in error
    assert not page.exists()


def test_command_names_every_bad_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    assert main(["matrix", str(tmp_path / "none.json"), str(empty)]) == 2
    error = capsys.readouterr().err
    assert "none.json: at (document root): cannot read: No such file or directory" in error
    assert "empty.json: at (document root): the file is empty; expected a JSON object" in error


def test_command_never_overwrites_a_report(tmp_path: Path) -> None:
    alpha = write(tmp_path, "alpha.json", ALPHA)
    before = alpha.read_bytes()
    assert main(["matrix", str(alpha), "-o", str(alpha)]) == 2
    assert alpha.read_bytes() == before


def test_real_conform_run_reports_render(tmp_path: Path) -> None:
    """Reports written by ``servesim conform`` itself, one of them of a broken implementation."""
    honest, broken = tmp_path / "honest.json", tmp_path / "wrong-numbers.json"
    cases = ["--case", "valid/smoke-one-request", "--case", "invalid/zero-workers"]
    assert run_servesim("conform", *cases, "--report-json", honest).returncode == 0
    impl = f"{sys.executable} {FAKE} wrong-numbers"
    assert run_servesim("conform", "--impl", impl, *cases, "--report-json", broken).returncode == 1
    page = tmp_path / "page.html"
    result = run_servesim("matrix", honest, broken, "-o", page)
    assert result.returncode == 0, result.stderr
    dom = Dom(page.read_text(encoding="utf-8"))
    texts = {row_id: [text for _, text, _ in cells] for row_id, cells in dom.rows}
    assert texts == {
        "case-invalid/zero-workers": ["pass", "pass"],
        "case-valid/smoke-one-request": ["pass", "fail"],
    }
    assert "<code>/requests/0/token_times_us/" in page.read_text(encoding="utf-8")


# --- in a real browser --------------------------------------------------------------------

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--force-color-profile=srgb",
    "--force-device-scale-factor=1",
)


@pytest.fixture(scope="module")
def chromium() -> str:
    """The browser; missing, the tests skip, unless SERVESIM_REQUIRE_BROWSER says CI has one."""
    found = next((path for name in BROWSERS if (path := shutil.which(name))), None)
    if found is not None:
        return found
    if os.environ.get("SERVESIM_REQUIRE_BROWSER"):
        pytest.fail("SERVESIM_REQUIRE_BROWSER is set but no Chromium is on PATH")
    pytest.skip("no Chromium on PATH (apt-get install chromium); SERVESIM_REQUIRE_BROWSER=1 fails")


def browse(chromium: str, tmp_path: Path, page: Path, *arguments: str) -> str:
    """Run the headless browser on ``page``; its standard output."""
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    profile.mkdir()
    result = subprocess.run(
        [chromium, *BROWSER_FLAGS, f"--user-data-dir={profile}", *arguments, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def solid_blocks(image: Image.Image, colours: dict[tuple[int, int, int], str]) -> Iterator[Any]:
    """``(left, top, right, bottom, outcome)`` of each connected block of one outcome colour."""
    rgb = image.convert("RGB")
    width = rgb.width
    data = rgb.tobytes()
    pixels = list(zip(data[0::3], data[1::3], data[2::3], strict=True))
    seen: set[int] = set()
    for start, colour in enumerate(pixels):
        if colour not in colours or start in seen:
            continue
        seen.add(start)
        stack, xs, ys = [start], [], []
        while stack:
            index = stack.pop()
            x, y = index % width, index // width
            xs.append(x)
            ys.append(y)
            neighbours = (index - width, index + width)
            neighbours += (index - 1,) if x > 0 else ()
            neighbours += (index + 1,) if x < width - 1 else ()
            for near in neighbours:
                if 0 <= near < len(pixels) and near not in seen and pixels[near] == colour:
                    seen.add(near)
                    stack.append(near)
        yield min(xs), min(ys), max(xs), max(ys), colours[colour]


def test_the_browser_renders_the_matrix(chromium: str, tmp_path: Path) -> None:
    """The DOM Chromium builds has the rows and cells, and the screenshot shows the table:
    one solid block of the outcome's colour per cell, in a 3 x 2 grid, in the right places."""
    page = tmp_path / "page.html"
    page.write_text(page_of(ALPHA, BETA), encoding="utf-8")
    dom = Dom(browse(chromium, tmp_path, page, "--dump-dom"))
    assert [len(cells) for _, cells in dom.rows] == [2, 2, 2]
    assert "img" not in dom.tags()  # the escaped message stayed text

    screenshot = tmp_path / "shot.png"
    browse(chromium, tmp_path, page, f"--screenshot={screenshot}", "--window-size=900,600")
    colours = {
        tuple(int(value[i : i + 2], 16) for i in (1, 3, 5)): outcome
        for outcome, value in OUTCOME_COLOURS.items()
    }
    with Image.open(screenshot) as image:
        blocks = [
            block
            for block in solid_blocks(image, colours)  # type: ignore[arg-type]
            if block[2] - block[0] >= 100 and block[3] - block[1] >= 14  # cells, not chips
        ]
    rows = sorted({top for _, top, _, _, _ in blocks})
    columns = sorted({left for left, _, _, _, _ in blocks})
    assert (len(rows), len(columns)) == (3, 2), blocks
    grid = {(rows.index(top), columns.index(left)): o for left, top, _, _, o in blocks}
    assert grid == {
        (0, 0): "pass",
        (0, 1): "error",
        (1, 0): "pass",
        (1, 1): "fail",
        (2, 0): "pass",
        (2, 1): "xfail",
    }


def test_the_committed_example_is_what_the_command_writes(tmp_path: Path) -> None:
    """docs/matrix/index.html, linked from the README, is not edited by hand or left stale."""
    folder = REPO / "docs" / "matrix"
    reports = [
        folder / f"{name}.json" for name in ("reference", "independent", "floor-rounding-fake")
    ]
    page = tmp_path / "index.html"
    assert main(["matrix", *map(str, reports), "-o", str(page)]) == 0
    assert page.read_bytes() == (folder / "index.html").read_bytes()
