"""What one calibration makes (R44): both profiles' bytes and the figures of step 4, for a
person (an aligned table), for scripts (``--summary-json``), and the warnings that say when
the figures are too thin to trust.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from servesim.contract.canonical import canonical_json
from servesim.tools.calibrate.evaluation import ERROR_PERCENTILES, ModelSummary
from servesim.tools.calibrate.options import CalibrateOptions

#: Fewer held-out lines than this, and the error percentiles are flagged as weak.
MIN_TRUSTED_HELD_OUT = 20
#: Fewer fitting lines per regression coefficient than this, and the fit is flagged as weak.
MIN_FITTING_PER_COEFFICIENT = 10


@dataclass(frozen=True, slots=True)
class Calibration:
    """What one run makes: both profiles' bytes, checked, and the figures of R44 step 4."""

    options: CalibrateOptions
    source_sha256: str
    lines: int
    regression: bytes
    grid: bytes
    knots: tuple[int, ...]
    grid_shape: tuple[int, int, int]
    models: tuple[ModelSummary, ...]

    def warnings(self) -> list[str]:
        """What makes the figures weak: too few held-out lines for their percentiles to mean
        much, too few fitting lines for the regression's coefficients. Not errors (a small
        calibration is still a calibration), but a person must not read 0.5 % off three lines
        as a property of the model."""
        held_out = self.models[0].held_out_lines
        fitting = self.lines - held_out
        coefficients = len(self.knots) + 2  # intercept, knots after the first, D and C
        found = []
        if held_out < MIN_TRUSTED_HELD_OUT:
            found.append(
                f"only {_count(held_out, 'held-out line')}: error percentiles need at least "
                f"{MIN_TRUSTED_HELD_OUT} to say much (measure more steps, or raise "
                "--holdout-percent)"
            )
        if fitting < MIN_FITTING_PER_COEFFICIENT * coefficients:
            found.append(
                f"only {_count(fitting, 'fitting line')} for {coefficients} regression "
                f"coefficients: at least {MIN_FITTING_PER_COEFFICIENT} per coefficient "
                "keep a fit from following the noise"
            )
        return found

    def summary_value(self) -> dict[str, Any]:
        """The figures for scripts (``--summary-json``)."""
        held_out = self.models[0].held_out_lines
        return {
            "source_sha256": self.source_sha256,
            "lines": self.lines,
            "fitting_lines": self.lines - held_out,
            "held_out_lines": held_out,
            "seed": self.options.seed,
            "holdout_percent": self.options.holdout_percent,
            "knots": list(self.knots),
            "grid_axes_sizes": list(self.grid_shape),
            "models": {model.kind: model.as_json() for model in self.models},
        }

    def summary_json(self) -> bytes:
        """``summary_value`` as RFC 8785 canonical JSON, so reruns give the same bytes."""
        return canonical_json(self.summary_value())

    def summary_text(self, file: str) -> str:
        """R44 step 4 for a person: where the figures come from, then one row per model."""
        held_out = self.models[0].held_out_lines
        grid = next(model for model in self.models if model.grid_points is not None)
        measured, filled = grid.grid_points or (0, 0)
        sizes = " x ".join(str(size) for size in self.grid_shape)
        lines = [
            f"measurements: {file}, {_count(self.lines, 'line')}, sha256 {self.source_sha256}",
            f"split: {self.lines - held_out} fitting, {held_out} held out "
            f"(--seed {self.options.seed}, --holdout-percent {self.options.holdout_percent})",
            f"regression: knots at prefill_tokens {', '.join(map(str, self.knots))}",
            f"grid: {sizes} points, {measured} measured, {filled} from the regression",
            "",
            *_table([_HEADER, *(_row(model) for model in self.models)]),
            "",
            "abs: |predicted - T| in us; rel: |predicted - T| / T; each the nearest-rank "
            "percentile (R27) over the held-out lines the model covers",
        ]
        return "\n".join(lines) + "\n"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


_HEADER = ["model", "fitting", "held-out covered"] + [
    f"{kind} p{percent}" for kind in ("abs", "rel") for percent in ERROR_PERCENTILES
]


def _row(model: ModelSummary) -> list[str]:
    if model.held_out_lines:
        share = f"{100 * model.covered_lines / model.held_out_lines:.1f}%"
        covered = f"{model.covered_lines}/{model.held_out_lines} ({share})"
    else:
        covered = "0/0 (n/a)"
    absolute = model.absolute_error_us or {}
    relative = model.relative_error or {}
    return [
        model.kind,
        str(model.fitting_lines),
        covered,
        *(f"{absolute[p]} us" if absolute else "n/a" for p in ERROR_PERCENTILES),
        *(f"{100 * relative[p]:.2f}%" if relative else "n/a" for p in ERROR_PERCENTILES),
    ]


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as aligned text: the first column to the left, the figures to the right."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return [
        "  ".join(
            cell.ljust(width) if column == 0 else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
