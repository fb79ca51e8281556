"""Workers with attention-DP ranks (SPEC.md R78, R80, R83) as Dynamo's replay runs them.

Dynamo models attention data parallelism as one logical worker of ``dp_size`` rank schedulers
with one pass barrier: every rank with work forms its pass at the worker's pass start, and the
worker's pass ends at the slowest rank's end (its ``GeneralizedMockerEngine``), as R83 says.
Its per-token runtime refuses a worker with more than one rank ("detailed replay artifacts
require fixed aggregated topology with one logical DP1 worker"), so ranks go through the
documented multi-worker replay (``extra_engine_args``'s ``dp_size``), whose per-request records
give each request's worker and rank (``routing_history``), its first admission, its first,
second and last token times and its output length, but not every token's time.

The token times are read off the worker's passes, which those records pin down under
Dynamo's fixed model with chunking off: a pass that prefills some request is
``[first_admit, first_token]`` of that request (the whole prompt is computed in one pass, which
emits the first token); every other pass only decodes, and lasts ``decode_ms`` on every rank
that runs, so ``decode_ms`` in all; the worker starts a pass at the end of the previous one
while any of its requests is running, and otherwise at the next prefill pass's start. Each
running request decodes one token in every pass of its worker (its rank has work), so its
tokens are the pass ends from its first token to its last. Every reading is checked against
the records (each first and last token is a pass end, the second token is where ``ttst``
says, the count is the output length, no two passes overlap, and each prefill pass lasts
what the fixed model gives its slowest rank): a record that does not fit is an error (exit
1), never a guess.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from servesim_dynamo.errors import DynamoResult
from servesim_dynamo.kv import cache_record
from servesim_dynamo.mapping import FixedTiming
from servesim_dynamo.timeline import Timeline, microseconds


@dataclass(frozen=True)
class Placed:
    """One request's record with the figures the passes are read from, in microseconds."""

    id: str
    worker: int
    rank: int
    arrival_us: int
    status: str
    first_admit_us: int | None
    first_token_us: int | None
    second_token_us: int | None
    last_token_us: int | None
    terminal_us: int
    output_tokens: int
    record: dict[str, Any]


@dataclass(frozen=True)
class Step:
    """One rank's step of a pass (R83): its rank and own duration d_r."""

    rank: int
    duration_us: int


@dataclass(frozen=True)
class Pass:
    """One worker pass: its start, its end (the slowest rank's, R83) and its ranks' steps."""

    start_us: int
    end_us: int
    steps: tuple[Step, ...]


def placed(record: dict[str, Any], request_id: str, first_us: int, dp_size: int) -> Placed:
    """A record of the documented replay read as integer microseconds (``first_us``: the
    workload's first arrival, Dynamo's time 0)."""

    def at(name: str) -> int | None:
        value = record.get(name)
        if value is None:
            return None
        return first_us + microseconds(value, f"{name} of {request_id}")

    route = record.get("routing_history") or []
    if not route:
        raise DynamoResult(f"request {request_id!r}: Dynamo recorded no routing")
    worker, rank = int(route[-1]["logical_worker_id"]), int(route[-1]["dp_rank"])
    if not 0 <= rank < dp_size:
        raise DynamoResult(f"request {request_id!r}: rank {rank} of a worker of {dp_size} ranks")
    if record.get("readmission_count"):
        raise DynamoResult(
            f"request {request_id!r}: Dynamo preempted it {record['readmission_count']} time(s) "
            "(KV cache); without kv_cache a servesim worker's memory is unlimited (R45)"
        )
    first_token = at("first_token_ms")
    ttst = record.get("ttst_ms")
    second = None
    if first_token is not None and ttst is not None and record["output_length"] >= 2:
        second = first_token + microseconds(ttst, f"ttst of {request_id}")
    terminal = at("terminal_time_ms")
    assert terminal is not None
    return Placed(
        id=request_id,
        worker=worker,
        rank=rank,
        arrival_us=first_us + microseconds(record["arrival_time_ms"], f"arrival of {request_id}"),
        status=str(record["terminal_status"]),
        first_admit_us=at("first_admit_ms"),
        first_token_us=first_token,
        second_token_us=second,
        last_token_us=at("last_token_ms"),
        terminal_us=terminal,
        output_tokens=int(record["output_length"]),
        record=record,
    )


def match_records(
    records: list[dict[str, Any]],
    requests: list[dict[str, Any]],
    workers: int,
    dp_size: int,
) -> list[dict[str, Any]]:
    """The records of requests without sessions, in workload order.

    Dynamo's records carry random ids and, for a request outside a multi-turn session, no
    session either, so each is matched by where Dynamo's aggregated round robin puts it (the
    k-th arrival, ties in file order, to worker k mod N, then that worker's next rank in
    rotation, fleet-semantics reading note 2.2; rejected requests take turns too), its arrival,
    prompt and output length. Requests alike in all of these on one rank are told apart by
    FCFS: the earlier in the workload is admitted no later. A record that matches nothing is
    an error: Dynamo did not place it as its own rule says.
    """
    first = min(request["arrival_us"] for request in requests)
    order = sorted(range(len(requests)), key=lambda p: requests[p]["arrival_us"])
    turns = [0] * workers
    wanted: dict[tuple[int, ...], list[int]] = {}
    for k, position in enumerate(order):
        worker = k % workers
        rank = turns[worker] % dp_size
        turns[worker] += 1
        request = requests[position]
        place: tuple[int, ...] = (
            worker,
            rank,
            request["arrival_us"] - first,
            request["prompt_tokens"],
            request["max_output_tokens"],
        )
        wanted.setdefault(place, []).append(position)
    found: dict[tuple[int, ...], list[dict[str, Any]]] = {}
    for record in records:
        route = (record.get("routing_history") or [{}])[-1]
        found_key = (
            int(route.get("logical_worker_id", -1)),
            int(route.get("dp_rank", -1)),
            microseconds(record["arrival_time_ms"], "an arrival"),
            int(record["input_length"]),
            int(record["requested_output_length"]),
        )
        found.setdefault(found_key, []).append(record)
    result: list[dict[str, Any] | None] = [None] * len(requests)
    for key, positions in wanted.items():
        matches = found.pop(key, [])
        if len(matches) != len(positions):
            raise DynamoResult(
                f"Dynamo recorded {len(matches)} request(s) on worker {key[0]} rank {key[1]} "
                f"arriving at {key[2]} us with prompt {key[3]} and output {key[4]}, where its "
                f"round robin would place {len(positions)} there"
            )
        matches.sort(key=_admission_order)
        for position, record in zip(positions, matches, strict=True):
            result[position] = record
    if found:
        raise DynamoResult(f"Dynamo recorded requests its round robin places nowhere: {found}")
    return [record for record in result if record is not None]


def _admission_order(record: dict[str, Any]) -> tuple[float, float]:
    admitted = record.get("first_admit_ms")
    return (float("inf") if admitted is None else admitted, record["terminal_time_ms"])


def _served(requests: list[Placed]) -> list[Placed]:
    return [r for r in requests if r.status == "completed" and r.first_token_us is not None]


def worker_passes(requests: list[Placed], timing: FixedTiming) -> list[Pass]:
    """The passes of one worker, read off its requests' records (module docstring)."""
    served = _served(requests)
    prefill_end: dict[int, int] = {}
    for request in served:
        assert request.first_admit_us is not None
        assert request.first_token_us is not None
        known = prefill_end.setdefault(request.first_admit_us, request.first_token_us)
        if known != request.first_token_us:
            raise DynamoResult(
                f"request {request.id!r}: admitted at {request.first_admit_us} us with a first "
                f"token at {request.first_token_us} us, where another request admitted then has "
                f"it at {known} us; one pass cannot end twice"
            )
    starts = sorted(prefill_end)
    firsts = sorted(r.first_token_us for r in served if r.first_token_us is not None)
    lasts = sorted(r.last_token_us for r in served if r.last_token_us is not None)
    bounds: list[tuple[int, int]] = []
    at = starts[0] if starts else 0
    index = 0
    while index < len(starts) or _running(firsts, lasts, at):
        if index < len(starts) and starts[index] == at:
            end = prefill_end[at]
            index += 1
        elif _running(firsts, lasts, at):
            end = at + timing.decode_us
            if index < len(starts) and starts[index] < end:
                raise DynamoResult(
                    f"a pass admits requests at {starts[index]} us, inside the decode pass "
                    f"{at}..{end} us: the records do not fit Dynamo's fixed model"
                )
        else:
            if starts[index] < at:
                raise DynamoResult(
                    f"a pass admits requests at {starts[index]} us, before the previous pass "
                    f"ended ({at} us)"
                )
            at = starts[index]
            continue
        bounds.append((at, end))
        at = end
    ranks = _RankIndex(served)
    return [Pass(start, end, ranks.steps(start, end, timing)) for start, end in bounds]


def _running(firsts: list[int], lasts: list[int], at: int) -> bool:
    """Whether a request has its first token by ``at`` and its last one after it."""
    return bisect.bisect_right(firsts, at) - bisect.bisect_right(lasts, at) > 0


class _RankIndex:
    """Each rank's admissions and first and last token times, sorted, to say which ranks
    prefilled and which decoded in a pass without scanning every request."""

    def __init__(self, served: list[Placed]) -> None:
        self.admitted: dict[int, set[int]] = {}
        firsts: dict[int, list[int]] = {}
        lasts: dict[int, list[int]] = {}
        for request in served:
            assert request.first_admit_us is not None
            assert request.first_token_us is not None
            assert request.last_token_us is not None
            self.admitted.setdefault(request.first_admit_us, set()).add(request.rank)
            firsts.setdefault(request.rank, []).append(request.first_token_us)
            lasts.setdefault(request.rank, []).append(request.last_token_us)
        self.firsts = {rank: sorted(times) for rank, times in firsts.items()}
        self.lasts = {rank: sorted(times) for rank, times in lasts.items()}

    def steps(self, start: int, end: int, timing: FixedTiming) -> tuple[Step, ...]:
        """Each rank's step of the pass ``start..end``: it prefills when one of its requests
        was admitted at the start, decodes when one of them had its first token by the start
        and its last one after it (so at or after the end, tokens coming at pass ends); its
        own duration is the fixed model's (R83's d_r)."""
        prefills = self.admitted.get(start, set())
        decodes = {
            rank
            for rank, firsts in self.firsts.items()
            if _running(firsts, self.lasts[rank], start)
        }
        steps = tuple(
            Step(
                rank,
                timing.prefill_us * (rank in prefills) + timing.decode_us * (rank in decodes),
            )
            for rank in sorted(prefills | decodes)
        )
        slowest = max(step.duration_us for step in steps)
        if end - start != slowest:
            raise DynamoResult(
                f"the pass {start}..{end} us lasts {end - start} us, where its slowest rank's "
                f"step lasts {slowest} us under the fixed model (R83)"
            )
        return steps


def timelines(requests: list[Placed], passes: list[Pass]) -> list[Timeline]:
    """Each request's timeline, its tokens at its worker's pass ends from its first to its
    last; checked against the records' token count and second token."""
    ends = [p.end_us for p in passes]
    result = []
    for request in requests:
        tokens: tuple[int, ...] = ()
        if request.status == "completed" and request.first_token_us is not None:
            low = bisect.bisect_left(ends, request.first_token_us)
            high = bisect.bisect_right(ends, request.last_token_us or 0)
            tokens = tuple(ends[low:high])
            if (
                not tokens
                or tokens[0] != request.first_token_us
                or tokens[-1] != request.last_token_us
                or len(tokens) != request.output_tokens
                or (request.second_token_us is not None and tokens[1] != request.second_token_us)
            ):
                raise DynamoResult(
                    f"request {request.id!r}: its worker's passes give it tokens {tokens[:3]}.. "
                    f"({len(tokens)}), where Dynamo recorded {request.output_tokens} tokens "
                    f"from {request.first_token_us} to {request.last_token_us} us (second at "
                    f"{request.second_token_us} us)"
                )
        elif request.status not in ("completed", "rejected"):
            raise DynamoResult(f"request {request.id!r}: terminal status {request.status!r}")
        elif request.status == "completed":
            raise DynamoResult(
                f"request {request.id!r}: Dynamo completed it without producing any token "
                "(servesim rejects max_output_tokens 0 at arrival, R10)"
            )
        result.append(
            Timeline(
                id=request.id,
                worker=request.worker,
                arrival_us=request.arrival_us,
                status=request.status,
                first_admit_us=request.first_admit_us,
                terminal_us=request.terminal_us,
                token_times_us=tokens,
                cache=cache_record(request.record),
                rank=request.rank,
            )
        )
    return result
