"""Replay: from the three input documents to the report's bytes, the job of ``servesim replay``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from servesim.contract.documents import Document, read_document
from servesim.contract.errors import InputProblem, InvalidInput, raise_if_any
from servesim.contract.model import DEFAULT_POOL
from servesim.contract.pair import check_pair, pair_problems
from servesim.contract.scenario import build_scenario
from servesim.contract.timing_profile import build_timing_profile
from servesim.contract.workload import build_workload
from servesim.engine.loop import ProgressCallback, simulate
from servesim.report.writer import report_chunks

#: R84: one profile for every pool, or each pool's own by name.
Profiles = Document | Mapping[str, Document]
ProfilePaths = str | Path | Mapping[str, str | Path]


def replay_documents(
    scenario: Document, workload: Document, timing_profile: Profiles, *, trace: bool = False
) -> bytes:
    """The canonical report bytes for three checked documents (see ``load_document``); the
    timing profile is one document for every pool or a mapping from pool name to its own
    (R84)."""
    return b"".join(replay_chunks(scenario, workload, timing_profile, trace=trace))


def replay_chunks(
    scenario: Document,
    workload: Document,
    timing_profile: Profiles,
    *,
    trace: bool = False,
    progress: ProgressCallback | None = None,
) -> Iterator[bytes]:
    """The canonical report bytes in pieces, for writing a large report without holding it.

    Raises ``InvalidInput`` before simulating if the scenario and the workload break R4
    together (``read_inputs`` reports that with the other files' problems already), or if
    the profiles named per pool are not exactly the scenario's pools (R84).
    """
    check_pair(scenario, workload)
    built = build_scenario(scenario.value)
    workload_model = build_workload(workload.value)
    inputs = {"scenario": scenario.data, "workload": workload.data}
    if isinstance(timing_profile, Document):
        timing = build_timing_profile(timing_profile.value)
        result = simulate(built, workload_model, timing, record_trace=trace, progress=progress)
        inputs["timing_profile"] = timing_profile.data
        return report_chunks(result, inputs, timing.calibration)
    raise_if_any(profile_pool_problems(scenario, timing_profile))
    timings = {name: build_timing_profile(each.value) for name, each in timing_profile.items()}
    result = simulate(built, workload_model, timings, record_trace=trace, progress=progress)
    pool_profiles = {
        name: (timing_profile[name].data, timing.calibration) for name, timing in timings.items()
    }
    return report_chunks(result, inputs, pool_profiles=pool_profiles)


def replay(
    scenario: str | Path,
    workload: str | Path,
    timing_profile: ProfilePaths,
    *,
    trace: bool = False,
) -> bytes:
    """The canonical report bytes for replaying the files: one timing profile for every pool,
    or a mapping from each pool's name to its profile's file (R84).

    Raises ``InvalidInput`` or ``UnrepresentableTime`` for inputs the specification rejects
    (every file is checked before the simulation starts, R5), and ``OutOfCoverage`` for a step
    the timing profile cannot time (R43); all three are ``ServesimError``.
    """
    return replay_documents(*read_inputs(scenario, workload, timing_profile), trace=trace)


def read_inputs(
    scenario: str | Path, workload: str | Path, timing_profile: ProfilePaths
) -> tuple[Document, Document, Profiles]:
    """Read and check the inputs; raise one ``InvalidInput`` listing the problems of every
    invalid file (R5), not only the first one's. Each pool's profile is checked on its own,
    its problems naming its pool (R84)."""
    documents: list[Document] = []
    problems: list[InputProblem] = []
    for path, kind in ((scenario, "scenario"), (workload, "workload")):
        try:
            documents.append(read_document(path, kind))
        except InvalidInput as error:
            problems.extend(error.problems)
    profiles: Profiles
    if isinstance(timing_profile, Mapping):
        profiles = {}
        for pool, path in timing_profile.items():
            try:
                profiles[pool] = read_document(path, "timing_profile")
            except InvalidInput as error:
                problems.extend(
                    InputProblem(each.file, each.pointer, f"(pool {pool}'s profile) {each.message}")
                    for each in error.problems
                )
    else:
        try:
            profiles = read_document(timing_profile, "timing_profile")
        except InvalidInput as error:
            problems.extend(error.problems)
    if len(documents) == 2:
        problems.extend(pair_problems(documents[0], documents[1]))
        if isinstance(timing_profile, Mapping):
            problems.extend(profile_pool_problems(documents[0], timing_profile))
    if problems:
        raise InvalidInput(problems)
    return documents[0], documents[1], profiles


def profile_pool_problems(
    scenario: Document, profiles: Mapping[str, Document] | Mapping[str, str | Path]
) -> list[InputProblem]:
    """R84: profiles named per pool name exactly the scenario's pools: none for a pool the
    scenario lacks, none missing."""
    fleet = scenario.value["fleet"]
    names = [pool["name"] for pool in fleet.get("pools", [{"name": DEFAULT_POOL}])]
    problems = [
        InputProblem(
            str(each.file if isinstance(each, Document) else each),
            "",
            f"a profile for no pool: --timing-profile names the pool {name!r}, which the "
            f"scenario {scenario.file} does not have (its pools: {', '.join(names)})",
        )
        for name, each in profiles.items()
        if name not in names
    ]
    problems.extend(
        InputProblem(
            scenario.file,
            f"/fleet/pools/{index}" if "pools" in fleet else "/fleet",
            f"the pool {name!r} has no timing profile; give --timing-profile {name}=FILE",
        )
        for index, name in enumerate(names)
        if name not in profiles
    )
    return problems
