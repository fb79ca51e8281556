"""``servesim schema review``: every schema change between two revisions, judged and explained.

A review pairs each document kind's schema at the base (a git revision, or the last release)
with its schema at the head (the work tree), compares them (``compare``), applies the policy
(``policy``) and checks that no released file changed. ``markdown`` renders the result for a
pull request; the exit code gates CI: 0 nothing against the policy, 1 a violation, 2 a change
that needs a person's decision.
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.contract.migrations import MigrationChain
from servesim_conformance.evolution.catalog import (
    RELEASED,
    SUMS,
    SchemaFile,
    newest,
    released_by_major,
    released_problems,
    schemas_by_major,
)
from servesim_conformance.evolution.compare import compare
from servesim_conformance.evolution.model import DEFAULT_EXAMPLES, Comparison, InvalidSchema
from servesim_conformance.evolution.policy import Finding, Level, judge, level_of
from servesim_conformance.evolution.roles import role_of


@dataclass(frozen=True)
class DocumentReview:
    """One document kind (or an older major of it): its schema at both ends, their comparison,
    the policy's findings."""

    kind: str
    base: SchemaFile | None
    head: SchemaFile | None
    comparison: Comparison | None
    findings: tuple[Finding, ...]

    @property
    def changed(self) -> bool:
        """Whether anything at all differs (annotations included)."""
        if self.base is None or self.head is None or self.comparison is None:
            return True
        return bool(self.comparison.changes) or self.base.version != self.head.version

    @property
    def level(self) -> Level:
        """The weightiest of its findings."""
        return level_of(list(self.findings))


@dataclass(frozen=True)
class Review:
    """A whole review: both revisions, every document, and the state of the releases."""

    base_label: str
    head_label: str
    documents: tuple[DocumentReview, ...]
    releases: tuple[Finding, ...]

    @property
    def level(self) -> Level:
        """The weightiest finding of the review."""
        findings = list(self.releases)
        for document in self.documents:
            findings.extend(document.findings)
        return level_of(findings)

    @property
    def exit_code(self) -> int:
        """0 nothing against the policy, 1 a violation, 2 a reviewer must decide."""
        return {Level.OK: 0, Level.VIOLATION: 1, Level.UNDECIDED: 2}[self.level]


def pair_schemas(
    base: dict[tuple[str, int], SchemaFile], head: dict[tuple[str, int], SchemaFile]
) -> list[tuple[str, SchemaFile | None, SchemaFile | None]]:
    """What to compare: per kind its newest schemas at both ends, then every older major the
    head still carries against the same major at the base (``scenario (v1)`` once v2 exists),
    so that a released major cannot be edited unseen behind a new one."""
    pairs: list[tuple[str, SchemaFile | None, SchemaFile | None]] = []
    newest_base, newest_head = newest(base), newest(head)
    for kind in sorted(set(newest_base) | set(newest_head)):
        pairs.append((kind, newest_base.get(kind), newest_head.get(kind)))
        latest = newest_head.get(kind)
        for (other, major), entry in sorted(head.items()):
            if other == kind and latest is not None and major < latest.major:
                pairs.append((f"{kind} (v{major})", base.get((kind, major)), entry))
    return pairs


def review_schemas(
    pairs: list[tuple[str, SchemaFile | None, SchemaFile | None]],
    *,
    chain: MigrationChain,
    base_label: str,
    head_label: str,
    releases: tuple[Finding, ...] = (),
    examples: int = DEFAULT_EXAMPLES,
) -> Review:
    """Review every pair (name, base schema, head schema)."""
    documents = []
    for name, before, after in pairs:
        comparison = None
        broken: tuple[Finding, ...] = ()
        if before is not None and after is not None:
            try:
                comparison = compare(
                    before.schema,
                    after.schema,
                    name=name,
                    role=role_of(after.kind),
                    examples=examples,
                )
            except InvalidSchema as error:
                broken = (Finding(Level.VIOLATION, str(error)),)
        findings = broken or tuple(judge(before, after, comparison, chain))
        documents.append(DocumentReview(name, before, after, comparison, findings))
    return Review(base_label, head_label, tuple(documents), releases)


def release_findings(
    head_files: dict[str, bytes], base_files: dict[str, bytes] | None = None
) -> tuple[Finding, ...]:
    """Violations of immutability: a checksum that fails, or a released file edited since base.

    The comparison with the base catches an edit made together with a matching edit of
    ``SHA256SUMS``, which the checksums alone cannot see.
    """
    findings = [Finding(Level.VIOLATION, problem) for problem in released_problems(head_files)]
    base = base_files or {}
    for path, data in sorted(base.items()):
        if not path.startswith(RELEASED + "/") or path == SUMS:
            continue
        if path not in head_files:
            findings.append(Finding(Level.VIOLATION, f"{path} was deleted; released files stay"))
        elif head_files[path] != data:
            findings.append(
                Finding(Level.VIOLATION, f"{path} was edited; released files never change")
            )
    if SUMS in base:
        # A release appends lines to the checksum list; none may change or go.
        kept = set(head_files.get(SUMS, b"").decode("utf-8").splitlines())
        for line in base[SUMS].decode("utf-8").splitlines():
            if line not in kept:
                findings.append(Finding(Level.VIOLATION, f"{SUMS} no longer has the line {line!r}"))
    return tuple(findings)


def review_files(
    head_files: dict[str, bytes],
    *,
    chain: MigrationChain,
    head_label: str,
    base_files: dict[str, bytes] | None = None,
    base_label: str | None = None,
    examples: int = DEFAULT_EXAMPLES,
) -> Review:
    """Review the head against ``base_files``, or against the head's own last releases."""
    if base_files is None:
        base = released_by_major(head_files)
        label = base_label or "the last release"
    else:
        base = schemas_by_major(base_files)
        label = base_label or "base"
    return review_schemas(
        pair_schemas(base, schemas_by_major(head_files)),
        chain=chain,
        base_label=label,
        head_label=head_label,
        releases=release_findings(head_files, base_files),
        examples=examples,
    )
