"""R3: what makes a document invalid under its JSON Schema, in words a user can act on.

``servesim.contract.validity`` decides fast whether a document is valid; only one it rejects
comes here, to ``jsonschema``, whose errors are reworded in JSON terms (what was expected, what
was found) and placed at the member to change rather than at the object that holds it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import TYPE_CHECKING, Any

from servesim.contract.errors import InputProblem, pointer
from servesim.contract.json_reading import as_json
from servesim.contract.schemas import load_schema

if TYPE_CHECKING:
    import jsonschema


def _is_json_integer(_checker: Any, instance: Any) -> bool:
    # R1: an integer is written without fraction or exponent, and a boolean is not an integer.
    return isinstance(instance, int) and not isinstance(instance, bool)


@cache
def _ecma_regex(pattern: str) -> re.Pattern[str]:
    # JSON Schema patterns are ECMA-262, where "$" (no multiline flag) matches only at the very
    # end; Python's "$" also matches before a final newline, which would let "abc\n" pass
    # "^[!-~]{1,128}$". Python's "\Z" is ECMA's "$". (Our schemas put "$" only at the end of a
    # pattern, never inside a character class.)
    return re.compile(re.sub(r"(?<!\\)\$", r"\\Z", pattern))


def _ecma_pattern(
    validator: Any, pattern: str, instance: Any, schema: dict[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    from jsonschema import ValidationError  # loaded already: only _validator calls this

    if validator.is_type(instance, "string") and not _ecma_regex(pattern).search(instance):
        yield ValidationError(f"{as_json(instance)} does not match {pattern!r}")


@cache
def _validator(kind: str, version: str) -> Any:
    """The validator that explains (``jsonschema``): imported only when a document needs it,
    since a valid one is decided by ``servesim.contract.validity`` and the import takes a
    tenth of a second of every replay."""
    import jsonschema

    strict = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
        jsonschema.Draft202012Validator,
        validators={"pattern": _ecma_pattern},
        type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
            "integer", _is_json_integer
        ),
    )
    return strict(load_schema(kind, version))


def _message(error: jsonschema.ValidationError) -> str:
    """What was expected, in JSON terms, for one schema error."""
    expected: Any = error.validator_value
    if error.validator == "type":
        names = " or ".join(expected) if isinstance(expected, list) else str(expected)
        return f"expected {names}, found {as_json(error.instance)}"
    if error.validator in {"const", "enum"}:
        choices = [expected] if error.validator == "const" else list(expected)
        message = f"expected {', '.join(as_json(choice) for choice in choices)}"
        message += f"; found {as_json(error.instance)}"
    elif error.validator == "required":
        message = f"missing required property: {error.message.split(' is a required')[0]}"
    else:
        message = error.message
    schema_path = list(error.absolute_schema_path)
    if "dependentSchemas" in schema_path:
        present = schema_path[schema_path.index("dependentSchemas") + 1]
        message = f"{message}, because {present!r} is present"
    return message


#: Schema errors whose generic text would only quote the schema back, by document kind and the
#: error's schema path: what was expected instead, in the words of the rule (R5). Every version
#: of the kind that has the keyword there means the same by it.
_EXPLAINED: dict[tuple[str, tuple[str | int, ...]], str] = {
    ("scenario", ("properties", "routing", "not")): (
        "prefill_weight and load_weight are both 0; expected at least one above 0 (R56)"
    ),
    ("scenario", ("properties", "slo", "minProperties")): (
        "no objective; expected at least one of ttft_us, mean_itl_us and e2e_us (R63)"
    ),
    ("scenario", ("then", "required")): (
        'missing kv_cache: policy "cache_aware" (at /routing/policy) needs kv_cache with '
        "prefix_caching true (R56)"
    ),
    ("scenario", ("then", "properties", "kv_cache", "properties", "prefix_caching", "const")): (
        'expected true; found false: policy "cache_aware" (at /routing/policy) needs kv_cache '
        "with prefix_caching true (R56)"
    ),
}


def _describe(error: jsonschema.ValidationError, file: str, kind: str = "") -> list[InputProblem]:
    """One schema error as problems; an unexpected property is reported at its own pointer."""
    path = list(error.absolute_path)
    explained = _EXPLAINED.get((kind, tuple(error.absolute_schema_path)))
    if explained is not None:
        return [InputProblem(file, pointer(path), explained)]
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        declared = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        allowed = sorted(declared)
        return [
            InputProblem(
                file,
                pointer([*path, key]),
                f"unexpected property {key!r}; allowed here: {', '.join(allowed)}",
            )
            for key in sorted(set(error.instance) - set(allowed))
        ]
    forbidden = error.validator_value
    if error.validator == "not" and isinstance(forbidden, dict) and set(forbidden) == {"required"}:
        # a member forbidden in this case: point at it, and say why if the schema does
        why = error.schema.get("description", "") if isinstance(error.schema, dict) else ""
        return [
            InputProblem(file, pointer([*path, name]), f"not allowed here. {why}".strip())
            for name in forbidden["required"]
        ]
    return [InputProblem(file, pointer(path), _message(error))]


def schema_problems(
    value: dict[str, Any], kind: str, version: str, file: str
) -> list[InputProblem]:
    """R3: everything that makes ``value`` invalid under its schema, sorted."""
    problems: list[InputProblem] = []
    for error in _validator(kind, version).iter_errors(value):
        problems.extend(_describe(error, file, kind))
    return sorted(set(problems))
