"""Where sweep points run: in this process, in local worker processes, or as Ray tasks.

Every executor takes a batch of points and returns their results in the batch's order,
calling ``on_done`` as each one finishes (in whatever order they finish), so the driver can
show progress while the outputs stay deterministic.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from types import TracebackType
from typing import Any

from servesim_cli.sweep_file import Point
from servesim_cli.sweep_run import BaseInputs, PointResult, run_point

OnDone = Callable[[PointResult], None]

#: The message when the ``ray`` extra is not installed.
MISSING_RAY = (
    "servesim: sweep --executor ray needs Ray, which is not installed; it comes with the "
    "optional extra: pip install 'servesim[ray]'"
)


class Executor:
    """Runs points one after the other in this process (``--jobs 1``); the base of the others."""

    def __init__(self, base: BaseInputs, *, keep_reports: bool = False) -> None:
        self.base = base
        self.keep_reports = keep_reports
        #: How many points it runs at once (the target search probes that many per round).
        self.parallel = 1

    def run(self, points: Sequence[Point], on_done: OnDone) -> list[PointResult]:
        """The results of ``points``, in their order."""
        results = []
        for point in points:
            result = run_point(self.base, point, keep_report=self.keep_reports)
            on_done(result)
            results.append(result)
        return results

    def close(self) -> None:
        """Release what the executor holds."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


# --- local processes ---------------------------------------------------------------------

_INSTALLED: BaseInputs | None = None


def _install(base: BaseInputs) -> None:
    """A worker process's initializer: the base documents arrive once, not with every point."""
    global _INSTALLED  # one per worker process, by design
    _INSTALLED = base


def _run_installed(point: Point, keep_report: bool) -> PointResult:
    assert _INSTALLED is not None, "the worker process was not initialised"
    return run_point(_INSTALLED, point, keep_report=keep_report)


class ProcessExecutor(Executor):
    """Points in a pool of ``jobs`` local processes (``concurrent.futures``)."""

    def __init__(self, base: BaseInputs, jobs: int, *, keep_reports: bool = False) -> None:
        super().__init__(base, keep_reports=keep_reports)
        self.pool = ProcessPoolExecutor(max_workers=jobs, initializer=_install, initargs=(base,))
        self.parallel = jobs

    def run(self, points: Sequence[Point], on_done: OnDone) -> list[PointResult]:
        futures: dict[Future[PointResult], int] = {
            self.pool.submit(_run_installed, point, self.keep_reports): position
            for position, point in enumerate(points)
        }
        results: list[PointResult | None] = [None] * len(points)
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=futures.__getitem__):
                result = future.result()
                results[futures[future]] = result
                on_done(result)
        return [result for result in results if result is not None]

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)


# --- Ray ---------------------------------------------------------------------------------


def _ray_task(base: BaseInputs, point: Point, keep_report: bool) -> PointResult:
    return run_point(base, point, keep_report=keep_report)


class RayExecutor(Executor):
    """Points as Ray tasks. Joins the Ray instance already running in this process, or
    connects to ``address`` (``"auto"``: a cluster started with ``ray start``), or starts a
    local instance; it shuts down only an instance it started."""

    def __init__(
        self,
        base: BaseInputs,
        address: str | None,
        jobs: int | None,
        *,
        keep_reports: bool = False,
    ) -> None:
        super().__init__(base, keep_reports=keep_reports)
        import ray

        self.ray: Any = ray
        self.started = not ray.is_initialized()
        if self.started:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        self.parallel = jobs or max(1, int(self.ray.cluster_resources().get("CPU", 1)))
        self.base_ref = ray.put(base)  # once into the object store, shared by every task
        self.task = ray.remote(_ray_task)

    def run(self, points: Sequence[Point], on_done: OnDone) -> list[PointResult]:
        references = [self.task.remote(self.base_ref, point, self.keep_reports) for point in points]
        position = {reference: index for index, reference in enumerate(references)}
        results: list[PointResult | None] = [None] * len(points)
        pending = list(references)
        while pending:
            done, pending = self.ray.wait(pending, num_returns=1)
            for reference in done:
                result: PointResult = self.ray.get(reference)
                results[position[reference]] = result
                on_done(result)
        return [result for result in results if result is not None]

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()


def ray_available() -> bool:
    """Whether Ray can be imported; if not, say how to get it (on stderr)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        print(MISSING_RAY, file=sys.stderr)
        return False
    return True


def make_executor(
    kind: str, base: BaseInputs, *, jobs: int | None, address: str | None, keep_reports: bool
) -> Executor:
    """The executor ``--executor`` names; ``process`` with one job runs in this process.

    ``jobs`` None: as many local processes as CPUs, or (Ray) the cluster's CPUs.
    """
    if kind == "ray":
        return RayExecutor(base, address, jobs, keep_reports=keep_reports)
    jobs = jobs or os.cpu_count() or 1
    if jobs == 1:
        return Executor(base, keep_reports=keep_reports)
    return ProcessExecutor(base, jobs, keep_reports=keep_reports)
