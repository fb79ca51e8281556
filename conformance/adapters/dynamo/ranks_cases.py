"""Dynamo's attention-DP ranks against SPEC.md section 15, case by case; writes RANKS.md.

    python conformance/adapters/dynamo/ranks_cases.py      # in the tox dynamo env

The golden rank cases (``golden/valid/ranks-*``, ``pools-*``) are timed by synthetic_linear
profiles, which no Dynamo timing model expresses, so the suite skips them for Dynamo. These
are their twins in the one form Dynamo runs exactly: a grid equal to Dynamo's fixed model
(``PREFILL_US`` per pass that prefills, ``DECODE_US`` per pass that decodes), the same rules
under test. Each case's hand derivation, written from SPEC.md before either ran, gives every
request's worker, rank and token times under servesim's rules (``servesim``), and where
Dynamo does otherwise, what it does (``dynamo``). For each case the page says whether the
adapter's report (Dynamo) matches the derivation, whether the reference's does, and whether
the two reports are the same bytes (or where they first differ).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servesim_dynamo.fixed_form import fixed_form_grid

from servesim_conformance.properties import at_current_version

HERE = Path(__file__).resolve().parent
ADAPTER = HERE / "adapter.py"
GOLDEN = HERE.parents[2] / "golden" / "valid"

#: The golden cases in Dynamo's fixed form, replayed again with their workers halved (at least
#: one) and two ranks each: the same requests through ranks, sessions and the closed loop.
FIXED_FORM = ("dynamo-fixed-", "fixed-pass-")

PREFILL_US = 300
DECODE_US = 200

#: (worker, rank, token times) per request id; worker and rank None for a rejected request.
Placements = dict[str, tuple[int | None, int | None, list[int]]]


@dataclass(frozen=True)
class Case:
    name: str
    rules: str
    derivation: str
    fleet: dict[str, Any]
    requests: list[tuple[str, int, int, int]]
    """(id, arrival_us, prompt_tokens, max_output_tokens)"""
    servesim: Placements
    dynamo: Placements | None = None
    """Dynamo's outcome where it differs from servesim's, else None."""
    limits: dict[str, Any] = field(default_factory=dict)


def _fixed(seqs: int, budget: int, model_len: int) -> dict[str, Any]:
    """A grid equal to Dynamo's fixed model (README: the fixed form), covering the limits."""
    return fixed_form_grid(PREFILL_US, DECODE_US, seqs, budget, model_len)


ROTATION = [("a", 0, 10, 1), ("b", 0, 20, 1), ("c", 0, 30, 1), ("d", 0, 40, 1), ("e", 0, 10, 1)]

CASES = (
    Case(
        "rotation-per-worker",
        "R80, R83",
        "Twin of golden ranks-rotation-per-worker. 2 workers of dp 2, a..e at 0, one token each. "
        "Round robin by worker, then each worker's own rank rotation: a (0,0), b (1,0), c (0,1), "
        "d (1,1), e (0,0). Every rank prefills at 0; each pass ends at 300, every token then.",
        {"workers": 2, "dp_size": 2},
        ROTATION,
        {
            "a": (0, 0, [300]),
            "b": (1, 0, [300]),
            "c": (0, 1, [300]),
            "d": (1, 1, [300]),
            "e": (0, 0, [300]),
        },
    ),
    Case(
        "barrier-and-arrival-on-idle-rank",
        "R83",
        "Twins of golden ranks-barrier-waits-for-slower-sibling and "
        "ranks-arrival-during-pass-on-idle-rank. 1 worker of dp 2. a (prompt 8, 3 tokens) at 0 "
        "joins rank 0; pass 0..300 prefills it. b (1 token) at 100 joins rank 1, idle, during "
        "the pass: it waits for the next pass (R83). Pass 300..600: rank 0 decodes a (200), "
        "rank 1 prefills b (300): a's second token waits at the barrier until 600. Pass "
        "600..800 decodes a.",
        {"workers": 1, "dp_size": 2},
        [("a", 0, 8, 3), ("b", 100, 8, 1)],
        {"a": (0, 0, [300, 600, 800]), "b": (0, 1, [600])},
    ),
    Case(
        "max-num-seqs-per-rank",
        "R78, R17",
        "Twin of golden ranks-max-num-seqs-per-rank. 1 worker of dp 2, max_num_seqs 1 per rank. "
        "a, b, c, d at 0 (2 tokens each): a, c on rank 0, b, d on rank 1. Each rank seats one: "
        "pass 0..300 prefills a and b, 300..500 decodes them; 500..800 prefills c and d, "
        "800..1000 decodes them.",
        {"workers": 1, "dp_size": 2},
        [("a", 0, 8, 2), ("b", 0, 8, 2), ("c", 0, 8, 2), ("d", 0, 8, 2)],
        {
            "a": (0, 0, [300, 500]),
            "b": (0, 1, [300, 500]),
            "c": (0, 0, [800, 1000]),
            "d": (0, 1, [800, 1000]),
        },
        limits={"max_num_seqs": 1},
    ),
    Case(
        "rejected-request-moves-no-rotation",
        "R80, R10",
        "1 worker of dp 2, max_model_len 16. a (prompt 20) at 0 is rejected at arrival (R10) "
        "and moves no rotation (R80); b (prompt 8, 1 token) at 0 joins rank 0, token at 300. "
        "Dynamo places a first (rank 0) and rejects it at the worker, so b joins rank 1.",
        {"workers": 1, "dp_size": 2},
        [("a", 0, 20, 1), ("b", 0, 8, 1)],
        {"a": (None, None, []), "b": (0, 0, [300])},
        dynamo={"a": (0, 0, []), "b": (0, 1, [300])},
        limits={"max_model_len": 16},
    ),
    Case(
        "alike-pools-are-one-fleet",
        "R77, R78, R80, R85",
        "Two pools x and y of 1 worker of dp 2 each, alike: R78 numbers x's worker 0 and y's "
        "worker 1, round robin runs over both as over one fleet: the rotation case's placements "
        "and times, each request reported in its worker's pool.",
        {"pools": [{"name": n, "workers": 1, "dp_size": 2} for n in ("x", "y")]},
        ROTATION,
        {
            "a": (0, 0, [300]),
            "b": (1, 0, [300]),
            "c": (0, 1, [300]),
            "d": (1, 1, [300]),
            "e": (0, 0, [300]),
        },
    ),
)


def documents(case: Case) -> dict[str, dict[str, Any]]:
    """The case's scenario (1.4), workload and fixed-form grid."""
    limits = {
        "max_num_seqs": 4,
        "max_batched_tokens": 64,
        "max_model_len": 1024,
        "prefill": {"mode": "whole"},
        **case.limits,
    }
    scenario = {
        "document": "scenario",
        "schema_version": "1.4",
        "fleet": case.fleet,
        "routing": {"policy": "round_robin"},
        "scheduler": limits,
    }
    workload = {
        "document": "workload",
        "schema_version": "1.0",
        "requests": [
            {"id": i, "arrival_us": t, "prompt_tokens": p, "max_output_tokens": o}
            for i, t, p, o in case.requests
        ],
    }
    profile = _fixed(limits["max_num_seqs"], limits["max_batched_tokens"], limits["max_model_len"])
    return {"scenario": scenario, "workload": workload, "timing-profile": profile}


def placements(report: dict[str, Any]) -> Placements:
    return {
        r["id"]: (r["worker"], r["rank"], list(r["token_times_us"])) for r in report["requests"]
    }


def replay(command: list[str], folder: Path, name: str) -> tuple[dict[str, Any] | None, str]:
    """Run one implementation on the case folder: its report, or None and why."""
    output = folder / f"{name}.json"
    done = subprocess.run(
        [
            *command,
            "--scenario",
            str(folder / "scenario.json"),
            "--workload",
            str(folder / "workload.json"),
            "--timing-profile",
            str(folder / "timing-profile.json"),
            "--output",
            str(output),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        return None, f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
    if name != "reference":
        # Dynamo's report 8.0, migrated to the reference's version as the harness does (R37)
        output.write_bytes(at_current_version(output.read_bytes()))
    return json.loads(output.read_bytes()), ""


def ranked_twin(case: Path, folder: Path) -> None:
    """The golden ``case`` with ``fleet.dp_size`` 2 on half its workers (scenario 1.4, or 1.5
    with a style)."""
    scenario = json.loads((case / "scenario.json").read_text())
    workers = scenario["fleet"]["workers"]
    # fleet.dp_size is scenario 1.4's (R77); a style keeps its case at 1.5 (R96)
    scenario["schema_version"] = "1.5" if "style" in scenario["scheduler"] else "1.4"
    scenario["fleet"] = {"workers": max(1, workers // 2), "dp_size": 2}
    (folder / "scenario.json").write_text(json.dumps(scenario, indent=1))
    for name in ("workload.json", "timing-profile.json"):
        (folder / name).write_text((case / name).read_text())


def compare_twins(temporary: Path) -> list[tuple[str, str]]:
    """Each fixed-form golden case's dp-2 twin through both: same bytes, or what differs."""
    from servesim_conformance.compare import first_difference

    rows = []
    for case in sorted(GOLDEN.iterdir()):
        if not case.name.startswith(FIXED_FORM):
            continue
        folder = temporary / f"dp2-{case.name}"
        folder.mkdir()
        ranked_twin(case, folder)
        dynamo, why_dynamo = replay([sys.executable, str(ADAPTER)], folder, "dynamo")
        reference, why_ref = replay(
            [sys.executable, "-m", "servesim_cli", "replay", "--quiet"], folder, "reference"
        )
        if dynamo is None or reference is None:
            verdict = f"reference {why_ref or 'exit 0'}; Dynamo {why_dynamo or 'exit 0'}"
        elif (folder / "dynamo.json").read_bytes() == (folder / "reference.json").read_bytes():
            verdict = "**same bytes**"
        else:
            verdict = f"differ: {first_difference(reference, dynamo)}"
        rows.append((case.name, verdict))
        print(f"dp2 {case.name} | {verdict}", flush=True)
    return rows


def main() -> int:
    from servesim_conformance.compare import first_difference

    rows = []
    with tempfile.TemporaryDirectory(prefix="servesim-dynamo-ranks-") as temporary:
        for case in CASES:
            folder = Path(temporary) / case.name
            folder.mkdir()
            for name, value in documents(case).items():
                (folder / f"{name}.json").write_text(json.dumps(value, indent=1))
            dynamo, why_dynamo = replay([sys.executable, str(ADAPTER)], folder, "dynamo")
            reference, why_ref = replay(
                [sys.executable, "-m", "servesim_cli", "replay", "--quiet"], folder, "reference"
            )
            wanted = case.dynamo or case.servesim
            dyn = "error: " + why_dynamo if dynamo is None else _verdict(placements(dynamo), wanted)
            ref = (
                "error: " + why_ref
                if reference is None
                else _verdict(placements(reference), case.servesim)
            )
            if dynamo is None or reference is None:
                same = "n/a"
            elif (folder / "dynamo.json").read_bytes() == (folder / "reference.json").read_bytes():
                same = "**same bytes**"
            else:
                same = f"differ: {first_difference(reference, dynamo)}"
            rows.append((case, dyn, ref, same))
            print(case.name, "|", dyn, "|", ref, "|", same, flush=True)
        twins = compare_twins(Path(temporary))
    (HERE / "RANKS.md").write_text(_page(rows, twins))
    return 0


def _verdict(actual: Placements, wanted: Placements) -> str:
    if actual == wanted:
        return "as derived"
    wrong = {k: actual.get(k) for k in wanted if actual.get(k) != wanted[k]}
    return f"NOT as derived: {wrong}"


def _page(rows: list[tuple[Case, str, str, str]], twins: list[tuple[str, str]]) -> str:
    lines = [
        "# Dynamo's attention-DP ranks against SPEC.md section 15",
        "",
        "Generated by `python conformance/adapters/dynamo/ranks_cases.py` (in the tox dynamo "
        "environment); do not edit by hand. The cases, their hand derivations and why they "
        "exist: the script's docstring and `CASES`. Timing: a grid equal to Dynamo's fixed "
        f"model, {PREFILL_US} us per pass that prefills, {DECODE_US} us per pass that decodes.",
        "",
        "Dynamo: the adapter's report (worker, rank and token times of every request) against "
        "the derivation of what Dynamo does (servesim's where they agree). Reference: "
        "`servesim replay` against servesim's derivation. Reports: the two whole reports.",
        "",
        "| case | rules | Dynamo | reference | reports |",
        "|---|---|---|---|---|",
    ]
    for case, dyn, ref, same in rows:
        lines.append(f"| {case.name} | {case.rules} | {dyn} | {ref} | {same} |")
    lines += [
        "",
        "## The golden fixed-form cases on workers of two ranks",
        "",
        "Each golden case in Dynamo's fixed form (`valid/dynamo-fixed-*`, `valid/fixed-pass-*`) "
        "with `fleet.dp_size` 2 on half its workers (at least one): the same requests through "
        "ranks (and, where the case has them, sessions and the closed loop). No hand "
        "derivation: the reference's report against Dynamo's. Where they differ, the case's "
        "own difference in RESULTS.md is the reason (the same differences as with one rank).",
        "",
        "| case, dp 2 | reports |",
        "|---|---|",
        *[f"| {name} | {verdict.replace('|', '/')} |" for name, verdict in twins],
        "",
    ]
    for case, _dyn, _ref, _same in rows:
        lines += [f"## {case.name}", "", case.derivation, ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
