"""The Dynamo adapter's mapping and report, tested without Dynamo installed.

Dynamo's outputs are recorded fixtures (conformance/adapters/dynamo/fixtures/, written by
record_fixture.py from real ai-dynamo 1.6.1 runs); ``tox -e dynamo`` runs the real thing.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from servesim.contract.migrations import CHAIN
from servesim_conformance.features import available_features, expected_without
from servesim_conformance.implementation import version_problems
from servesim_conformance.outcomes import Outcome
from servesim_conformance.properties import at_current_version
from servesim_conformance.runner import judge_report
from servesim_conformance.schemas import validate_harness_document

ROOT = Path(__file__).resolve().parents[1]
ADAPTER = ROOT / "conformance" / "adapters" / "dynamo"
GOLDEN = ROOT / "golden" / "valid"
sys.path.insert(0, str(ADAPTER))

from servesim_dynamo import cli, dynamo_runtime  # noqa: E402
from servesim_dynamo.kv import (  # noqa: E402
    CacheRecord,
    cache_record,
    check_continuing_turns,
    check_host,
    check_kv_cache,
)
from servesim_dynamo.mapping import (  # noqa: E402
    FixedTiming,
    Unsupported,
    check_scenario,
    fixed_timing,
    placement,
    replay_spec,
    to_ms,
)
from servesim_dynamo.timeline import DynamoResult, microseconds, read_worker  # noqa: E402


def documents(case: str) -> dict[str, Any]:
    folder = GOLDEN / case
    return {
        name: json.loads((folder / f"{name}.json").read_text())
        for name in ("scenario", "workload", "timing-profile")
    }


def recorded(case: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((ADAPTER / "fixtures" / f"{case}.json").read_text())
    return value


def replay_with_fixture(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, Path]:
    """Run the adapter's command line on a golden case, with Dynamo's recorded outputs."""
    fixture = recorded(case)
    outputs = iter(value for key, value in fixture.items() if key.startswith("worker"))
    monkeypatch.setattr(dynamo_runtime, "run", lambda spec: next(outputs))
    monkeypatch.setattr(dynamo_runtime, "run_trace", lambda *a, **k: fixture["multi-turn replay"])
    folder = GOLDEN / case
    report = tmp_path / "report.json"
    code = cli.main(
        [
            "--scenario",
            str(folder / "scenario.json"),
            "--workload",
            str(folder / "workload.json"),
            "--timing-profile",
            str(folder / "timing-profile.json"),
            "--output",
            str(report),
        ]
    )
    return code, report


def test_fixed_form_grid_maps_to_dynamo_fixed_timing() -> None:
    docs = documents("dynamo-fixed-smoke")
    timing = fixed_timing(docs["timing-profile"], docs["scenario"]["scheduler"])
    assert timing == FixedTiming(prefill_us=300, decode_us=200)
    assert timing.as_dynamo() == {"type": "fixed", "prefill_ms": 0.3, "decode_ms": 0.2}


@pytest.mark.parametrize(
    ("case", "feature"),
    [
        ("smoke-one-request", "timing.synthetic_linear"),
        ("regression-prefill-on-knots", "timing.regression"),
        ("grid-exact-grid-points", "timing.grid"),
        ("out-of-coverage-prefill-below-min", "timing.grid"),
    ],
)
def test_timing_dynamo_cannot_express_is_refused_by_name(case: str, feature: str) -> None:
    docs = documents(case)
    with pytest.raises(Unsupported) as caught:
        fixed_timing(docs["timing-profile"], docs["scenario"]["scheduler"])
    assert caught.value.feature == feature


def test_grid_with_a_mixed_step_not_the_sum_is_refused() -> None:
    docs = documents("dynamo-fixed-smoke")
    profile = copy.deepcopy(docs["timing-profile"])
    profile["model"]["duration_us"][2][1][2] = 501
    with pytest.raises(Unsupported, match=r"duration_us\[2\]\[...\]\[2\] is 501, not 500"):
        fixed_timing(profile, docs["scenario"]["scheduler"])


def test_coverage_narrower_than_the_scheduler_is_refused() -> None:
    docs = documents("dynamo-fixed-smoke")
    scheduler = dict(docs["scenario"]["scheduler"], max_num_seqs=5)
    with pytest.raises(Unsupported) as caught:
        fixed_timing(docs["timing-profile"], scheduler)
    assert caught.value.feature == "timing.coverage"


@pytest.mark.parametrize(
    ("case", "feature"),
    [("smoke-chunked", "prefill.chunked"), ("routing-random-seed-0", "routing.random")],
)
def test_scheduler_features_dynamo_lacks_are_refused_by_name(case: str, feature: str) -> None:
    with pytest.raises(Unsupported) as caught:
        check_scenario(documents(case)["scenario"])
    assert caught.value.feature == feature


def test_placement_is_round_robin_over_every_arrival_ties_in_list_order() -> None:
    requests = [
        {"arrival_us": 100},
        {"arrival_us": 0},
        {"arrival_us": 100},
        {"arrival_us": 50},
        {"arrival_us": 0},
    ]
    # arrival order: positions 1, 4, 3, 0, 2
    assert placement(requests, 2) == [[1, 3, 2], [4, 0]]
    assert placement(requests, 4) == [[1, 2], [4], [3], [0]]


def test_replay_spec_of_the_smoke_case() -> None:
    docs = documents("dynamo-fixed-smoke")
    timing = FixedTiming(prefill_us=300, decode_us=200)
    requests = docs["workload"]["requests"]
    spec = replay_spec(docs["scenario"], requests, [0, 1], timing)
    assert spec == {
        "version": 1,
        "topology": {"kind": "aggregated", "workers": {"initial_workers": 1}},
        "engine": {
            "rank": {
                "backend": "vllm",
                "timing_model": {"type": "fixed", "prefill_ms": 0.3, "decode_ms": 0.2},
                "max_num_seqs": 4,
                "max_num_batched_tokens": 64,
                "max_model_len": 1024,
                "enable_chunked_prefill": False,
                "enable_prefix_caching": False,
                "block_size": 64,
                "num_gpu_blocks": 68,
            }
        },
        "requests": [
            {"id": "A", "arrival_time_ms": 0.0, "input_tokens": 10, "output_tokens": 3},
            {"id": "B", "arrival_time_ms": 0.1, "input_tokens": 5, "output_tokens": 2},
        ],
    }


def test_times_come_back_as_whole_microseconds_or_not_at_all() -> None:
    assert to_ms(1234567) == 1234.567
    assert microseconds(1234.567, "t") == 1234567
    assert microseconds(0.1 + 0.2, "t") == 300
    assert microseconds(8589934.893000001, "t") == 8589934893
    with pytest.raises(DynamoResult, match="not a whole microsecond"):
        microseconds(0.0005, "t")
    with pytest.raises(DynamoResult, match="no longer resolve a microsecond"):
        microseconds(4503599627370.796, "t")  # 2^52 us + 300: recorded from Dynamo


def test_recorded_dynamo_timeline_of_the_smoke_case() -> None:
    (timelines,) = [read_worker(output, 0) for output in recorded("dynamo-fixed-smoke").values()]
    by_id = {timeline.id: timeline for timeline in timelines}
    assert by_id["A"].token_times_us == (300, 800, 1000)
    assert by_id["B"].token_times_us == (800, 1000)
    assert by_id["B"].first_admit_us == 300


@pytest.mark.parametrize(
    "case",
    [
        "dynamo-fixed-smoke",
        "dynamo-fixed-two-workers",
        "fixed-pass-session-two-sessions-round-robin",
        "fixed-pass-closed-loop-one-in-flight",
        "fixed-pass-slo-bounds-inclusive",
        "dynamo-fixed-styles-sglang",
        "dynamo-fixed-styles-trtllm",
        "dynamo-fixed-sglang-chunks-share-the-pass",
        "dynamo-fixed-sglang-no-seat-decodes",
    ],
    ids=lambda case: case,
)
def test_report_from_recorded_dynamo_output_equals_the_golden_bytes(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The adapter writes report 8.0 (R38, R96, R108: it reads scenario 1.5; R52's members from
    Dynamo's admissions, their no-cache values; R57's null under round robin; sessions and the
    closed loop from Dynamo's multi-turn replay; R63's objectives read off the report; the one
    pool of one-rank workers by the reference's R86 migration; each worker's and pool's style
    after R96's). It is judged as the harness judges it (runner.judge_report): canonical bytes
    (R23), migrated to the current report version (R37, R38), then the golden report byte for
    byte with its trace null, as the harness compares an implementation without the trace
    feature (R71). The sglang cases need the passes that emit no token (a chunk that does not
    end its prompt) read off the timeline."""
    code, report = replay_with_fixture(case, tmp_path, monkeypatch)
    assert code == cli.EXIT_OK
    written = json.loads(report.read_bytes())
    assert written["schema_version"] == "8.0"
    golden = (GOLDEN / case / "expected-report.json").read_bytes()
    expected = expected_without(golden, ["trace"])
    assert json.loads(expected)["schema_version"] == CHAIN.current["report"]
    outcome, message, _ = judge_report(report.read_bytes(), expected, ["8.0"])
    assert (outcome, message) == (Outcome.PASS, "")


def test_sglang_chunk_pass_without_a_token_is_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R90: A's first chunk (8 of 10 tokens) ends no prompt and emits no token; the worker's
    five passes and 1300 us of busy time are read only if that pass is inferred."""
    code, report = replay_with_fixture(
        "dynamo-fixed-sglang-chunks-share-the-pass", tmp_path, monkeypatch
    )
    assert code == cli.EXIT_OK
    worker = json.loads(report.read_bytes())["workers"][0]
    assert (worker["steps"], worker["busy_us"], worker["style"]) == (5, 1300, "sglang")


def test_sglang_timeline_that_fits_no_pass_is_an_error() -> None:
    """A token time that no sequence of prefill-only and decode-only passes reaches is an
    error, never a guess: A's first token 100 us after its admission, with 300 us passes."""
    from servesim_dynamo.kv import CacheRecord
    from servesim_dynamo.report import _passes_with_chunks
    from servesim_dynamo.timeline import Timeline

    timeline = Timeline("A", 0, 0, "completed", 0, 500, (100, 500), CacheRecord((0,)))
    with pytest.raises(DynamoResult, match="cannot end at the next token time"):
        _passes_with_chunks([timeline], FixedTiming(prefill_us=300, decode_us=200))


@pytest.mark.parametrize(
    ("style", "expected"),
    [
        ("vllm", {"backend": "vllm", "block_size": 64, "enable_chunked_prefill": False}),
        (
            "trtllm",
            {
                "backend": "trtllm",
                "block_size": 64,
                "trtllm": {"capacity_scheduler_policy": "guaranteed_no_evict"},
            },
        ),
        (
            "sglang",
            {
                "backend": "sglang",
                "block_size": 1,
                "enable_chunked_prefill": True,
                "sglang": {
                    "schedule_policy": "fifo",
                    "chunked_prefill_size": 32,
                    "max_prefill_tokens": 64,
                    "clip_max_new_tokens": 7,
                    "schedule_conservativeness": 0.3,
                },
            },
        ),
    ],
)
def test_each_style_is_dynamo_backend_of_the_same_name(
    style: str, expected: dict[str, Any]
) -> None:
    """R88: the style is Dynamo's backend; sglang's chunk budget is chunked_prefill_size, its
    max_batched_tokens max_prefill_tokens, its options SGLang's (permille as a fraction)."""
    from servesim_dynamo.mapping import engine_args

    scenario = copy.deepcopy(documents("dynamo-fixed-styles-vllm")["scenario"])
    scenario["scheduler"]["style"] = style
    if style == "sglang":
        scenario["scheduler"]["prefill"] = {"mode": "chunked", "max_chunk_tokens": 32}
        scenario["scheduler"]["sglang"] = {
            "clip_max_new_tokens": 7,
            "conservativeness_permille": 300,
        }
    args = engine_args(scenario, FixedTiming(prefill_us=300, decode_us=200))
    assert {key: args.get(key) for key in expected} == expected


def test_unbounded_style_memory_that_needs_too_many_blocks_is_refused() -> None:
    """R45: without a cache nothing memory-bound may bind; a trtllm reservation or an sglang
    estimate that a capped block count could bind unseen is refused by name."""
    from servesim_dynamo.mapping import engine_args

    scenario = copy.deepcopy(documents("dynamo-fixed-styles-trtllm")["scenario"])
    scenario["scheduler"].update(max_num_seqs=1024, max_model_len=1 << 20)
    with pytest.raises(Unsupported) as caught:
        engine_args(scenario, FixedTiming(prefill_us=300, decode_us=200))
    assert caught.value.feature == "kv_cache.unlimited"


def test_a_given_cache_is_the_engine_memory_whatever_the_limits() -> None:
    """The experiment scripts (style_cases.py, mooncake_styles.py) give Dynamo a servesim cache:
    its blocks, block size and prefix caching are the engine's, and the unbounded-memory
    refusal does not apply (the memory rules are meant to bind)."""
    from servesim_dynamo.mapping import engine_args

    scenario = copy.deepcopy(documents("dynamo-fixed-styles-sglang")["scenario"])
    scenario["scheduler"].update(max_num_seqs=1024, max_model_len=1 << 20)
    scenario["kv_cache"] = {"blocks": 96, "block_tokens": 4, "prefix_caching": True}
    args = engine_args(scenario, FixedTiming(prefill_us=300, decode_us=200))
    assert (args["num_gpu_blocks"], args["block_size"], args["enable_prefix_caching"]) == (
        96,
        4,
        True,
    )


def with_host(scenario: dict[str, Any], **host: int) -> dict[str, Any]:
    """``scenario`` with a 16-block GPU cache of 16 tokens and a host tier (R129): 16 entries,
    1000 bytes per token (block_bytes 16,000), 1 GB/s stores, 2 GB/s loads unless given."""
    tier = {
        "blocks": 16,
        "bytes_per_token": 1000,
        "store_bytes_per_s": 1_000_000_000,
        "load_bytes_per_s": 2_000_000_000,
    }
    tier.update(host)
    cache = {"blocks": 16, "block_tokens": 16, "prefix_caching": True, "host": tier}
    return dict(copy.deepcopy(scenario), schema_version="1.8", kv_cache=cache)


def test_a_host_tier_is_dynamo_native_host_offload() -> None:
    """R129, R130: host.blocks -> native_host_offload.num_host_blocks, bytes_per_token ->
    the engine's kv_cache_bytes_per_token (Dynamo's host block is block_size times it), and
    the lanes' bytes per second over 10^9 -> d2h / h2d GB/s (docs: dynamo-host-facts)."""
    from servesim_dynamo.mapping import engine_args

    scenario = with_host(documents("dynamo-fixed-smoke")["scenario"], blocks=40)
    args = engine_args(scenario, FixedTiming(prefill_us=300, decode_us=200))
    assert args["kv_cache_bytes_per_token"] == 1000
    assert args["native_host_offload"] == {
        "num_host_blocks": 40,
        "d2h_bandwidth_gbps": 1.0,
        "h2d_bandwidth_gbps": 2.0,
    }
    assert (args["num_gpu_blocks"], args["block_size"], args["enable_prefix_caching"]) == (
        16,
        16,
        True,
    )
    without = engine_args(
        dict(scenario, kv_cache={"blocks": 16, "block_tokens": 16, "prefix_caching": True}),
        FixedTiming(prefill_us=300, decode_us=200),
    )
    assert "native_host_offload" not in without
    assert "kv_cache_bytes_per_token" not in without


@pytest.mark.parametrize(
    ("lane", "bytes_per_s"),
    [("store_bytes_per_s", 3_000_000_000), ("load_bytes_per_s", 3_000_000_000)],
)
def test_a_host_transfer_ending_within_a_microsecond_is_refused_by_name(
    lane: str, bytes_per_s: int
) -> None:
    """R130 rounds a transfer up to whole microseconds; Dynamo's float-millisecond lane does
    not (a block of 16,000 bytes at 3 GB/s takes 5.33 us there, 6 in servesim)."""
    from servesim_dynamo.mapping import engine_args

    scenario = with_host(documents("dynamo-fixed-smoke")["scenario"], **{lane: bytes_per_s})
    with pytest.raises(Unsupported) as caught:
        engine_args(scenario, FixedTiming(prefill_us=300, decode_us=200))
    assert caught.value.feature == "kv_cache.host.fractional_us"
    with pytest.raises(Unsupported) as again:
        check_host(scenario, disaggregated=False)
    assert again.value.feature == "kv_cache.host.fractional_us"
    # 16,000 bytes at 4 GB/s is 4 us: whole microseconds for every block count
    check_host(with_host(scenario, **{lane: 4_000_000_000}), disaggregated=False)


def test_a_host_tier_dynamo_records_no_transfers_for_is_refused_by_name() -> None:
    """Dynamo records host transfers only in the one-worker, one-rank per-token runtime, so a
    host tier on ranks or in a disaggregated fleet is refused by name (R140's host members
    could not be stated); a mappable host tier in an aggregated fleet passes check_host and
    is then refused with the cache (kv_cache: no blocks in use per pass, R52)."""
    scenario = with_host(documents("dynamo-fixed-smoke")["scenario"])
    check_host(scenario, disaggregated=False)
    with pytest.raises(Unsupported) as cache:
        check_kv_cache(scenario)
    assert cache.value.feature == "kv_cache"
    assert "native_host_offload" in cache.value.detail
    ranked = copy.deepcopy(scenario)
    ranked["fleet"]["dp_size"] = 2
    with pytest.raises(Unsupported) as ranks:
        check_host(ranked, disaggregated=False)
    assert ranks.value.feature == "kv_cache.host.ranks"
    disagg = copy.deepcopy(documents("disagg-activation-waits-for-pass-end")["scenario"])
    disagg["fleet"]["pools"][1]["kv_cache"] = with_host(scenario)["kv_cache"]
    check_host(documents("disagg-activation-waits-for-pass-end")["scenario"], True)
    with pytest.raises(Unsupported) as split:
        check_host(disagg, disaggregated=True)
    assert split.value.feature == "kv_cache.host.disaggregated"


def test_continuing_turns_with_a_prefix_cache_are_refused_by_name() -> None:
    """R127 reuses a turn's answer blocks only with sessions and prefix caching; Dynamo's trace
    replay draws output tokens at random, so it cannot state that: refused by name. Without a
    prefix cache (or without sessions) the member changes nothing and is read."""
    smoke = documents("dynamo-fixed-smoke")
    workload = dict(
        smoke["workload"],
        schema_version="1.3",
        session_prompts_extend=True,
        sessions=[{"id": "s"}],
    )
    check_continuing_turns(smoke["scenario"], workload)  # no cache
    check_continuing_turns(with_cache(smoke["scenario"], False), workload)  # no prefix caching
    alone = {key: value for key, value in workload.items() if key != "sessions"}
    check_continuing_turns(with_cache(smoke["scenario"], True), alone)  # no sessions
    disagg = copy.deepcopy(documents("disagg-activation-waits-for-pass-end")["scenario"])
    check_continuing_turns(disagg, workload)  # its pools' caches have prefix caching off
    disagg["fleet"]["pools"][0]["kv_cache"]["prefix_caching"] = True
    with pytest.raises(Unsupported) as caught:
        check_continuing_turns(disagg, workload)
    assert caught.value.feature == "workload.session_prompts_extend"
    check_continuing_turns(disagg, dict(workload, session_prompts_extend=False))


def test_output_cut_at_max_model_len_is_reported_as_dynamo_ran_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, report = replay_with_fixture(
        "dynamo-fixed-context-over-max-model-len", tmp_path, monkeypatch
    )
    assert code == cli.EXIT_OK
    first = json.loads(report.read_bytes())["requests"][0]
    assert (first["id"], first["outcome"], first["output_tokens"]) == ("A", "completed", 6)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("dynamo-fixed-zero-output", "completed it without producing any token"),
        ("dynamo-fixed-empty-prompt", "served an empty prompt"),
    ],
)
def test_what_a_report_cannot_hold_exits_1_without_a_report(
    case: str,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, report = replay_with_fixture(case, tmp_path, monkeypatch)
    assert code == cli.EXIT_DYNAMO
    assert message in capsys.readouterr().err
    assert not report.exists()


def test_recorded_empty_prompt_delays_its_neighbour_first_token() -> None:
    """The finding the results page cites: B alone gets its first token at 300 us."""
    (timelines,) = [
        read_worker(output, 0) for output in recorded("dynamo-fixed-empty-prompt").values()
    ]
    by_id = {timeline.id: timeline for timeline in timelines}
    assert by_id["B"].token_times_us == (500, 700)


def test_preempted_request_is_an_error() -> None:
    output = copy.deepcopy(recorded("dynamo-fixed-smoke")["worker 0"])
    output["report"]["per_request"][0]["readmission_count"] = 1
    with pytest.raises(DynamoResult, match="preempted"):
        read_worker(output, 0)


def test_unsupported_feature_exits_2_naming_it_without_running_dynamo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(dynamo_runtime, "run", lambda spec: pytest.fail("Dynamo was run"))
    folder = GOLDEN / "smoke-one-request"
    report = tmp_path / "report.json"
    code = cli.main(
        [
            "--scenario",
            str(folder / "scenario.json"),
            "--workload",
            str(folder / "workload.json"),
            "--timing-profile",
            str(folder / "timing-profile.json"),
            "--output",
            str(report),
        ]
    )
    assert code == cli.EXIT_INVALID
    assert "unsupported feature timing.synthetic_linear" in capsys.readouterr().err
    assert not report.exists()


def test_invalid_input_exits_2_with_the_reference_reader_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = ROOT / "golden" / "invalid" / "duplicate-key"
    code = cli.main(
        [
            "--scenario",
            str(folder / "scenario.json"),
            "--workload",
            str(folder / "workload.json"),
            "--timing-profile",
            str(folder / "timing-profile.json"),
            "--output",
            str(tmp_path / "report.json"),
        ]
    )
    assert code == cli.EXIT_INVALID
    assert "invalid input" in capsys.readouterr().err
    assert not (tmp_path / "report.json").exists()


def test_describe_is_a_valid_description_declaring_only_timing_grid() -> None:
    description = cli.description()
    assert validate_harness_document("describe", description) == []
    assert description["features"] == ["timing.grid"]
    # R38: protocol 4 or later, so leaving out timing.synthetic_linear skips the synthetic
    # cases; protocol 5 (R87) without timing.per_pool, which Dynamo cannot express
    assert description["protocol_version"] == 5
    assert "timing.synthetic_linear" not in available_features(
        description["features"], description["protocol_version"]
    )


def test_describe_reads_scenario_1_8_writes_report_8_0_not_scenario_1_1_or_1_2() -> None:
    """R38, R64, R96, R108, R124, R141: reading workload 1.3 and scenario 1.3 to 1.8 it writes
    report 8.0 and declares 10.0, the exact migration of a static fleet's 8.0 without a host
    tier (it refuses a fleet that changes, and a cache, host tier included); scenario 1.1 only
    adds kv_cache, which the adapter cannot state in an aggregated fleet, and 1.2 only the
    state-aware policies, which it refuses."""
    versions = cli.description()["schema_versions"]
    assert versions["report"] == ["8.0", "10.0"]
    assert versions["workload"] == ["1.0", "1.1", "1.2", "1.3"]
    assert versions["scenario"] == ["1.0", "1.3", "1.4", "1.5", "1.6", "1.7", "1.8"]
    assert version_problems(versions) == []


def test_a_scenario_1_8_with_a_host_tier_exits_2_without_running_dynamo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """R129: read by the reference's reader, then refused by name: kv_cache (no blocks in use
    per pass) for a mappable host tier, kv_cache.host.fractional_us for one that is not."""
    monkeypatch.setattr(dynamo_runtime, "run", lambda spec: pytest.fail("Dynamo was run"))
    docs = documents("dynamo-fixed-smoke")
    workload = dict(docs["workload"], schema_version="1.1", prefix_hash_block_tokens=16)
    for host, feature in (
        ({}, "kv_cache:"),
        ({"load_bytes_per_s": 3_000_000_000}, "kv_cache.host.fractional_us:"),
    ):
        scenario = with_host(docs["scenario"], **host)
        assert cli.main(write_case(tmp_path, scenario, workload)) == cli.EXIT_INVALID
        error = capsys.readouterr().err
        assert f"unsupported feature {feature}" in error
        assert not (tmp_path / "report.json").exists()


def test_continuing_turns_without_a_cache_change_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R125, R128: a workload 1.3 with session_prompts_extend and no cache is read; the
    report is the golden one but for the workload's digest."""
    docs = documents("dynamo-fixed-smoke")
    outputs = iter(recorded("dynamo-fixed-smoke").values())
    monkeypatch.setattr(dynamo_runtime, "run", lambda spec: next(outputs))
    workload = dict(docs["workload"], schema_version="1.3", session_prompts_extend=True)
    assert cli.main(write_case(tmp_path, docs["scenario"], workload)) == cli.EXIT_OK
    report = json.loads(at_current_version((tmp_path / "report.json").read_bytes()))
    expected = json.loads((GOLDEN / "dynamo-fixed-smoke" / "expected-report.json").read_bytes())
    del report["inputs"], expected["inputs"]
    assert report == expected


def changing(scenario: dict[str, Any], change: str) -> dict[str, Any]:
    """``scenario`` at version 1.7 with one of section 18's changes (R110, R116)."""
    changed = copy.deepcopy(dict(scenario, schema_version="1.7"))
    if change == "fleet.scaling":
        changed["fleet"]["scaling"] = {"schedule": [{"at_us": 100, "target": 2}]}
    elif change == "pool.scaling":
        changed["fleet"]["pools"][0]["scaling"] = {"startup_us": 50}
    else:
        changed["failures"] = {
            "events": [
                {
                    "pool": changed["fleet"].get("pools", [{"name": "default"}])[0]["name"],
                    "pool_worker": 0,
                    "at_us": 50,
                }
            ],
            "policy": "migrate",
            "max_migrations": 1,
        }
    return changed


@pytest.mark.parametrize(
    ("case", "change", "feature"),
    [
        ("dynamo-fixed-smoke", "fleet.scaling", "fleet.scaling"),
        ("dynamo-fixed-smoke", "failures", "failures"),
        ("disagg-activation-waits-for-pass-end", "pool.scaling", "fleet.scaling"),
        ("disagg-activation-waits-for-pass-end", "failures", "failures"),
    ],
)
def test_a_fleet_that_changes_is_refused_by_name_without_running_dynamo(
    case: str,
    change: str,
    feature: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """R109-R124: Dynamo's replays take no scaling schedule, reactive policy or failures, so
    a scenario 1.7 that has any exits 2 naming it, aggregated or disaggregated, rather than
    report a static fleet (it was accepted, and its changes ignored, before)."""
    for run in ("run", "run_trace", "run_disagg"):
        monkeypatch.setattr(dynamo_runtime, run, lambda *a, **k: pytest.fail("Dynamo was run"))
    docs = documents(case)
    arguments = write_case(tmp_path, changing(docs["scenario"], change), docs["workload"])
    assert cli.main(arguments) == cli.EXIT_INVALID
    error = capsys.readouterr().err
    assert f"unsupported feature {feature}:" in error
    assert "invalid input" not in error  # the document is valid: refused, not rejected
    assert not (tmp_path / "report.json").exists()


def test_a_static_scenario_1_7_is_the_1_6_scenario(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R124: every 1.6 document is a 1.7 document with the same meaning; the adapter's 8.0
    report migrates to the golden report (which is at the current version)."""
    docs = documents("dynamo-fixed-smoke")
    outputs = iter(recorded("dynamo-fixed-smoke").values())
    monkeypatch.setattr(dynamo_runtime, "run", lambda spec: next(outputs))
    scenario = dict(docs["scenario"], schema_version="1.7")
    assert cli.main(write_case(tmp_path, scenario, docs["workload"])) == cli.EXIT_OK
    written = json.loads((tmp_path / "report.json").read_bytes())
    assert written["schema_version"] == "8.0"
    report = json.loads(at_current_version((tmp_path / "report.json").read_bytes()))
    expected = json.loads((GOLDEN / "dynamo-fixed-smoke" / "expected-report.json").read_bytes())
    del report["inputs"], expected["inputs"]  # the scenario's bytes differ, not its meaning
    assert report == expected


def test_a_turn_recorded_after_its_release_is_refused_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """R59 takes the later of a turn's recorded time and its release; Dynamo has only the
    delay. s-1 is released at 600 us in Dynamo's replay (recorded); recorded at 700 it would
    arrive at 700 in servesim, so the adapter exits 2 naming it rather than report 600."""
    case = "fixed-pass-session-two-sessions-round-robin"
    fixture = recorded(case)
    monkeypatch.setattr(dynamo_runtime, "run_trace", lambda *a, **k: fixture["multi-turn replay"])
    monkeypatch.setattr(dynamo_runtime, "run", lambda spec: pytest.fail("Dynamo was run"))
    data = documents(case)
    data["workload"]["requests"][2]["arrival_us"] = 700
    arguments = write_case(tmp_path / "case", data["scenario"], data["workload"])
    assert cli.main(arguments) == cli.EXIT_INVALID
    error = capsys.readouterr().err
    assert "unsupported feature session.recorded_arrival" in error
    assert "recorded at 700 us, after its release at 600 us" in error
    assert not (tmp_path / "case" / "report.json").exists()


def test_the_two_replays_must_agree_on_every_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The per-token replay is given the multi-turn replay's arrivals; if it ended a request
    at another time the arrivals would not be Dynamo's, so the adapter exits 1."""
    case = "fixed-pass-closed-loop-one-in-flight"
    fixture = recorded(case)
    records = [dict(record) for record in fixture["multi-turn replay"]]
    records[0]["terminal_time_ms"] += 0.001
    monkeypatch.setattr(dynamo_runtime, "run_trace", lambda *a, **k: records)
    outputs = iter(value for key, value in fixture.items() if key.startswith("worker"))
    monkeypatch.setattr(dynamo_runtime, "run", lambda spec: next(outputs))
    folder = GOLDEN / case
    arguments = write_case(
        tmp_path / "case", *(documents(case)[n] for n in ("scenario", "workload"))
    )
    assert cli.main(arguments) == cli.EXIT_DYNAMO
    assert "the multi-turn replay ended it at" in capsys.readouterr().err
    assert folder.is_dir()


def test_a_stop_time_is_refused_by_name_without_running_dynamo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(dynamo_runtime, "run", lambda spec: pytest.fail("Dynamo was run"))
    monkeypatch.setattr(dynamo_runtime, "run_trace", lambda *a, **k: pytest.fail("Dynamo was run"))
    data = documents("fixed-pass-stop-mid-decode-run")
    arguments = write_case(tmp_path / "case", data["scenario"], data["workload"])
    assert cli.main(arguments) == cli.EXIT_INVALID
    assert "unsupported feature scenario.stop_at_us" in capsys.readouterr().err


def write_case(folder: Path, scenario: dict[str, Any], workload: dict[str, Any]) -> list[str]:
    """The smoke case's timing profile with ``scenario`` and ``workload``; the CLI arguments."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scenario.json").write_text(json.dumps(scenario))
    (folder / "workload.json").write_text(json.dumps(workload))
    profile = GOLDEN / "dynamo-fixed-smoke" / "timing-profile.json"
    return [
        "--scenario",
        str(folder / "scenario.json"),
        "--workload",
        str(folder / "workload.json"),
        "--timing-profile",
        str(profile),
        "--output",
        str(folder / "report.json"),
    ]


def with_cache(scenario: dict[str, Any], prefix_caching: bool) -> dict[str, Any]:
    cache = {"blocks": 64, "block_tokens": 4, "prefix_caching": prefix_caching}
    return dict(scenario, schema_version="1.1", kv_cache=cache)


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_scenario_with_a_kv_cache_is_refused_by_name_without_running_dynamo(
    prefix_caching: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(dynamo_runtime, "run", lambda spec: pytest.fail("Dynamo was run"))
    docs = documents("dynamo-fixed-smoke")
    scenario = with_cache(docs["scenario"], prefix_caching)
    code = cli.main(write_case(tmp_path, scenario, docs["workload"]))
    assert code == cli.EXIT_INVALID
    error = capsys.readouterr().err
    assert "unsupported feature kv_cache" in error
    assert "peak_blocks_in_use" in error
    assert not (tmp_path / "report.json").exists()


@pytest.mark.parametrize("policy", ["least_loaded", "cache_aware"])
def test_state_aware_routing_is_refused_by_name_without_running_dynamo(
    policy: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Section 12: Dynamo's kv_router breaks ties at random, unseeded, so a scenario 1.2 with
    a state-aware policy exits 2 naming the policy, never a report that cannot be compared."""
    monkeypatch.setattr(dynamo_runtime, "run", lambda spec: pytest.fail("Dynamo was run"))
    docs = documents("dynamo-fixed-smoke")
    scenario = dict(with_cache(docs["scenario"], True), schema_version="1.2")
    if policy == "least_loaded":
        del scenario["kv_cache"]
    scenario["routing"] = {"policy": policy}
    code = cli.main(write_case(tmp_path, scenario, docs["workload"]))
    assert code == cli.EXIT_INVALID
    error = capsys.readouterr().err
    assert f"unsupported feature routing.{policy}" in error
    assert "ties at random" in error
    assert not (tmp_path / "report.json").exists()


def test_scenario_1_1_without_a_cache_is_the_1_0_scenario() -> None:
    scenario = dict(documents("dynamo-fixed-smoke")["scenario"], schema_version="1.1")
    check_kv_cache(scenario)  # no kv_cache: nothing to refuse
    with pytest.raises(Unsupported) as caught:
        check_kv_cache(with_cache(scenario, True))
    assert caught.value.feature == "kv_cache"


def test_prefix_hashes_without_a_cache_change_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R47/R53: hashes are read, left out of Dynamo's input, and the report is the golden one
    but for the workload's digest."""
    docs = documents("dynamo-fixed-smoke")
    workload = dict(docs["workload"], schema_version="1.1", prefix_hash_block_tokens=4)
    workload["requests"] = [
        dict(request, prefix_hashes=[1, 2]) for request in docs["workload"]["requests"]
    ]
    specs: list[dict[str, Any]] = []
    outputs = iter(recorded("dynamo-fixed-smoke").values())
    monkeypatch.setattr(dynamo_runtime, "run", lambda spec: specs.append(spec) or next(outputs))
    code = cli.main(write_case(tmp_path, docs["scenario"], workload))
    assert code == cli.EXIT_OK
    timing = FixedTiming(prefill_us=300, decode_us=200)
    assert specs == [replay_spec(docs["scenario"], docs["workload"]["requests"], [0, 1], timing)]
    report = json.loads(at_current_version((tmp_path / "report.json").read_bytes()))
    expected = json.loads((GOLDEN / "dynamo-fixed-smoke" / "expected-report.json").read_bytes())
    written = hashlib.sha256((tmp_path / "workload.json").read_bytes()).hexdigest()
    assert report["inputs"]["workload"] == {"sha256": written}
    del report["inputs"], expected["inputs"]  # the documents' bytes differ, not their meaning
    assert report == expected


def preemption_records() -> dict[str, dict[str, Any]]:
    """Dynamo's records of kv_experiments.py's preemption experiment (trace lines 1 to 3)."""
    records = json.loads((ADAPTER / "fixtures" / "kv-preemption-records.json").read_text())
    return {record["session_id"]: record for record in records}


def test_recorded_preemption_maps_onto_r52_reuse_and_preemptions() -> None:
    """request_2 is preempted once and its recompute reuses 8 tokens: R52 counts the first
    admission's reuse (0) for the request, every admission's (8) for the worker."""
    records = preemption_records()
    assert cache_record(records["request_1"]) == CacheRecord((0,))
    preempted = cache_record(records["request_2"])
    assert preempted == CacheRecord((0, 8))
    assert (preempted.reused_prompt_tokens, preempted.reused_tokens) == (0, 8)
    assert preempted.preemptions == 1
    assert CacheRecord(()).reused_prompt_tokens == 0  # rejected: never admitted


def test_admissions_that_disagree_with_the_readmission_count_are_an_error() -> None:
    record = copy.deepcopy(preemption_records()["request_2"])
    record["readmission_count"] = 2
    with pytest.raises(DynamoResult, match="2 admissions for readmission_count 2"):
        cache_record(record)
    record = copy.deepcopy(preemption_records()["request_2"])
    record["admission_history"][1]["is_readmission"] = False
    with pytest.raises(DynamoResult, match="out of order"):
        cache_record(record)


def test_prompt_reuse_with_prefix_caching_off_exits_1_without_a_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = copy.deepcopy(recorded("dynamo-fixed-smoke"))
    (admission,) = outputs["worker 0"]["report"]["per_request"][1]["admission_history"]
    admission["reused_input_tokens"] = 64
    monkeypatch.setattr(dynamo_runtime, "run", lambda spec: outputs["worker 0"])
    docs = documents("dynamo-fixed-smoke")
    code = cli.main(write_case(tmp_path, docs["scenario"], docs["workload"]))
    assert code == cli.EXIT_DYNAMO
    assert "reused 64 cached prompt tokens with prefix caching off" in capsys.readouterr().err
    assert not (tmp_path / "report.json").exists()


def test_unwritable_output_exits_4_as_the_reference_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = iter(recorded("dynamo-fixed-smoke").values())
    monkeypatch.setattr(dynamo_runtime, "run", lambda spec: next(outputs))
    folder = GOLDEN / "dynamo-fixed-smoke"
    code = cli.main(
        [
            "--scenario",
            str(folder / "scenario.json"),
            "--workload",
            str(folder / "workload.json"),
            "--timing-profile",
            str(folder / "timing-profile.json"),
            "--output",
            str(tmp_path / "missing-folder" / "report.json"),
        ]
    )
    assert code == cli.EXIT_UNWRITABLE


def test_mooncake_comparison_matches_records_to_trace_lines_by_round_robin_key() -> None:
    import mooncake_kv

    rows = [
        {"timestamp": 100, "input_length": 600, "output_length": 2, "hash_ids": [1, 2]},
        {"timestamp": 100, "input_length": 600, "output_length": 2, "hash_ids": [1, 3]},
    ]
    records = [
        {
            "decode_worker_idx": turn,
            "arrival_time_ms": 0.0,
            "input_length": 600,
            "requested_output_length": 2,
        }
        for turn in (1, 0)
    ]
    matched = mooncake_kv.match_records(rows, records)
    assert {line: record["decode_worker_idx"] for line, record in matched.items()} == {0: 0, 1: 1}


def test_mooncake_comparison_counts_reuse_that_depends_on_registration_time() -> None:
    """Two 1,024-token prompts with the same hashes admitted in one pass of one worker: the
    second hits 15 blocks if blocks are reusable when scheduled, none under R47."""
    import mooncake_kv

    rows = [
        {"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [5, 6]},
        {"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [5, 6]},
        {"timestamp": 9, "input_length": 1024, "output_length": 1, "hash_ids": [5, 6]},
    ]

    def record(admitted: float, ordinal: int) -> dict[str, Any]:
        return {
            "decode_worker_idx": 0,
            "first_admit_ms": admitted,
            "admission_history": [{"admission_ordinal": ordinal}],
        }

    together = {0: record(0.0, 0), 1: record(0.0, 1), 2: record(9.0, 2)}
    assert mooncake_kv.same_pass_dependent(rows, together) == 1
    apart = {0: record(0.0, 0), 1: record(5.0, 1), 2: record(9.0, 2)}
    assert mooncake_kv.same_pass_dependent(rows, apart) == 0
