"""The mutation tool (conformance/mutation/mutate.py): its operators, ids and fixed order.

Only the enumeration and the rewriting are tested here (fast); judging mutants runs the whole
corpus per mutant and lives in ``tox -e mutation``.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "conformance" / "mutation" / "mutate.py"


@pytest.fixture(scope="module")
def mutate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("servesim_mutate", TOOL)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


SNIPPET = '''\
"""Docstring with 7 in it."""
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    X = 1 + 2


def f(a: int, b: list[int]) -> int | None:
    """Not mutated: 3."""
    assert a < 5, f"{a + 1}"
    if a < b[0] and not a == 2:
        return min(a, 3) * 2
    if a in b or True:
        raise ValueError(f"bad {a - 1}")
    a += 1
    return a // 4


def g(x: int) -> int:
    return x % 2
'''

EXPECTED = [
    "m:11:7:<-><=",
    "m:11:7:and->or",
    "m:11:13:int+1",
    "m:11:13:int-1",
    "m:11:20:drop-not",
    "m:11:24:==->!=",
    "m:11:29:int+1",
    "m:11:29:int-1",
    "m:12:8:return->None",
    "m:12:15:*->//",
    "m:12:15:min->max",
    "m:12:22:int+1",
    "m:12:22:int-1",
    "m:12:27:int+1",
    "m:12:27:int-1",
    "m:13:7:in->not-in",
    "m:13:7:or->and",
    "m:13:17:true->false",
    "m:15:4:+->-",
    "m:15:9:int+1",
    "m:15:9:int-1",
    "m:16:4:return->None",
    "m:16:11://->*",
    "m:16:16:int+1",
    "m:16:16:int-1",
    "m:20:11:%->//",
    "m:20:15:int+1",
    "m:20:15:int-1",
]


def test_enumeration_ids_and_order(mutate: ModuleType) -> None:
    ids = [mutant.id for mutant in mutate.enumerate_mutants(SNIPPET, "m")]
    assert ids == EXPECTED


def test_nothing_in_docstrings_asserts_raises_annotations(mutate: ModuleType) -> None:
    lines = {mutant.line for mutant in mutate.enumerate_mutants(SNIPPET, "m")}
    # 1: module docstring, 5: TYPE_CHECKING, 8: annotations, 9: docstring, 10: assert, 14: raise
    assert not lines & {1, 5, 8, 9, 10, 14}


@pytest.mark.parametrize(
    ("mutant_id", "before", "after"),
    [
        ("m:11:7:<-><=", "a < b[0]", "a <= b[0]"),
        ("m:11:7:and->or", "a < b[0] and (not a == 2)", "a < b[0] or not a == 2"),
        ("m:11:20:drop-not", "and (not a == 2)", "and a == 2"),
        ("m:12:15:min->max", "min(a, 3) * 2", "max(a, 3) * 2"),
        ("m:12:27:int-1", "min(a, 3) * 2", "min(a, 3) * 1"),
        ("m:13:17:true->false", "a in b or True", "a in b or False"),
        ("m:15:4:+->-", "a += 1", "a -= 1"),
        ("m:16:4:return->None", "return a // 4", "return None"),
        ("m:20:11:%->//", "return x % 2", "return x // 2"),
    ],
)
def test_each_mutant_is_one_change(
    mutate: ModuleType, mutant_id: str, before: str, after: str
) -> None:
    (mutant,) = [m for m in mutate.enumerate_mutants(SNIPPET, "m") if m.id == mutant_id]
    original = ast.unparse(ast.parse(SNIPPET))
    changed = mutate.mutated_source(SNIPPET, mutant).rstrip("\n")
    assert before in original
    assert after in changed
    differing = [
        pair
        for pair in zip(original.splitlines(), changed.splitlines(), strict=True)
        if pair[0] != pair[1]
    ]
    assert len(differing) == 1


def test_the_engine_enumeration_is_stable(mutate: ModuleType) -> None:
    path = ROOT / "reference" / "servesim" / "engine" / "admission.py"
    name = mutate.module_name(path)
    first = mutate.enumerate_mutants(path.read_text(), name)
    assert first == mutate.enumerate_mutants(path.read_text(), name)
    assert name == "servesim.engine.admission"
    assert len({mutant.id for mutant in first}) == len(first)


def test_the_equivalent_list_names_real_mutants(mutate: ModuleType) -> None:
    entries = json.loads(mutate.EQUIVALENT.read_text())
    known = {
        mutant.id
        for path in mutate.engine_modules()
        for mutant in mutate.enumerate_mutants(path.read_text(), mutate.module_name(path))
    }
    for entry in entries:
        assert entry["id"] in known, entry["id"]
        assert entry["reason"].strip()


def test_combine_keeps_the_last_judgement_and_every_total(
    mutate: ModuleType, tmp_path: Path
) -> None:
    def run(folder: str, totals: dict[str, int], results: list[tuple[str, str]]) -> Path:
        path = tmp_path / folder
        path.mkdir()
        run = {"sample": None, "seed": 0, "wall_s": 60.0, "totals": totals}
        (path / "run.json").write_text(json.dumps(run))
        entries = [
            {
                "id": i,
                "module": i.rsplit(":", 3)[0],
                "status": s,
                "judge": "conform",
                "detail": "",
                "seconds": 1.0,
            }
            for i, s in results
        ]
        (path / "results.json").write_text(json.dumps(entries))
        return path

    first = run("first", {"m": 3}, [("m:1:1:int+1", "survived"), ("m:2:1:int+1", "killed")])
    second = run("second", {"n": 1}, [("m:1:1:int+1", "killed"), ("n:1:1:int-1", "timeout")])
    summary = mutate.combine([first, second], tmp_path / "out")
    assert "Sample: 2 runs combined; wall time 2.0 min." in summary
    assert "| m | 3 | 2 | 2 | 0 | 0 | 0 | 100.0 % |" in summary
    assert "| n | 1 | 1 | 0 | 1 | 0 | 0 | 100.0 % |" in summary
    assert json.loads((tmp_path / "out" / "survivors.json").read_text()) == []
