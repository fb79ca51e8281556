"""``servesim sweep``: replay a grid of scenario settings and workload speed-ups, one table out.

The sweep file (schema: ``servesim_cli/schemas/sweep.schema.json``) names a base scenario,
workload and timing profile and the axes to vary. Every point is replayed by the reference,
in-process in a worker (local processes by default, Ray tasks with ``--executor ray``), and
the table is sorted by point. ``--target`` bisects the file's target axis instead of replaying
the whole grid (``servesim_cli.sweep_search``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from servesim.contract.canonical import write_all_atomically
from servesim.contract.documents import Document
from servesim.contract.errors import MAX_LISTED_PROBLEMS, InputProblem, InvalidInput, ServesimError
from servesim.replay import read_inputs
from servesim_cli import sweep_output
from servesim_cli.command import EXIT_INVALID_INPUT, EXIT_OK, Command
from servesim_cli.messages import positive_int, report_invalid, same_file
from servesim_cli.plot import matplotlib_available
from servesim_cli.sweep_executors import Executor, make_executor, ray_available
from servesim_cli.sweep_file import Point, Setting, SweepPlan, read_sweep, scenario_problems
from servesim_cli.sweep_run import BaseInputs, PointResult, point_documents
from servesim_cli.sweep_search import Search, search


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep", metavar="SWEEP", help="the sweep file (JSON)")
    parser.add_argument(
        "--target",
        action="store_true",
        help="with the file's target on workers: find, for each combination of the other axes, "
        "the smallest worker count that meets its conditions (bisection; assumes more workers "
        "never make the metrics worse) instead of replaying the whole grid; on pools: replay "
        "the whole grid and mark the best split among those that meet them",
    )
    parser.add_argument("--csv", metavar="FILE", help="write the table as CSV")
    parser.add_argument("--json", metavar="FILE", help="write the table (and answers) as JSON")
    parser.add_argument(
        "--plot", metavar="FILE", help="draw p99 TTFT and E2E per point (.png or .svg)"
    )
    parser.add_argument(
        "--reports",
        metavar="DIR",
        help="also write each point's report, as DIR/point-N.json (for servesim plot)",
    )
    parser.add_argument(
        "--executor",
        choices=("process", "ray"),
        default="process",
        help="where points run: local processes (default) or Ray tasks (servesim[ray])",
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=positive_int,
        metavar="N",
        help="points replayed at once (default: the number of CPUs, or with Ray the "
        "cluster's; 1 runs in this process); --target probes this many points per round",
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDRESS",
        help="the Ray cluster to use (e.g. 'auto'); default: a Ray instance already running "
        "in this process, else a new local one",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")


class _Progress:
    """One line per finished point on stderr."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total = total
        self.done = 0
        self.quiet = quiet
        self.prefix = ""

    def __call__(self, result: PointResult) -> None:
        self.done += 1
        if self.quiet:
            return
        columns = result.columns
        detail = (
            f"p99 TTFT {columns['ttft_us_p99'] / 1000:,.1f} ms"
            if result.ok and columns["ttft_us_p99"] is not None
            else columns["status"]
        )
        print(
            f"servesim sweep: {self.prefix}[{self.done}/{self.total}] point {result.point.index} "
            f"({result.point.describe()}): {detail}, {result.seconds:.1f} s",
            file=sys.stderr,
            flush=True,
        )


def _check_points(base: BaseInputs, plan: SweepPlan, points: Sequence[Point]) -> None:
    """Every point's scenario must be valid (R4) before anything runs: one message for all."""
    problems: list[InputProblem] = []
    checked: set[tuple[tuple[str, Setting], ...]] = set()
    for point in points:
        settings = tuple(setting for setting in point.settings if setting[0] != "speedup")
        if settings in checked:
            continue
        checked.add(settings)
        try:
            point_documents(base, Point(point.index, settings))
        except InvalidInput as error:
            problems.extend(
                InputProblem(
                    plan.file,
                    "/axes",
                    f"point {point.describe()} makes the scenario invalid: at "
                    f"{problem.pointer or '(document root)'}: {problem.message}",
                )
                for problem in error.problems
            )
    if problems:
        more = len(problems) - MAX_LISTED_PROBLEMS
        listed = problems[:MAX_LISTED_PROBLEMS]
        if more > 0:
            listed.append(InputProblem(plan.file, "/axes", f"... and {more} more problems"))
        raise InvalidInput(listed)


def _outputs(arguments: argparse.Namespace) -> list[tuple[str, str]]:
    """(kind, path) of each output file asked for."""
    return [
        (kind, getattr(arguments, kind))
        for kind in ("csv", "json", "plot")
        if getattr(arguments, kind) is not None
    ]


def _run(arguments: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if arguments.plot is not None and Path(arguments.plot).suffix not in {".png", ".svg"}:
        parser.error(f"--plot {arguments.plot}: the file name must end in .png or .svg")
    if arguments.plot is not None and not matplotlib_available("sweep --plot"):
        return EXIT_INVALID_INPUT
    if arguments.executor == "ray" and not ray_available():
        return EXIT_INVALID_INPUT
    try:
        plan = read_sweep(arguments.sweep)
        if arguments.target and plan.target is None:
            message = "--target needs a target member: {axis, conditions}"
            raise InvalidInput([InputProblem(plan.file, "/target", message)])
        scenario, workload, profile = read_inputs(plan.scenario, plan.workload, plan.timing_profile)
        assert isinstance(profile, Document), "a sweep names one timing profile"
        problems = scenario_problems(plan, scenario)  # workers or pools, as the fleet is
        if problems:
            raise InvalidInput(problems)
        base = BaseInputs(scenario, workload, profile)
        points = plan.points()
        _check_points(base, plan, points)
    except ServesimError as error:
        return report_invalid(error)
    inputs = [arguments.sweep, plan.scenario, plan.workload, plan.timing_profile]
    for _, path in _outputs(arguments):
        if any(same_file(path, given) for given in inputs):
            print(
                f"servesim: invalid input: the output {path} is one of the inputs", file=sys.stderr
            )
            return EXIT_INVALID_INPUT
    target = plan.target if arguments.target else None
    keep = arguments.reports is not None
    with make_executor(
        arguments.executor,
        base,
        jobs=arguments.jobs,
        address=arguments.ray_address,
        keep_reports=keep,
    ) as executor:
        if target is None or target.axis == "pools":  # a split is not bisected (sweep_best)
            progress = _Progress(len(points), arguments.quiet)
            results = executor.run(points, progress)
            searches: list[Search] = []
        else:
            results, searches = _search(plan, executor, arguments)
    return _write(arguments, plan, results, searches)


def _search(
    plan: SweepPlan, executor: Executor, arguments: argparse.Namespace
) -> tuple[list[PointResult], list[Search]]:
    assert plan.target is not None
    progress = _Progress(0, arguments.quiet)
    rounds = 0

    def run_batch(points: Sequence[Point]) -> list[PointResult]:
        nonlocal rounds
        rounds += 1
        progress.prefix, progress.done, progress.total = f"round {rounds} ", 0, len(points)
        return executor.run(points, progress)

    searches = search(plan, plan.target, run_batch, executor.parallel)
    evaluated = {
        result.point.index: result for item in searches for result in item.results.values()
    }
    return [evaluated[index] for index in sorted(evaluated)], searches


def _write(
    arguments: argparse.Namespace,
    plan: SweepPlan,
    results: list[PointResult],
    searches: list[Search],
) -> int:
    target = plan.target if arguments.target else None
    print(sweep_output.text_table(plan, results, target))
    if target is not None:
        print()
        if target.axis == "pools":
            print(sweep_output.split_answers_text(plan, results, target))
        else:
            print(sweep_output.answers_text(target, searches))
    files: list[tuple[str | Path, bytes]] = []
    for kind, path in _outputs(arguments):
        if kind == "csv":
            files.append((path, sweep_output.csv_bytes(plan, results, target)))
        elif kind == "json":
            files.append((path, sweep_output.json_bytes(plan, results, target, searches)))
        else:
            fmt = Path(path).suffix[1:]
            files.append((path, sweep_output.plot_bytes(plan, results, fmt, target)))
    if arguments.reports is not None:
        folder = Path(arguments.reports)
        files.extend(
            (folder / f"point-{result.point.index}.json", result.report)
            for result in results
            if result.report is not None
        )
    try:
        if arguments.reports is not None:
            Path(arguments.reports).mkdir(parents=True, exist_ok=True)
        write_all_atomically(files)
    except OSError as error:
        print(f"servesim: cannot write the outputs: {error}", file=sys.stderr)
        return EXIT_INVALID_INPUT
    failed = [result for result in results if not result.ok]
    for result in failed:
        print(
            f"servesim sweep: warning: point {result.point.index} ({result.point.describe()}) "
            f"was not replayed to the end: {result.columns['status']}: {result.columns['message']}",
            file=sys.stderr,
        )
    return EXIT_OK


COMMAND = Command(
    name="sweep",
    description="Replay every point of a sweep file's grid (workers, or the pools' sizes "
    "of a scenario with fleet.pools, max_num_seqs, max_batched_tokens, prefill chunk size, "
    "routing, and workload speed-ups, which divide every arrival_us by the factor, floored) "
    "and print one table, sorted by point; --csv and --json write it, --plot draws it. With "
    "a pools axis the table marks, for each combination of the other axes, the best point: "
    "the most goodput requests, then the lowest p99 TTFT, then the lowest p99 ITL. With "
    "--target on workers, bisect the workers for the smallest count whose p-th percentile "
    "latencies meet the file's conditions, for each combination of the other axes; this "
    "assumes more workers never make them worse, and the answer's bracketing points are "
    "shown. With --target on pools, every point is replayed (a split is not monotone) and the "
    "best is chosen among the points that meet the conditions. Points run in parallel on local "
    "processes (--jobs), or as Ray tasks with --executor ray (servesim[ray]). Progress on "
    "stderr. The sweep file's schema is servesim_cli/schemas/sweep.schema.json. Exit 0: "
    "done (a point a measured profile cannot time is a row with status out_of_coverage and "
    "a warning). Exit 2: the sweep file, a base input or a point's scenario is invalid, or an "
    "extra is missing; nothing written.",
    add_arguments=_add_arguments,
    run=_run,
)
