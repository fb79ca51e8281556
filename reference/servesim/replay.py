"""Replay: from the three input documents to the report's bytes, the job of ``servesim replay``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from servesim.contract.documents import Document, read_document
from servesim.contract.errors import InputProblem, InvalidInput
from servesim.contract.pair import check_pair, pair_problems
from servesim.contract.scenario import build_scenario
from servesim.contract.timing_profile import build_timing_profile
from servesim.contract.workload import build_workload
from servesim.engine.loop import ProgressCallback, simulate
from servesim.report.writer import report_chunks


def replay_documents(
    scenario: Document, workload: Document, timing_profile: Document, *, trace: bool = False
) -> bytes:
    """The canonical report bytes for three checked documents (see ``load_document``)."""
    return b"".join(replay_chunks(scenario, workload, timing_profile, trace=trace))


def replay_chunks(
    scenario: Document,
    workload: Document,
    timing_profile: Document,
    *,
    trace: bool = False,
    progress: ProgressCallback | None = None,
) -> Iterator[bytes]:
    """The canonical report bytes in pieces, for writing a large report without holding it.

    Raises ``InvalidInput`` before simulating if the scenario and the workload break R4
    together (``read_inputs`` reports that with the other files' problems already).
    """
    check_pair(scenario, workload)
    timing = build_timing_profile(timing_profile.value)
    result = simulate(
        build_scenario(scenario.value),
        build_workload(workload.value),
        timing,
        record_trace=trace,
        progress=progress,
    )
    inputs = {
        "scenario": scenario.data,
        "workload": workload.data,
        "timing_profile": timing_profile.data,
    }
    return report_chunks(result, inputs, timing.calibration)


def replay(
    scenario: str | Path,
    workload: str | Path,
    timing_profile: str | Path,
    *,
    trace: bool = False,
) -> bytes:
    """The canonical report bytes for replaying the three files.

    Raises ``InvalidInput`` or ``UnrepresentableTime`` for inputs the specification rejects
    (every file is checked before the simulation starts, R5), and ``OutOfCoverage`` for a step
    the timing profile cannot time (R43); all three are ``ServesimError``.
    """
    return replay_documents(*read_inputs(scenario, workload, timing_profile), trace=trace)


def read_inputs(
    scenario: str | Path, workload: str | Path, timing_profile: str | Path
) -> tuple[Document, Document, Document]:
    """Read and check the three inputs; raise one ``InvalidInput`` listing the problems of
    every invalid file (R5), not only the first one's."""
    documents: list[Document] = []
    problems: list[InputProblem] = []
    for path, kind in (
        (scenario, "scenario"),
        (workload, "workload"),
        (timing_profile, "timing_profile"),
    ):
        try:
            documents.append(read_document(path, kind))
        except InvalidInput as error:
            problems.extend(error.problems)
    if not problems:
        problems.extend(pair_problems(documents[0], documents[1]))
    if problems:
        raise InvalidInput(problems)
    return documents[0], documents[1], documents[2]
