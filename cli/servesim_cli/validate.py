"""``servesim validate``: check documents against R1 to R4 without replaying anything."""

from __future__ import annotations

import argparse
import sys

from servesim.contract.documents import Document, read_document
from servesim.contract.errors import ServesimError
from servesim.contract.pair import check_pair
from servesim_cli.command import EXIT_OK, Command
from servesim_cli.messages import report_invalid


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE")


def _run(arguments: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    status = EXIT_OK
    valid: list[Document] = []
    for file in arguments.files:
        try:
            valid.append(read_document(file))
        except ServesimError as error:
            status = report_invalid(error)
    refused = _refused_pair(valid)
    if refused is not None:
        status = report_invalid(refused)
    for document in valid:
        if refused is None or document.kind != "workload":
            print(f"{document.file}: valid {document.kind} {document.version}")
            _warn_extend_without_sessions(document)
    return status


def _warn_extend_without_sessions(document: Document) -> None:
    """R33, R125: ``session_prompts_extend: true`` in a workload without ``sessions`` is valid
    and changes nothing; a warning on standard error says so (the exit status stays 0)."""
    value = document.value
    if (
        document.kind == "workload"
        and value.get("session_prompts_extend")
        and not value.get("sessions")
    ):
        print(
            f"servesim: warning: {document.file}: session_prompts_extend is true but the "
            "workload has no sessions: it changes nothing (R125)",
            file=sys.stderr,
        )


def _refused_pair(documents: list[Document]) -> ServesimError | None:
    """R4's rule across a scenario and a workload (R47), when the files given hold exactly one
    valid scenario and one valid workload: they are then the inputs of one replay, and a check
    of each file alone would pass a pair that ``replay`` refuses. The problem is the
    workload's (its ``prefix_hash_block_tokens``), so only the scenario is then called valid."""
    scenarios = [document for document in documents if document.kind == "scenario"]
    workloads = [document for document in documents if document.kind == "workload"]
    if len(scenarios) != 1 or len(workloads) != 1:
        return None
    try:
        check_pair(scenarios[0], workloads[0])
    except ServesimError as error:
        return error
    return None


COMMAND = Command(
    name="validate",
    description="Check each document (its kind is read from its 'document' field) against "
    "R1 to R4; given exactly one scenario and one workload, also R4's check of the two "
    "together. Exit 0 if all are valid, 2 otherwise.",
    add_arguments=_add_arguments,
    run=_run,
)
