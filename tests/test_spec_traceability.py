"""SPEC.md section 20: every rule names at least one test, and every test named exists."""

from __future__ import annotations

import re

from tests.helpers import REPO

SPEC = (REPO / "SPEC.md").read_text(encoding="utf-8")


def _defined_rules() -> list[int]:
    return [int(number) for number in re.findall(r"^\*\*R(\d+)\. ", SPEC, flags=re.MULTILINE)]


def _traceability() -> dict[int, list[str]]:
    table = SPEC.split("## 20. Traceability", 1)[1]
    rows = re.findall(r"^\| R(\d+) \| (.+) \|$", table, flags=re.MULTILINE)
    return {int(rule): re.findall(r"`([^`]+)`", tests) for rule, tests in rows}


def test_rules_are_numbered_consecutively() -> None:
    # Each number once, none skipped; a later rule may sit in an earlier section (R74 to R76,
    # the estimator's profiles, are in section 10 with the other measured timing rules).
    rules = _defined_rules()
    assert sorted(rules) == list(range(1, len(rules) + 1))


def test_every_rule_names_a_test() -> None:
    table = _traceability()
    assert sorted(table) == sorted(_defined_rules())
    assert all(table.values())


def test_every_named_test_exists() -> None:
    missing = []
    for tests in _traceability().values():
        for node in tests:
            path, _, name = node.partition("::")
            source = REPO / path
            if not source.is_file() or f"def {name}(" not in source.read_text(encoding="utf-8"):
                missing.append(node)
    assert not missing
