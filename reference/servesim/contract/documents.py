"""Reading input documents: strict JSON (R1), the header (R2), the schema (R3), the semantics (R4).

Every check returns problems as data (``InputProblem``) so that one run reports everything wrong
with a file at once, in a stable order, instead of the first thing a parser tripped on.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jsonpointer import JsonPointer

from servesim.contract import validity
from servesim.contract.errors import InputProblem, InvalidInput
from servesim.contract.model import (
    SHAPE_DIMENSIONS,
    ClosedLoop,
    Coverage,
    GridTiming,
    Interval,
    KvCache,
    PrefillKnot,
    RegressionTiming,
    Request,
    Routing,
    Scenario,
    SchedulerLimits,
    Slo,
    SyntheticLinearTiming,
    TimingModel,
    TimingProfile,
    Workload,
)
from servesim.contract.schemas import SUPPORTED_VERSIONS, load_schema

if TYPE_CHECKING:
    import jsonschema

#: How many problems one error message lists before summarising the rest.
MAX_LISTED_PROBLEMS = 20


@dataclass(frozen=True)
class Document:
    """A document that passed R1 to R4: its kind, version, exact bytes and parsed value."""

    file: str
    kind: str
    version: str
    data: bytes
    value: dict[str, Any]


def as_json(value: Any, limit: int = 80) -> str:
    """``value`` written as JSON, shortened for messages (users wrote JSON, not Python)."""
    text = repr(value) if isinstance(value, _OversizedInteger) else json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def pointer(parts: Iterable[str | int]) -> str:
    """The RFC 6901 JSON pointer for a path of keys and indices."""
    return str(JsonPointer.from_parts([str(part) for part in parts]).path)


# --- R1: strict JSON ------------------------------------------------------------------------


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(f"duplicate object key {key!r}")


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


#: Integers with more digits than this are far beyond every bound in the schemas (2**64 has 20).
_MAX_INTEGER_DIGITS = 40


class _OversizedInteger(int):
    """Stands in for an integer literal too long to convert cheaply; it exceeds every maximum.

    Converting a many-thousand-digit literal costs time quadratic in its length (and Python
    refuses beyond 4300 digits), so the literal is kept only as its digit count.
    """

    digits: int

    def __new__(cls, literal: str) -> _OversizedInteger:
        negative = literal.startswith("-")
        value = super().__new__(
            cls, -(10**_MAX_INTEGER_DIGITS) if negative else 10**_MAX_INTEGER_DIGITS
        )
        value.digits = len(literal.lstrip("-"))
        return value

    def __repr__(self) -> str:
        sign = "negative " if self < 0 else ""
        return f"a {sign}{self.digits}-digit integer"


def _parse_int(literal: str) -> int:
    if len(literal.lstrip("-")) > _MAX_INTEGER_DIGITS:
        return _OversizedInteger(literal)
    return int(literal)


def parse_json(data: bytes, file: str) -> Any:
    """R1: UTF-8 JSON text without duplicate keys, NaN or Infinity."""
    return read_json(data, file).value


@dataclass(frozen=True)
class ParsedJson:
    """A document's parsed value (R1), and whether ``servesim.contract.validity`` may judge it."""

    value: Any
    plain_numbers: bool
    """No integer stand-in (``_OversizedInteger``) and no float literal whose value is integral
    or infinite: ``servesim.contract.validity`` may decide this value's validity."""


#: Every ASCII digit as "0", so that a run of digits is found with one ``bytes.find``.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")


def has_long_digit_run(data: bytes, longer_than: int = _MAX_INTEGER_DIGITS) -> bool:
    """Whether ``data`` holds more than ``longer_than`` ASCII digits in a row (anywhere, strings
    included: a run inside a string only costs the slower path).

    Without such a run every integer literal converts cheaply and exactly, so the parser may
    convert integers itself instead of calling ``_parse_int`` for each of a report's millions.
    """
    return b"0" * (longer_than + 1) in data.translate(_DIGITS_AS_ZERO)


def read_json(data: bytes, file: str) -> ParsedJson:
    """``parse_json``, noting what ``servesim.contract.validity`` needs to know of the numbers."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidInput(
            [InputProblem(file, "", f"not UTF-8 text (bad byte at offset {error.start})")]
        ) from None
    long_integers = has_long_digit_run(data)
    unusual_floats: list[float] = []
    oversized: list[_OversizedInteger] = []

    def parse_float(literal: str) -> float:
        value = float(literal)
        if value.is_integer() or not math.isfinite(value):
            unusual_floats.append(value)
        return value

    def parse_long_int(literal: str) -> int:
        # The run may be in a string (a digest of zeros): only a stand-in makes numbers unusual.
        value = _parse_int(literal)
        if isinstance(value, _OversizedInteger):
            oversized.append(value)
        return value

    try:
        value = json.loads(
            text,
            object_pairs_hook=_reject_duplicate_keys,
            parse_constant=_reject_constant,
            parse_float=parse_float,
            parse_int=parse_long_int if long_integers else int,
        )
    except json.JSONDecodeError as error:
        where = f"line {error.lineno} column {error.colno}"
        message = f"not valid JSON at {where}: {error.msg}"
        if not text.strip():
            message = "the file is empty; expected a JSON object"
        raise InvalidInput([InputProblem(file, "", message)]) from None
    except RecursionError:
        message = "nested too deeply to read (arrays and objects inside each other)"
        raise InvalidInput([InputProblem(file, "", message)]) from None
    except ValueError as error:  # duplicate keys, NaN, Infinity
        raise InvalidInput([InputProblem(file, "", f"not valid JSON: {error}")]) from None
    if _SURROGATE_ESCAPE.search(text):  # rare: look for the string that holds it
        _raise_if_any(list(_lone_surrogates(value, [], file)))
    return ParsedJson(value, plain_numbers=not oversized and not unusual_floats)


def plain_numbers(value: Any) -> bool:
    """``ParsedJson.plain_numbers`` for a value parsed some other way: no float that is integral
    or infinite (which only ``jsonschema`` with servesim's type checker judges as R1 asks) and
    no integer stand-in, so ``servesim.contract.validity`` may decide it. Walks the whole value: for
    small ones (a report without its requests)."""
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is float:
            if item.is_integer() or not math.isfinite(item):
                return False
        elif kind is dict:
            pending.extend(item.values())
        elif kind is list:
            pending.extend(item)
        elif kind is _OversizedInteger:
            return False
    return True


#: A \uD800 to \uDFFF escape: half of a UTF-16 surrogate pair, alone unless its partner follows.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


_UNPAIRED = "with an unpaired surrogate escape (\\ud800 to \\udfff): not a Unicode string"


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _lone_surrogates(value: Any, path: list[str | int], file: str) -> Iterator[InputProblem]:
    """R1: strings holding half a surrogate pair, which no UTF-8 text (nor a report) can hold."""
    if isinstance(value, str) and not _is_unicode(value):
        yield InputProblem(file, pointer(path), f"a string {_UNPAIRED}")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not _is_unicode(key):
                yield InputProblem(file, pointer(path), f"a member name {_UNPAIRED}")
            yield from _lone_surrogates(item, [*path, key], file)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _lone_surrogates(item, [*path, index], file)


# --- R2: which document, which version ---------------------------------------------------


def check_header(value: Any, file: str, expected_kind: str | None) -> tuple[str, str]:
    """R2: the document's kind and a supported schema version, or the reason it has neither."""
    if not isinstance(value, dict):
        found = type(value).__name__ if value is not None else "null"
        raise InvalidInput([InputProblem(file, "", f"expected a JSON object, found {found}")])
    kinds = expected_kind if expected_kind is not None else ", ".join(sorted(SUPPORTED_VERSIONS))
    kind = value.get("document")
    if not isinstance(kind, str) or kind not in SUPPORTED_VERSIONS:
        detail = "missing" if "document" not in value else f"{as_json(kind)} is not a known kind"
        raise InvalidInput([InputProblem(file, "/document", f"{detail}; expected one of: {kinds}")])
    if expected_kind is not None and kind != expected_kind:
        raise InvalidInput(
            [
                InputProblem(
                    file, "/document", f"expected a {expected_kind} document, found {as_json(kind)}"
                )
            ]
        )
    version = value.get("schema_version")
    supported = SUPPORTED_VERSIONS[kind]
    if not isinstance(version, str) or version not in supported:
        detail = (
            "missing" if "schema_version" not in value else f"{as_json(version)} is not supported"
        )
        raise InvalidInput(
            [
                InputProblem(
                    file,
                    "/schema_version",
                    f"{detail}; this implementation reads {kind} versions: "
                    + ", ".join(as_json(version) for version in supported),
                )
            ]
        )
    return kind, version


# --- R3: the schema ---------------------------------------------------------------------


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
    since a valid one is decided by ``servesim.contract.validity`` and the import takes a tenth of a
    second of every replay."""
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


def _needs_newer_minor(
    value: dict[str, Any], kind: str, version: str, file: str
) -> list[InputProblem] | None:
    """R2: a document that uses what a later minor added gets one problem saying so.

    Its version's schema would list every member it does not know; the user only needs to hear
    that the document is written for the newer minor (for example a grid profile labelled 1.0).
    The minor named is the first that accepts the document (a KV cache in a scenario 1.0 needs
    1.1, not the newest minor), and a document no later minor accepts gets its own errors.
    """
    major = version.split(".", 1)[0]
    minors = [each for each in SUPPORTED_VERSIONS[kind] if each.split(".", 1)[0] == major]
    later = minors[minors.index(version) + 1 :]
    if not later or not schema_problems(value, kind, version, file):
        return None
    for newer in later:
        if not schema_problems({**value, "schema_version": newer}, kind, newer, file):
            return [
                InputProblem(
                    file,
                    "/schema_version",
                    f"the document uses what version {newer} added; expected {as_json(newer)}, "
                    f"found {as_json(version)}",
                )
            ]
    return None


# --- R4: semantic constraints -----------------------------------------------------------


def repeated_ids(ids: Iterable[str]) -> Iterator[tuple[int, int]]:
    """R4, R59: for each id used before, its index and the index of its first use."""
    first_seen: dict[str, int] = {}
    for index, item_id in enumerate(ids):
        first = first_seen.setdefault(item_id, index)
        if first != index:
            yield index, first


def semantic_problems(value: dict[str, Any], kind: str, file: str) -> list[InputProblem]:
    """R4: constraints a JSON Schema cannot state, on a schema-valid document."""
    problems: list[InputProblem] = []
    if kind == "workload":
        requests = value["requests"]
        for index, first in repeated_ids(request["id"] for request in requests):
            problems.append(
                InputProblem(
                    file,
                    pointer(["requests", index, "id"]),
                    f"duplicate request id {requests[index]['id']!r}; first used at "
                    f"{pointer(['requests', first, 'id'])}",
                )
            )
        problems.extend(_prefix_hash_problems(value, file))
        problems.extend(_session_problems(value, file))
    elif kind == "scenario":
        scheduler = value["scheduler"]
        if scheduler["max_batched_tokens"] < scheduler["max_num_seqs"]:
            problems.append(
                InputProblem(
                    file,
                    "/scheduler/max_batched_tokens",
                    f"{scheduler['max_batched_tokens']} is less than max_num_seqs "
                    f"({scheduler['max_num_seqs']}); every running request must be able to "
                    "decode in the same step",
                )
            )
    elif kind == "timing_profile" and "calibration" in value:
        problems.extend(_measured_profile_problems(value, file))
    return problems


def _prefix_hash_problems(value: dict[str, Any], file: str) -> list[InputProblem]:
    """R4, R47: a request's prefix hashes need the workload's H, and cover no more blocks of H
    tokens than its prompt has."""
    problems: list[InputProblem] = []
    block_tokens = value.get("prefix_hash_block_tokens")
    for index, request in enumerate(value["requests"]):
        hashes = request.get("prefix_hashes")
        if hashes is None:
            continue
        where = pointer(["requests", index, "prefix_hashes"])
        if block_tokens is None:
            problems.append(
                InputProblem(
                    file,
                    where,
                    "prefix_hashes need the workload's prefix_hash_block_tokens (the tokens each "
                    "hash covers), which is missing",
                )
            )
            continue
        most = -(-request["prompt_tokens"] // block_tokens)
        if len(hashes) > most:
            problems.append(
                InputProblem(
                    file,
                    where,
                    f"{len(hashes)} hashes, but a prompt of {request['prompt_tokens']} tokens has "
                    f"at most {most} blocks of prefix_hash_block_tokens ({block_tokens}); expected "
                    f"at most {most}",
                )
            )
    return problems


def _session_problems(value: dict[str, Any], file: str) -> list[InputProblem]:
    """R4, R59: sessions have unique ids and at least one turn, every request names a session
    that exists, ``think_time_us`` belongs to a turn after the first, and a session's turns do
    not go back in time.

    Each fault is one problem, at the member to change: a request naming an unknown session is
    not a turn of anything, so it is not also judged as a turn.
    """
    problems: list[InputProblem] = []
    sessions = value.get("sessions", ())
    declared: dict[str, int] = {}  # session id -> index of its first declaration
    for index, session in enumerate(sessions):
        declared.setdefault(session["id"], index)
    for index, first in repeated_ids(session["id"] for session in sessions):
        problems.append(
            InputProblem(
                file,
                pointer(["sessions", index, "id"]),
                f"duplicate session id {as_json(sessions[index]['id'])}; first used at "
                f"{pointer(['sessions', first, 'id'])}",
            )
        )
    previous_turn: dict[str, int] = {}  # session id -> workload index of its latest turn
    for index, request in enumerate(value["requests"]):
        session_id = request.get("session")
        if session_id is None:
            if "think_time_us" in request:
                problems.append(
                    InputProblem(
                        file,
                        pointer(["requests", index, "think_time_us"]),
                        "think_time_us without session: only a session's later turns wait "
                        "for a think time (R59); expected no think_time_us, or a session",
                    )
                )
            continue
        if session_id not in declared:
            known = "the workload has no sessions" if not declared else "not in /sessions"
            problems.append(
                InputProblem(
                    file,
                    pointer(["requests", index, "session"]),
                    f"unknown session {as_json(session_id)} ({known}); expected the id of one "
                    "of the workload's sessions",
                )
            )
            continue
        before = previous_turn.get(session_id)
        previous_turn[session_id] = index
        if before is None:
            if "think_time_us" in request:
                problems.append(
                    InputProblem(
                        file,
                        pointer(["requests", index, "think_time_us"]),
                        f"think_time_us on turn 0 of session {as_json(session_id)}: the first turn "
                        "arrives at its arrival_us (R59); expected no think_time_us here",
                    )
                )
            continue
        earlier = value["requests"][before]["arrival_us"]
        if request["arrival_us"] < earlier:
            problems.append(
                InputProblem(
                    file,
                    pointer(["requests", index, "arrival_us"]),
                    f"{request['arrival_us']} is smaller than the arrival_us of the previous "
                    f"turn of session {as_json(session_id)} ({earlier}, at "
                    f"{pointer(['requests', before, 'arrival_us'])}); expected at least {earlier}",
                )
            )
    for session_id, index in declared.items():
        if session_id not in previous_turn:
            problems.append(
                InputProblem(
                    file,
                    pointer(["sessions", index]),
                    f"session {as_json(session_id)} has no turn: no request names it; expected at "
                    "least one request with this session",
                )
            )
    return problems


def pair_problems(scenario: Document, workload: Document) -> list[InputProblem]:
    """R4's checks of a scenario and a workload together, each reported at the member to change.

    R62: a stop time comes after the first arrival (a run that stops before anything arrives
    would have no first arrival to measure from), reported at the scenario's ``/stop_at_us``.
    R47: with a KV cache, a prefix hash covers whole cache blocks, so
    ``prefix_hash_block_tokens`` is a multiple of ``block_tokens``, reported at the workload's
    ``/prefix_hash_block_tokens``.
    """
    problems: list[InputProblem] = []
    stop_at_us = scenario.value.get("stop_at_us")
    if stop_at_us is not None:
        requests = workload.value["requests"]
        first = min(range(len(requests)), key=lambda index: requests[index]["arrival_us"])
        earliest = requests[first]["arrival_us"]
        if stop_at_us <= earliest:
            problems.append(
                InputProblem(
                    scenario.file,
                    "/stop_at_us",
                    f"{stop_at_us} is not after the workload's first arrival ({earliest}, at "
                    f"{pointer(['requests', first, 'arrival_us'])} in {workload.file}); "
                    f"expected more than {earliest}",
                )
            )
    kv_cache = scenario.value.get("kv_cache")
    hash_tokens = workload.value.get("prefix_hash_block_tokens")
    if kv_cache is not None and hash_tokens is not None and hash_tokens % kv_cache["block_tokens"]:
        problems.append(
            InputProblem(
                workload.file,
                "/prefix_hash_block_tokens",
                f"{hash_tokens} is not a multiple of the scenario's kv_cache.block_tokens "
                f"({kv_cache['block_tokens']}, in {scenario.file}); expected a multiple of it",
            )
        )
    return problems


def check_pair(scenario: Document, workload: Document) -> None:
    """Raise ``InvalidInput`` if the scenario and the workload break R4 together."""
    _raise_if_any(pair_problems(scenario, workload))


def _measured_profile_problems(value: dict[str, Any], file: str) -> list[InputProblem]:
    """R40: a measured model agrees with its own axes or knots, its coverage and its limits."""
    model = value["model"]
    coverage = model["coverage"]
    problems: list[InputProblem] = []

    def problem(parts: list[str | int], message: str) -> None:
        problems.append(InputProblem(file, pointer(["model", *parts]), message))

    for name in SHAPE_DIMENSIONS:
        if coverage[name]["min"] > coverage[name]["max"]:
            problem(["coverage", name], f"min {coverage[name]['min']} is greater than max")
    if model["kind"] == "grid":
        domain = _grid_problems(model, problem)
    else:
        tokens = [knot["tokens"] for knot in model["prefill_knots"]]
        for index in _not_increasing(tokens):
            problem(
                ["prefill_knots", index, "tokens"],
                f"{tokens[index]} does not exceed the previous knot's tokens; knots are strictly "
                "increasing",
            )
        domain = {"prefill_tokens": (tokens[0], tokens[-1])}
    for name, (first, last) in domain.items():
        if (coverage[name]["min"], coverage[name]["max"]) != (first, last):
            problem(
                ["coverage", name],
                f"covers {coverage[name]['min']}..{coverage[name]['max']} but the model is "
                f"measured on {first}..{last}; the coverage must be exactly that range",
            )
    limits = value["calibration"]["limits"]
    bounds = {
        "decode_requests": (limits["max_num_seqs"], "calibration.limits.max_num_seqs"),
        "prefill_tokens": (limits["max_batched_tokens"], "calibration.limits.max_batched_tokens"),
        "context_tokens": (
            limits["max_num_seqs"] * limits["max_model_len"],
            "calibration.limits.max_num_seqs * max_model_len",
        ),
    }
    for name, (bound, source) in bounds.items():
        if coverage[name]["max"] > bound:
            problem(
                ["coverage", name, "max"],
                f"{coverage[name]['max']} is beyond what the engine could run: {source} is {bound}",
            )
    return problems


def _not_increasing(values: list[int]) -> list[int]:
    """The indices whose value does not exceed the one before (R40: strictly increasing)."""
    return [index for index in range(1, len(values)) if values[index] <= values[index - 1]]


def _grid_problems(model: dict[str, Any], problem: Any) -> dict[str, tuple[int, int]]:
    """R40 for a grid: increasing axes, one duration per grid point; returns the axes' ranges."""
    axes = model["axes"]
    for name in SHAPE_DIMENSIONS:
        for index in _not_increasing(axes[name]):
            problem(
                ["axes", name, index],
                f"{axes[name][index]} does not exceed the previous point; axes are strictly "
                "increasing",
            )
    sizes = [len(axes[name]) for name in SHAPE_DIMENSIONS]

    def check(rows: list[Any], depth: int, parts: list[str | int]) -> None:
        if len(rows) != sizes[depth]:
            problem(
                parts,
                f"has {len(rows)} entries; expected {sizes[depth]}, one per "
                f"axes.{SHAPE_DIMENSIONS[depth]} point",
            )
        elif depth + 1 < len(sizes):
            for index, row in enumerate(rows):
                check(row, depth + 1, [*parts, index])

    check(model["duration_us"], 0, ["duration_us"])
    return {name: (axes[name][0], axes[name][-1]) for name in SHAPE_DIMENSIONS}


# --- Putting it together ----------------------------------------------------------------


def _raise_if_any(problems: list[InputProblem]) -> None:
    if not problems:
        return
    listed = problems[:MAX_LISTED_PROBLEMS]
    if len(problems) > len(listed):
        more = len(problems) - len(listed)
        last = listed[-1]
        listed.append(InputProblem(last.file, "", f"... and {more} more problems"))
    raise InvalidInput(listed)


def load_document(data: bytes, file: str, expected_kind: str | None = None) -> Document:
    """Parse and check one input document's bytes (R1 to R4), or raise ``InvalidInput``.

    ``file`` names the document in messages; ``expected_kind``, when given, is the only kind
    accepted (R2).
    """
    return check_document(read_json(data, file), data, file, expected_kind)


def check_document(
    parsed: ParsedJson, data: bytes, file: str, expected_kind: str | None = None
) -> Document:
    """R2 to R4 for the document ``read_json`` made of ``data``: ``load_document`` for a
    caller that has parsed the bytes already (``servesim migrate``), so they are read once.

    A valid document is recognised by ``servesim.contract.validity`` (fast); only one it does not
    accept
    is explained by ``schema_problems`` (``jsonschema``), so the messages are the same either way.
    """
    value = parsed.value
    kind, version = check_header(value, file, expected_kind)
    if not (parsed.plain_numbers and validity.is_valid(value, kind, version)):
        _raise_if_any(_needs_newer_minor(value, kind, version, file) or [])
        _raise_if_any(schema_problems(value, kind, version, file))
    _raise_if_any(semantic_problems(value, kind, file))
    return Document(file=file, kind=kind, version=version, data=data, value=value)


def read_input_bytes(path: str | Path) -> bytes:
    """A file's bytes, or ``InvalidInput`` naming it when it cannot be read (R5)."""
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise InvalidInput(
            [InputProblem(str(path), "", f"cannot read the file: {error.strerror}")]
        ) from None


def read_document(path: str | Path, expected_kind: str | None = None) -> Document:
    """Read one input file and check it with ``load_document``."""
    return load_document(read_input_bytes(path), str(path), expected_kind)


def build_scenario(value: dict[str, Any]) -> Scenario:
    """The ``Scenario`` of a checked scenario document."""
    routing = value["routing"]
    scheduler = value["scheduler"]
    prefill = scheduler["prefill"]
    kv_cache = value.get("kv_cache")
    closed_loop = value.get("closed_loop")
    slo = value.get("slo")
    return Scenario(
        workers=value["fleet"]["workers"],
        routing=Routing(
            policy=routing["policy"],
            seed=routing.get("seed"),
            prefill_weight=routing.get("prefill_weight", 1),
            load_weight=routing.get("load_weight", 1),
        ),
        scheduler=SchedulerLimits(
            max_num_seqs=scheduler["max_num_seqs"],
            max_batched_tokens=scheduler["max_batched_tokens"],
            max_model_len=scheduler["max_model_len"],
            prefill_mode=prefill["mode"],
            max_chunk_tokens=prefill.get("max_chunk_tokens"),
        ),
        kv_cache=None
        if kv_cache is None
        else KvCache(
            blocks=kv_cache["blocks"],
            block_tokens=kv_cache["block_tokens"],
            prefix_caching=kv_cache["prefix_caching"],
        ),
        closed_loop=None if closed_loop is None else ClosedLoop(closed_loop["max_in_flight"]),
        stop_at_us=value.get("stop_at_us"),
        slo=None
        if slo is None
        else Slo(
            ttft_us=slo.get("ttft_us"),
            mean_itl_us=slo.get("mean_itl_us"),
            e2e_us=slo.get("e2e_us"),
        ),
    )


def build_workload(value: dict[str, Any]) -> Workload:
    """The ``Workload`` of a checked workload document (R59: a request's session by index)."""
    sessions = tuple(session["id"] for session in value.get("sessions", ()))
    session_index = {session: index for index, session in enumerate(sessions)}
    return Workload(
        requests=tuple(
            Request(
                id=item["id"],
                arrival_us=item["arrival_us"],
                prompt_tokens=item["prompt_tokens"],
                max_output_tokens=item["max_output_tokens"],
                prefix_hashes=tuple(item.get("prefix_hashes", ())),
                session=session_index[item["session"]] if "session" in item else None,
                think_time_us=item.get("think_time_us", 0),
            )
            for item in value["requests"]
        ),
        prefix_hash_block_tokens=value.get("prefix_hash_block_tokens"),
        sessions=sessions,
    )


def build_timing_profile(value: dict[str, Any]) -> TimingProfile:
    """The ``TimingProfile`` of a checked timing-profile document."""
    return TimingProfile(model=_build_model(value["model"]), calibration=value.get("calibration"))


def _build_coverage(coverage: dict[str, Any]) -> Coverage:
    return Coverage(
        **{
            name: Interval(coverage[name]["min"], coverage[name]["max"])
            for name in SHAPE_DIMENSIONS
        }
    )


def _build_model(model: dict[str, Any]) -> TimingModel:
    """R22, R41, R42: the model of a checked profile, by kind."""
    if model["kind"] == "grid":
        axes = model["axes"]
        return GridTiming(
            decode_axis=tuple(axes["decode_requests"]),
            context_axis=tuple(axes["context_tokens"]),
            prefill_axis=tuple(axes["prefill_tokens"]),
            durations=tuple(tuple(tuple(row) for row in plane) for plane in model["duration_us"]),
            coverage=_build_coverage(model["coverage"]),
        )
    if model["kind"] == "regression":
        return RegressionTiming(
            intercept_ns=model["intercept_ns"],
            prefill_knots=tuple(
                PrefillKnot(knot["tokens"], knot["ns"]) for knot in model["prefill_knots"]
            ),
            decode_request_ns=model["decode_request_ns"],
            context_token_ps=model["context_token_ps"],
            coverage=_build_coverage(model["coverage"]),
        )
    return SyntheticLinearTiming(
        step_overhead_ns=model["step_overhead_ns"],
        prefill_token_ns=model["prefill_token_ns"],
        decode_token_ns=model["decode_token_ns"],
    )
