"""Disaggregated fleets (SPEC.md section 17, scenario 1.6) through Dynamo's disaggregated replay.

Dynamo's documented ``run_trace_replay`` runs a disaggregated fleet when given
``prefill_engine_args`` and ``decode_engine_args`` (``worker_type`` prefill and decode): one
engine per side, ``num_prefill_workers`` and ``num_decode_workers``, one router for both sides
(``round_robin``), the transfer timed from the prefill engine's ``kv_transfer_bytes_per_token``
and ``kv_transfer_bandwidth`` (decimal GB/s) in float milliseconds with no base latency
(docs/design/issue-26-dynamo/facts.md). This module states a scenario 1.6 to it, or refuses it
by name, and reads its per-request records back into a report 8.0.

What is stated (everything else is refused, exit 2, naming the feature):

- prefill pools all alike and decode pools all alike (limits, cache, ``dp_size``): one engine
  per side, with the side's attention-DP ranks; the prefill pools' workers in pool order are
  Dynamo's prefill workers, the decode pools' its decode workers;
- one style on both sides, ``vllm`` or ``trtllm`` (Dynamo's backend of that name: its
  disaggregated replay takes one backend for both sides), prefill whole;
- routing ``round_robin`` (or weighted with equal weights) on the prefill side and round robin
  on the decode side (Dynamo's ``router_mode`` round_robin);
- one fixed-form grid profile (mapping.fixed_timing) for both sides: a prefill pass lasts its
  prefill part, a decode pass its decode part (Dynamo charges no decode time on a prefill
  worker and no prefill time on a decode worker);
- ``kv_transfer`` with ``base_latency_us`` 0 (Dynamo has none) and ``bytes_per_token * 10^6``
  a multiple of ``bandwidth_bytes_per_s`` (every transfer then lasts whole microseconds, which
  Dynamo's float milliseconds can hold; R103's ceiling never rounds); mode ``full_prompt`` is
  Dynamo's ``full_prompt``; ``destination_missing`` is Dynamo's ``full_prompt`` when no decode
  hit is possible (no decode prefix cache, or trtllm: R103 sends the prompt, Dynamo's own
  ``destination_missing`` would send it block-rounded) and refused otherwise
  (``kv_transfer.destination_missing``: block-rounded, and not recorded; DISAGG.md);
- sessions (R59) and the closed loop (R61) through Dynamo's multi-turn replay (``session_id``,
  ``delay``, ``replay_concurrency``), as sessions.py does for aggregated fleets; no stop time.

What is read back: every request's prefill and decode worker and rank, prefill admission (its
``first_scheduled_us``), prefill end (``source_held_ms``), reservation, activation, decode
admissions and first/last token; its token times are the decode worker's pass ends from its
first token to its last (every decode pass lasts the fixed model's decode part, and a running
request has a token at every pass end), with one gap at a decode-side readmission. The transfer
end is the reservation plus Dynamo's own delay formula on the tokens it sends. Not recorded by
Dynamo, so not produced: every ``kv_cache`` member of workers, ranks, pools and the summary
(``null``: Dynamo records no blocks in use, R52), the trace.
"""

from __future__ import annotations

import bisect
import itertools
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from servesim.contract.migrations import CHAIN
from servesim.report.writer import digest, ratio, statistics
from servesim_dynamo.mapping import (
    FixedTiming,
    Unsupported,
    arrival_order,
    engine_args,
    fixed_timing,
    style,
    to_ms,
)
from servesim_dynamo.report import as_report_5, report_4_summary, request_entry
from servesim_dynamo.sessions import LONE
from servesim_dynamo.timeline import DynamoResult, microseconds

#: Trace block size for rows without prefix hashes (every block gets a hash nothing shares).
UNHASHED = 1 << 40


def is_disaggregated(scenario: dict[str, Any]) -> bool:
    """R97: a fleet whose pools have roles."""
    return any("role" in pool for pool in scenario["fleet"].get("pools", []))


@dataclass(frozen=True)
class Side:
    """One side of the fleet as one Dynamo engine: its pools (name, workers, first global
    worker index) in pool order, its limits and its cache."""

    pools: tuple[tuple[str, int, int], ...]
    scheduler: dict[str, Any]
    cache: dict[str, Any]
    dp_size: int = 1

    @property
    def workers(self) -> int:
        return sum(count for _, count, _ in self.pools)

    def global_worker(self, index: int) -> tuple[int, str, int]:
        """Dynamo's worker ``index`` on this side: (global worker, pool name, pool worker)."""
        for name, count, first in self.pools:
            if index < count:
                return first + index, name, index
            index -= count
        raise DynamoResult(f"Dynamo placed a request on worker {index} past the side's workers")


@dataclass(frozen=True)
class Disagg:
    prefill: Side
    decode: Side
    transfer: dict[str, Any]
    timing: FixedTiming
    dynamo_mode: str
    """Dynamo's ``kv_transfer_timing_mode``."""
    concurrency: int | None = None
    """R61's ``max_in_flight``: Dynamo's ``replay_concurrency``."""

    @property
    def bandwidth_gb_s(self) -> float:
        return float(self.transfer["bandwidth_bytes_per_s"] / 1e9)

    def delay_ms(self, tokens: int) -> float:
        """Dynamo's ``transfer_delay_ms`` (aisimulate engine/handoff.rs), in the same floats."""
        bytes_ = float(tokens) * float(self.transfer["bytes_per_token"])
        return bytes_ / (self.bandwidth_gb_s * 1e9) * 1000.0


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _side(scenario: dict[str, Any], role: str) -> Side:
    pools, first, members = [], 0, []
    for pool in scenario["fleet"]["pools"]:
        if pool["role"] == role:
            pools.append((pool["name"], pool["workers"], first))
            members.append(pool)
        first += pool["workers"]
    sizes = {pool.get("dp_size", 1) for pool in members}
    scheduler = {_canonical(p.get("scheduler", scenario["scheduler"])) for p in members}
    cache = {_canonical(p.get("kv_cache", scenario.get("kv_cache"))) for p in members}
    if len(scheduler) > 1 or len(cache) > 1 or len(sizes) > 1:
        raise Unsupported(
            "fleet.pools",
            f"the {role} pools differ in limits, cache or dp_size; Dynamo's disaggregated replay "
            f"takes one engine configuration (one dp_size) for all its {role} workers",
        )
    return Side(
        tuple(pools), json.loads(scheduler.pop()), json.loads(cache.pop()), int(sizes.pop())
    )


def check_disagg(scenario: dict[str, Any], profile: dict[str, Any]) -> Disagg:
    """The disaggregated fleet as Dynamo can run it, or Unsupported naming the feature."""
    routing = scenario["routing"]
    policy = routing["policy"]
    if policy == "weighted_round_robin":
        weights = {p.get("weight", 1) for p in scenario["fleet"]["pools"] if p["role"] == "prefill"}
        if len(weights) > 1:
            raise Unsupported(
                "routing.weighted_round_robin",
                "Dynamo's disaggregated replay routes the prefill side by round robin or "
                "kv_router; neither takes weights",
            )
    elif policy != "round_robin":
        raise Unsupported(
            f"routing.{policy}",
            "Dynamo's disaggregated replay has one router_mode for both sides: round_robin "
            "(stated), or kv_router, which breaks ties at random, unseeded",
        )
    decode_policy = routing.get("decode", {}).get("policy", "round_robin")
    if decode_policy != "round_robin":
        raise Unsupported(
            f"routing.decode.{decode_policy}",
            "Dynamo's decode side is routed by the same router_mode as the prefill side; only "
            "round_robin on both sides can be stated",
        )
    if "stop_at_us" in scenario:
        raise Unsupported(
            "scenario.stop_at_us",
            "Dynamo's max_sim_time_ms records no token times to cut at it (R62, R106); not "
            "stated for a disaggregated fleet",
        )
    prefill, decode = _side(scenario, "prefill"), _side(scenario, "decode")
    styles = {style(prefill.scheduler), style(decode.scheduler)}
    if len(styles) > 1:
        raise Unsupported(
            "disagg.style.mixed",
            "Dynamo's disaggregated replay requires one backend on both sides (R97 allows "
            "vllm and trtllm mixed)",
        )
    for side in (prefill, decode):
        if side.scheduler["prefill"]["mode"] != "whole":
            raise Unsupported(
                "prefill.chunked",
                "Dynamo's vLLM-style chunked prefill has no per-request chunk cap",
            )
    transfer = scenario["kv_transfer"]
    if transfer["base_latency_us"] != 0:
        raise Unsupported(
            "kv_transfer.base_latency_us",
            "Dynamo's transfer time has no base latency (bytes / bandwidth only; its fallback "
            "handoff_latency_ms is used only without a bandwidth and is not settable in 1.6.1)",
        )
    mode = transfer.get("mode", "destination_missing")
    if (
        mode == "destination_missing"
        and decode.cache["prefix_caching"]
        and style(decode.scheduler) == "vllm"  # trtllm reserves FreshOnly: no hit (R102)
    ):
        raise Unsupported(
            "kv_transfer.destination_missing",
            "with prefix caching on the decode side R103 sends prompt_tokens minus the decode "
            "hit; Dynamo's destination_missing sends whole missing blocks (up to ceil(P/B) * B "
            "tokens), and its records hold neither the hit nor the tokens sent, so a transfer "
            "that ends during a decode pass cannot be read back (DISAGG.md)",
        )
    # without a decode hit (no decode prefix cache, or trtllm) R103 sends the whole prompt:
    # Dynamo's full_prompt (its own
    # destination_missing would round the prompt up to whole blocks)
    dynamo_mode = "full_prompt"
    timing = fixed_timing(profile, prefill.scheduler)
    if decode.scheduler != prefill.scheduler:
        fixed_timing(profile, decode.scheduler)  # the coverage must hold the decode limits too
    loop = scenario.get("closed_loop")
    concurrency = None if loop is None else int(loop["max_in_flight"])
    return Disagg(prefill, decode, transfer, timing, dynamo_mode, concurrency)


def check_workload(shape: Disagg, workload: dict[str, Any]) -> None:
    """Refuse a transfer that would last a fraction of a microsecond (R103 rounds it up,
    Dynamo keeps float milliseconds unrounded)."""
    requests = workload["requests"]
    per_token = shape.transfer["bytes_per_token"] * 1_000_000
    bandwidth = shape.transfer["bandwidth_bytes_per_s"]
    block = shape.decode.cache["block_tokens"]
    counts = {request["prompt_tokens"] for request in requests}
    if shape.dynamo_mode == "destination_missing":
        counts.add(block)  # Dynamo sends whole blocks then
    for tokens in sorted(counts):
        if tokens * per_token % bandwidth:
            raise Unsupported(
                "kv_transfer.fractional_us",
                f"a transfer of {tokens} tokens lasts a fraction of a microsecond: R103 rounds it "
                "up to whole microseconds, Dynamo keeps float milliseconds unrounded",
            )


def side_engine(shape: Disagg, side: Side, worker_type: str) -> dict[str, Any]:
    """Dynamo's engine arguments of one side (mapping.engine_args with the side's cache)."""
    pseudo = {"fleet": {"workers": 1}, "scheduler": side.scheduler, "kv_cache": side.cache}
    args = engine_args(pseudo, shape.timing)
    args["worker_type"] = worker_type
    if worker_type == "prefill":
        args.update(
            kv_transfer_bytes_per_token=shape.transfer["bytes_per_token"],
            kv_transfer_bandwidth=shape.bandwidth_gb_s,
            kv_transfer_timing_mode=shape.dynamo_mode,
        )
    return args


def trace_rows(requests: list[dict[str, Any]], block: int) -> list[dict[str, Any]]:
    """Mooncake rows in workload order (timestamps from the first arrival, Dynamo's time 0);
    blocks the workload leaves without a hash get hashes nothing shares (R47)."""
    first = min(request["arrival_us"] for request in requests)
    rows = []
    for number, request in enumerate(requests):
        hashes = list(request.get("prefix_hashes", []))
        count = max(1, -(-request["prompt_tokens"] // block))
        hashes += [UNHASHED + number * 65536 + index for index in range(len(hashes), count)]
        rows.append(
            {
                "timestamp": (request["arrival_us"] - first) / 1000,
                "input_length": request["prompt_tokens"],
                "output_length": request["max_output_tokens"],
                "hash_ids": hashes,
            }
        )
    return rows


def with_sessions(shape: Disagg, workload: dict[str, Any]) -> bool:
    """Whether arrivals depend on the run (R59 sessions, R61 closed loop): then every request
    is a session of Dynamo's multi-turn replay and its records name their session and turn."""
    return shape.concurrency is not None or "sessions" in workload


def session_keys(requests: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """Each request's (Dynamo session id, turn index); a request without a session is a
    session of one turn (sessions.LONE)."""
    turns: dict[str, int] = {}
    keys = []
    for position, request in enumerate(requests):
        session = request.get("session")
        name = LONE.format(position) if session is None else session
        keys.append((name, turns.get(name, 0)))
        turns[name] = turns.get(name, 0) + 1
    return keys


def run(shape: Disagg, workload: dict[str, Any]) -> list[Any]:
    """Dynamo's per-request records of the disaggregated replay, in no order."""
    from servesim_dynamo import dynamo_runtime

    check_workload(shape, workload)
    block = workload.get("prefix_hash_block_tokens", shape.prefill.cache["block_tokens"])
    requests = workload["requests"]
    rows = trace_rows(requests, block)
    if with_sessions(shape, workload):
        # R59: a later turn arrives think_time_us after the previous one ends (Dynamo's delay)
        for row, request, (name, turn) in zip(rows, requests, session_keys(requests), strict=True):
            row["session_id"] = name
            if turn > 0:
                row["delay"] = to_ms(request.get("think_time_us", 0))
    return dynamo_runtime.run_disagg(
        rows,
        side_engine(shape, shape.prefill, "prefill"),
        side_engine(shape, shape.decode, "decode"),
        shape.prefill.workers,
        shape.decode.workers,
        block_size=block,
        concurrency=shape.concurrency,
        dp_sizes=(shape.prefill.dp_size, shape.decode.dp_size),
    )


def released(
    shape: Disagg, records: list[dict[str, Any]], requests: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """With sessions or a closed loop: the records in workload order (matched by session and
    turn) and the requests with the arrivals Dynamo released them at."""
    by_key = {
        (str(r["session_id"]), int(r["turn_index"])): r
        for r in records
        if r.get("turn_index") is not None
    }
    first = min(request["arrival_us"] for request in requests)
    ordered, arrived = [], []
    for request, key in zip(requests, session_keys(requests), strict=True):
        record = by_key.get(key)
        if record is None:
            raise DynamoResult(f"Dynamo's session replay recorded no turn {key}")
        what = f"{request['id']} (session {key[0]!r}, turn {key[1]})"
        at = first + microseconds(record["arrival_time_ms"], f"arrival of {what}")
        if key[1] > 0 and shape.concurrency is None and request["arrival_us"] > at:
            raise Unsupported(
                "session.recorded_arrival",
                f"turn {what} is recorded at {request['arrival_us']} us, after its release at "
                f"{at} us; R59 takes the later of the two, Dynamo's sessions only the delay",
            )
        ordered.append(record)
        arrived.append({**request, "arrival_us": at})
    return ordered, arrived


def match(
    records: list[dict[str, Any]],
    requests: list[dict[str, Any]],
    prefill_workers: int,
    dp_size: int = 1,
) -> list[dict[str, Any]]:
    """The records in workload order. Records carry random ids, so each is matched by its
    arrival, prompt and output length and its prefill worker by Dynamo's round-robin rule (the
    k-th arrival, ties in trace order, to prefill scheduler k mod (N * d) in worker-major
    order; every request takes a turn);
    requests alike in all of these are told apart by FCFS (the earlier in the workload
    admitted, held, given its first and last token no later) and by decode-side round-robin
    turns: a convention, since nothing in a record names its request (DISAGG.md)."""
    first = min(request["arrival_us"] for request in requests)
    # Dynamo's disaggregated router goes round its schedulers (worker, rank) in worker-major
    # order: the k-th arrival to scheduler k mod (N * d), worker (k mod (N * d)) div d
    schedulers = prefill_workers * dp_size
    turn = {
        position: k % schedulers // dp_size for k, position in enumerate(arrival_order(requests))
    }
    groups: dict[tuple[int, int, int, int], list[dict[str, Any]]] = {}
    for record in records:
        key = (
            first + microseconds(record["arrival_time_ms"], "arrival"),
            int(record["input_length"]),
            int(record["requested_output_length"]),
            _logical_worker(record, "prefill"),
        )
        groups.setdefault(key, []).append(record)
    for group in groups.values():
        group.sort(
            key=lambda r: (
                r.get("prefill_admit_ms") is None,
                r.get("prefill_admit_ms") or 0.0,
                r.get("source_held_ms") or 0.0,
                r.get("first_token_ms") or 0.0,
                r.get("last_token_ms") or 0.0,
            )
        )
        _round_robin_ties(group, "decode_worker_idx", _DECODE_SAME)
    ordered = []
    for position, request in enumerate(requests):
        key = (
            request["arrival_us"],
            request["prompt_tokens"],
            request["max_output_tokens"],
            turn[position],
        )
        group = groups.get(key, [])
        if not group:
            raise DynamoResult(
                f"request {request['id']!r}: no record of Dynamo's matches it on prefill worker "
                f"{turn[position]} (its round-robin turn)"
            )
        ordered.append(group.pop(0))
    left = sum(len(group) for group in groups.values())
    if left:
        raise DynamoResult(f"Dynamo recorded {left} request(s) the workload does not hold")
    return ordered


def _logical_worker(record: dict[str, Any], pool: str) -> int:
    """The logical worker a record was routed to on one side (its ``*_worker_idx`` numbers
    schedulers: worker * dp_size + rank)."""
    for routed in reversed(record.get("routing_history") or []):
        if routed["pool"] == pool:
            return int(routed["logical_worker_id"])
    return int(record.get(f"{pool}_worker_idx") or 0)


_DECODE_SAME = ("prefill_admit_ms", "source_held_ms", "prefill_worker_idx", "first_token_ms")


def _round_robin_ties(group: list[dict[str, Any]], field: str, same: tuple[str, ...]) -> None:
    """Records alike in ``same`` (and in arrival, prompt and output) were routed one after
    another, so their workers (``field``) follow round robin (s, s+1, ... mod N): put them in
    that order (in place), which labels the earlier request with the earlier turn. Left as they
    are when no start s fits."""
    start = 0
    while start < len(group):
        key = tuple(group[start].get(name) for name in same)
        end = start
        while end < len(group) and tuple(group[end].get(name) for name in same) == key:
            end += 1
        run = group[start:end]
        if len(run) > 1 and all(r.get(field) is not None for r in run):
            workers = [int(r[field]) for r in run]
            size = max(workers) + 1
            found = None
            for modulus in range(size, size + len(run) + 1):
                for first in range(modulus):
                    wanted = [(first + k) % modulus for k in range(len(run))]
                    if sorted(wanted) == sorted(workers):
                        found = wanted
                        break
                if found is not None:
                    break
            if found is not None:
                pool = list(run)
                group[start:end] = [pool.pop([r[field] for r in pool].index(w)) for w in found]
        start = end


@dataclass
class Read:
    """One request read off its record, in microseconds."""

    request: dict[str, Any]
    status: str
    prefill_worker: int | None
    decode_worker: int | None
    prefill_rank: int
    decode_rank: int
    prefill_admit_us: int | None
    held_us: int | None
    reserved_us: int | None
    activated_us: int | None
    tokens: list[int]
    readmissions: list[tuple[str, int, int]]
    """(pool, at_us, reused tokens) of every readmission."""
    reused_prompt_tokens: int
    preemptions: int
    transferred_tokens: int | None
    transfer_end_us: int | None
    decode_reused_tokens: int | None
    terminal_us: int


def _at(record: dict[str, Any], name: str, first: int, rid: str) -> int | None:
    value = record.get(name)
    return None if value is None else first + microseconds(value, f"{name} of {rid}")


def _tokens(record: dict[str, Any], read: Read, first: int, decode_us: int) -> list[int]:
    """Every client token's time: the decode worker's pass ends from the first token to the
    last, one gap at a decode readmission (its recompute pass ends a decode part later)."""
    rid = read.request["id"]
    count = int(record["output_length"])
    first_token = _at(record, "first_token_ms", first, rid)
    last_token = _at(record, "last_token_ms", first, rid)
    if count == 0 or first_token is None or last_token is None:
        return []
    readmits = [at for pool, at, _ in read.readmissions if pool == "decode"]
    if not readmits or readmits[-1] + decode_us > last_token:
        if last_token - first_token != (count - 1) * decode_us:
            raise DynamoResult(
                f"request {rid!r}: {count} tokens from {first_token} to {last_token} us are not "
                f"one decode pass ({decode_us} us) apart"
            )
        return [first_token + i * decode_us for i in range(count)]
    if len(readmits) > 1:
        raise DynamoResult(
            f"request {rid!r}: readmitted {len(readmits)} times on its decode worker; the token "
            "times between readmissions are not recorded"
        )
    resumed = readmits[0] + decode_us
    later, remainder = divmod(last_token - resumed, decode_us)
    earlier = count - later - 1
    if remainder or earlier < 0:
        raise DynamoResult(f"request {rid!r}: its tokens after readmission do not fit passes")
    tokens = [first_token + i * decode_us for i in range(earlier)]
    if tokens and tokens[0] != first_token:
        raise DynamoResult(f"request {rid!r}: first token does not fit")
    if not tokens and resumed != first_token:
        raise DynamoResult(f"request {rid!r}: first token {first_token} is not {resumed} us")
    return tokens + [resumed + i * decode_us for i in range(later + 1)]


def read(shape: Disagg, record: dict[str, Any], request: dict[str, Any], first: int) -> Read:
    rid = request["id"]
    status = str(record["terminal_status"])
    admissions = record.get("admission_history") or []
    readmissions = [
        (
            str(a["pool"]),
            first + microseconds(a["at_ms"], f"admission of {rid}"),
            int(a["reused_input_tokens"]),
        )
        for a in admissions
        if a.get("is_readmission")
    ]
    prefill_first = [a for a in admissions if a["pool"] == "prefill" and not a["is_readmission"]]
    # each side's logical worker and attention-DP rank (the last routing of that pool; Dynamo's
    # *_worker_idx numbers schedulers, worker * dp_size + rank)
    route = {
        str(h["pool"]): (int(h["logical_worker_id"]), int(h["dp_rank"]))
        for h in record.get("routing_history") or []
    }
    entry = Read(
        request=request,
        status=status,
        prefill_worker=route["prefill"][0] if "prefill" in route else None,
        decode_worker=route["decode"][0] if "decode" in route else None,
        prefill_rank=route["prefill"][1] if "prefill" in route else 0,
        decode_rank=route["decode"][1] if "decode" in route else 0,
        prefill_admit_us=_at(record, "prefill_admit_ms", first, rid),
        held_us=_at(record, "source_held_ms", first, rid),
        reserved_us=_at(record, "destination_reserved_ms", first, rid),
        activated_us=_at(record, "destination_activated_ms", first, rid),
        tokens=[],
        readmissions=readmissions,
        reused_prompt_tokens=int(prefill_first[0]["reused_input_tokens"]) if prefill_first else 0,
        preemptions=int(record.get("readmission_count") or 0),
        transferred_tokens=None,
        transfer_end_us=None,
        decode_reused_tokens=None,
        terminal_us=first + microseconds(record["terminal_time_ms"], f"terminal of {rid}"),
    )
    if status != "completed":
        return entry
    entry.tokens = _tokens(record, entry, first, shape.timing.decode_us)
    if entry.reserved_us is None or entry.activated_us is None:
        raise DynamoResult(f"request {rid!r}: completed without a reservation or activation")
    prompt = request["prompt_tokens"]
    block = shape.decode.cache["block_tokens"]
    reserved_ms = record["destination_reserved_ms"]
    if shape.dynamo_mode == "full_prompt":
        candidates = [(prompt, None)]
    else:
        # Dynamo sends (ceil(P/B) - resident full blocks) * B tokens, which it does not record;
        # the one count whose transfer ends at the activation (an idle decode worker) is read
        blocks = -(-prompt // block)
        candidates = [((blocks - h) * block, h * block) for h in range(blocks + 1)]
        candidates = [
            c
            for c in candidates
            if first + microseconds(reserved_ms + shape.delay_ms(c[0]), "transfer end")
            == entry.activated_us
        ]
        if len(candidates) != 1:
            raise DynamoResult(
                f"request {rid!r}: Dynamo does not record the tokens it transferred, and its "
                "activation does not tell them (deferred to a decode pass end)"
            )
    tokens, reused = candidates[0]
    entry.transferred_tokens = tokens
    entry.transfer_end_us = first + microseconds(
        reserved_ms + shape.delay_ms(tokens), f"transfer end of {rid}"
    )
    entry.decode_reused_tokens = (
        int(record.get("decode_reused_input_tokens") or 0) if reused is None else reused
    )
    if entry.transfer_end_us > entry.activated_us:
        raise DynamoResult(f"request {rid!r}: activated before its transfer ended")
    return entry


def reject_reason(shape: Disagg, request: dict[str, Any]) -> str:
    """R10's name for a request Dynamo rejected (it records no reason): the first of R10's
    reasons (R100: against every pool) that holds for it; an error if none does."""
    prompt, output = request["prompt_tokens"], request["max_output_tokens"]
    if prompt == 0:
        return "empty_prompt"
    if output == 0:
        return "zero_max_output_tokens"
    for side, total in ((shape.prefill, prompt + 1), (shape.decode, prompt + output)):
        if total > side.scheduler["max_model_len"]:
            return "context_exceeds_max_model_len"
    if prompt > shape.prefill.scheduler["max_batched_tokens"]:
        return "prefill_exceeds_step_budget"
    for side, total in ((shape.prefill, prompt + 1), (shape.decode, prompt + output)):
        if total > side.cache["blocks"] * side.cache["block_tokens"]:
            return "exceeds_kv_cache"
    raise DynamoResult(
        f"request {request['id']!r}: Dynamo rejected it, but no R10 reason holds for it"
    )


def _peak(intervals: list[tuple[int, int]]) -> int:
    """Most half-open intervals [start, end) holding one instant."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    peak = level = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def _counters(
    role: str, mine: list[Read], timing: FixedTiming
) -> tuple[dict[str, Any], list[int], int]:
    """One worker's or rank's counters over its completed requests ``mine``, its pass ends and
    a pass's length: a prefill worker's passes end at its distinct prefill ends (whole prefill:
    every pass completes its prompts) and last the prefill part; a decode worker's at its
    distinct token times, a decode part."""
    if role == "prefill":
        ends = sorted({r.held_us for r in mine if r.held_us is not None})
        held = Counter(r.held_us for r in mine)
        ordered = sorted(r.request["arrival_us"] for r in mine)
        admitted = sorted(r.prefill_admit_us or 0 for r in mine)
        peak_waiting = 0
        for k, now in enumerate(ordered):
            peak_waiting = max(peak_waiting, k + 1 - bisect.bisect_left(admitted, now))
        return (
            {
                "routed": len(mine),
                "completed": 0,
                "handed_off": len(mine),
                "activated": 0,
                "prefill_tokens": sum(
                    r.request["prompt_tokens"] - r.reused_prompt_tokens for r in mine
                ),
                "decode_tokens": 0,
                "output_tokens": 0,
                "peak_running": max(held.values(), default=0),
                "peak_waiting": peak_waiting,
            },
            ends,
            timing.prefill_us,
        )
    ends = sorted({t for r in mine for t in r.tokens})
    at_end = Counter(t for r in mine for t in r.tokens)
    waits = []
    recompute = 0
    recompute_firsts = 0
    for r in mine:
        for pool_name, at, reused in r.readmissions:
            if pool_name != "decode":
                continue
            before = [t for t in r.tokens if t <= at]
            waits.append((before[-1] if before else r.activated_us or at, at))
            recompute += r.request["prompt_tokens"] + 1 + len(before) - reused
            recompute_firsts += 1
    outputs = sum(len(r.tokens) for r in mine)
    return (
        {
            "routed": len(mine),
            "completed": len(mine),
            "handed_off": 0,
            "activated": len(mine),
            "prefill_tokens": recompute,
            "decode_tokens": outputs - recompute_firsts,
            "output_tokens": outputs,
            "peak_running": max(at_end.values(), default=0),
            "peak_waiting": _peak(waits),
        },
        ends,
        timing.decode_us,
    )


def _timed(
    counters: dict[str, Any], ends: list[int], duration: int, makespan: int, what: str
) -> dict[str, Any]:
    for earlier, later in itertools.pairwise(ends):
        if later - earlier < duration:
            raise DynamoResult(
                f"{what}: passes ending at {earlier} and {later} us overlap under the fixed "
                f"model ({duration} us a pass)"
            )
    busy = duration * len(ends)
    return {
        **counters,
        "steps": len(ends),
        "busy_us": busy,
        "utilization": ratio(busy, makespan),
        "kv_cache": None,  # R52: Dynamo records no blocks in use
    }


def _workers(shape: Disagg, reads: list[Read], makespan: int, total: int) -> list[dict[str, Any]]:
    """Every worker's counters, in global order, read off the records; a worker of several
    ranks passes at once on all of them (R83: every rank's step lasts the same part under the
    fixed model), so its passes are the union of its ranks' steps."""
    entries: list[dict[str, Any]] = []
    sides = {"prefill": shape.prefill, "decode": shape.decode}
    for role, side in sides.items():
        for index in range(side.workers):
            worker, pool, pool_worker = side.global_worker(index)
            served = [r for r in reads if r.status == "completed"]
            if role == "prefill":
                mine = [r for r in served if r.prefill_worker == index]
            else:
                mine = [r for r in served if r.decode_worker == index]
            ranks = []
            for rank in range(side.dp_size):
                ours = [
                    r
                    for r in mine
                    if (r.prefill_rank if role == "prefill" else r.decode_rank) == rank
                ]
                counters, ends, duration = _counters(role, ours, shape.timing)
                ranks.append(
                    {"rank": rank, **_timed(counters, ends, duration, makespan, f"worker {worker}")}
                )
            counters, ends, duration = _counters(role, mine, shape.timing)
            entries.append(
                {
                    "worker": worker,
                    "pool": pool,
                    "pool_worker": pool_worker,
                    "style": style(side.scheduler),
                    **_timed(counters, ends, duration, makespan, f"worker {worker}"),
                    "ranks": ranks,
                }
            )
    entries.sort(key=lambda entry: entry["worker"])
    assert len(entries) == total
    return entries


def build(
    shape: Disagg,
    scenario: dict[str, Any],
    inputs: dict[str, bytes],
    calibration: dict[str, Any] | None,
    requests: list[dict[str, Any]],
    records: list[dict[str, Any]],
) -> dict[str, Any]:
    """The report 8.0 value of a disaggregated replay."""
    first = min(request["arrival_us"] for request in requests)
    if any(record.get("turn_index") is not None for record in records):
        ordered, requests = released(shape, records, requests)
    else:
        ordered = match(records, requests, shape.prefill.workers, shape.prefill.dp_size)
    reads = [
        read(shape, record, request, first)
        for record, request in zip(ordered, requests, strict=True)
    ]
    entries = []
    for r in reads:
        request = r.request
        completed = r.status == "completed"
        # a rejected request is reported on the prefill worker Dynamo placed it on (it
        # rejects after routing; R10 rejects before, RESULTS.md's rejected-takes-a-turn)
        worker = shape.prefill.global_worker(r.prefill_worker or 0)[0]
        entry = request_entry(
            request,
            completed=completed,
            worker=worker,
            reject_reason=None if completed else reject_reason(shape, request),
            terminal_us=r.tokens[-1] if completed else r.terminal_us,
            first_scheduled_us=r.prefill_admit_us,
            tokens=r.tokens,
            reused_prompt_tokens=r.reused_prompt_tokens,
            preemptions=r.preemptions,
        )
        entries.append(entry)
    makespan = max(entry["terminal_us"] for entry in entries) - first
    total = shape.prefill.workers + shape.decode.workers
    workers = _workers(shape, reads, makespan, total)
    summary = report_4_summary(entries, workers, first, makespan)
    digests: dict[str, dict[str, Any]] = {
        name: {"sha256": digest(data)} for name, data in inputs.items()
    }
    digests["timing_profile"]["calibration"] = calibration
    value = {
        "document": "report",
        "schema_version": "4.0",
        "inputs": digests,
        "summary": summary,
        "workers": [
            {
                k: w[k]
                for k in (
                    "worker",
                    "routed",
                    "completed",
                    "steps",
                    "busy_us",
                    "utilization",
                    "peak_running",
                    "peak_waiting",
                    "prefill_tokens",
                    "decode_tokens",
                    "output_tokens",
                    "kv_cache",
                )
            }
            for w in workers
        ],
        "requests": entries,
        "trace": None,
    }
    report = dict(CHAIN.migrate(as_report_5(value, requests, scenario), "report", "8.0").document)
    return _with_disagg(report, shape, scenario, reads, workers)


def _with_disagg(
    report: dict[str, Any],
    shape: Disagg,
    scenario: dict[str, Any],
    reads: list[Read],
    workers: list[dict[str, Any]],
) -> dict[str, Any]:
    """R107's members on the migrated report: pools and roles, workers, handoffs, transfers."""
    report["workers"] = workers
    makespan = report["summary"]["makespan_us"]
    roles = {}
    for role, side in (("prefill", shape.prefill), ("decode", shape.decode)):
        for name, _, _ in side.pools:
            roles[name] = role
    pools = []
    for pool in scenario["fleet"]["pools"]:
        name = pool["name"]
        mine = [w for w in workers if w["pool"] == name]
        done = [
            e
            for e, r in zip(report["requests"], reads, strict=True)
            if e["outcome"] == "completed"
            and roles[name] == "decode"
            and shape.decode.global_worker(r.decode_worker or 0)[1] == name
        ]
        busy = sum(w["busy_us"] for w in mine)
        completed = sum(w["completed"] for w in mine)
        outputs = sum(e["output_tokens"] for e in done)
        pools.append(
            {
                "name": name,
                "style": style(
                    (shape.prefill if roles[name] == "prefill" else shape.decode).scheduler
                ),
                "role": roles[name],
                "handed_off": sum(w["handed_off"] for w in mine),
                "activated": sum(w["activated"] for w in mine),
                "workers": pool["workers"],
                "dp_size": (shape.prefill if roles[name] == "prefill" else shape.decode).dp_size,
                "routed": sum(w["routed"] for w in mine),
                "completed": completed,
                "prompt_tokens": sum(e["prompt_tokens"] for e in done),
                "output_tokens": outputs,
                "steps": sum(w["steps"] for w in mine),
                "busy_us": busy,
                "utilization": ratio(busy, pool["workers"] * makespan),
                "request_throughput_per_s": ratio(completed * 1_000_000, makespan),
                "output_token_throughput_per_s": ratio(outputs * 1_000_000, makespan),
                "kv_cache": None,
            }
        )
    report["pools"] = pools
    # R84: one profile for every pool, listed per pool in pool order
    profile = report["inputs"]["timing_profile"]
    report["inputs"]["timing_profiles"] = [
        {"pool": pool["name"], **profile} for pool in scenario["fleet"]["pools"]
    ]
    handoffs = []
    for entry, r in zip(report["requests"], reads, strict=True):
        entry["rank"] = r.prefill_rank
        if r.status != "completed":
            entry["pool"] = shape.prefill.global_worker(r.prefill_worker or 0)[1]
            entry["handoff"] = None
            continue
        _, pool, _ = shape.prefill.global_worker(r.prefill_worker or 0)
        decode_worker, decode_pool, _ = shape.decode.global_worker(r.decode_worker or 0)
        entry["pool"] = pool
        assert r.transfer_end_us is not None
        assert r.reserved_us is not None
        entry["handoff"] = {
            "prefill_end_us": r.held_us,
            "decode_worker": decode_worker,
            "decode_pool": decode_pool,
            "decode_rank": r.decode_rank,
            "reserved_us": r.reserved_us,
            "transfer_start_us": r.reserved_us,
            "transfer_end_us": r.transfer_end_us,
            "activation_us": r.activated_us,
            "transferred_tokens": r.transferred_tokens,
            "transfer_us": r.transfer_end_us - r.reserved_us,
            "decode_reused_tokens": r.decode_reused_tokens,
        }
        handoffs.append(entry["handoff"])
    tokens = sum(h["transferred_tokens"] for h in handoffs)
    report["summary"]["transfers"] = {
        "count": len(handoffs),
        "tokens": tokens,
        "gigabytes": ratio(tokens * shape.transfer["bytes_per_token"], 1_000_000_000),
        "transfer_us": statistics([h["transfer_us"] for h in handoffs]),
        "reservation_wait_us": statistics(
            [h["reserved_us"] - h["prefill_end_us"] for h in handoffs]
        ),
    }
    return report
