"""The corpus's rule coverage table: which golden cases exercise each rule of SPEC.md.

``python -m servesim_conformance.coverage SPEC.md > golden/COVERAGE.md`` regenerates it; the
corpus lint checks that the committed table is current.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from servesim_conformance.corpus import Corpus, load_corpus


def spec_rules(spec: str) -> list[str]:
    """The rule numbers SPEC.md defines, in order."""
    return [f"R{number}" for number in re.findall(r"^\*\*R(\d+)\. ", spec, flags=re.MULTILINE)]


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
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    spec = Path(argv[0] if argv else "SPEC.md").read_text(encoding="utf-8")
    sys.stdout.write(coverage_table(load_corpus(), spec_rules(spec)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
