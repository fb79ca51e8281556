"""``servesim profile aic``'s steps (R74 to R76): the estimator's answers frozen into a grid
(and a regression) timing profile, with the calibration identity and digests of what it read,
the grid's accuracy against the estimator on held-out shapes, and the memory suggestion.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servesim.contract.canonical import canonical_json
from servesim.contract.model import Coverage, GridTiming, Interval, StepShape, TimingModel
from servesim.contract.nearest_rank import nearest_rank
from servesim.tools.aic.axes import Limits, all_points, held_out, refine_axis
from servesim.tools.aic.estimator import MemoryEstimate, Setting, StepEstimator
from servesim.tools.aic.mapping import ShapeTimer, duration_us
from servesim.tools.calibrate.measurements import Measurement
from servesim.tools.calibrate.profiles import (
    calibration_value,
    checked_profile,
    grid_value,
    profile_value,
    regression_value,
)
from servesim.tools.calibrate.regression import fit_regression

#: R75's accuracy target: the grid's p99 relative error against the estimator on the replay-like
#: held-out shapes. The estimator itself steps by 4 to 6 % where a step's tokens (P + D, the
#: rows of its matrix products) cross an edge of its kernel tables (1,024 to 1,025 prefill
#: tokens: +5.3 % on an H100 with Qwen3-8B); an edge's place on the prefill axis moves with D,
#: so no grid over (D, C, P) follows it exactly, and a target below the size of those steps
#: would only measure how many edges the held-out draw lands next to.
TARGET_P99 = 0.05

#: The sets R75 measures the accuracy on, in the order they are printed.
ACCURACY_SETS = ("decode_requests", "context_tokens", "prefill_tokens", "all")


@dataclass(frozen=True, slots=True)
class Options:
    """The grid's options (R75) and the accuracy measurement's."""

    tolerance: float = 0.005
    max_points: int = 32
    held_out: int = 1000
    seed: int = 0
    knots: int = 8


@dataclass(frozen=True, slots=True)
class Accuracy:
    """R75: one held-out set's relative errors."""

    shapes: int
    p50: float
    p99: float
    max: float
    worst: StepShape | None

    def as_json(self) -> dict[str, Any]:
        worst = self.worst
        return {
            "shapes": self.shapes,
            "relative_error": {"p50": self.p50, "p99": self.p99, "max": self.max},
            "worst_shape": None
            if worst is None
            else {
                "decode_requests": worst.decode_requests,
                "context_tokens": worst.context_tokens,
                "prefill_tokens": worst.prefill_tokens,
            },
        }


@dataclass(frozen=True, slots=True)
class Profiled:
    """What one run makes."""

    setting: Setting
    estimator_version: str
    limits: Limits
    options: Options
    settings_value: dict[str, Any]
    server_config_sha256: str
    source_sha256: str
    source_files: int
    grid: bytes
    regression: bytes
    axes: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]
    estimates: int
    accuracy: dict[str, dict[str, Accuracy]]
    memory: MemoryEstimate | None = None
    kv_block_tokens: int = 16
    warnings: list[str] = field(default_factory=list)

    def summary_value(self) -> dict[str, Any]:
        """The figures for scripts (``--summary-json``)."""
        value: dict[str, Any] = {
            "settings": self.settings_value,
            "server_config_sha256": self.server_config_sha256,
            "source_sha256": self.source_sha256,
            "source_files": self.source_files,
            "grid_axes": {
                "decode_requests": list(self.axes[0]),
                "context_tokens": list(self.axes[1]),
                "prefill_tokens": list(self.axes[2]),
            },
            "grid_points": _points(self.axes),
            "estimates": self.estimates,
            "accuracy_target_p99": TARGET_P99,
            "accuracy": {
                kind: {name: figures.as_json() for name, figures in sets.items()}
                for kind, sets in self.accuracy.items()
            },
            "memory": None,
        }
        if self.memory is not None:
            value["memory"] = memory_value(self.memory, self.kv_block_tokens)
        return value

    def summary_json(self) -> bytes:
        return canonical_json(self.summary_value())

    def summary_text(self) -> str:
        setting = self.setting
        sizes = " x ".join(str(len(axis)) for axis in self.axes)
        lines = [
            f"estimator: aiconfigurator-core {self.estimator_version}: {setting.model} on "
            f"{setting.system}, {setting.backend} {setting.backend_version}, tensor parallel "
            f"{setting.tp}, attention data parallel {setting.attention_dp}",
            f"database: {self.source_files} files, sha256 {self.source_sha256}",
            f"settings: sha256 {self.server_config_sha256} (server_config_sha256)",
            f"limits: max_num_seqs {self.limits.max_num_seqs}, max_batched_tokens "
            f"{self.limits.max_batched_tokens}, max_model_len {self.limits.max_model_len}",
            f"grid: {sizes} = {_points(self.axes)} points (tolerance "
            f"{100 * self.options.tolerance:g}%, at most {self.options.max_points} per axis), "
            f"{self.estimates} shapes estimated",
            *(
                f"  {name}: {', '.join(map(str, axis))}"
                for name, axis in zip(
                    ("decode_requests", "context_tokens", "prefill_tokens"), self.axes, strict=True
                )
            ),
            "",
            "relative error against the estimator on held-out feasible shapes "
            f"(--held-out {self.options.held_out} per set, --seed {self.options.seed}):",
        ]
        rows = [["model", "shapes off the grid on", "shapes", "p50", "p99", "max"]]
        for kind, sets in self.accuracy.items():
            for name, figures in sets.items():
                rows.append(
                    [
                        kind,
                        "every axis (replay-like)" if name == "all" else name,
                        str(figures.shapes),
                        f"{100 * figures.p50:.3f}%",
                        f"{100 * figures.p99:.3f}%",
                        f"{100 * figures.max:.3f}%",
                    ]
                )
        lines += _table(rows)
        overall = self.accuracy["grid"]["all"].p99
        verdict = "meets" if overall <= TARGET_P99 else "MISSES"
        lines.append(
            f"target: grid p99 on replay-like shapes at most {100 * TARGET_P99:g}%: {verdict} "
            f"({100 * overall:.3f}%)"
        )
        if self.memory is not None:
            lines += ["", *memory_text(self.memory, self.kv_block_tokens)]
        return "\n".join(lines) + "\n"


def _points(axes: Sequence[Sequence[int]]) -> int:
    return len(axes[0]) * len(axes[1]) * len(axes[2])


def memory_value(memory: MemoryEstimate, block_tokens: int) -> dict[str, Any]:
    """R76's memory suggestion for scripts."""
    return {
        "gpu_memory_fraction": memory.fraction,
        "fraction_of": memory.fraction_kind,
        "gpu_bytes": memory.gpu_bytes,
        "weights_bytes": memory.weights_bytes,
        "kv_cache_bytes": memory.kv_bytes,
        "kv_bytes_per_token": memory.kv_bytes_per_token,
        "kv_cache_tokens": memory.kv_tokens,
        "block_tokens": block_tokens,
        "kv_cache_blocks": memory.kv_tokens // block_tokens,
    }


def memory_text(memory: MemoryEstimate, block_tokens: int) -> list[str]:
    """R76's memory suggestion for a person."""
    gib = 1 << 30
    weights = (
        "" if memory.weights_bytes is None else f", weights {memory.weights_bytes / gib:.1f} GiB"
    )
    return [
        f"memory (aiconfigurator's estimate at {memory.fraction:g} of the GPU's "
        f"{'total' if memory.fraction_kind == 'of_total' else 'free'} memory, "
        f"{memory.gpu_bytes / gib:.1f} GiB{weights}): KV cache {memory.kv_bytes / gib:.2f} GiB "
        f"= {memory.kv_tokens} tokens at {memory.kv_bytes_per_token} bytes per token",
        f'suggested scenario kv_cache: {{"blocks": {memory.kv_tokens // block_tokens}, '
        f'"block_tokens": {block_tokens}}}',
    ]


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(width) if column < 2 else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def sources_digest(files: Sequence[Path], root: Path) -> str:
    """R76's ``source_sha256``: the SHA-256 of the lines ``<sha256 of the file>  <path>`` (as
    ``sha256sum`` prints them, paths relative to the package's folder, sorted), one per file."""
    lines = []
    for path in files:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        lines.append(f"{digest}  {path.relative_to(root).as_posix()}\n")
    return hashlib.sha256("".join(lines).encode("utf-8")).hexdigest()


def _config_sha256(files: Sequence[Path], setting: Setting) -> str:
    stem = setting.model.replace("/", "--")
    for path in files:
        if path.name == f"{stem}_config.json":
            return hashlib.sha256(path.read_bytes()).hexdigest()
    return "unknown"


def identity(
    setting: Setting,
    estimator_version: str,
    limits: Limits,
    settings_value: dict[str, Any],
    files: Sequence[Path],
    root: Path,
) -> tuple[dict[str, Any], str, str]:
    """R76: the calibration member, with its two digests."""
    server_config = hashlib.sha256(canonical_json(settings_value)).hexdigest()
    source = sources_digest(files, root)
    members = {
        "engine": setting.backend,
        "engine_version": setting.backend_version,
        "model": setting.model,
        "model_revision": f"aiconfigurator-core {estimator_version} model config sha256 "
        f"{_config_sha256(files, setting)}",
        "gpu": f"{setting.system} x{setting.tp * setting.attention_dp} (aiconfigurator-core "
        f"{estimator_version} estimate; tensor parallel {setting.tp}, attention data parallel "
        f"{setting.attention_dp})",
        "server_config_sha256": server_config,
        "limits": {
            "max_num_seqs": limits.max_num_seqs,
            "max_batched_tokens": limits.max_batched_tokens,
            "max_model_len": limits.max_model_len,
        },
    }
    return calibration_value(members, source), server_config, source


def _errors(model: TimingModel, timer: ShapeTimer, shapes: Sequence[StepShape]) -> Accuracy:
    found = sorted(
        (abs(model.step_duration_us(shape) - timer.us(shape)) / timer.us(shape), index)
        for index, shape in enumerate(shapes)
    )
    if not found:
        return Accuracy(0, 0.0, 0.0, 0.0, None)
    values = [error for error, _ in found]
    positions = range(len(values))
    return Accuracy(
        shapes=len(values),
        p50=values[nearest_rank(positions, 50)],
        p99=values[nearest_rank(positions, 99)],
        max=values[-1],
        worst=shapes[found[-1][1]],
    )


def profile(
    estimator: StepEstimator,
    setting: Setting,
    estimator_version: str,
    limits: Limits,
    options: Options,
    files: Sequence[Path],
    root: Path,
    kv_block_tokens: int,
) -> Profiled:
    """R74 to R76: the grid and the regression, read back, and their accuracy."""
    timer = ShapeTimer(estimator)
    axes = (
        refine_axis("decode_requests", limits, timer.us, options.tolerance, options.max_points),
        refine_axis("context_tokens", limits, timer.us, options.tolerance, options.max_points),
        refine_axis("prefill_tokens", limits, timer.us, options.tolerance, options.max_points),
    )
    values = {shape: duration_us(timer.us(shape) / 1000) for shape in all_points(axes)}
    durations = tuple(
        tuple(tuple(values[StepShape(d, c, p)] for p in axes[2]) for c in axes[1]) for d in axes[0]
    )
    coverage = Coverage(*(Interval(axis[0], axis[-1]) for axis in axes))
    grid = GridTiming(axes[0], axes[1], axes[2], durations, coverage)
    settings_value = {
        "estimator": "aiconfigurator-core",
        "estimator_version": estimator_version,
        **setting.as_json(),
        "kv_block_tokens": kv_block_tokens,
        "mapping": "SPEC.md R74",
        "grid": {"tolerance": options.tolerance, "max_points": options.max_points},
        "limits": {
            "max_num_seqs": limits.max_num_seqs,
            "max_batched_tokens": limits.max_batched_tokens,
            "max_model_len": limits.max_model_len,
        },
    }
    calibration, server_config, source = identity(
        setting, estimator_version, limits, settings_value, files, root
    )
    grid_bytes, grid_model = checked_profile(
        profile_value(calibration, grid_value(grid)), "the aiconfigurator grid profile"
    )
    # The regression is R44's fit (least squares, knots evenly spaced by rank) over the grid's
    # feasible points, with the regression's own coverage widened to the limits' (R40).
    fitting = [
        Measurement(index + 1, shape, values[shape])
        for index, shape in enumerate(all_points(axes))
        if limits.feasible(shape)
    ]
    regression = fit_regression(fitting, options.knots)
    regression_bytes, regression_model = checked_profile(
        profile_value(calibration, regression_value(_widened(regression, coverage))),
        "the aiconfigurator regression profile",
    )
    sets = held_out(axes, limits, options.held_out, options.seed)
    accuracy = {
        kind: {name: _errors(model, timer, sets[name]) for name in ACCURACY_SETS}
        for kind, model in (("grid", grid_model), ("regression", regression_model))
    }
    return Profiled(
        setting=setting,
        estimator_version=estimator_version,
        limits=limits,
        options=options,
        settings_value=settings_value,
        server_config_sha256=server_config,
        source_sha256=source,
        source_files=len(files),
        grid=grid_bytes,
        regression=regression_bytes,
        axes=axes,
        estimates=timer.calls,
        accuracy=accuracy,
        kv_block_tokens=kv_block_tokens,
    )


def _widened(regression: Any, coverage: Coverage) -> Any:
    """The regression with the grid's coverage: its knots must span the prefill coverage
    (R40), which they do, since the grid's prefill ends are feasible points of the fit."""
    from dataclasses import replace

    return replace(regression, coverage=coverage)
