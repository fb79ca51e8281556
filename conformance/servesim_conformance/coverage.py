"""The corpus's coverage tables: which golden cases exercise each rule of SPEC.md, and which
cases and property strategies exercise the features of sections 10 to 13 in combination.

``python -m servesim_conformance.coverage SPEC.md > golden/COVERAGE.md`` regenerates them; the
corpus lint checks that the committed tables are current.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

from servesim_conformance.corpus import EXPECTED_REPORT, Case, Corpus, Expect, load_corpus


def spec_rules(spec: str) -> list[str]:
    """The rule numbers SPEC.md defines, in numeric order (a later rule may sit in an earlier
    section: R74 to R76 are in section 10)."""
    numbers = re.findall(r"^\*\*R(\d+)\. ", spec, flags=re.MULTILINE)
    return [f"R{number}" for number in sorted(numbers, key=int)]


def coverage_table(corpus: Corpus, rules: list[str]) -> str:
    """A Markdown table: per rule, how many valid and invalid cases exercise it, and which."""
    lines = [
        "# Rule coverage of the golden corpus",
        "",
        f"Generated from `manifest.json` (corpus {corpus.version}) by "
        "`python -m servesim_conformance.coverage SPEC.md`; do not edit by hand.",
        "",
        "| rule | valid | invalid | cases |",
        "|---|---|---|---|",
    ]
    for rule in rules:
        cases = [case for case in corpus.cases if rule in case.rules]
        valid = sum(case.valid for case in cases)
        names = ", ".join(f"`{case.id}`" for case in cases[:6])
        more = f" and {len(cases) - 6} more" if len(cases) > 6 else ""
        lines.append(f"| {rule} | {valid} | {len(cases) - valid} | {names or '—'}{more} |")
    return "\n".join(lines) + "\n" + pair_table(corpus)


Inputs = dict[str, object]
"""A case's documents by name (``scenario``, ``workload``, ``timing``) and, when it has one,
its expected ``report``, as parsed JSON."""


def _get(document: object, *keys: str) -> object:
    for key in keys:
        if not isinstance(document, dict):
            return None
        document = document.get(key)
    return document


def _styles(scenario: object) -> set[object]:
    """R88: the styles of the scenario's limits and of every pool's own."""
    limits = [_get(scenario, "scheduler")]
    pools = _get(scenario, "fleet", "pools")
    if isinstance(pools, list):
        limits += [pool.get("scheduler") for pool in pools if isinstance(pool, dict)]
    return {_get(each, "style") for each in limits if each is not None}


def _as_list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _has_hashes(inputs: Inputs) -> bool:
    requests = _get(inputs["workload"], "requests")
    return isinstance(requests, list) and any("prefix_hashes" in r for r in requests)


#: The features of sections 10 to 13 a case may combine, each read from its inputs (and for
#: preemption from its expected report).
FEATURE_TESTS: dict[str, Callable[[Inputs], bool]] = {
    "measured timing": lambda i: _get(i["timing"], "model", "kind") in ("grid", "regression"),
    "KV cache": lambda i: _get(i["scenario"], "kv_cache") is not None,
    "preemption": lambda i: bool(_get(i.get("report"), "summary", "kv_cache", "preemptions")),
    "prefix caching": lambda i: (
        _get(i["scenario"], "kv_cache", "prefix_caching") is True and _has_hashes(i)
    ),
    "trace": lambda i: _get(i.get("report"), "trace") is not None,
    "stop time": lambda i: _get(i["scenario"], "stop_at_us") is not None,
    "least_loaded": lambda i: _get(i["scenario"], "routing", "policy") == "least_loaded",
    "cache_aware": lambda i: _get(i["scenario"], "routing", "policy") == "cache_aware",
    "sessions": lambda i: _get(i["workload"], "sessions") is not None,
    "closed loop": lambda i: _get(i["scenario"], "closed_loop") is not None,
    "disaggregation": lambda i: _get(i["scenario"], "kv_transfer") is not None,
    "trtllm": lambda i: "trtllm" in _styles(i["scenario"]),
    "ranks": lambda i: any(
        isinstance(pool, dict) and pool.get("dp_size", 1) > 1
        for pool in _as_list(_get(i["scenario"], "fleet", "pools"))
    ),
}

#: The combinations whose interactions matter (issue 30, item 7), and the property strategies
#: of ``servesim_conformance.strategies`` that draw each (besides the tests' own).
PAIRS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("measured timing", "KV cache"), "`kv_input_triples` (`kv_timing_profiles`)"),
    (("measured timing", "preemption"), "`kv_input_triples`"),
    (("measured timing", "prefix caching"), "`kv_input_triples`"),
    (("measured timing", "trace"), "`measured_input_triples`, `kv_input_triples`"),
    (("measured timing", "stop time"), "`session_input_triples` over `kv_input_triples`"),
    (("measured timing", "least_loaded"), "`routed_input_triples`"),
    (("measured timing", "cache_aware"), "`routed_input_triples`"),
    (("KV cache", "sessions"), "`session_input_triples` over `kv_input_triples`"),
    (("KV cache", "closed loop"), "`session_input_triples` over `kv_input_triples`"),
    (
        ("KV cache", "sessions", "closed loop"),
        "`session_input_triples` over `kv_input_triples`",
    ),
    (("sessions", "closed loop"), "`session_input_triples`"),
    (("disaggregation", "prefix caching"), "`disaggregated_input_triples`"),
    (("disaggregation", "preemption"), "`disaggregated_input_triples`"),
    (("disaggregation", "stop time"), "`disaggregated_input_triples`"),
    (("disaggregation", "sessions"), "`disaggregated_input_triples`"),
    (("disaggregation", "closed loop"), "`disaggregated_input_triples`"),
    (("disaggregation", "cache_aware"), "`disaggregated_input_triples`"),
    (("disaggregation", "least_loaded"), "`disaggregated_input_triples`"),
    (("disaggregation", "trtllm"), "`disaggregated_input_triples`"),
    (("disaggregation", "ranks"), "`disaggregated_input_triples`"),
    (("disaggregation", "measured timing"), "`disaggregated_input_triples`"),
)


def case_inputs(case: Case) -> Inputs:
    """The documents of a case with expected values (and its report, if it has one)."""
    names = {"scenario": "scenario.json", "workload": "workload.json"}
    inputs: Inputs = {
        role: json.loads((case.folder / name).read_bytes()) for role, name in names.items()
    }
    # R87: of per-pool profiles, a measured one if any (it is what "measured timing" asks)
    profiles = [
        json.loads(path.read_bytes())
        for kind, path in case.input_documents()
        if kind == "timing_profile"
    ]
    measured = [p for p in profiles if _get(p, "model", "kind") in ("grid", "regression")]
    inputs["timing"] = (measured or profiles)[0]
    if (case.folder / EXPECTED_REPORT).is_file():
        inputs["report"] = json.loads((case.folder / EXPECTED_REPORT).read_bytes())
    return inputs


def pair_table(corpus: Corpus) -> str:
    """A Markdown table: per combination of features, the valid cases that have them all and
    the strategies that draw them together."""
    features = {
        case.id: {name for name, test in FEATURE_TESTS.items() if test(case_inputs(case))}
        for case in corpus.cases
        if case.expectation is Expect.REPORT
    }
    lines = [
        "",
        "# Features in combination",
        "",
        "Valid cases whose inputs combine the features (read from each case's inputs, preemption "
        "and the trace from its expected report), and the property strategies of "
        "`servesim_conformance.strategies` that draw them together (the property tier and the "
        "differential tests against the plain loop run them).",
        "",
        "| features | cases | strategies |",
        "|---|---|---|",
    ]
    for combination, strategies in PAIRS:
        cases = [case for case, has in features.items() if set(combination) <= has]
        names = ", ".join(f"`{case}`" for case in cases[:6])
        more = f" and {len(cases) - 6} more" if len(cases) > 6 else ""
        lines.append(
            f"| {' + '.join(combination)} | {len(cases)}: {names or '—'}{more} | {strategies} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    spec = Path(argv[0] if argv else "SPEC.md").read_text(encoding="utf-8")
    sys.stdout.write(coverage_table(load_corpus(), spec_rules(spec)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
