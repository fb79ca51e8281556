"""Section 15 (R77 to R87): the reference against the plain per-step loop, byte for byte, on
generated inputs with pools and ranks.

The plain loop (``conformance/examples/independent/servesim_independent.py``) was extended from
SPEC.md section 15 alone, so an agreement here is two readings of the section agreeing. Inputs
are ``pool_input_triples``: 2 or 3 pools of 1 or 2 workers of 1 to 3 ranks (own limits, own
caches, weights), or one ``fleet.workers`` pool with ``fleet.dp_size`` 1 to 3, under all five
routing policies (R80 to R82), over plain, cached (prefix caching, preemptions) and state-aware
bases, with sessions and a stop time (section 13), and timed by one profile or by one profile
per pool (R84: each pool's drawn on its own, synthetic or measured). Exit codes are compared
too: an uncovered step (R43) or an R6 overflow must stop both the same way.

``SERVESIM_POOL_EXAMPLES`` sets the examples of each test (default 25, for CI time);
``SERVESIM_POOL_EXAMPLES=1000`` runs a large batch.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

import servesim
from servesim.contract.errors import OutOfCoverage, ServesimError
from servesim_conformance.properties import INPUT_FILES, Documents, at_current_version, encode
from servesim_conformance.strategies import (
    input_triples,
    kv_input_triples,
    measured_input_triples,
    measured_timing_profiles,
    narrow_measured_input_triples,
    pool_input_triples,
    routed_input_triples,
    session_input_triples,
    timing_profiles,
)
from tests.test_differential import PLAIN, PLAIN_REPORT_VERSION

EXAMPLES = int(os.environ.get("SERVESIM_POOL_EXAMPLES", "25"))

#: A pool triple whose profile is one document for every pool or a mapping pool -> profile.
PoolDocuments = tuple[dict[str, Any], dict[str, Any], Any]


def pool_names(scenario: dict[str, Any]) -> list[str]:
    """R77: the scenario's pools in pool order ("default" for a fleet.workers scenario)."""
    fleet = scenario["fleet"]
    return [pool["name"] for pool in fleet["pools"]] if "pools" in fleet else ["default"]


@st.composite
def per_pool_profiles(draw: st.DrawFn, base: st.SearchStrategy[Documents]) -> PoolDocuments:
    """A pool triple of ``base`` whose profile is, half the time, replaced by one profile per
    pool (R84): each the triple's own, or a synthetic or measured one drawn for that pool."""
    scenario, workload, timing = draw(base)
    if not draw(st.booleans()):
        return scenario, workload, timing
    own = st.one_of(st.just(timing), timing_profiles(), measured_timing_profiles())
    return scenario, workload, {name: draw(own) for name in pool_names(scenario)}


def reference_outcome(documents: PoolDocuments, *, trace: bool) -> tuple[int, bytes | None]:
    """The reference's exit code (R32) and report, in-process, with one profile or a mapping."""
    scenario, workload, timing = documents
    roles = list(INPUT_FILES)
    try:
        loaded_scenario = servesim.load_document(encode(scenario), "s.json", roles[0])
        loaded_workload = servesim.load_document(encode(workload), "w.json", roles[1])
        if isinstance(timing, dict) and "document" not in timing:
            profiles: Any = {
                name: servesim.load_document(encode(doc), f"{name}.json", roles[2])
                for name, doc in timing.items()
            }
        else:
            profiles = servesim.load_document(encode(timing), "t.json", roles[2])
        report = servesim.replay_documents(loaded_scenario, loaded_workload, profiles, trace=trace)
    except OutOfCoverage:
        return 3, None
    except ServesimError:
        return 2, None
    return 0, report


def plain_outcome(documents: PoolDocuments, *, trace: bool) -> tuple[int, bytes | None]:
    """The plain loop's exit code and report; per-pool profiles are passed as POOL=FILE in
    reverse pool order (R84: the order of the arguments carries no meaning)."""
    scenario, workload, timing = documents
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        (folder / "s.json").write_bytes(encode(scenario))
        (folder / "w.json").write_bytes(encode(workload))
        arguments = ["replay", "--scenario", str(folder / "s.json")]
        arguments += ["--workload", str(folder / "w.json")]
        if isinstance(timing, dict) and "document" not in timing:
            for index, (name, doc) in reversed(list(enumerate(timing.items()))):
                path = folder / f"t{index}.json"
                path.write_bytes(encode(doc))
                arguments += ["--timing-profile", f"{name}={path}"]
        else:
            (folder / "t.json").write_bytes(encode(timing))
            arguments += ["--timing-profile", str(folder / "t.json")]
        arguments += ["--output", str(folder / "r.json")]
        arguments += ["--report-version", PLAIN_REPORT_VERSION]
        with contextlib.redirect_stderr(io.StringIO()):
            code = PLAIN.main([*arguments, "--trace"] if trace else arguments)
        report = folder / "r.json"
        return code, at_current_version(report.read_bytes()) if report.exists() else None


def assert_agree(documents: PoolDocuments, *, trace: bool = True) -> None:
    assert reference_outcome(documents, trace=trace) == plain_outcome(documents, trace=trace)


def bases() -> st.SearchStrategy[Documents]:
    return st.one_of(input_triples(), kv_input_triples(), routed_input_triples())


@settings(max_examples=EXAMPLES)
@given(per_pool_profiles(pool_input_triples()))
def test_reference_equals_plain_loop_with_pools(documents: PoolDocuments) -> None:
    """Pools and ranks over plain, cached and state-aware inputs, every policy (R77 to R85)."""
    assert_agree(documents)


@settings(max_examples=EXAMPLES)
@given(per_pool_profiles(pool_input_triples(session_input_triples(bases()))))
def test_reference_equals_plain_loop_with_pools_sessions_and_a_stop_time(
    documents: PoolDocuments,
) -> None:
    """Sections 13 and 15: turns released at pass ends, passes cut by the stop time (R83)."""
    assert_agree(documents)


@settings(max_examples=EXAMPLES)
@given(per_pool_profiles(pool_input_triples(routed_input_triples())))
def test_reference_equals_plain_loop_with_pools_and_state_aware_routing(
    documents: PoolDocuments,
) -> None:
    """least_loaded and cache_aware over every (worker, rank) scheduler, ties and seeded draws
    among them (R82, R58)."""
    assert_agree(documents)


@settings(max_examples=EXAMPLES)
@given(pool_input_triples(narrow_measured_input_triples()))
def test_reference_and_plain_loop_stop_alike_outside_the_coverage(documents: Documents) -> None:
    """A rank's uncovered step stops both with exit 3 at the same pass (R43, R83), or neither."""
    assert_agree(documents)


@settings(max_examples=EXAMPLES)
@given(per_pool_profiles(pool_input_triples(measured_input_triples())))
def test_reference_equals_plain_loop_with_pools_and_measured_profiles(
    documents: PoolDocuments,
) -> None:
    """Each rank's step timed by its pool's grid or regression profile (R41, R42, R84)."""
    assert_agree(documents)


@settings(max_examples=EXAMPLES)
@given(per_pool_profiles(pool_input_triples(session_input_triples(kv_input_triples()))))
def test_reference_equals_plain_loop_with_pools_without_the_trace(
    documents: PoolDocuments,
) -> None:
    """The same without --trace (the reference may skip work it need not report)."""
    assert_agree(documents, trace=False)
