"""``servesim validate``: check documents against R1 to R4 without replaying anything."""

from __future__ import annotations

import argparse

from servesim.documents import read_document
from servesim.errors import ServesimError
from servesim_cli.command import EXIT_OK, Command
from servesim_cli.messages import report_invalid


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE")


def _run(arguments: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    status = EXIT_OK
    for file in arguments.files:
        try:
            document = read_document(file)
        except ServesimError as error:
            status = report_invalid(error)
            continue
        print(f"{file}: valid {document.kind} {document.version}")
    return status


COMMAND = Command(
    name="validate",
    description="Check each document (its kind is read from its 'document' field) against "
    "R1 to R4. Exit 0 if all are valid, 2 otherwise.",
    add_arguments=_add_arguments,
    run=_run,
)
