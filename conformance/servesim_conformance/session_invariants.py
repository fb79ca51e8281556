"""What every report of a run with sessions, a closed loop, a stop time or objectives must show
(SPEC.md section 13, R59 to R64).

Each check reads only the inputs and the report (the trace where it says so), so it holds any
implementation to the rules. Arrivals are rebuilt from the report: a turn's release follows from
its predecessor's ``terminal_us`` (R59), a closed loop's releases from the units' end times
(R61), and a stop time D decides which of them happen (R62: no arrival at D or later). Without
section 13's members every check reduces to what sections 2 to 12 already say (no cut-off, every
arrival as recorded), so the checks run on every report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from servesim_conformance.violations import Document, require

#: The terminal outcomes a request may end in (R9, R62).
OUTCOMES = ("completed", "rejected", "cut_off")


def stop_time(scenario: Document) -> int | None:
    """R62: the scenario's ``stop_at_us`` D, None without one."""
    value: int | None = scenario.get("stop_at_us")
    return value


def in_flight_limit(scenario: Document) -> int | None:
    """R61: the closed loop's ``max_in_flight`` N, None in an open loop."""
    closed: Document | None = scenario.get("closed_loop")
    return None if closed is None else int(closed["max_in_flight"])


def stop_time_of(report: Document) -> int | None:
    """R62, read from the report: every cut-off request's ``terminal_us`` is the stop time D,
    and without a cut-off request no step was cut (a cut step holds a running request, which
    is cut off), so the trace checks need D only when there is one."""
    for entry in report["requests"]:
        if entry["outcome"] == "cut_off":
            stop: int = entry["terminal_us"]
            return stop
    return None


def objectives(scenario: Document) -> Document | None:
    """R63: the scenario's ``slo``, None without one."""
    slo: Document | None = scenario.get("slo")
    return slo


def before_stop(time: int, scenario: Document) -> bool:
    """R62: whether an arrival or a step start at ``time`` is processed (strictly before D)."""
    stop = stop_time(scenario)
    return stop is None or time < stop


def step_ended(step: Document, scenario: Document) -> bool:
    """R62: whether a traced step's end happened (at or before D); a step that would end after
    D is *cut*: it was formed, but produced nothing."""
    stop = stop_time(scenario)
    return stop is None or step["end_us"] <= stop


@dataclass(frozen=True)
class Unit:
    """R61: a session or a request without one; ``members`` are workload positions, in order."""

    members: tuple[int, ...]

    @property
    def position(self) -> int:
        """The workload position of its first request (a session's turn 0)."""
        return self.members[0]


def units_of(workload: Document) -> list[Unit]:
    """R59, R61: the workload's units in order of position, each with its requests (a
    session's turns in workload order)."""
    turns: dict[str, list[int]] = {}
    heads: list[tuple[int, str | None]] = []
    for index, request in enumerate(workload["requests"]):
        session = request.get("session")
        if session is None:
            heads.append((index, None))
        elif session not in turns:
            turns[session] = [index]
            heads.append((index, session))
        else:
            turns[session].append(index)
    return [
        Unit((index,) if session is None else tuple(turns[session])) for index, session in heads
    ]


def turn_release(request: Document, previous: Document, scenario: Document) -> int:
    """R59, R61: when turn k > 0 arrives, from turn k-1's terminal time T: ``max(arrival_us,
    T + think_time_us)`` in an open loop, ``T + think_time_us`` in a closed loop (its
    ``arrival_us`` is not read)."""
    after_think: int = previous["terminal_us"] + request.get("think_time_us", 0)
    if in_flight_limit(scenario) is not None:
        return after_think
    recorded: int = request["arrival_us"]
    return max(recorded, after_think)


def _arrival_or_none(release: int | None, scenario: Document) -> int | None:
    """R62: a release at ``release`` is an arrival unless it comes at D or later (or never)."""
    return release if release is not None and before_stop(release, scenario) else None


def check_session_members(workload: Document, report: Document) -> None:
    """R64: each request reports its session's id, or null without one."""
    for request, entry in zip(workload["requests"], report["requests"], strict=True):
        expected = request.get("session")
        require(
            "session" in entry and entry["session"] == expected,
            "R64",
            f"{entry['id']}: session {entry.get('session')!r}, the workload says {expected!r}",
        )


def check_turns(scenario: Document, workload: Document, report: Document) -> None:
    """R59, R60, R61, R62: a session's turns never overlap and keep their order, and each turn
    k > 0 arrives exactly at its release: ``max(arrival_us, T + think)`` after turn k-1's
    terminal time T in an open loop, ``T + think`` in a closed one, or never when that is at D
    or later (then it is cut off, R62)."""
    entries = report["requests"]
    for unit in units_of(workload):
        for previous_index, index in zip(unit.members, unit.members[1:], strict=False):
            previous, entry = entries[previous_index], entries[index]
            rid, arrival = entry["id"], entry["arrival_us"]
            if arrival is not None:
                require(
                    previous["terminal_us"] is not None and arrival >= previous["terminal_us"],
                    "R59",
                    f"{rid} arrived at {arrival}, before turn {previous['id']} ended at "
                    f"{previous['terminal_us']}",
                )
            request = workload["requests"][index]
            expected = _arrival_or_none(turn_release(request, previous, scenario), scenario)
            require(
                arrival == expected,
                "R59",
                f"{rid}: arrived at {arrival}, released at {expected} after turn "
                f"{previous['id']} ended at {previous['terminal_us']}",
            )


def check_open_loop_arrivals(scenario: Document, workload: Document, report: Document) -> None:
    """R8, R26, R62: in an open loop every unit's first request (a turn 0 or a request without a
    session) arrives at its ``arrival_us``, or never when that is at D or later."""
    if in_flight_limit(scenario) is not None:
        return
    for unit in units_of(workload):
        request, entry = workload["requests"][unit.position], report["requests"][unit.position]
        expected = _arrival_or_none(request["arrival_us"], scenario)
        require(
            entry["arrival_us"] == expected,
            "R26",
            f"{entry['id']}: arrived at {entry['arrival_us']}, recorded {request['arrival_us']}",
        )


def unit_end(unit: Unit, report: Document) -> int:
    """R61: a unit ends when its last request reaches its terminal state."""
    end: int = report["requests"][unit.members[-1]]["terminal_us"]
    return end


def check_closed_loop_releases(scenario: Document, workload: Document, report: Document) -> None:
    """R61, R62: units are released in order of position: the first N at T0 (the smallest
    ``arrival_us``), then one whenever a unit ends, at that instant; the j-th unit end in time
    releases unit N + j. A release is an arrival unless it is at D or later."""
    limit = in_flight_limit(scenario)
    if limit is None:
        return
    units = units_of(workload)
    start = min(request["arrival_us"] for request in workload["requests"])
    ends = sorted(
        unit_end(unit, report)
        for unit in units
        if report["requests"][unit.members[-1]]["outcome"] != "cut_off"
    )
    for rank, unit in enumerate(units):
        release: int | None = start
        if rank >= limit:
            release = ends[rank - limit] if rank - limit < len(ends) else None
        entry = report["requests"][unit.position]
        expected = _arrival_or_none(release, scenario)
        require(
            entry["arrival_us"] == expected,
            "R61",
            f"{entry['id']}: unit {rank} arrived at {entry['arrival_us']}, released at {expected}",
        )


def check_in_flight(scenario: Document, workload: Document, report: Document) -> None:
    """R61: at no instant are more than N units released and not ended. A unit is in flight
    from its first request's arrival (its release) until its end; one released and ended at the
    same instant (a lone request rejected at once) is never in flight."""
    limit = in_flight_limit(scenario)
    if limit is None:
        return
    spans = [
        (report["requests"][unit.position]["arrival_us"], unit_end(unit, report))
        for unit in units_of(workload)
        if report["requests"][unit.position]["arrival_us"] is not None
    ]
    for instant in sorted({start for start, _ in spans}):
        count = sum(start <= instant < end for start, end in spans)
        require(count <= limit, "R61", f"{count} units in flight at {instant}, over {limit}")


def check_stop_time(scenario: Document, report: Document) -> None:
    """R62, R29: with a stop time D no arrival and no step start is at D or later, no token is
    after D, every request that did not complete and was not rejected is cut off at D, and a
    cut step's busy time counts only up to D. Without one no request is cut off, and each
    worker's ``busy_us`` is the sum of its steps' durations (with ``trace``)."""
    stop = stop_time(scenario)
    for entry in report["requests"]:
        rid, outcome, terminal = entry["id"], entry["outcome"], entry["terminal_us"]
        require(outcome in OUTCOMES, "R9", f"{rid}: outcome {outcome!r}")
        if stop is None:
            require(outcome != "cut_off", "R62", f"{rid}: cut off without a stop time")
            continue
        if entry["arrival_us"] is not None:
            require(entry["arrival_us"] < stop, "R62", f"{rid}: arrived at or after {stop}")
        late = [time for time in entry["token_times_us"] if time > stop]
        require(not late, "R62", f"{rid}: token at {late[:1]}, after the stop time {stop}")
        if outcome == "cut_off":
            require(terminal == stop, "R62", f"{rid}: cut off at {terminal}, not at {stop}")
        else:
            require(terminal <= stop, "R62", f"{rid}: {outcome} at {terminal}, after {stop}")
    if report["trace"] is None:
        return
    busy = {worker["worker"]: 0 for worker in report["workers"]}
    for step in report["trace"]:
        start, end = step["start_us"], step["end_us"]
        if stop is not None:
            where = f"worker {step['worker']} step at {start}"
            require(start < stop, "R62", f"{where}: started at or after the stop time {stop}")
            end = min(end, stop)
        busy[step["worker"]] += end - start
    for worker in report["workers"]:
        index = worker["worker"]
        require(
            worker["busy_us"] == busy[index],
            "R29",
            f"worker {index}: busy_us {worker['busy_us']}, its steps say {busy[index]}",
        )


def check_cut_off_entries(workload: Document, report: Document) -> None:
    """R62, R26: a cut-off request keeps what it produced and has no completion; one that never
    arrived has no worker and no times; one that arrived was routed (R10 would have rejected it
    at once) and its queueing and first-token latencies are R26's where their times exist."""
    for request, entry in zip(workload["requests"], report["requests"], strict=True):
        if entry["outcome"] != "cut_off":
            continue
        rid, times = entry["id"], entry["token_times_us"]
        require(entry["reject_reason"] is None, "R62", f"{rid}: cut off with a reject reason")
        for member in ("completion_us", "e2e_us", "mean_itl_us"):
            require(entry[member] is None, "R62", f"{rid}: cut off with {member} {entry[member]}")
        require(entry["output_tokens"] == len(times), "R62", f"{rid}: output_tokens vs tokens")
        require(
            entry["output_tokens"] == 0 or entry["output_tokens"] < request["max_output_tokens"],
            "R62",
            f"{rid}: cut off having produced all its tokens",
        )
        arrival = entry["arrival_us"]
        if arrival is None:
            for member in ("worker", "first_scheduled_us", "first_token_us", "queue_us", "ttft_us"):
                require(entry[member] is None, "R62", f"{rid}: never arrived, has {member}")
            require(times == [], "R62", f"{rid}: never arrived, has tokens")
            continue
        require(entry["worker"] is not None, "R62", f"{rid}: arrived, cut off, not routed")
        scheduled = entry["first_scheduled_us"]
        first_token = times[0] if times else None
        require(entry["first_token_us"] == first_token, "R26", f"{rid}: first_token_us")
        queue = None if scheduled is None else scheduled - arrival
        require(entry["queue_us"] == queue, "R62", f"{rid}: queue_us {entry['queue_us']}")
        ttft = None if first_token is None else first_token - arrival
        require(entry["ttft_us"] == ttft, "R62", f"{rid}: ttft_us {entry['ttft_us']}")
        if times:
            require(scheduled is not None, "R62", f"{rid}: tokens but never scheduled")


def check_outcome_counts(report: Document) -> None:
    """R28, R64: ``completed + rejected + cut_off = requests``, each counting the requests;
    ``first_arrival_us`` is the earliest arrival of a request that arrived and ``makespan_us``
    the latest terminal time (cut-off ones included) less it."""
    summary, entries = report["summary"], report["requests"]
    for outcome in OUTCOMES:
        counted = sum(entry["outcome"] == outcome for entry in entries)
        require(summary[outcome] == counted, "R64", f"summary {outcome} {summary[outcome]}")
    total = summary["completed"] + summary["rejected"] + summary["cut_off"]
    require(total == summary["requests"] == len(entries), "R64", "outcomes do not add up")
    arrivals = [entry["arrival_us"] for entry in entries if entry["arrival_us"] is not None]
    require(bool(arrivals), "R62", "no request arrived")
    first = min(arrivals)
    require(summary["first_arrival_us"] == first, "R64", f"first_arrival_us is not {first}")
    makespan = max(entry["terminal_us"] for entry in entries) - first
    require(summary["makespan_us"] == makespan, "R64", f"makespan_us is not {makespan}")


def meets_objectives(entry: Document, slo: Document) -> bool:
    """R63: completed, and every given bound holds inclusively; the mean inter-token latency
    bound compared exactly in integers."""
    if entry["outcome"] != "completed":
        return False
    if "ttft_us" in slo and entry["ttft_us"] > slo["ttft_us"]:
        return False
    if "e2e_us" in slo and entry["e2e_us"] > slo["e2e_us"]:
        return False
    if "mean_itl_us" in slo:
        gaps = entry["completion_us"] - entry["first_token_us"]
        if gaps > slo["mean_itl_us"] * (entry["output_tokens"] - 1):
            return False
    return True


def _ratio(numerator: int, denominator: int) -> float | None:
    """R24: the correctly rounded quotient, None for a zero denominator."""
    return None if denominator == 0 else float(Fraction(numerator, denominator))


def check_objectives(scenario: Document, report: Document) -> None:
    """R63: with ``slo`` every request says whether it met the objectives, and only a completed
    request within every bound did; without ``slo`` no request has ``slo_met``."""
    slo = objectives(scenario)
    for entry in report["requests"]:
        rid = entry["id"]
        if slo is None:
            require("slo_met" not in entry, "R63", f"{rid}: slo_met without slo")
            continue
        met = entry.get("slo_met")
        require(isinstance(met, bool), "R63", f"{rid}: slo_met is {met!r}")
        expected = meets_objectives(entry, slo)
        require(met == expected, "R63", f"{rid}: slo_met {met}, the bounds say {expected}")


def check_goodput(scenario: Document, report: Document) -> None:
    """R63: ``summary.goodput`` only with ``slo``; it counts the requests that met the objectives
    and their output tokens, R24 of each per second of the makespan, and never exceeds
    throughput (requests, tokens, and their rates)."""
    summary = report["summary"]
    if objectives(scenario) is None:
        require("goodput" not in summary, "R63", "summary.goodput without slo")
        return
    goodput = summary.get("goodput")
    require(isinstance(goodput, dict), "R63", f"summary.goodput is {goodput!r}")
    met = [entry for entry in report["requests"] if entry.get("slo_met") is True]
    tokens = sum(entry["output_tokens"] for entry in met)
    require(goodput["requests"] == len(met), "R63", f"goodput requests is not {len(met)}")
    require(goodput["output_tokens"] == tokens, "R63", f"goodput output_tokens is not {tokens}")
    makespan = summary["makespan_us"]
    for member, count in (
        ("request_throughput_per_s", goodput["requests"]),
        ("output_token_throughput_per_s", goodput["output_tokens"]),
    ):
        expected = _ratio(count * 1_000_000, makespan)
        require(goodput[member] == expected, "R63", f"goodput {member} is not {expected}")
    require(goodput["requests"] <= summary["completed"], "R63", "goodput over completed")
    require(goodput["output_tokens"] <= summary["output_tokens"], "R63", "goodput over tokens")
    for member in ("request_throughput_per_s", "output_token_throughput_per_s"):
        if goodput[member] is not None:
            require(goodput[member] <= summary[member], "R63", f"goodput {member} over throughput")


def tpot_samples(report: Document) -> list[Fraction]:
    """R63: each completed request's exact mean inter-token latency, for those with at least
    two output tokens."""
    return [
        Fraction(entry["completion_us"] - entry["first_token_us"], entry["output_tokens"] - 1)
        for entry in report["requests"]
        if entry["outcome"] == "completed" and entry["output_tokens"] >= 2
    ]


def tpot_statistics(samples: Sequence[Fraction]) -> Document:
    """R27 as R63 changes it: nearest rank by exact value, every number R24 of an exact
    rational, the mean summed exactly before its one rounding."""
    count = len(samples)
    if count == 0:
        nothing: Document = dict.fromkeys(("min", "max", "mean", "p50", "p90", "p95", "p99"))
        return {"count": 0, **nothing}
    ordered = sorted(samples)
    statistics: Document = {
        "count": count,
        "min": float(ordered[0]),
        "max": float(ordered[-1]),
        "mean": float(sum(ordered, Fraction(0)) / count),
    }
    for percentile in (50, 90, 95, 99):
        rank = max(1, -(-percentile * count // 100))
        statistics[f"p{percentile}"] = float(ordered[rank - 1])
    return statistics


def check_tpot(report: Document) -> None:
    """R63: ``summary.tpot_us`` counts the completed requests with at least two output tokens
    and is R27 (as R63 changes it) of their exact per-request means."""
    tpot = report["summary"]["tpot_us"]
    samples = tpot_samples(report)
    require(tpot["count"] == len(samples), "R63", f"tpot_us count is not {len(samples)}")
    expected = tpot_statistics(samples)
    for member, value in expected.items():
        require(tpot[member] == value, "R63", f"tpot_us {member} {tpot[member]}, not {value}")


def check_sessions(scenario: Document, workload: Document, report: Document) -> None:
    """Every check of this module."""
    check_session_members(workload, report)
    check_open_loop_arrivals(scenario, workload, report)
    check_turns(scenario, workload, report)
    check_closed_loop_releases(scenario, workload, report)
    check_in_flight(scenario, workload, report)
    check_stop_time(scenario, report)
    check_cut_off_entries(workload, report)
    check_outcome_counts(report)
    check_objectives(scenario, report)
    check_goodput(scenario, report)
    check_tpot(report)


__all__: Sequence[str] = (
    "Unit",
    "before_stop",
    "check_closed_loop_releases",
    "check_cut_off_entries",
    "check_goodput",
    "check_in_flight",
    "check_objectives",
    "check_open_loop_arrivals",
    "check_outcome_counts",
    "check_session_members",
    "check_sessions",
    "check_stop_time",
    "check_tpot",
    "check_turns",
    "meets_objectives",
    "step_ended",
    "stop_time",
    "tpot_statistics",
    "units_of",
)
