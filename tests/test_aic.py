"""``servesim profile aic`` (SPEC.md R74 to R76): the shape mapping, the axes and the identity
with a fake estimator here; the command on the real aiconfigurator-core estimator where it is
installed. aiconfigurator-core is the optional ``aic`` extra (an 80 MB wheel): those tests skip
without it, unless ``SERVESIM_REQUIRE_AIC`` is set (``tox -e extras``), where they fail.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

from servesim.contract.canonical import canonical_json
from servesim.contract.model import StepShape
from servesim.contract.timing_profile import build_timing_profile
from servesim.replay import replay
from servesim.tools.aic import axes as aic_axes
from servesim.tools.aic.axes import Limits, held_out, refine_axis
from servesim.tools.aic.build import Options, profile, sources_digest
from servesim.tools.aic.estimator import Setting
from servesim.tools.aic.mapping import NoEstimate, duration_us, mean_context, step_ms
from servesim_cli.main import main
from tests.helpers import EXAMPLES

BASIC = EXAMPLES / "basic"


class FakeEstimator:
    """A smooth estimator in ms that records its calls: 5 ms, plus 0.01 ms a prefill token,
    0.001 ms per prefill token squared over 1000 (its attention), 0.05 ms a decoding request and
    0.0001 ms a decoding request's context token."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def mixed_step_breakdown(
        self, ctx_tokens: int, gen_tokens: int, isl: int, osl: int, prefix: int = 0
    ) -> tuple[float, float, float, float]:
        self.calls.append(("mixed", ctx_tokens, gen_tokens, isl, osl, prefix))
        shared = 5 + 0.01 * ctx_tokens + 0.05 * gen_tokens
        prefill = 0.001 * isl * ctx_tokens / 1000
        decode = 0.0001 * gen_tokens * (isl + osl // 2 + 1)
        return shared + prefill + decode, shared, prefill, decode

    def decode_step_latency(self, gen_tokens: int, isl: int, osl: int) -> float:
        self.calls.append(("decode", gen_tokens, isl, osl))
        return 5 + 0.05 * gen_tokens + 0.0001 * gen_tokens * (isl + osl // 2 + 1)


def _need_aic() -> None:
    """Skip without aiconfigurator-core, unless this environment promised it."""
    if os.environ.get("SERVESIM_REQUIRE_AIC"):
        import aiconfigurator_core  # noqa: F401  (fails the test here, as it should)
    else:
        pytest.importorskip("aiconfigurator_core")


# --- R74: the mapping ------------------------------------------------------------------------


def test_r74_each_length_is_asked_of_the_call_that_uses_it() -> None:
    fake = FakeEstimator()
    # D = 4 requests with 1,002 context tokens: a mean of 250.5, rounded half up to 251
    shape = StepShape(4, 1002, 300)
    assert mean_context(shape) == 251
    value = step_ms(fake, shape)
    assert fake.calls == [("mixed", 300, 4, 300, 1, 0), ("mixed", 300, 4, 250, 1, 0)]
    # shared and prefill attention from the first call, decode attention (at 251) from the second
    assert value == pytest.approx(5 + 3 + 0.2 + 0.09 + 0.0001 * 4 * 251)
    fake.calls.clear()
    assert step_ms(fake, StepShape(4, 1002, 0)) == pytest.approx(5 + 0.2 + 0.0001 * 4 * 251)
    assert fake.calls == [("decode", 4, 250, 1)]
    fake.calls.clear()
    assert step_ms(fake, StepShape(0, 0, 300)) == pytest.approx(5 + 3 + 0.09)
    assert fake.calls == [("mixed", 300, 0, 300, 1, 0)]
    # the shortest context a decoding request can have is 2 (a prompt token and one produced)
    assert mean_context(StepShape(8, 3, 0)) == 2


def test_r74_duration_is_whole_microseconds_rounded_half_up() -> None:
    assert duration_us(6.2944) == 6294
    assert duration_us(6.2945) == 6295
    assert duration_us(0.0001) == 1


def test_r74_a_non_duration_answer_is_no_estimate() -> None:
    class Broken(FakeEstimator):
        def decode_step_latency(self, gen_tokens: int, isl: int, osl: int) -> float:
            return float("nan")

    with pytest.raises(NoEstimate, match="decode_requests 2, context_tokens 10"):
        step_ms(Broken(), StepShape(2, 10, 0))


# --- R75: the axes and the held-out shapes ----------------------------------------------------


def test_r75_points_go_where_the_line_bends_and_next_to_a_jump() -> None:
    limits = Limits(max_num_seqs=8, max_batched_tokens=4096, max_model_len=1024)

    def kinked(shape: StepShape) -> float:  # flat to 1,000 prefill tokens, then steep
        p = shape.prefill_tokens
        return 1000.0 + max(0, p - 1000) * 10.0

    points = refine_axis("prefill_tokens", limits, kinked, 0.001, 32)
    assert points[0] == 0
    assert points[-1] == 4096
    assert any(990 <= p <= 1010 for p in points)  # the kink is bracketed tightly

    def jump(shape: StepShape) -> float:  # a 5 % step from 2,048 to 2,049 tokens
        return 1050.0 if shape.prefill_tokens > 2048 else 1000.0

    points = refine_axis("prefill_tokens", limits, jump, 0.001, 32)
    assert 2048 in points
    assert 2049 in points
    # with the straight line exact, the axis keeps its three starting points
    assert refine_axis("prefill_tokens", limits, lambda shape: 7.0, 0.001, 32) == (0, 1, 4096)


def test_r75_held_out_shapes_are_feasible_and_off_the_grid_on_their_axis_only() -> None:
    limits = Limits(max_num_seqs=16, max_batched_tokens=2048, max_model_len=4096)
    axes = ((0, 1, 8, 16), (0, 2, 1000, 65536), (0, 1, 512, 2048))
    sets = held_out(axes, limits, 200, seed=7)
    assert sets == held_out(axes, limits, 200, seed=7)  # the same seed, the same shapes
    for name, shapes in sets.items():
        assert len(shapes) == 200
        assert all(limits.feasible(shape) for shape in shapes)
        if name == "all":
            continue
        for shape in shapes:
            for axis, other in zip(aic_axes._NAMES, axes, strict=True):
                if axis != name:
                    assert getattr(shape, axis) in other
    assert not limits.feasible(StepShape(0, 0, 0))
    assert not limits.feasible(StepShape(2, 3, 0))  # each decoding request has 2 tokens at least


# --- R76: the identity, with a fake estimator ---------------------------------------------------


def test_r76_identity_names_the_estimator_and_digests_what_it_read(tmp_path: Path) -> None:
    root = tmp_path / "package"
    (root / "systems").mkdir(parents=True)
    files = [root / "systems" / "h100_sxm.yaml", root / "systems" / "b.parquet"]
    for index, path in enumerate(files):
        path.write_bytes(b"data %d" % index)
    setting = Setting("Qwen/Qwen3-8B", "h100_sxm", "vllm", "0.24.0", tp=2)
    limits = Limits(max_num_seqs=8, max_batched_tokens=512, max_model_len=2048)
    made = profile(
        FakeEstimator(), setting, "0.12.0", limits, Options(held_out=50), files, root, 16
    )
    document = json.loads(made.grid)
    calibration = document["calibration"]
    assert calibration["engine"] == "vllm"
    assert calibration["engine_version"] == "0.24.0"
    assert calibration["model"] == "Qwen/Qwen3-8B"
    assert "aiconfigurator-core 0.12.0" in calibration["gpu"]
    assert "tensor parallel 2" in calibration["gpu"]
    assert calibration["limits"] == {
        "max_num_seqs": 8,
        "max_batched_tokens": 512,
        "max_model_len": 2048,
    }
    # server_config_sha256 is the SHA-256 of the canonical settings, which the summary prints
    assert (
        calibration["server_config_sha256"]
        == hashlib.sha256(canonical_json(made.settings_value)).hexdigest()
    )
    assert made.settings_value["mapping"] == "SPEC.md R74"
    # source_sha256: sha256sum's lines for the files, paths relative to the package, sorted
    lines = "".join(
        f"{hashlib.sha256(path.read_bytes()).hexdigest()}  systems/{path.name}\n" for path in files
    )
    assert calibration["source_sha256"] == hashlib.sha256(lines.encode()).hexdigest()
    assert sources_digest(files, root) == calibration["source_sha256"]
    # the grid covers the limits, and a replay on it runs
    model = document["model"]
    assert model["coverage"]["decode_requests"] == {"min": 0, "max": 8}
    assert model["coverage"]["prefill_tokens"] == {"min": 0, "max": 512}
    assert model["coverage"]["context_tokens"] == {"min": 0, "max": 8 * 2048}
    build_timing_profile(document)
    build_timing_profile(json.loads(made.regression))
    grid_file = tmp_path / "grid.json"
    grid_file.write_bytes(made.grid)
    report = json.loads(replay(BASIC / "scenario.json", BASIC / "workload.json", grid_file))
    assert report["inputs"]["timing_profile"]["calibration"] == calibration
    # the fake is smooth, so the grid is close to it everywhere
    assert made.accuracy["grid"]["all"].p99 < 0.01


def test_r76_without_aiconfigurator_the_command_says_what_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "aiconfigurator_core", None)  # an import of it fails
    grid = tmp_path / "grid.json"
    code = main(
        [
            "profile",
            "aic",
            "--model",
            "Qwen/Qwen3-8B",
            "--system",
            "h100_sxm",
            "--backend",
            "vllm",
            "--scenario",
            str(BASIC / "scenario.json"),
            "--grid-output",
            str(grid),
        ]
    )
    assert code == 2
    assert "pip install 'servesim[aic]'" in capsys.readouterr().err
    assert not grid.exists()


# --- the real estimator (the aic extra) -------------------------------------------------------

_SMALL = [
    "--model",
    "Qwen/Qwen3-0.6B",
    "--system",
    "h100_sxm",
    "--backend",
    "vllm",
    "--backend-version",
    "0.24.0",
    "--max-num-seqs",
    "8",
    "--max-batched-tokens",
    "512",
    "--max-model-len",
    "2048",
]


def test_r74_r75_profile_aic_writes_a_grid_a_replay_runs_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _need_aic()
    grid, regression, summary = (tmp_path / name for name in ("g.json", "r.json", "s.json"))
    code = main(
        [
            "profile",
            "aic",
            *_SMALL,
            "--max-points",
            "12",
            "--held-out",
            "200",
            "--memory-fraction",
            "0.9",
            "--grid-output",
            str(grid),
            "--regression-output",
            str(regression),
            "--summary-json",
            str(summary),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "Qwen/Qwen3-0.6B on h100_sxm, vllm 0.24.0" in out
    assert "every axis (replay-like)" in out
    document = json.loads(grid.read_bytes())
    build_timing_profile(document)
    build_timing_profile(json.loads(regression.read_bytes()))
    figures = json.loads(summary.read_bytes())
    accuracy = figures["accuracy"]["grid"]
    assert set(accuracy) == {"decode_requests", "context_tokens", "prefill_tokens", "all"}
    assert accuracy["all"]["shapes"] == 200
    assert accuracy["all"]["relative_error"]["p50"] < 0.05
    # R76: the memory suggestion is the estimate's tokens in blocks of 16
    memory = figures["memory"]
    assert memory["kv_cache_blocks"] == memory["kv_cache_tokens"] // 16 > 0
    assert memory["kv_bytes_per_token"] > 0
    assert f'"blocks": {memory["kv_cache_blocks"]}' in out
    # a grid point is the estimator's answer there, rounded (R74)
    from servesim.tools.aic import estimator

    real = estimator.load(Setting("Qwen/Qwen3-0.6B", "h100_sxm", "vllm", "0.24.0"))
    model = document["model"]
    d, c, p = (
        model["axes"][name][-1] for name in ("decode_requests", "context_tokens", "prefill_tokens")
    )
    assert model["duration_us"][-1][-1][-1] == duration_us(step_ms(real, StepShape(d, c, p)))
    # the same inputs, the same bytes
    again = tmp_path / "again.json"
    assert (
        main(
            [
                "profile",
                "aic",
                *_SMALL,
                "--max-points",
                "12",
                "--held-out",
                "200",
                "--grid-output",
                str(again),
            ]
        )
        == 0
    )
    assert again.read_bytes() == grid.read_bytes()
    report = json.loads(replay(BASIC / "scenario.json", BASIC / "workload.json", grid))
    assert report["inputs"]["timing_profile"]["calibration"] == document["calibration"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (("--model", "Nobody/Nothing-1B"), "supported models: "),
        (("--system", "h999_sxm"), "supported systems: "),
        (("--backend", "tensorflow"), "supported backends there: "),
        (("--backend-version", "9.9.9"), "supported versions: "),
        # FP4 weights on a Hopper GPU: in the support matrix as HW_INCOMPATIBLE
        (("--model", "nvidia/DeepSeek-V3.1-NVFP4"), "HW_INCOMPATIBLE"),
    ],
)
def test_r76_an_unsupported_setting_exits_2_naming_what_is_supported(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    change: tuple[str, ...],
    named: str,
) -> None:
    _need_aic()
    arguments = list(_SMALL)
    for flag, value in zip(change[::2], change[1::2], strict=True):
        arguments[arguments.index(flag) + 1] = value
    grid = tmp_path / "grid.json"
    assert main(["profile", "aic", *arguments, "--grid-output", str(grid)]) == 2
    err = capsys.readouterr().err
    assert named in err
    assert "nothing written" in err
    assert not grid.exists()
