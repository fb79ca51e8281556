"""``servesim schema diff|review`` and ``servesim migrate``: the wiring for servesim's CLI.

``servesim_cli.suite`` calls ``add_schema_arguments``/``run_schema`` and
``add_migrate_arguments``/``run_migrate``, as it calls the conformance suite's. Building the
parser happens on every ``servesim`` command, ``replay`` included, so this module imports only
the standard library at the top; the diff engine (and Hypothesis, for counterexamples) load when
a schema command actually runs.

Exit codes. ``schema diff``: 0 compatible, 1 breaking, 2 undecided or unreadable (in the
directions that matter for each document, or those ``--direction`` names). ``schema review``: 0
nothing against the versioning policy, 1 a violation, 2 a change a reviewer must decide or a
revision that cannot be read. ``migrate``: 0 written, 2 invalid input or no migration.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from servesim_conformance.evolution.model import DEFAULT_EXAMPLES

if TYPE_CHECKING:
    from servesim.contract.json_reading import ParsedJson
    from servesim.contract.migrations import MigrationChain
    from servesim_conformance.evolution.model import Comparison, Direction

EXIT_OK = 0
EXIT_BREAKING = 1
EXIT_UNDECIDED = 2


class Check(Protocol):
    """What ``migrate`` checks a migrated document with: its bytes, file name and kind, and
    the bytes already parsed (``servesim.contract.json_reading.read_json``) when the document
    needed no step, so that a large current document is not parsed twice. It raises
    ``InvalidInput`` when the result is not a valid document of its new version."""

    def __call__(
        self, data: bytes, file: str, kind: str, parsed: ParsedJson | None = None
    ) -> None: ...


def _examples(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return number


def add_schema_arguments(parser: argparse.ArgumentParser) -> None:
    """The subcommands and options of ``servesim schema``."""
    commands = parser.add_subparsers(dest="schema_command", required=True, metavar="COMMAND")
    diff = commands.add_parser(
        "diff",
        help="compare two versions of a schema: every change, and a verdict per direction",
        description="List every change from OLD to NEW (JSON pointer, kind) and judge "
        "backward compatibility (new readers accept every old document) and forward "
        "compatibility (old readers accept every new document), with a generated "
        "counterexample for every break. OLD and NEW are schema files, folders of schemas "
        "(paired by path) or REV:PATH in git. Exit 0 compatible, 1 breaking, 2 undecided, in "
        "the direction that matters for each document (inputs: backward; report: forward).",
    )
    diff.add_argument("old", metavar="OLD", help="the old schema (file, folder or REV:PATH)")
    diff.add_argument("new", metavar="NEW", help="the new schema (file, folder or REV:PATH)")
    diff.add_argument(
        "--direction",
        choices=("matters", "backward", "forward", "both"),
        default="matters",
        help="which verdicts decide the exit code (default: the one that matters per document)",
    )
    diff.add_argument(
        "--examples",
        type=_examples,
        default=DEFAULT_EXAMPLES,
        metavar="N",
        help=f"documents generated per counterexample search (default {DEFAULT_EXAMPLES}; "
        "0 searches none, so nothing can be shown breaking)",
    )
    diff.add_argument("--json", action="store_true", help="print the comparison as JSON")
    review = commands.add_parser(
        "review",
        help="Markdown review of every schema change since a revision or the last release",
        description="Compare every schema of the work tree with a git revision (--base) or, "
        "by default, with the last released version of each document, apply the versioning "
        "policy, check that no released schema changed, and print a Markdown review for a "
        "pull request. Exit 0 nothing against the policy, 1 a violation, 2 undecided.",
    )
    review.add_argument("--base", metavar="REV", help="a git revision (default: last release)")
    review.add_argument(
        "--schemas",
        metavar="DIR",
        type=Path,
        help="the schemas folder (default: schemas/ of the git work tree here, else servesim's)",
    )
    review.add_argument(
        "--output", metavar="FILE", type=Path, help="also write the review to FILE (for CI)"
    )
    review.add_argument(
        "--examples",
        type=_examples,
        default=DEFAULT_EXAMPLES,
        metavar="N",
        help=f"documents generated per counterexample search (default {DEFAULT_EXAMPLES})",
    )


def add_migrate_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``servesim migrate``."""
    parser.add_argument("file", metavar="FILE", help="the document to upgrade")
    parser.add_argument(
        "--output",
        metavar="FILE",
        type=Path,
        help="write the upgraded document here, atomically (default: standard output)",
    )
    parser.add_argument(
        "--to", metavar="VERSION", help="the version to reach (default: the current one)"
    )


# --- schema diff ----------------------------------------------------------------------------


def _read_side(spec: str) -> tuple[dict[str, bytes], bool]:
    """The schema files OLD or NEW names, by relative path, and whether it named one file."""
    from servesim_conformance.evolution.catalog import CatalogError, read_git_path

    path = Path(spec)
    if path.is_file():
        return {path.name: path.read_bytes()}, True
    if path.is_dir():
        files = {
            found.relative_to(path).as_posix(): found.read_bytes()
            for found in sorted(path.rglob("*.schema.json"))
        }
        if not files:
            raise CatalogError(f"{spec}: no *.schema.json file in this folder")
        return files, False
    if ":" in spec:
        revision, _, inside = spec.partition(":")
        return read_git_path(Path.cwd(), revision, inside)
    raise CatalogError(f"{spec}: no such file or folder (nor REV:PATH)")


def _chosen(argument: str, comparison: Comparison) -> tuple[Direction, ...]:
    from servesim_conformance.evolution.model import Direction

    if argument == "matters":
        return comparison.matters
    if argument == "both":
        return (Direction.BACKWARD, Direction.FORWARD)
    return (Direction(argument),)


def _diff(arguments: argparse.Namespace) -> int:
    from servesim_conformance.evolution.catalog import CatalogError, parse_schema
    from servesim_conformance.evolution.compare import compare
    from servesim_conformance.evolution.model import InvalidSchema, Verdict
    from servesim_conformance.evolution.render import comparison_json, comparison_text
    from servesim_conformance.evolution.roles import kind_of

    try:
        old_files, old_single = _read_side(arguments.old)
        new_files, new_single = _read_side(arguments.new)
        if old_single and new_single:
            (old_only,), (new_only,) = old_files.values(), new_files.values()
            pairs = [(arguments.new, arguments.old, arguments.new, old_only, new_only)]
        else:
            pairs = [
                (name, f"{arguments.old}/{name}", f"{arguments.new}/{name}", old, new_files[name])
                for name, old in sorted(old_files.items())
                if name in new_files
            ]
        parsed = [  # each side is named by its own path in a message
            (name, parse_schema(old, old_path), parse_schema(new, new_path))
            for name, old_path, new_path, old, new in pairs
        ]
    except CatalogError as error:
        print(f"servesim schema diff: {error}", file=sys.stderr)
        return EXIT_UNDECIDED
    only_old = [] if old_single and new_single else sorted(set(old_files) - set(new_files))
    only_new = [] if old_single and new_single else sorted(set(new_files) - set(old_files))
    verdicts = [Verdict.BREAKING] if only_old else []
    rendered: list[Any] = []
    for name, old, new in parsed:
        label = kind_of(new) or kind_of(old) or Path(name).name
        try:
            comparison = compare(old, new, name=label, examples=arguments.examples)
        except InvalidSchema as error:
            print(f"servesim schema diff: {name}: {error}", file=sys.stderr)
            return EXIT_UNDECIDED
        directions = _chosen(arguments.direction, comparison)
        verdicts.append(comparison.verdict(directions))
        rendered.append(
            comparison_json(comparison)
            if arguments.json
            else comparison_text(comparison, directions)
        )
    verdict = Verdict.combine(verdicts)
    if arguments.json:
        print(
            json.dumps(
                {
                    "comparisons": rendered,
                    "only_in_old": only_old,
                    "only_in_new": only_new,
                    "verdict": verdict.value,
                },
                indent=2,
            )
        )
    else:
        print("\n\n".join(rendered))
        for name in only_old:
            print(f"{name}: only in OLD (removed: its documents can no longer be read)")
        for name in only_new:
            print(f"{name}: only in NEW (added)")
        if len(rendered) + len(only_old) + len(only_new) > 1:
            print(f"overall: {verdict.value}")
    return verdict.exit_code


# --- schema review --------------------------------------------------------------------------


def _schemas_folder(argument: Path | None) -> Path:
    """``--schemas``, else ``schemas/`` at the top of the git work tree here, else servesim's."""
    if argument is not None:
        return argument
    import subprocess

    try:
        completed = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=False
        )
    except OSError:
        completed = None
    if completed is not None and completed.returncode == 0:
        candidate = Path(completed.stdout.strip()) / "schemas"
        if (candidate / "released").is_dir():
            return candidate
    from servesim.contract.schemas import schema_root

    return schema_root()


def _review(arguments: argparse.Namespace, chain: MigrationChain | None = None) -> int:
    from servesim.contract.canonical import write_atomically
    from servesim.contract.migrations import CHAIN
    from servesim_conformance.evolution.catalog import (
        CatalogError,
        describe_revision,
        read_revision,
        read_work_tree,
    )
    from servesim_conformance.evolution.markdown import review_markdown
    from servesim_conformance.evolution.review import review_files

    folder = _schemas_folder(arguments.schemas)
    try:
        head_files = read_work_tree(folder)
        base_files = base_label = None
        if arguments.base is not None:
            base_files = read_revision(folder, arguments.base)
            base_label = f"`{arguments.base}` ({describe_revision(folder, arguments.base)})"
    except CatalogError as error:
        print(f"servesim schema review: {error}", file=sys.stderr)
        return EXIT_UNDECIDED
    review = review_files(
        head_files,
        chain=chain or CHAIN,
        head_label="the work tree",
        base_files=base_files,
        base_label=base_label,
        examples=arguments.examples,
    )
    text = review_markdown(review)
    sys.stdout.write(text)
    if arguments.output is not None:
        write_atomically(arguments.output, text.encode("utf-8"))
        print(f"servesim schema review: wrote {arguments.output}", file=sys.stderr)
    return review.exit_code


def run_schema(arguments: argparse.Namespace) -> int:
    """Run ``servesim schema diff`` or ``servesim schema review``; the exit code."""
    if arguments.schema_command == "diff":
        return _diff(arguments)
    return _review(arguments)


# --- migrate --------------------------------------------------------------------------------


def reference_check(data: bytes, file: str, kind: str, parsed: ParsedJson | None = None) -> None:
    """Check a migrated document as ``servesim validate`` would (R1 to R4)."""
    from servesim.contract.documents import check_document
    from servesim.contract.json_reading import read_json

    check_document(parsed if parsed is not None else read_json(data, file), data, file, kind)


def migrate_file(
    file: str,
    *,
    chain: MigrationChain,
    check: Check,
    output: Path | None = None,
    target: str | None = None,
) -> int:
    """Upgrade ``file`` along ``chain`` and write it; the exit code (0 written, 2 invalid).

    The result is checked (``check``) before anything is written, so a migration never leaves
    a document its new version rejects.
    """
    from servesim.contract.canonical import write_atomically
    from servesim.contract.errors import InvalidInput
    from servesim.contract.json_reading import read_json

    try:
        try:
            data = Path(file).read_bytes()
        except OSError as error:
            raise InvalidInput(
                [_problem(file, f"cannot read the file: {error.strerror}")]
            ) from None
        parsed = read_json(data, file)
        migrated = chain.migrate(parsed.value, file, target)
        if migrated.changed:
            result = (json.dumps(migrated.document, indent=2, ensure_ascii=False) + "\n").encode()
            check(result, file, migrated.kind)
        else:  # already at the target: its bytes are the result, as parsed
            result = data
            check(data, file, migrated.kind, parsed)
    except InvalidInput as error:
        print("servesim: invalid input:", file=sys.stderr)
        for problem in error.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_UNDECIDED
    if migrated.changed:
        steps = ", ".join(f"{step.source} -> {step.target}" for step in migrated.steps)
        print(f"servesim migrate: {file}: {migrated.kind} {steps}", file=sys.stderr)
    else:
        print(
            f"servesim migrate: {file}: already {migrated.kind} {migrated.target}; unchanged",
            file=sys.stderr,
        )
    try:
        if output is not None:
            write_atomically(output, result)
        else:
            sys.stdout.buffer.write(result)
            sys.stdout.flush()
    except OSError as error:
        print(f"servesim migrate: cannot write {output}: {error.strerror}", file=sys.stderr)
        return EXIT_UNDECIDED
    return EXIT_OK


def _problem(file: str, message: str) -> Any:
    from servesim.contract.errors import InputProblem

    return InputProblem(file, "", message)


def run_migrate(arguments: argparse.Namespace) -> int:
    """Run ``servesim migrate`` with the reference's chain; the exit code."""
    from servesim.contract.migrations import CHAIN

    return migrate_file(
        arguments.file,
        chain=CHAIN,
        check=reference_check,
        output=arguments.output,
        target=arguments.to,
    )
