"""The versioning policy (SPEC.md, R34 onwards) applied to one document's change.

Compatibility is a fact about two schemas; whether a change is *allowed* depends on the version
it ships under. A minor version may only change a document in the way its readers tolerate
(``roles``); a major version may change anything but must bring a migration; an unchanged
version may not change what is valid at all. This module turns a ``Comparison`` and the two
versions into findings a reviewer acts on.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from servesim.contract.errors import InvalidInput
from servesim.contract.migrations import MigrationChain, version_key
from servesim_conformance.evolution.catalog import SchemaFile
from servesim_conformance.evolution.model import Comparison, Verdict
from servesim_conformance.evolution.oracle import version_values


class Level(enum.Enum):
    """How a finding weighs: fine, needs a person's decision, or against the policy."""

    OK = "ok"
    UNDECIDED = "undecided"
    VIOLATION = "violation"


@dataclass(frozen=True)
class Finding:
    """One thing the policy says about one document's change."""

    level: Level
    message: str


def _migration(chain: MigrationChain, kind: str, base: str, head: str) -> Finding:
    try:
        steps = chain.path(kind, base, head)
    except InvalidInput:
        return Finding(
            Level.VIOLATION,
            f"no migration from {base} to {head}: "
            "add the step to servesim.contract.migrations (R37)",
        )
    described = "; ".join(f"{step.source} -> {step.target}: {step.summary}" for step in steps)
    return Finding(Level.OK, f"migration {base} -> {head}: {described}")


def _compatibility(comparison: Comparison, why: str) -> Finding:
    verdict = comparison.verdict()
    directions = " and ".join(direction.value for direction in comparison.matters)
    if verdict is Verdict.COMPATIBLE:
        return Finding(Level.OK, f"{directions} compatible, as {why} requires")
    if verdict is Verdict.BREAKING:
        return Finding(
            Level.VIOLATION,
            f"not {directions} compatible, which {why} requires; ship it as a new major "
            "version (with a migration) or drop the breaking change",
        )
    return Finding(
        Level.UNDECIDED,
        f"{directions} compatibility could not be decided, and {why} requires it: "
        "a reviewer must decide (see the changes no rule decides)",
    )


def _unversioned(base: SchemaFile, head: SchemaFile, comparison: Comparison) -> list[Finding]:
    """The harness's documents: versioned by the protocol, not by a member of their own."""
    if base.version != head.version:
        return [Finding(Level.OK, f"new {head.version}")]
    if all(change.is_annotation for change in comparison.changes):
        return [Finding(Level.OK, "annotations only")]
    return [_compatibility(comparison, f"a change within {head.version}")]


def judge(
    base: SchemaFile | None,
    head: SchemaFile | None,
    comparison: Comparison | None,
    chain: MigrationChain,
) -> list[Finding]:
    """What the policy says about a document going from ``base`` to ``head``."""
    if base is None:
        return [Finding(Level.OK, "a new kind of document")]
    if head is None:
        return [
            Finding(
                Level.VIOLATION,
                f"the {base.kind} schema was removed; released versions stay readable (R36)",
            )
        ]
    if comparison is None:
        return []
    if not base.versioned:
        return _unversioned(base, head, comparison)
    for end in (base, head):
        try:
            version_key(end.version)
        except ValueError:
            return [
                Finding(
                    Level.VIOLATION,
                    f'{end.path} declares no "MAJOR.MINOR" schema_version (R2), so no policy '
                    "can be applied",
                )
            ]
    if base.version == head.version:
        if all(change.is_annotation for change in comparison.changes):
            return [Finding(Level.OK, "annotations only: no new version needed")]
        return [
            Finding(
                Level.VIOLATION,
                f"what is valid changed but the version is still {head.version}; a released "
                "version never changes (R34): give the change a new version",
            )
        ]
    if version_key(head.version) < version_key(base.version):
        return [
            Finding(Level.VIOLATION, f"the version went down, {base.version} to {head.version}")
        ]
    findings: list[Finding] = []
    if version_key(head.version)[0] > version_key(base.version)[0]:
        findings.append(Finding(Level.OK, f"new major version {head.version}: any change allowed"))
    else:
        findings.append(_compatibility(comparison, f"a minor version of a {base.kind}"))
        if base.version not in version_values(head.schema):
            findings.append(
                Finding(
                    Level.VIOLATION,
                    f"{head.path} no longer reads {base.version}; the schema of a minor "
                    "version reads every earlier minor of its major (R35)",
                )
            )
    findings.append(_migration(chain, base.kind, base.version, head.version))
    return findings


def level_of(findings: list[Finding]) -> Level:
    """The weightiest level among ``findings`` (OK when there are none)."""
    levels = {finding.level for finding in findings}
    for level in (Level.VIOLATION, Level.UNDECIDED):
        if level in levels:
            return level
    return Level.OK
