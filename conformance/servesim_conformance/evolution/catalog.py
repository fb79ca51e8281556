"""Where the schemas of a revision are: the current ones, the released ones, their checksums.

The layout of the ``schemas/`` folder (the versioning policy in SPEC.md):

- ``v<MAJOR>/<kind>.schema.json``: the schema of the latest minor version of each major; its
  ``schema_version`` lists every minor of that major it reads;
- ``harness/v<PROTOCOL>/<name>.schema.json``: the conformance harness's own documents;
- ``released/<MAJOR.MINOR>/<kind>.schema.json`` and ``released/harness/<PROTOCOL>/...``: the
  frozen copy of every released version, never edited, with their SHA-256 digests in
  ``released/SHA256SUMS`` (the format of ``sha256sum``, so ``sha256sum -c`` checks it too).

A revision is read as a mapping from paths (relative to ``schemas/``) to bytes, from the work
tree or from git, so that the same code reviews either.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema_specifications import REGISTRY as SPECIFICATIONS  # type: ignore[import-untyped]

from servesim.contract.migrations import version_key
from servesim_conformance.evolution.oracle import latest_version, version_values
from servesim_conformance.evolution.roles import kind_of

RELEASED = "released"
SUMS = f"{RELEASED}/SHA256SUMS"

_CURRENT = re.compile(r"^v(\d+)/([^/]+\.schema\.json)$")
_HARNESS = re.compile(r"^harness/v(\d+)/([^/]+\.schema\.json)$")
_RELEASED = re.compile(r"^released/(\d+\.\d+)/([^/]+\.schema\.json)$")
_RELEASED_HARNESS = re.compile(r"^released/harness/(\d+)/([^/]+\.schema\.json)$")


class CatalogError(Exception):
    """A revision or file that cannot be read as schemas (a bad revision, invalid JSON, ...)."""


@dataclass(frozen=True)
class SchemaFile:
    """One schema of one revision: its document kind, version, path, parsed value and major
    version (the harness's protocol version for its documents)."""

    kind: str
    version: str
    path: str
    schema: Any
    major: int

    @property
    def versioned(self) -> bool:
        """Whether its documents carry ``schema_version`` (the harness's documents do not)."""
        return not self.kind.startswith("harness/")


def parse_schema(data: bytes, path: str) -> Any:
    """The parsed schema, or ``CatalogError`` naming the file.

    An object must use at least one Draft 2020-12 keyword. That refuses an instance document
    passed by mistake (``scenario.json`` for ``scenario.schema.json``): the meta-schema alone
    accepts any object, since unknown members are allowed, and the diff would then compare
    nothing and call it compatible.
    """
    try:
        schema = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CatalogError(f"{path}: not a JSON schema ({error})") from None
    if not isinstance(schema, dict):  # compare() judges booleans and non-schemas itself
        return schema
    if schema and not schema.keys() & _schema_keywords():  # {} is a schema: it accepts all
        document = schema.get("document")
        hint = f" (it looks like a {document} document)" if isinstance(document, str) else ""
        raise CatalogError(
            f"{path}: not a JSON schema: it uses none of the Draft 2020-12 keywords{hint}; "
            "pass the schema files, e.g. schemas/v1/scenario.schema.json"
        )
    return schema


@cache
def _schema_keywords() -> frozenset[str]:
    """Every keyword the Draft 2020-12 vocabularies define (from their meta-schemas)."""
    registry = SPECIFICATIONS
    return frozenset(
        keyword
        for uri in registry
        if uri.startswith("https://json-schema.org/draft/2020-12/meta/")
        for keyword in registry[uri].contents.get("properties", {})
    )


def _schema_file(path: str, data: bytes, version: str | None, major: int) -> SchemaFile:
    schema = parse_schema(data, path)
    kind = kind_of(schema) or Path(path).name.removesuffix(".schema.json")
    if version is None:
        version = latest_version(version_values(schema))
    return SchemaFile(kind=kind, version=version, path=path, schema=schema, major=major)


def schemas_by_major(files: dict[str, bytes]) -> dict[tuple[str, int], SchemaFile]:
    """Every current schema by (kind, major), the harness's by (kind, protocol)."""
    found: dict[tuple[str, int], SchemaFile] = {}
    for path in sorted(files):
        document = _CURRENT.match(path)
        harness = _HARNESS.match(path)
        if document is not None:
            schema_file = _schema_file(path, files[path], None, int(document[1]))
        elif harness is not None:
            major = int(harness[1])
            schema_file = _schema_file(path, files[path], f"protocol {major}", major)
        else:
            continue
        found[(schema_file.kind, schema_file.major)] = schema_file
    return found


def released_schemas(files: dict[str, bytes]) -> dict[str, list[SchemaFile]]:
    """Per kind, every released schema, oldest first."""
    found: dict[str, list[tuple[tuple[int, int], SchemaFile]]] = {}
    for path in sorted(files):
        document = _RELEASED.match(path)
        harness = _RELEASED_HARNESS.match(path)
        if document is not None:
            order = version_key(document[1])
            schema_file = _schema_file(path, files[path], document[1], order[0])
        elif harness is not None:
            order = (int(harness[1]), 0)
            schema_file = _schema_file(path, files[path], f"protocol {harness[1]}", order[0])
        else:
            continue
        found.setdefault(schema_file.kind, []).append((order, schema_file))
    return {
        kind: [entry for _, entry in sorted(entries, key=lambda pair: pair[0])]
        for kind, entries in sorted(found.items())
    }


def released_by_major(files: dict[str, bytes]) -> dict[tuple[str, int], SchemaFile]:
    """The last release of every (kind, major)."""
    return {
        (entry.kind, entry.major): entry
        for entries in released_schemas(files).values()
        for entry in entries  # oldest first, so the last of each major stays
    }


def newest(schemas: dict[tuple[str, int], SchemaFile]) -> dict[str, SchemaFile]:
    """Per kind, the entry of its highest major."""
    found: dict[str, SchemaFile] = {}
    for (kind, major), entry in sorted(schemas.items()):
        if kind not in found or found[kind].major < major:
            found[kind] = entry
    return found


def released_problems(files: dict[str, bytes]) -> list[str]:
    """Everything wrong with the frozen releases: a changed, missing or unlisted file.

    The digests are of the exact bytes: a released schema is immutable, even in whitespace.
    """
    problems: list[str] = []
    if SUMS not in files:
        return [f"{SUMS} is missing"]
    listed: dict[str, str] = {}
    for number, line in enumerate(files[SUMS].decode("utf-8").splitlines(), start=1):
        match = re.fullmatch(r"([0-9a-f]{64}) [ *](\S+)", line)
        if match is None:
            problems.append(f"{SUMS} line {number} is not '<sha256>  <path>'")
            continue
        listed[f"{RELEASED}/{match[2]}"] = match[1]
    for path, digest in sorted(listed.items()):
        if path not in files:
            problems.append(f"{path} is listed in {SUMS} but missing")
        elif hashlib.sha256(files[path]).hexdigest() != digest:
            problems.append(f"{path} has changed since its release (its SHA-256 differs)")
    for path in sorted(files):
        if path.startswith(RELEASED + "/") and path != SUMS and path not in listed:
            problems.append(f"{path} is not listed in {SUMS}")
    return problems


def sums_line(path: str, data: bytes) -> str:
    """The ``SHA256SUMS`` line of a released file (``path`` relative to ``released/``)."""
    return f"{hashlib.sha256(data).hexdigest()}  {path}"


def read_work_tree(root: Path) -> dict[str, bytes]:
    """Every schema file and the checksum list under ``root`` (a ``schemas/`` folder)."""
    if not root.is_dir():
        raise CatalogError(f"{root} is not a folder")
    files = {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*.schema.json"))
    }
    sums = root / SUMS
    if sums.is_file():
        files[SUMS] = sums.read_bytes()
    return files


def _git(directory: Path, *arguments: str) -> bytes:
    try:
        completed = subprocess.run(
            ["git", "-C", str(directory), *arguments], capture_output=True, check=False
        )
    except OSError as error:
        raise CatalogError(f"cannot run git: {error}") from None
    if completed.returncode != 0:
        message = completed.stderr.decode("utf-8", "replace").strip()
        raise CatalogError(f"git {' '.join(arguments)}: {message}")
    return completed.stdout


def read_revision(root: Path, revision: str) -> dict[str, bytes]:
    """The schema files under ``root`` (``schemas/`` in a git work tree) at ``revision``."""
    prefix = _git(root, "rev-parse", "--show-prefix").decode().strip()
    listing = _git(root, "ls-tree", "-r", "--name-only", "--full-tree", revision, "--", prefix)
    files: dict[str, bytes] = {}
    for line in listing.decode("utf-8").splitlines():
        relative = line[len(prefix) :] if line.startswith(prefix) else line
        if relative.endswith(".schema.json") or relative == SUMS:
            files[relative] = _git(root, "show", f"{revision}:{line}")
    return files


def describe_revision(root: Path, revision: str) -> str:
    """A short name for ``revision`` ("abc1234"), for the review's title."""
    return _git(root, "rev-parse", "--short", revision).decode().strip()


def read_git_path(directory: Path, revision: str, path: str) -> tuple[dict[str, bytes], bool]:
    """The schema file or folder at git's ``REV:PATH``, and whether it is a single file.

    ``PATH`` is from the top of the repository holding ``directory``, or from ``directory``
    itself when it starts with ``./`` (git's own rule).
    """
    spec = f"{revision}:{path}"
    if _git(directory, "cat-file", "-t", spec).decode().strip() == "blob":
        return {Path(path).name: _git(directory, "show", spec)}, True
    listing = _git(directory, "ls-tree", "-r", "--name-only", spec).decode("utf-8").splitlines()
    files = {
        name: _git(directory, "show", f"{spec.rstrip('/')}/{name}")
        for name in listing
        if name.endswith(".schema.json")
    }
    if not files:
        raise CatalogError(f"{spec}: no *.schema.json file there")
    return files, False
