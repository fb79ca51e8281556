"""Deciding fast whether a document is valid under its schema (R3); never explaining why not.

The Python ``jsonschema`` package walks a 48 MB report in tens of seconds; ``jsonschema-rs``
decides the same question in a fraction of a second. So every document is first put to
``jsonschema-rs``; only a document it rejects (or one it might judge differently, below) goes to
``jsonschema``, whose errors become the messages and JSON pointers users read
(``servesim.contract.schema_check.schema_problems``). A valid document never pays for
explanations, and an invalid one gets exactly the messages it always got.

Where the two validators could disagree, the fast one is not asked:

- R1: a number written with a fraction or an exponent is not an integer, even when its value is
  integral (``1.0``, ``1e3``); JSON Schema, and so ``jsonschema-rs``, calls such a number an
  integer. A document holding one (or one too large for a binary64, which reads as infinity) is
  decided by ``jsonschema`` with servesim's stricter type checker. ``parse_json`` notes them.
- An integer literal of more than 40 digits is read as an ``_OversizedInteger`` stand-in, which
  ``jsonschema-rs`` refuses (``ValueError``): such a document is decided by ``jsonschema`` too.

The rest is the same in both: Draft 2020-12 with ``$ref`` to ``$defs``, ``if``/``then``,
``dependentSchemas``, ``not``; integer bounds up to 2**64-1 compared exactly; ``pattern`` with
ECMA-262 semantics for what the schemas write (``$`` matches only at the very end, where
Python's ``re`` would also match before a final newline; ``[!-~]`` and ``[0-9a-f]`` are ASCII
ranges); ``format`` is an annotation, never asserted. tests/test_validity.py checks the
agreement on every golden document and on generated ones.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import jsonschema_rs

from servesim.contract.schemas import load_schema


@cache
def _fast_validator(kind: str, version: str) -> Any:
    return jsonschema_rs.Draft202012Validator(
        load_schema(kind, version), validate_formats=False, offline=True
    )


def is_valid(value: Any, kind: str, version: str) -> bool | None:
    """Whether ``value`` is valid under the ``kind`` schema at ``version``; None when this
    cannot be decided here (a value ``jsonschema-rs`` does not take) and ``jsonschema`` must.

    Only for a value whose numbers ``parse_json`` found plain (see the module's docstring).
    """
    try:
        return bool(_fast_validator(kind, version).is_valid(value))
    except ValueError:  # e.g. an _OversizedInteger: not a type jsonschema-rs converts
        return None
