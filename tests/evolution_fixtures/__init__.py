"""A deliberate schema evolution, for the evolution tests: scenario 1.3 -> 1.4 -> 2.0.

Scenario 1.3 is the real, released one (it added the closed loop, the stop time and the
objectives); the versions after it are made up, an alternative history beside the real 1.4
(pools, SPEC.md section 15) and 1.5 (styles, section 16), whose 1.3 -> 1.4 and 1.4 -> 1.5 steps
``CHAIN`` replaces with its own:

- 1.4 (a minor version): adds the optional ``fleet.label``; its schema reads 1.0 to 1.4.
- 2.0 (a major version): renames ``scheduler.prefill.max_chunk_tokens`` to ``chunk_tokens`` and
  raises the ceiling of ``scheduler.max_num_seqs`` from 2^20 to 2^24.

The real schemas in ``schemas/`` are not touched: these files stand in for what a pull request
would put in ``schemas/v1/`` and ``schemas/v2/``. ``CHAIN`` is the migration chain such a pull
request would add to ``servesim.contract.migrations``, and ``load_scenario_2_0`` is what an
implementation that reads 2.0 does with a 2.0 file, so that replaying a migrated document can
be compared with replaying the original.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema

from servesim.contract.documents import Document, semantic_problems
from servesim.contract.errors import InputProblem, InvalidInput, pointer
from servesim.contract.json_reading import parse_json
from servesim.contract.migrations import CHAIN as REFERENCE_CHAIN
from servesim.contract.migrations import Migration, MigrationChain, relabel

HERE = Path(__file__).parent
SCENARIO_1_4 = HERE / "scenario-1.4.schema.json"
SCENARIO_2_0 = HERE / "scenario-2.0.schema.json"


def load(path: Path) -> Any:
    """A fixture schema, parsed."""
    return json.loads(path.read_text(encoding="utf-8"))


def rename_chunk_tokens(document: Mapping[str, Any]) -> dict[str, Any]:
    """Scenario 1.4 -> 2.0: ``scheduler.prefill.max_chunk_tokens`` is now ``chunk_tokens``."""
    upgraded = dict(document)
    scheduler = dict(upgraded["scheduler"])
    prefill = dict(scheduler["prefill"])
    if "max_chunk_tokens" in prefill:
        prefill = {
            ("chunk_tokens" if key == "max_chunk_tokens" else key): value
            for key, value in prefill.items()
        }
    scheduler["prefill"] = prefill
    upgraded["scheduler"] = scheduler
    return upgraded


CHAIN = MigrationChain(
    migrations=(
        *(
            step
            for step in REFERENCE_CHAIN.migrations
            if (step.kind, step.source) not in {("scenario", "1.3"), ("scenario", "1.4")}
        ),
        Migration(
            "scenario", "1.3", "1.4", "relabelled only (1.4 adds the optional fleet.label)", relabel
        ),
        Migration(
            "scenario",
            "1.4",
            "2.0",
            "renames scheduler.prefill.max_chunk_tokens to chunk_tokens",
            rename_chunk_tokens,
        ),
    ),
    current={**REFERENCE_CHAIN.current, "scenario": "2.0"},
)


def load_scenario_2_0(data: bytes, file: str) -> Document:
    """What an implementation that reads scenario 2.0 makes of a 2.0 file: R1 to R4, then the
    same model a 1.0 document gives (``fleet.label`` is for people and is ignored).

    ``Document.value`` is what the reference's model builder takes, so the reference simulates
    it; ``Document.data`` are the 2.0 bytes, whose digest the report carries (R25).
    """
    value = parse_json(data, file)
    problems = [
        InputProblem(file, pointer(error.absolute_path), error.message)
        for error in jsonschema.Draft202012Validator(load(SCENARIO_2_0)).iter_errors(value)
    ]
    if problems:
        raise InvalidInput(problems)
    scheduler = dict(value["scheduler"])
    prefill = {
        ("max_chunk_tokens" if key == "chunk_tokens" else key): item
        for key, item in scheduler["prefill"].items()
    }
    model_value = {**value, "scheduler": {**scheduler, "prefill": prefill}}
    semantic = semantic_problems(model_value, "scenario", file)
    if semantic:
        raise InvalidInput(semantic)
    return Document(file=file, kind="scenario", version="2.0", data=data, value=model_value)
