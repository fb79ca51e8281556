"""The conformance suite's commands: ``servesim conform``, ``schema`` and ``migrate``.

They live in ``servesim_conformance``; this module only names them for the parser, importing
the suite's modules when a command runs or its parser is built (never hypothesis or the schema
diff engine for another command).
"""

from __future__ import annotations

import argparse

from servesim_cli.command import Command


def _add_conform_arguments(parser: argparse.ArgumentParser) -> None:
    from servesim_conformance.cli import add_arguments

    add_arguments(parser)


def _conform(arguments: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    from servesim_conformance.cli import run_from_arguments

    return run_from_arguments(arguments)


def _add_schema_arguments(parser: argparse.ArgumentParser) -> None:
    from servesim_conformance.evolution.cli import add_schema_arguments

    add_schema_arguments(parser)


def _schema(arguments: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    from servesim_conformance.evolution.cli import run_schema

    return run_schema(arguments)


def _add_migrate_arguments(parser: argparse.ArgumentParser) -> None:
    from servesim_conformance.evolution.cli import add_migrate_arguments

    add_migrate_arguments(parser)


def _migrate(arguments: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    from servesim_conformance.evolution.cli import run_migrate

    return run_migrate(arguments)


CONFORM = Command(
    name="conform",
    description="Run the smoke, golden and invalid tiers of the conformance suite against "
    "an implementation (by default this reference). Exit 0 when nothing failed, 1 otherwise, "
    "2 when the implementation or the corpus could not be used.",
    add_arguments=_add_conform_arguments,
    run=_conform,
)

SCHEMA = Command(
    name="schema",
    description="servesim schema diff OLD NEW: every change and a compatibility verdict per "
    "direction. servesim schema review: a Markdown review of all schema changes since a git "
    "revision or the last release, gated by the versioning policy.",
    add_arguments=_add_schema_arguments,
    run=_schema,
)

MIGRATE = Command(
    name="migrate",
    description="Upgrade a document from any supported older schema version to the current "
    "one, step by step, and check the result (R1 to R4). Exit 0: written. Exit 2: invalid "
    "input or no migration.",
    add_arguments=_add_migrate_arguments,
    run=_migrate,
)
