"""``servesim profile aic``: a grid (and a regression) timing profile from NVIDIA's
aiconfigurator-core estimator, its accuracy and a memory suggestion (SPEC.md R74 to R76)."""

from __future__ import annotations

import argparse
import math
import sys

from servesim.contract.errors import ServesimError
from servesim_cli.command import EXIT_INVALID_INPUT, EXIT_OK, Command
from servesim_cli.messages import (
    int_between,
    outputs_clash,
    report_invalid,
    write_every_output,
)

#: The estimators ``servesim profile`` can freeze.
SOURCES = ("aic",)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, found {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= 1):
        raise argparse.ArgumentTypeError(f"expected a fraction in (0, 1], found {text!r}")
    return value


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, found {text!r}") from None
    if not (math.isfinite(value) and 0 < value < 100):
        raise argparse.ArgumentTypeError(f"expected a percentage in (0, 100), found {text!r}")
    return value


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source", choices=SOURCES, help="the estimator: aic, NVIDIA's aiconfigurator-core"
    )
    parser.add_argument("--model", required=True, help="a Hugging Face id, e.g. Qwen/Qwen3-8B")
    parser.add_argument("--system", required=True, help="aiconfigurator's system, e.g. h100_sxm")
    parser.add_argument("--backend", required=True, help="vllm, sglang or trtllm")
    parser.add_argument(
        "--backend-version", help="the backend's data version (default: aiconfigurator's latest)"
    )
    parser.add_argument("--tp", type=int_between(1, 1024), default=1, help="tensor parallel size")
    parser.add_argument(
        "--attention-dp", type=int_between(1, 1024), default=1, help="attention data parallel size"
    )
    parser.add_argument(
        "--scenario",
        metavar="FILE",
        help="take the limits (and kv_cache.block_tokens) from this scenario",
    )
    for option in ("--max-num-seqs", "--max-batched-tokens", "--max-model-len"):
        parser.add_argument(
            option, type=int_between(1, 2**32 - 1), metavar="N", help="a limit (without --scenario)"
        )
    parser.add_argument(
        "--kv-block-tokens",
        type=int_between(1, 2**20),
        metavar="N",
        help="tokens per KV block for the memory suggestion (default: the scenario's, else 16)",
    )
    parser.add_argument(
        "--memory-fraction",
        type=_fraction,
        metavar="F",
        help="suggest kv_cache.blocks for this fraction of GPU memory (e.g. 0.9)",
    )
    parser.add_argument("--grid-output", metavar="FILE", help="write the grid profile here")
    parser.add_argument(
        "--regression-output", metavar="FILE", help="write the regression profile here"
    )
    parser.add_argument("--summary-json", metavar="FILE", help="write the figures here as JSON")
    parser.add_argument(
        "--tolerance",
        type=_percent,
        default=0.5,
        metavar="PERCENT",
        help="split a grid interval while its line misses the estimator by more (default 0.5)",
    )
    parser.add_argument(
        "--max-points",
        type=int_between(3, 64),
        default=32,
        metavar="N",
        help="at most N points per axis (default 32)",
    )
    parser.add_argument(
        "--held-out",
        type=int_between(1, 100_000),
        default=1000,
        metavar="N",
        help="held-out shapes per accuracy set (default 1000)",
    )
    parser.add_argument(
        "--seed",
        type=int_between(0, 2**64 - 1),
        default=0,
        metavar="N",
        help="of the held-out draw",
    )


def _limits(arguments: argparse.Namespace) -> tuple[tuple[int, int, int], int | None] | str:
    """The limits and the scenario's block size, or what is wrong."""
    given = (arguments.max_num_seqs, arguments.max_batched_tokens, arguments.max_model_len)
    if arguments.scenario is not None:
        if any(value is not None for value in given):
            return "give the limits either with --scenario or with the three --max-* options"
        from servesim.contract.documents import read_document
        from servesim.contract.scenario import build_scenario

        scenario = build_scenario(read_document(arguments.scenario, "scenario").value)
        limits = scenario.scheduler
        block = None if scenario.kv_cache is None else scenario.kv_cache.block_tokens
        return (limits.max_num_seqs, limits.max_batched_tokens, limits.max_model_len), block
    if any(value is None for value in given):
        return "give --scenario, or all of --max-num-seqs, --max-batched-tokens, --max-model-len"
    seqs, tokens, length = given
    return (seqs, tokens, length), None


def _run(arguments: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from servesim.tools.aic import estimator as aic
    from servesim.tools.aic.axes import Limits
    from servesim.tools.aic.build import Options, profile
    from servesim.tools.aic.mapping import NoEstimate

    outputs = [
        (path, kind)
        for path, kind in (
            (arguments.grid_output, "grid"),
            (arguments.regression_output, "regression"),
            (arguments.summary_json, "summary"),
        )
        if path is not None
    ]
    inputs = [arguments.scenario] if arguments.scenario else []
    if outputs_clash([path for path, _ in outputs], inputs):
        return EXIT_INVALID_INPUT
    try:
        found = _limits(arguments)
        if isinstance(found, str):
            parser.error(found)
        (seqs, tokens, length), scenario_block = found
        limits = Limits(seqs, tokens, length)
        block_tokens = arguments.kv_block_tokens or scenario_block or 16
        version = aic.version()
        backend_version = arguments.backend_version or aic.default_version(
            arguments.system, arguments.backend
        )
        setting = aic.Setting(
            model=arguments.model,
            system=arguments.system,
            backend=arguments.backend,
            backend_version=backend_version or "(none)",
            tp=arguments.tp,
            attention_dp=arguments.attention_dp,
        )
        estimator = aic.load(setting)
        root = aic.package_root()
        options = Options(
            tolerance=arguments.tolerance / 100,
            max_points=arguments.max_points,
            held_out=arguments.held_out,
            seed=arguments.seed,
        )
        result = profile(
            estimator,
            setting,
            version,
            limits,
            options,
            aic.database_files(setting, root),
            root,
            block_tokens,
        )
        if arguments.memory_fraction is not None:
            memory = aic.estimate_memory(
                setting,
                max_num_seqs=seqs,
                max_batched_tokens=tokens,
                fraction=arguments.memory_fraction,
            )
            from dataclasses import replace

            result = replace(result, memory=memory)
    except aic.EstimatorMissing as error:
        print(f"servesim: {error}", file=sys.stderr)
        return EXIT_INVALID_INPUT
    except (aic.UnsupportedSetting, NoEstimate) as error:
        print(f"servesim: invalid input: {error}; nothing written", file=sys.stderr)
        return EXIT_INVALID_INPUT
    except ServesimError as error:
        return report_invalid(error)
    contents = {"grid": result.grid, "regression": result.regression}
    contents["summary"] = result.summary_json()
    written = write_every_output([(path, contents[kind]) for path, kind in outputs])
    if written != EXIT_OK:
        return written
    print(result.summary_text(), end="")
    return EXIT_OK


COMMAND = Command(
    name="profile",
    description="Freeze an estimator's step times into a grid (and a regression) timing "
    "profile 1.1 (SPEC.md R74 to R76): `servesim profile aic` asks NVIDIA's "
    "aiconfigurator-core (pip install 'servesim[aic]') for a model on a system, backend and "
    "version, prints the grid's error against the estimator on held-out shapes and, with "
    "--memory-fraction, a kv_cache.blocks suggestion. Exit 0: done, asked files written. Exit 2: "
    "an unknown or unsupported model, system, backend or version (the message names what is "
    "supported), or aiconfigurator-core missing; nothing written.",
    add_arguments=_add_arguments,
    run=_run,
)
