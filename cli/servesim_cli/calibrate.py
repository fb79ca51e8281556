"""``servesim calibrate``: measured steps in, regression and grid timing profiles out (R44)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from servesim.contract.errors import ServesimError
from servesim_cli.command import EXIT_INVALID_INPUT, EXIT_OK, Command
from servesim_cli.messages import (
    int_between,
    outputs_clash,
    report_invalid,
    write_every_output,
)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    from servesim.tools.calibrate import MIN_GRID_POINTS, MIN_KNOTS

    parser.add_argument(
        "measurements",
        metavar="MEASUREMENTS",
        help="measured steps (JSON Lines), or a report written with --trace",
    )
    parser.add_argument(
        "--identity",
        required=True,
        metavar="FILE",
        help="JSON object: the calibration members but source_sha256 (engine, engine_version, "
        "model, model_revision, gpu, server_config_sha256, limits)",
    )
    parser.add_argument("--regression-output", metavar="FILE", help="write the regression here")
    parser.add_argument("--grid-output", metavar="FILE", help="write the grid here")
    parser.add_argument(
        "--summary-json", metavar="FILE", help="write the summary's figures here as JSON"
    )
    for option, low, high, default, meaning in (
        ("--holdout-percent", 0, 99, 20, "hold a line out when its draw mod 100 is below N"),
        ("--seed", 0, 2**64 - 1, 0, "the SplitMix64 seed of the split"),
        ("--knots", MIN_KNOTS, 64, 4, "at most N prefill knots"),
        ("--grid-points", MIN_GRID_POINTS, 32, 8, "at most N grid points per axis"),
    ):
        parser.add_argument(
            option,
            type=int_between(low, high),
            default=default,
            metavar="N",
            help=f"{meaning}; {low}..{high}, default {default}",
        )


def _outputs(arguments: argparse.Namespace) -> list[tuple[str, str]]:
    """(path, kind) of every output asked for."""
    return [
        (path, kind)
        for path, kind in (
            (arguments.regression_output, "regression"),
            (arguments.grid_output, "grid"),
            (arguments.summary_json, "summary"),
        )
        if path is not None
    ]


def _run(arguments: argparse.Namespace, _parser: argparse.ArgumentParser) -> int:
    from servesim.tools.calibrate import (
        CalibrateOptions,
        InvalidMeasurements,
        calibrate,
        parse_identity,
    )

    try:
        data = Path(arguments.measurements).read_bytes()
        identity_data = Path(arguments.identity).read_bytes()
    except OSError as error:
        print(f"servesim: cannot read {error.filename}: {error.strerror}", file=sys.stderr)
        return EXIT_INVALID_INPUT
    outputs = _outputs(arguments)
    inputs = (arguments.measurements, arguments.identity)
    if outputs_clash([path for path, _ in outputs], inputs):
        return EXIT_INVALID_INPUT
    options = CalibrateOptions(
        holdout_percent=arguments.holdout_percent,
        seed=arguments.seed,
        knots=arguments.knots,
        grid_points=arguments.grid_points,
    )
    try:
        identity = parse_identity(identity_data, arguments.identity)
        result = calibrate(data, arguments.measurements, identity, arguments.identity, options)
    except InvalidMeasurements as error:
        print("servesim: invalid input:", file=sys.stderr)
        for problem in error.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_INVALID_INPUT
    except ServesimError as error:
        return report_invalid(error)
    contents = {"regression": result.regression, "grid": result.grid}
    contents["summary"] = result.summary_json()
    written = write_every_output([(path, contents[kind]) for path, kind in outputs])
    if written != EXIT_OK:
        return written
    for warning in result.warnings():
        print(f"servesim: warning: {warning}", file=sys.stderr)
    print(result.summary_text(arguments.measurements), end="")
    return EXIT_OK


COMMAND = Command(
    name="calibrate",
    description="Fit a regression and a grid timing profile (1.1) to measured steps, JSON "
    "Lines of {decode_requests, context_tokens, prefill_tokens, duration_us} (SPEC.md R44), "
    "and print their errors on the held-out lines. Exit 0: done, asked profiles written. "
    "Exit 2: invalid measurements or identity, nothing written.",
    add_arguments=_add_arguments,
    run=_run,
)
