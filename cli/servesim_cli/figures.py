"""A report's headline figures, read once into a small frozen value (SPEC.md R25 to R29).

``read_figures(path)`` is the public entry: ``servesim summary``, ``servesim compare`` and any
other reader (plots, sweeps) get the same figures, computed the same way.

Where the figures come from:

- the report as written: counts, makespan, the R27 statistics of queue time, TTFT, ITL and E2E,
  the per-worker counters, the input digests;
- derived exactly (``Fraction``) from the report's integers: throughputs
  (``completed * 10**6 / makespan_us``, and goodput's likewise), each worker's utilisation
  (``busy_us / makespan_us``), and per-request TPOT: for every completed request with at least
  two output tokens, ``(completion_us - first_token_us) / (output_tokens - 1)``, the mean gap
  between its tokens; its statistics follow R27 (nearest rank) over those exact values, as
  R63's ``summary.tpot_us`` of a report 5.0 does before it rounds them (an older report has no
  such member, R64's migration computes it the same way).
- absent from older reports, and read as R64's migration to 5.0 gives them: ``cut_off`` is 0
  before 5.0, there is no goodput without ``slo`` (R63), and no request has a session.

Nothing here needs a request's ``token_times_us`` or the ``trace``, which are nearly all of a
large report's bytes (the Mooncake trace replayed on 16 workers: 4.1 million token times in
a 48 MB report; with ``--trace``, 4.1 million steps in 927 MB). A report is canonical JSON
(R23), so ``_Reducer`` drops both while the file is read in blocks (or while ``replay`` writes
it) and only the rest is parsed; a report in any other layout (pretty-printed, members
reordered) is parsed whole, with the same result.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cmp_to_key
from pathlib import Path
from typing import Any, BinaryIO, TypeGuard

import orjson

from servesim.contract import validity
from servesim.contract.canonical import canonical_json
from servesim.contract.errors import InputProblem, InvalidInput, pointer
from servesim.contract.header import check_header
from servesim.contract.json_reading import parse_json, plain_numbers
from servesim.contract.nearest_rank import PERCENTILES
from servesim.contract.schema_check import schema_problems
from servesim.engine.admission import REJECT_REASONS

__all__ = [
    "Figure",
    "FiguresTap",
    "GoodputFigures",
    "Inputs",
    "KvCacheFigures",
    "ReportFigures",
    "Statistics",
    "Value",
    "WorkerSpread",
    "figures_of",
    "flat_figures",
    "read_figures",
]

#: A figure's value: exact, or ``None`` where the report has no samples (R27) or no makespan.
Value = Fraction | None


@dataclass(frozen=True)
class Statistics:
    """R27 statistics of one latency, in microseconds."""

    count: int
    min: Value
    max: Value
    mean: Value
    #: percent -> the nearest-rank percentile, for each of ``PERCENTILES``.
    percentiles: tuple[tuple[int, Value], ...]

    def percentile(self, percent: int) -> Value:
        """The ``percent``-th nearest-rank percentile (one of ``PERCENTILES``)."""
        return dict(self.percentiles)[percent]


@dataclass(frozen=True)
class WorkerSpread:
    """How evenly the fleet was used (R29): the spread of the per-worker counters."""

    workers: int
    utilization_min: Value
    utilization_mean: Value
    utilization_max: Value
    #: The worker with the lowest and the highest utilisation (the first one on a tie).
    least_busy_worker: int
    most_busy_worker: int
    routed_min: int
    routed_max: int
    peak_running: int
    peak_waiting: int


@dataclass(frozen=True)
class KvCacheFigures:
    """What the report says of the workers' KV caches (R52); only a report 3.0 or later of a
    scenario with ``kv_cache`` has them."""

    reused_prompt_tokens: int
    #: Reused over all prompt tokens of completed requests, exact (R52 writes it rounded).
    prefix_reuse_ratio: Value
    preemptions: int
    evictions: int
    #: The largest ``peak_blocks_in_use`` of any worker.
    peak_blocks_in_use: int


@dataclass(frozen=True)
class GoodputFigures:
    """The requests that met the scenario's objectives (R63); only a report 5.0 of a scenario
    with ``slo`` has them."""

    requests: int
    output_tokens: int
    #: Requests that met the objectives over the completed ones, exact; ``None`` if none completed.
    share_of_completed: Value
    request_throughput_per_s: Value
    output_token_throughput_per_s: Value


@dataclass(frozen=True)
class Inputs:
    """What the report was made from (R25)."""

    scenario_sha256: str
    workload_sha256: str
    timing_profile_sha256: str
    #: The timing profile's calibration member as canonical JSON text; ``None`` when it has none
    #: (a synthetic profile, or a 1.0 report, which cannot say).
    calibration: str | None

    def calibration_label(self) -> str:
        """The calibration in a few words: engine and version, model and revision, GPU."""
        if self.calibration is None:
            return "none"
        identity = json.loads(self.calibration)
        return (
            f"{identity['engine']} {identity['engine_version']}, {identity['model']} "
            f"@ {identity['model_revision']}, {identity['gpu']}"
        )


@dataclass(frozen=True)
class ReportFigures:
    """The figures of one report; every duration in microseconds."""

    file: str
    schema_version: str
    inputs: Inputs
    #: Whether the report holds a step trace (R30).
    traced: bool
    requests: int
    completed: int
    rejected: int
    #: Every R10 reason with its count, in R10 order.
    rejected_by_reason: tuple[tuple[str, int], ...]
    prompt_tokens: int
    output_tokens: int
    steps: int
    first_arrival_us: int
    makespan_us: int
    request_throughput_per_s: Value
    output_token_throughput_per_s: Value
    queue_us: Statistics
    ttft_us: Statistics
    itl_us: Statistics
    #: Per-request time per output token (see the module docstring).
    tpot_us: Statistics
    e2e_us: Statistics
    workers: WorkerSpread
    #: ``None`` without a cache (every report before 3.0, R53).
    kv_cache: KvCacheFigures | None = None
    #: Requests cut off by the stop time (R62); 0 before report 5.0.
    cut_off: int = 0
    #: How many sessions the requests belong to (R59, R64); 0 before report 5.0.
    sessions: int = 0
    #: ``None`` without ``slo`` (every report before 5.0).
    goodput: GoodputFigures | None = None

    def latencies(self) -> tuple[tuple[str, Statistics], ...]:
        """Each latency by its short name, in the order a table shows them."""
        return (
            ("queue", self.queue_us),
            ("ttft", self.ttft_us),
            ("itl", self.itl_us),
            ("tpot", self.tpot_us),
            ("e2e", self.e2e_us),
        )


def read_figures(path: str | Path) -> ReportFigures:
    """The figures of the report file at ``path``.

    Raises ``InvalidInput`` (problems naming the file and a JSON pointer) for a file that is not
    a readable report of a version this package reads (R2: 1.0 to 5.0). What the figures do not
    use is not checked (``servesim validate`` checks a whole report).
    """
    file = str(path)
    try:
        with open(path, "rb") as stream:
            reduced = _reduced_report(stream)
        value = _parsed(reduced) if reduced is not None else None
        if value is None:  # another layout, or not JSON: parse the whole file
            data = Path(path).read_bytes()
            value = _parsed(data)
            if value is None:  # not JSON: the strict reader says where and why
                value = parse_json(data, file)
    except OSError as error:
        raise InvalidInput(
            [InputProblem(file, "", f"cannot read the file: {error.strerror}")]
        ) from None
    return figures_of(value, file)


#: Digits in a row beyond which an integer literal might not fit in 64 bits (2**63 has 19),
#: where orjson would read it as a float and the standard parser as an integer.
_ORJSON_DIGITS = 18
#: What may come right before the first digit of an integer literal (or of an exponent): the
#: start of a value, after ``:``, ``[``, ``,`` or whitespace, or a sign, or ``e``.
_BEFORE_DIGITS = frozenset(b"-+:[,eE \t\r\n")
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")


def _may_hold_a_long_integer(data: bytes) -> bool:
    """Whether ``data`` may hold an integer literal of more than ``_ORJSON_DIGITS`` digits: a
    run of that many digits, unless the byte before the run shows that it is no number's start
    (a quote or a letter: a string, such as a calibration's digest of zeros; a ``.``: a
    fraction, which orjson reads as exactly as ``json`` does)."""
    digits = data.translate(_DIGITS_AS_ZERO)
    run = b"0" * (_ORJSON_DIGITS + 1)
    start = digits.find(run)
    while start >= 0:  # each later start inside the same run follows a digit: not a number's
        if start == 0 or data[start - 1] in _BEFORE_DIGITS:
            return True
        start = digits.find(run, start + 1)
    return False


def _parsed(data: bytes) -> Any:
    """JSON text as a value, ``None`` if it is not JSON (NaN and Infinity included).

    Not ``parse_json``: its duplicate-key check takes longer than the rest of a summary, and a
    report is written by a program, not a person. Read by orjson, about 3x faster than the
    standard parser, when no run of digits is long enough for an integer beyond 64 bits: then
    both give the same value (floats correctly rounded, the last of duplicate keys). Whatever
    orjson refuses (NaN, a lone surrogate, a number beyond binary64, a byte-order mark) is left
    to the standard parser, so the value, or ``None``, is always the one it gives.
    """
    if not _may_hold_a_long_integer(data):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(data, parse_constant=_not_a_number)
    except (ValueError, RecursionError):
        return None


def _not_a_number(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


@dataclass(frozen=True)
class Figure:
    """One figure by a stable name, for tables, comparisons and machine-readable output."""

    #: A stable dotted name, e.g. ``ttft_us.p99`` or ``rejected_by_reason.empty_prompt``.
    key: str
    #: What a table calls it, e.g. ``TTFT p99``.
    label: str
    #: How to show it: ``count``; ``ms`` and ``s`` (the value is in microseconds);
    #: ``per_s``; ``percent`` (the value is a ratio).
    unit: str
    value: Value


def flat_figures(figures: ReportFigures) -> tuple[Figure, ...]:
    """Every figure of a report in table order: counts, throughput, latencies, workers."""
    counts = [
        Figure("requests", "requests", "count", Fraction(figures.requests)),
        Figure("completed", "completed", "count", Fraction(figures.completed)),
        Figure("rejected", "rejected", "count", Fraction(figures.rejected)),
        *(
            Figure(f"rejected_by_reason.{reason}", f"rejected: {reason}", "count", Fraction(n))
            for reason, n in figures.rejected_by_reason
        ),
        Figure("cut_off", "cut off", "count", Fraction(figures.cut_off)),
        Figure("sessions", "sessions", "count", Fraction(figures.sessions)),
        Figure("prompt_tokens", "prompt tokens", "count", Fraction(figures.prompt_tokens)),
        Figure("output_tokens", "output tokens", "count", Fraction(figures.output_tokens)),
        Figure("steps", "steps", "count", Fraction(figures.steps)),
        Figure("makespan_us", "makespan", "s", Fraction(figures.makespan_us)),
        Figure(
            "request_throughput_per_s",
            "request throughput",
            "per_s",
            figures.request_throughput_per_s,
        ),
        Figure(
            "output_token_throughput_per_s",
            "output token throughput",
            "per_s",
            figures.output_token_throughput_per_s,
        ),
    ]
    latencies = [
        Figure(f"{name}_us.{part}", f"{name.upper()} {part}", unit, value)
        for name, statistics in figures.latencies()
        for part, unit, value in _parts(statistics)
    ]
    spread = figures.workers
    workers = [
        Figure("workers", "workers", "count", Fraction(spread.workers)),
        Figure("workers.utilization_min", "utilisation min", "percent", spread.utilization_min),
        Figure("workers.utilization_mean", "utilisation mean", "percent", spread.utilization_mean),
        Figure("workers.utilization_max", "utilisation max", "percent", spread.utilization_max),
        Figure("workers.routed_min", "routed min", "count", Fraction(spread.routed_min)),
        Figure("workers.routed_max", "routed max", "count", Fraction(spread.routed_max)),
        Figure("workers.peak_running", "peak running", "count", Fraction(spread.peak_running)),
        Figure("workers.peak_waiting", "peak waiting", "count", Fraction(spread.peak_waiting)),
    ]
    return (
        *counts,
        *_goodput_flat(figures.goodput),
        *latencies,
        *workers,
        *_kv_cache_flat(figures.kv_cache),
    )


#: Goodput's figures: key, label and unit (R63).
_GOODPUT_FIGURES = (
    ("goodput.requests", "goodput requests", "count"),
    ("goodput.share_of_completed", "goodput share of completed", "percent"),
    ("goodput.output_tokens", "goodput output tokens", "count"),
    ("goodput.request_throughput_per_s", "goodput request throughput", "per_s"),
    ("goodput.output_token_throughput_per_s", "goodput output token throughput", "per_s"),
)


def _goodput_flat(goodput: GoodputFigures | None) -> tuple[Figure, ...]:
    """Goodput's figures; without objectives each is ``None`` (as the cache's, so that any two
    reports have the same figures in the same order)."""
    values: tuple[Value, ...] = (None,) * len(_GOODPUT_FIGURES)
    if goodput is not None:
        values = (
            Fraction(goodput.requests),
            goodput.share_of_completed,
            Fraction(goodput.output_tokens),
            goodput.request_throughput_per_s,
            goodput.output_token_throughput_per_s,
        )
    return tuple(
        Figure(key, label, unit, value)
        for (key, label, unit), value in zip(_GOODPUT_FIGURES, values, strict=True)
    )


#: The cache's figures: key, label and unit (R52).
_KV_CACHE_FIGURES = (
    ("kv_cache.reused_prompt_tokens", "reused prompt tokens", "count"),
    ("kv_cache.prefix_reuse_ratio", "prefix reuse", "percent"),
    ("kv_cache.preemptions", "preemptions", "count"),
    ("kv_cache.evictions", "evictions", "count"),
    ("kv_cache.peak_blocks_in_use", "peak blocks in use", "count"),
)


def _kv_cache_flat(cache: KvCacheFigures | None) -> tuple[Figure, ...]:
    """The cache's figures; without a cache each is ``None``, so that any two reports have the
    same figures in the same order (``servesim compare`` pairs them)."""
    values: tuple[Value, ...] = (None,) * len(_KV_CACHE_FIGURES)
    if cache is not None:
        values = (
            Fraction(cache.reused_prompt_tokens),
            cache.prefix_reuse_ratio,
            Fraction(cache.preemptions),
            Fraction(cache.evictions),
            Fraction(cache.peak_blocks_in_use),
        )
    return tuple(
        Figure(key, label, unit, value)
        for (key, label, unit), value in zip(_KV_CACHE_FIGURES, values, strict=True)
    )


def _parts(statistics: Statistics) -> Iterator[tuple[str, str, Value]]:
    """A latency's figures in table order: count, mean, min, the percentiles, max."""
    yield "count", "count", Fraction(statistics.count)
    yield "mean", "ms", statistics.mean
    yield "min", "ms", statistics.min
    for percent, value in statistics.percentiles:
        yield f"p{percent}", "ms", value
    yield "max", "ms", statistics.max


class FiguresTap:
    """A report's figures taken from its bytes as they are written, so that ``servesim replay``
    can summarise what it wrote without reading it back (it may have gone to a pipe)."""

    def __init__(self, file: str) -> None:
        self._file = file
        self._reducer = _Reducer()

    def passing(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """The report's chunks, unchanged, noted on their way."""
        for chunk in chunks:
            self._reducer.feed(chunk)
            yield chunk

    def figures(self) -> ReportFigures:
        """The figures, once every chunk has passed."""
        reduced = self._reducer.reduced()
        if reduced is None:
            raise ValueError("the report written is not canonical JSON (R23)")
        return figures_of(_parsed(reduced), self._file)


def figures_of(value: Any, file: str) -> ReportFigures:
    """The figures of a parsed report (``token_times_us`` and ``trace`` may be emptied)."""
    _, version = check_header(value, file, "report")
    _check(value, version, file)
    summary = value["summary"]
    makespan = summary["makespan_us"]
    inputs = value["inputs"]
    calibration = inputs["timing_profile"].get("calibration")
    return ReportFigures(
        file=file,
        schema_version=version,
        inputs=Inputs(
            scenario_sha256=inputs["scenario"]["sha256"],
            workload_sha256=inputs["workload"]["sha256"],
            timing_profile_sha256=inputs["timing_profile"]["sha256"],
            calibration=None if calibration is None else canonical_json(calibration).decode(),
        ),
        traced=value["trace"] is not None,
        requests=summary["requests"],
        completed=summary["completed"],
        rejected=summary["rejected"],
        rejected_by_reason=tuple(
            # A report before 3.0 has no exceeds_kv_cache: it comes from a scenario without a
            # cache, where the count is 0 (R53), so reports of every version show the same rows.
            (reason, summary["rejected_by_reason"].get(reason, 0))
            for reason in REJECT_REASONS
        ),
        prompt_tokens=summary["prompt_tokens"],
        output_tokens=summary["output_tokens"],
        steps=summary["steps"],
        first_arrival_us=summary["first_arrival_us"],
        makespan_us=makespan,
        request_throughput_per_s=_quotient(summary["completed"] * 1_000_000, makespan),
        output_token_throughput_per_s=_quotient(summary["output_tokens"] * 1_000_000, makespan),
        queue_us=_as_written(summary["queue_us"]),
        ttft_us=_as_written(summary["ttft_us"]),
        itl_us=_as_written(summary["itl_us"]),
        tpot_us=_tpot_statistics(value["requests"], file),
        e2e_us=_as_written(summary["e2e_us"]),
        workers=_worker_spread(value["workers"], makespan),
        kv_cache=_kv_cache_figures(summary, value["workers"]),
        cut_off=summary.get("cut_off", 0),
        sessions=len({r.get("session") for r in value["requests"]} - {None}),
        goodput=_goodput_figures(summary, makespan),
    )


def _goodput_figures(summary: Mapping[str, Any], makespan_us: int) -> GoodputFigures | None:
    """R63's goodput, ``None`` when the report has none (no ``slo``, or a report before 5.0)."""
    goodput = summary.get("goodput")
    if goodput is None:
        return None
    return GoodputFigures(
        requests=goodput["requests"],
        output_tokens=goodput["output_tokens"],
        share_of_completed=_quotient(goodput["requests"], summary["completed"]),
        request_throughput_per_s=_quotient(goodput["requests"] * 1_000_000, makespan_us),
        output_token_throughput_per_s=_quotient(goodput["output_tokens"] * 1_000_000, makespan_us),
    )


def _kv_cache_figures(
    summary: Mapping[str, Any], workers: Sequence[Mapping[str, Any]]
) -> KvCacheFigures | None:
    """R52's cache figures, ``None`` when the report has none (``kv_cache`` null or absent)."""
    cache = summary.get("kv_cache")
    if cache is None:
        return None
    return KvCacheFigures(
        reused_prompt_tokens=cache["reused_prompt_tokens"],
        prefix_reuse_ratio=_quotient(cache["reused_prompt_tokens"], summary["prompt_tokens"]),
        preemptions=cache["preemptions"],
        evictions=cache["evictions"],
        peak_blocks_in_use=max(worker["kv_cache"]["peak_blocks_in_use"] for worker in workers),
    )


def _quotient(numerator: int, denominator: int) -> Value:
    return None if denominator == 0 else Fraction(numerator, denominator)


def _exact(number: int | float | None) -> Value:
    """A report number as an exact value (a float is exactly the binary64 the report holds)."""
    return None if number is None else Fraction(number)


def _as_written(statistics: Mapping[str, Any]) -> Statistics:
    return Statistics(
        count=statistics["count"],
        min=_exact(statistics["min"]),
        max=_exact(statistics["max"]),
        mean=_exact(statistics["mean"]),
        percentiles=tuple((percent, _exact(statistics[f"p{percent}"])) for percent in PERCENTILES),
    )


def _check(value: dict[str, Any], version: str, file: str) -> None:
    """R3 for what the figures read: the whole schema, but for the requests after the first
    (checking 12,000 requests member by member with jsonschema takes seconds, longer than all
    the rest); ``_tpot_statistics`` checks what it reads of those."""
    requests = value.get("requests")
    sample = {**value, "requests": requests[:1]} if isinstance(requests, list) else value
    # A valid sample is recognised fast (servesim.contract.validity); only an invalid one is
    # explained.
    if plain_numbers(sample) and validity.is_valid(sample, "report", version):
        return
    problems = schema_problems(sample, "report", version, file)
    if problems:
        raise InvalidInput(problems)


def _tpot_statistics(requests: Sequence[Any], file: str) -> Statistics:
    """R27 over each completed request's mean gap between its output tokens (two or more)."""
    spans: dict[int, int] = {}  # tokens - 1 -> the sum of (completion - first token) of those
    samples: list[tuple[int, int]] = []  # (completion - first token, tokens - 1)
    for index, request in enumerate(requests):
        if not isinstance(request, dict) or request.get("outcome") != "completed":
            if not isinstance(request, dict) or request.get("outcome") not in _NOT_COMPLETED:
                raise InvalidInput([_request_problem(request, index, file)])
            continue
        tokens, first, last = (request.get(name) for name in _TPOT_MEMBERS)
        if not (_is_count(tokens) and _is_count(first) and _is_count(last) and first <= last):
            raise InvalidInput([_request_problem(request, index, file)])
        if tokens >= 2:
            spans[tokens - 1] = spans.get(tokens - 1, 0) + last - first
            samples.append((last - first, tokens - 1))
    if not samples:
        return Statistics(0, None, None, None, tuple((percent, None) for percent in PERCENTILES))
    # Sorted by the correctly rounded quotient, the samples are in order but within runs of
    # equal floats; the exact comparison then fixes those few in about one pass.
    samples.sort(key=lambda sample: sample[0] / sample[1])
    samples.sort(key=cmp_to_key(_compare_quotients))
    count = len(samples)
    # Summed by denominator: adding 12,000 Fractions one by one takes seconds.
    total = sum((Fraction(span, gaps) for gaps, span in spans.items()), Fraction(0))
    return Statistics(
        count=count,
        min=Fraction(*samples[0]),
        max=Fraction(*samples[-1]),
        mean=total / count,
        percentiles=tuple(
            (percent, Fraction(*samples[max(1, -(-percent * count // 100)) - 1]))
            for percent in PERCENTILES
        ),
    )


#: What a completed request's TPOT is derived from (R26).
_TPOT_MEMBERS = ("output_tokens", "first_token_us", "completion_us")

#: The other outcomes (R26; ``cut_off`` from report 5.0, R62): no TPOT sample.
_NOT_COMPLETED = frozenset({"rejected", "cut_off"})


def _compare_quotients(first: tuple[int, int], second: tuple[int, int]) -> int:
    """-1, 0 or 1 as a/b is below, equal to or above c/d (b and d positive)."""
    left, right = first[0] * second[1], second[0] * first[1]
    return (left > right) - (left < right)


def _request_problem(request: Any, index: int, file: str) -> InputProblem:
    """Why one request cannot give its TPOT (R26)."""
    if not isinstance(request, dict):
        return InputProblem(file, pointer(["requests", index]), "expected an object")
    outcome = request.get("outcome")
    if outcome != "completed" and outcome not in _NOT_COMPLETED:
        return InputProblem(
            file,
            pointer(["requests", index, "outcome"]),
            f'expected "completed", "rejected" or "cut_off", found {outcome!r}',
        )
    for name in _TPOT_MEMBERS:
        if not _is_count(number := request.get(name)):
            return InputProblem(
                file,
                pointer(["requests", index, name]),
                f"expected an integer >= 0 in a completed request, found {number!r}",
            )
    return InputProblem(
        file,
        pointer(["requests", index, "completion_us"]),
        "a request cannot complete before its first token",
    )


def _is_count(number: object) -> TypeGuard[int]:
    return isinstance(number, int) and not isinstance(number, bool) and number >= 0


def _worker_spread(workers: Sequence[Mapping[str, Any]], makespan_us: int) -> WorkerSpread:
    busy = [worker["busy_us"] for worker in workers]
    least = min(range(len(busy)), key=busy.__getitem__)
    most = max(range(len(busy)), key=lambda index: (busy[index], -index))
    routed = [worker["routed"] for worker in workers]
    return WorkerSpread(
        workers=len(workers),
        utilization_min=_quotient(busy[least], makespan_us),
        utilization_mean=_quotient(sum(busy), makespan_us * len(workers)),
        utilization_max=_quotient(busy[most], makespan_us),
        least_busy_worker=workers[least]["worker"],
        most_busy_worker=workers[most]["worker"],
        routed_min=min(routed),
        routed_max=max(routed),
        peak_running=max(worker["peak_running"] for worker in workers),
        peak_waiting=max(worker["peak_waiting"] for worker in workers),
    )


# --- reading a large report ------------------------------------------------------------------

#: In canonical JSON (R23) a raw ``,"`` never occurs inside a string (a quote there is ``\\"``),
#: so these byte strings are always an object member's start: a request's token times, and the
#: report's trace, which is followed by ``workers``, the last member in sorted order.
_TOKEN_TIMES = b',"token_times_us":['
_TRACE = b',"trace":['
_TRACE_END = b'],"workers":['
_BLOCK_BYTES = 1 << 20


class _Reducer:
    """Keeps a report's bytes but for every ``token_times_us`` and the trace, which it empties
    (``[]``), as the bytes are fed to it in pieces of any size."""

    def __init__(self) -> None:
        self._kept: list[bytes] = []
        self._buffer = b""
        self._skipping: bytes | None = None  # _TOKEN_TIMES or _TRACE while inside that array
        self.canonical = True  # False once the layout is not the one this relies on

    def feed(self, block: bytes) -> None:
        """Take the next piece of the report."""
        if not self.canonical:
            return
        buffer = self._buffer + block
        position = 0
        while True:
            if self._skipping is _TRACE:
                end = buffer.find(_TRACE_END, position)
                if end < 0:  # keep what could be the start of the end marker
                    self._buffer = buffer[max(position, len(buffer) - len(_TRACE_END) + 1) :]
                    return
                position, self._skipping = end, None
            elif self._skipping is _TOKEN_TIMES:
                end = buffer.find(b"]", position)
                stop = len(buffer) if end < 0 else end
                if buffer[position:stop].translate(None, b"0123456789,"):
                    self.canonical = False  # not only integers: the file must be parsed whole
                    return
                if end < 0:
                    self._buffer = b""
                    return
                position, self._skipping = end, None
            else:
                found, self._skipping = _next_marker(buffer, position)
                if self._skipping is None:  # keep what could be the start of a marker
                    keep = max(position, len(buffer) - len(_TOKEN_TIMES) + 1)
                    self._kept.append(buffer[position:keep])
                    self._buffer = buffer[keep:]
                    return
                self._kept.append(buffer[position:found])
                position = found

    def reduced(self) -> bytes | None:
        """The kept bytes, once the whole report was fed; ``None`` if it was not canonical."""
        if not self.canonical or self._skipping is not None:
            return None
        return b"".join([*self._kept, self._buffer])


def _reduced_report(stream: BinaryIO) -> bytes | None:
    """The report's bytes with every ``token_times_us`` and the trace emptied (``[]``), or
    ``None`` when its layout is not the canonical one this relies on."""
    reducer = _Reducer()
    while reducer.canonical and (block := stream.read(_BLOCK_BYTES)):
        reducer.feed(block)
    return reducer.reduced()


def _next_marker(buffer: bytes, position: int) -> tuple[int, bytes | None]:
    """Where the next skipped array starts (just after its ``[``), and which it is."""
    tokens = buffer.find(_TOKEN_TIMES, position)
    trace = buffer.find(_TRACE, position, len(buffer) if tokens < 0 else tokens)
    if trace >= 0:
        return trace + len(_TRACE), _TRACE
    if tokens >= 0:
        return tokens + len(_TOKEN_TIMES), _TOKEN_TIMES
    return -1, None
