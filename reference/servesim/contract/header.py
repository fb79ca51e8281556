"""R2: which document this is and which version of it, or the one reason it cannot be read.

Every later check needs the kind and the version (they choose the schema), so a document
without a known kind or a supported version gets one problem here and no others.
"""

from __future__ import annotations

from typing import Any

from servesim.contract.errors import InputProblem, InvalidInput
from servesim.contract.json_reading import as_json
from servesim.contract.schema_check import schema_problems
from servesim.contract.schemas import SUPPORTED_VERSIONS


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


def needs_newer_minor(
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
