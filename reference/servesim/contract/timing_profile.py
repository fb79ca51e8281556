"""The timing profile's own checks (R40: a measured model agrees with its axes, knots,
coverage and limits) and its ``TimingProfile`` (R22, R41, R42).

A synthetic profile has nothing to check beyond its schema; a measured one (``grid`` or
``regression``, with its ``calibration``) states the same ranges several ways, and they must
agree.
"""

from __future__ import annotations

from typing import Any

from servesim.contract.errors import InputProblem, pointer
from servesim.contract.model import (
    SHAPE_DIMENSIONS,
    Coverage,
    GridTiming,
    Interval,
    PrefillKnot,
    RegressionTiming,
    SyntheticLinearTiming,
    TimingModel,
    TimingProfile,
)


def timing_profile_problems(value: dict[str, Any], file: str) -> list[InputProblem]:
    """R4, R40: what a schema-valid timing profile breaks (only a measured one can)."""
    if "calibration" not in value:
        return []
    return _measured_profile_problems(value, file)


def _measured_profile_problems(value: dict[str, Any], file: str) -> list[InputProblem]:
    """R40: a measured model agrees with its own axes or knots, its coverage and its limits."""
    model = value["model"]
    coverage = model["coverage"]
    problems: list[InputProblem] = []

    def problem(parts: list[str | int], message: str) -> None:
        problems.append(InputProblem(file, pointer(["model", *parts]), message))

    for name in SHAPE_DIMENSIONS:
        if coverage[name]["min"] > coverage[name]["max"]:
            problem(["coverage", name], f"min {coverage[name]['min']} is greater than max")
    if model["kind"] == "grid":
        domain = _grid_problems(model, problem)
    else:
        tokens = [knot["tokens"] for knot in model["prefill_knots"]]
        for index in _not_increasing(tokens):
            problem(
                ["prefill_knots", index, "tokens"],
                f"{tokens[index]} does not exceed the previous knot's tokens; knots are strictly "
                "increasing",
            )
        domain = {"prefill_tokens": (tokens[0], tokens[-1])}
    for name, (first, last) in domain.items():
        if (coverage[name]["min"], coverage[name]["max"]) != (first, last):
            problem(
                ["coverage", name],
                f"covers {coverage[name]['min']}..{coverage[name]['max']} but the model is "
                f"measured on {first}..{last}; the coverage must be exactly that range",
            )
    limits = value["calibration"]["limits"]
    bounds = {
        "decode_requests": (limits["max_num_seqs"], "calibration.limits.max_num_seqs"),
        "prefill_tokens": (limits["max_batched_tokens"], "calibration.limits.max_batched_tokens"),
        "context_tokens": (
            limits["max_num_seqs"] * limits["max_model_len"],
            "calibration.limits.max_num_seqs * max_model_len",
        ),
    }
    for name, (bound, source) in bounds.items():
        if coverage[name]["max"] > bound:
            problem(
                ["coverage", name, "max"],
                f"{coverage[name]['max']} is beyond what the engine could run: {source} is {bound}",
            )
    return problems


def _not_increasing(values: list[int]) -> list[int]:
    """The indices whose value does not exceed the one before (R40: strictly increasing)."""
    return [index for index in range(1, len(values)) if values[index] <= values[index - 1]]


def _grid_problems(model: dict[str, Any], problem: Any) -> dict[str, tuple[int, int]]:
    """R40 for a grid: increasing axes, one duration per grid point; returns the axes' ranges."""
    axes = model["axes"]
    for name in SHAPE_DIMENSIONS:
        for index in _not_increasing(axes[name]):
            problem(
                ["axes", name, index],
                f"{axes[name][index]} does not exceed the previous point; axes are strictly "
                "increasing",
            )
    sizes = [len(axes[name]) for name in SHAPE_DIMENSIONS]

    def check(rows: list[Any], depth: int, parts: list[str | int]) -> None:
        if len(rows) != sizes[depth]:
            problem(
                parts,
                f"has {len(rows)} entries; expected {sizes[depth]}, one per "
                f"axes.{SHAPE_DIMENSIONS[depth]} point",
            )
        elif depth + 1 < len(sizes):
            for index, row in enumerate(rows):
                check(row, depth + 1, [*parts, index])

    check(model["duration_us"], 0, ["duration_us"])
    return {name: (axes[name][0], axes[name][-1]) for name in SHAPE_DIMENSIONS}


def build_timing_profile(value: dict[str, Any]) -> TimingProfile:
    """The ``TimingProfile`` of a checked timing-profile document."""
    return TimingProfile(model=_build_model(value["model"]), calibration=value.get("calibration"))


def _build_coverage(coverage: dict[str, Any]) -> Coverage:
    return Coverage(
        **{
            name: Interval(coverage[name]["min"], coverage[name]["max"])
            for name in SHAPE_DIMENSIONS
        }
    )


def _build_model(model: dict[str, Any]) -> TimingModel:
    """R22, R41, R42: the model of a checked profile, by kind."""
    if model["kind"] == "grid":
        axes = model["axes"]
        return GridTiming(
            decode_axis=tuple(axes["decode_requests"]),
            context_axis=tuple(axes["context_tokens"]),
            prefill_axis=tuple(axes["prefill_tokens"]),
            durations=tuple(tuple(tuple(row) for row in plane) for plane in model["duration_us"]),
            coverage=_build_coverage(model["coverage"]),
        )
    if model["kind"] == "regression":
        return RegressionTiming(
            intercept_ns=model["intercept_ns"],
            prefill_knots=tuple(
                PrefillKnot(knot["tokens"], knot["ns"]) for knot in model["prefill_knots"]
            ),
            decode_request_ns=model["decode_request_ns"],
            context_token_ps=model["context_token_ps"],
            coverage=_build_coverage(model["coverage"]),
        )
    return SyntheticLinearTiming(
        step_overhead_ns=model["step_overhead_ns"],
        prefill_token_ns=model["prefill_token_ns"],
        decode_token_ns=model["decode_token_ns"],
    )
