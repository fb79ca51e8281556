"""Regenerate RESULTS.md: every conformance case's outcome against Dynamo, and why.

    tox -e dynamo                                        # installs ai-dynamo 1.6.1, runs this
    python conformance/adapters/dynamo/results.py        # with servesim and ai-dynamo installed

It runs ``servesim conform`` on the repository's golden corpus with the Dynamo adapter (the
Python running this script must have both servesim and ai-dynamo), reruns the adapter on each
case that errs or fails to keep its own message, and matches every case that does not pass to a
difference in differences.json. It exits 1 when a case that does not pass matches no
difference, or a case a difference names passes (the page would be stale); the page is written
either way.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
ADAPTER = HERE / "adapter.py"
GOLDEN = ROOT / "golden"
SKIP_PREFIX = "needs undeclared features: "
INPUTS = ("scenario.json", "workload.json", "timing-profile.json")
#: The cases an agreement run compares: those whose timing Dynamo expresses exactly.
AGREEMENT_CASES = ("valid/dynamo-fixed-*", "valid/fixed-pass-*")


def conform(patterns: list[str], timeout_s: float) -> dict[str, Any]:
    """The harness's run report of the cases matching ``patterns`` against the adapter."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "run.json"
        command = [
            sys.executable,
            "-m",
            "servesim_cli",
            "conform",
            "--impl",
            f"{sys.executable} {ADAPTER}",
            "--golden",
            str(GOLDEN),
            "--timeout",
            str(timeout_s),
            "--report-json",
            str(report),
        ]
        for pattern in patterns:
            command += ["--case", pattern]
        subprocess.run(command, cwd=ROOT, check=False, stdout=subprocess.DEVNULL)
        if not report.is_file():
            raise SystemExit("servesim conform wrote no run report; run it by hand to see why")
        value: dict[str, Any] = json.loads(report.read_text())
        return value


def run_conform(timeout_s: float) -> dict[str, Any]:
    """Every case's outcome, in one run: the adapter speaks protocol 4 and leaves out
    ``timing.synthetic_linear`` (R38), so the smoke cases, all synthetic, are skipped rather
    than refused, and the harness no longer stops after them with "adapter broken"."""
    return conform([], timeout_s)


def agreement(timeout_s: float) -> str:
    """The harness's agreement table (``--agreement``) on the cases Dynamo can run exactly."""
    with tempfile.TemporaryDirectory() as folder:
        page = Path(folder) / "agreement.md"
        command = [
            sys.executable,
            "-m",
            "servesim_cli",
            "conform",
            "--agreement",
            "--impl",
            f"{sys.executable} {ADAPTER}",
            "--golden",
            str(GOLDEN),
            *(argument for pattern in AGREEMENT_CASES for argument in ("--case", pattern)),
            "--generated",
            "0",
            "--timeout",
            str(timeout_s),
            "--markdown",
            str(page),
        ]
        subprocess.run(command, cwd=ROOT, check=False, capture_output=True)
        if not page.is_file():
            return "(the agreement run wrote no summary; run it by hand to see why)"
        text = page.read_text()
    start = text.find("Cases:")
    return text[start:].strip() if start >= 0 else text.strip()


def adapter_message(case_id: str) -> str:
    """The adapter's last line of standard error on the case (rerun outside the harness)."""
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        for name in INPUTS:
            shutil.copyfile(GOLDEN / case_id / name, work / name)
        arguments = [f"--{name.removesuffix('.json')}" for name in INPUTS]
        command = [sys.executable, str(ADAPTER)]
        for option, name in zip(arguments, INPUTS, strict=True):
            command += [option, str(work / name)]
        command += ["--output", str(work / "report.json")]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = [line for line in done.stderr.splitlines() if line.startswith("dynamo-replay")]
    return lines[-1] if lines else ""


def matches(difference: dict[str, Any], case: dict[str, Any], text: str) -> bool:
    """Whether a difference explains a case that did not pass."""
    rule = difference["match"]
    if case["id"] in rule.get("cases", []):
        return True
    if case["outcome"] == "skip" and case["message"].startswith(SKIP_PREFIX):
        needed = case["message"].removeprefix(SKIP_PREFIX).split(", ")
        if set(needed) & set(rule.get("features", [])):
            return True
    return any(fragment in text for fragment in rule.get("text", []))


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def detail(case: dict[str, Any], message: str) -> str:
    """What the harness saw (with the first differing pointer) and the adapter's message."""
    parts = [case["message"]] if case["message"] else []
    if message:
        parts.append(f"adapter: {message}")
    return cell("; ".join(parts))


def build_page(
    run: dict[str, Any], data: dict[str, Any], messages: dict[str, str], agreed: str = ""
) -> tuple[str, list[str]]:
    """The page and the problems that make it stale."""
    differences = data["differences"]
    by_id = {difference["id"]: difference for difference in differences}
    problems: list[str] = []
    rows = []
    used: Counter[str] = Counter()
    for case in run["cases"]:
        text = " ".join([case["message"], messages.get(case["id"], "")])
        found = [d["id"] for d in differences if matches(d, case, text)]
        notes = [n["id"] for n in data["notes"] if case["id"] in n["cases"]]
        if case["outcome"] == "pass":
            listed = [d["id"] for d in differences if case["id"] in d["match"].get("cases", [])]
            if listed:
                problems.append(f"{case['id']} passes but {', '.join(listed)} says it should not")
            found = []
        elif not found:
            problems.append(f"{case['id']} ({case['outcome']}) matches no difference")
        used.update(found)
        rules = "; ".join(by_id[d]["rule"] for d in found)
        why = "; ".join(f"[{d}](#{d})" for d in found + notes)
        rows.append(
            f"| `{case['id']}` | {case['outcome']} | {rules} | {why} | "
            f"{detail(case, messages.get(case['id'], ''))} |"
        )
    summary = run["summary"]
    description = run["implementation"]["description"]
    counted = ", ".join(
        f"{summary[k]} {k}" for k in ("pass", "fail", "error", "skip") if k in summary
    )
    others = {k: v for k, v in summary.items() if k not in ("pass", "fail", "error", "skip") and v}
    lines = [
        "# Dynamo's replay against the servesim conformance suite",
        "",
        "Generated by `tox -e dynamo` (`python conformance/adapters/dynamo/results.py`); do not "
        "edit by hand. The explanations are data: `differences.json` beside this page.",
        "",
        f"Implementation: {description['name']}, {description['version']}, protocol "
        f"{description['protocol_version']}, declared features: "
        f"{', '.join(description['features']) or 'none'}. Corpus {run['corpus_version']}, "
        f"{len(run['cases'])} cases.",
        "",
        f"**Outcome: {counted}**" + (f" (also {others})" if others else "") + ".",
        "",
        "How the adapter works, and which Dynamo API produced each figure: see README.md here. "
        "The adapter speaks harness protocol 5 and leaves out `timing.synthetic_linear` (R38) "
        "and `timing.per_pool` (R87): the cases timed by servesim's synthetic model, the smoke "
        "cases among them, are skipped; the fixed-pass twins (`valid/fixed-pass-*`) judge it on "
        "the same rules. The Mooncake trace, byte for byte: MOONCAKE.md (and with attention-DP "
        "ranks: MOONCAKE-DP2.md, MOONCAKE-DP4.md); sessions on real traces: SESSIONS.md.",
        "",
        *pools_paragraph(run),
        "",
        *styles_paragraph(run),
        "",
        *disagg_paragraph(run),
        "",
        "## Differences found",
        "",
        "Kinds: *different* (Dynamo does it another way by design), *wrong* (Dynamo looks wrong, "
        "with a minimal case), *not expressible* (the adapter cannot state the case to Dynamo "
        "exactly, so it refuses it by name).",
        "",
    ]
    for difference in differences:
        lines += [
            f"### {difference['id']}",
            "",
            f"**{difference['title']}.** Rule {difference['rule']}; {difference['kind']}; "
            f"{used[difference['id']]} case(s). Minimal case: `{difference['minimal_case']}`.",
            "",
            difference["explanation"],
            "",
        ]
    for note in data["notes"]:
        lines += [f"### {note['id']}", "", f"**{note['title']}.** {note['explanation']}", ""]
    if agreed:
        lines += [
            "## Agreement",
            "",
            "`servesim conform --agreement "
            + " ".join(f"--case '{pattern}'" for pattern in AGREEMENT_CASES)
            + " --generated 0` (how far "
            "Dynamo's times are from the reference's where it runs; the generated cases use "
            "timing, routing or chunking the adapter refuses, so none is compared). The "
            "Mooncake trace agrees to the byte: MOONCAKE.md.",
            "",
            agreed,
            "",
        ]
    lines += [
        "## Every case",
        "",
        "| case | outcome | rule | why | what the harness and the adapter said |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ]
    if problems:
        lines += ["## Stale", "", *[f"- {problem}" for problem in problems], ""]
    return "\n".join(lines), problems


def pools_paragraph(run: dict[str, Any]) -> list[str]:
    """What the run says of the corpus's cases with pools or ranks (scenario 1.4, R77-R86),
    and where the rank cases Dynamo can run are compared (RANKS.md)."""
    outcomes: dict[str, list[str]] = {}
    for case in run["cases"]:
        scenario_file = GOLDEN / case["id"] / "scenario.json"
        if not scenario_file.is_file():
            continue
        try:  # an invalid case's scenario may be anything
            fleet = json.loads(scenario_file.read_text()).get("fleet", {})
            ranked = "pools" in fleet or fleet.get("dp_size", 1) != 1
        except (ValueError, AttributeError, TypeError):
            continue
        if ranked:
            outcomes.setdefault(case["outcome"], []).append(case["id"])
    counted = ", ".join(f"{len(ids)} {outcome}" for outcome, ids in sorted(outcomes.items()))
    passed = ", ".join(f"`{case}`" for case in outcomes.get("pass", [])) or "none"
    return [
        "**Pools and ranks (scenario 1.4).** Corpus cases with `fleet.pools` or "
        f"`fleet.dp_size` > 1: {counted or 'none'}; passed: {passed}. The corpus's rank and "
        "pool cases are timed by synthetic_linear profiles or give a profile per pool, which "
        "Dynamo cannot run (synthetic-timing, pools-one-engine), so their fixed-form twins, "
        "hand-derived, are compared in RANKS.md (`ranks_cases.py`, run by `tox -e dynamo` "
        "after this page): Dynamo's reports and the reference's, byte for byte.",
    ]


def disagg_paragraph(run: dict[str, Any]) -> list[str]:
    """What the run says of the corpus's disaggregated cases (scenario 1.6 with pool roles,
    R97-R108), and where their fixed-form twins are compared (DISAGG-CASES.md)."""
    outcomes: dict[str, Counter[str]] = {}
    for case in run["cases"]:
        kind, _, name = case["id"].partition("/")
        if name.startswith("disagg-"):
            outcomes.setdefault(kind, Counter())[case["outcome"]] += 1
    parts = [
        f"{kind}: " + ", ".join(f"{n} {k}" for k, n in sorted(outcomes[kind].items()))
        for kind in sorted(outcomes)
    ]
    return [
        "**Disaggregated prefill and decode (scenario 1.6).** Corpus cases `disagg-*`, "
        + ("; ".join(parts) or "none")
        + ". The valid ones are timed by synthetic_linear profiles, which Dynamo cannot run "
        "(synthetic-timing); the invalid ones are rejected by the adapter's document reader "
        "before Dynamo runs. Their fixed-form twins run through Dynamo's disaggregated replay "
        "and are compared member by member in DISAGG-CASES.md (`disagg_cases.py`, run by "
        "`tox -e dynamo` after this page); every difference, with its minimal case, is in "
        "DISAGG.md, and the Mooncake trace split 8P+8D in MOONCAKE-DISAGG.md.",
    ]


def styles_paragraph(run: dict[str, Any]) -> list[str]:
    """What the run says of each scheduler style (scenario 1.5, R88-R96): the outcomes of the
    corpus's valid cases whose workers all have that style, and where the cases with a cache
    are compared (STYLES.md)."""
    outcomes: dict[str, Counter[str]] = {}
    passed: dict[str, list[str]] = {}
    for case in run["cases"]:
        scenario_file = GOLDEN / case["id"] / "scenario.json"
        if not case["id"].startswith("valid/") or not scenario_file.is_file():
            continue
        scenario = json.loads(scenario_file.read_text())
        pools = scenario["fleet"].get("pools", [])
        own = [pool["scheduler"] for pool in pools if "scheduler" in pool]
        used = own if pools and len(own) == len(pools) else [scenario["scheduler"], *own]
        styles = {scheduler.get("style", "vllm") for scheduler in used}
        if scenario["schema_version"] != "1.5" or len(styles) != 1:
            continue
        style = styles.pop()
        outcomes.setdefault(style, Counter())[case["outcome"]] += 1
        if case["outcome"] == "pass":
            passed.setdefault(style, []).append(case["id"])
    parts = []
    for style in ("vllm", "sglang", "trtllm"):
        counted = ", ".join(f"{n} {k}" for k, n in sorted(outcomes.get(style, Counter()).items()))
        names = ", ".join(f"`{case}`" for case in passed.get(style, [])) or "none"
        parts.append(f"{style}: {counted or 'no case'} (passed: {names})")
    return [
        "**Scheduler styles (scenario 1.5).** Valid corpus cases of scenario 1.5 whose workers "
        "all have one style, by style: " + "; ".join(parts) + ". Each style runs as Dynamo's "
        "`backend` of the same name; the skipped ones are timed by synthetic_linear profiles "
        "and most have a KV cache, which the adapter refuses (kv-cache). Their fixed-form twins, "
        "with the cache given to Dynamo's engine, are compared request by request in STYLES.md "
        "(`style_cases.py`, run by `tox -e dynamo` after this page).",
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=HERE / "RESULTS.md")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    arguments = parser.parse_args()
    data = json.loads((HERE / "differences.json").read_text())
    run = run_conform(arguments.timeout)
    messages = {
        case["id"]: adapter_message(case["id"])
        for case in run["cases"]
        if case["outcome"] in ("fail", "error") and (GOLDEN / case["id"]).is_dir()
    }
    page, problems = build_page(run, data, messages, agreement(arguments.timeout))
    arguments.output.write_text(page)
    print(f"wrote {arguments.output}: {run['summary']}")
    for problem in problems:
        print(f"stale: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
