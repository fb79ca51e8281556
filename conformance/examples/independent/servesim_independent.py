#!/usr/bin/env python3
"""Clean-room servesim v1 replay, written from SPEC.md sections 2-7 only.

An outside implementation, for showing how the conformance suite checks one: it was written
from the specification without reading the reference, and it does not validate its input
(sections 1 and 8), so the suite's invalid tier finds that. See README.md beside it.
"""

import argparse, hashlib, heapq, json, os, sys, tempfile
import rfc8785

MAX_T = 2**53 - 1
MASK = 2**64 - 1
REASONS = [
    "empty_prompt",
    "zero_max_output_tokens",
    "context_exceeds_max_model_len",
    "prefill_exceeds_step_budget",
]


def splitmix(seed):
    state = seed & MASK
    while True:
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        yield z ^ (z >> 31)


def q(a, b):  # R24
    return None if b == 0 else a / b  # Python int/int true division is correctly rounded


def stats(samples):  # R27
    n = len(samples)
    if n == 0:
        return {
            k: (0 if k == "count" else None)
            for k in ["count", "min", "max", "mean", "p50", "p90", "p95", "p99"]
        }
    s = sorted(samples)
    out = {"count": n, "min": s[0], "max": s[-1], "mean": q(sum(s), n)}
    for p in (50, 90, 95, 99):
        r = max(1, -(-(p * n) // 100))
        out["p%d" % p] = s[r - 1]
    return out


class Req:
    def __init__(self, idx, d):
        self.idx = idx
        self.id = d["id"]
        self.arrival = d["arrival_us"]
        self.prompt = d["prompt_tokens"]
        self.max_out = d["max_output_tokens"]
        self.worker = None
        self.reason = None
        self.prefilled = 0
        self.tokens = []
        self.first_sched = None
        self.done_t = None

    @property
    def decoding(self):
        return self.prefilled == self.prompt


class Worker:
    def __init__(self, i):
        self.i = i
        self.waiting = []  # FIFO
        self.running = []
        self.busy = False
        self.sched_pending = False
        self.routed = self.completed = self.steps = self.busy_us = 0
        self.peak_running = self.peak_waiting = 0
        self.prefill_tokens = self.decode_tokens = self.output_tokens = 0
        self.inflight = None


class InvalidInput(Exception):
    pass


def simulate(scn, wl, tp, trace_on):
    N = scn["fleet"]["workers"]
    policy = scn["routing"]["policy"]
    rng = splitmix(scn["routing"]["seed"]) if policy == "random" else None
    sch = scn["scheduler"]
    max_seqs = sch["max_num_seqs"]
    mbt = sch["max_batched_tokens"]
    mml = sch["max_model_len"]
    mode = sch["prefill"]["mode"]
    mct = sch["prefill"].get("max_chunk_tokens")
    m = tp["model"]
    ovh, pns, dns = m["step_overhead_ns"], m["prefill_token_ns"], m["decode_token_ns"]

    reqs = [Req(i, d) for i, d in enumerate(wl["requests"])]
    workers = [Worker(i) for i in range(N)]
    heap = []
    seq = [0]

    def push(t, prio, payload):
        heapq.heappush(heap, (t, prio, seq[0], payload))
        seq[0] += 1

    for r in sorted(reqs, key=lambda r: r.arrival):  # stable (R8)
        push(r.arrival, 1, r)

    routed_count = [0]
    trace = []

    def maybe_schedule(w, now):
        if not w.busy and (w.running or w.waiting) and not w.sched_pending:
            w.sched_pending = True
            push(now, 2, w)

    def form_step(w, now):
        budget = mbt
        decode = [r for r in w.running if r.decoding]
        budget -= len(decode)
        allot = []
        for r in w.running:
            if not r.decoding:
                a = min(r.prompt - r.prefilled, mct, budget)
                if a > 0:
                    allot.append((r, a))
                    budget -= a
        while w.waiting and budget > 0 and len(w.running) < max_seqs:
            h = w.waiting[0]
            if mode == "whole":
                a = h.prompt if h.prompt <= budget else 0
            else:
                a = min(h.prompt - h.prefilled, mct, budget)
            if a == 0:
                break
            w.waiting.pop(0)
            w.running.append(h)
            h.first_sched = now
            allot.append((h, a))
            budget -= a
        w.peak_running = max(w.peak_running, len(w.running))
        D = len(decode)
        P = sum(a for _, a in allot)
        assert D + P >= 1
        dur = (ovh + P * pns + D * dns + 999) // 1000
        end = now + dur
        if end > MAX_T:
            raise InvalidInput("a step would end after 2^53-1 us")
        w.busy = True
        w.steps += 1
        w.busy_us += dur
        w.prefill_tokens += P
        w.decode_tokens += D
        w.inflight = (decode, allot)
        if trace_on:
            trace.append(
                {
                    "worker": w.i,
                    "start_us": now,
                    "end_us": end,
                    "decode_requests": [r.id for r in decode],
                    "prefill": [{"id": r.id, "tokens": a} for r, a in allot],
                    "prefill_tokens": P,
                    "batched_tokens": D + P,
                }
            )
        push(end, 0, w)

    def complete_step(w, now):
        decode, allot = w.inflight
        w.inflight = None
        for r in decode:
            r.tokens.append(now)
            w.output_tokens += 1
        for r, a in allot:
            r.prefilled += a
            if r.prefilled == r.prompt:
                r.tokens.append(now)
                w.output_tokens += 1
        keep = []
        for r in w.running:
            if len(r.tokens) == r.max_out:
                r.done_t = now
                w.completed += 1
            else:
                keep.append(r)
        w.running = keep
        w.busy = False
        maybe_schedule(w, now)

    while heap:
        t, prio, _, payload = heapq.heappop(heap)
        if prio == 0:
            complete_step(payload, t)
        elif prio == 1:
            r = payload
            if r.prompt == 0:
                r.reason = REASONS[0]
            elif r.max_out == 0:
                r.reason = REASONS[1]
            elif r.prompt > mml or r.max_out > mml - r.prompt:
                r.reason = REASONS[2]
            elif mode == "whole" and r.prompt > mbt:
                r.reason = REASONS[3]
            if r.reason is not None:
                r.done_t = r.arrival
                continue
            k = routed_count[0]
            routed_count[0] += 1
            wi = k % N if policy == "round_robin" else next(rng) % N
            w = workers[wi]
            r.worker = wi
            w.routed += 1
            w.waiting.append(r)
            w.peak_waiting = max(w.peak_waiting, len(w.waiting))
            maybe_schedule(w, t)
        else:
            w = payload
            w.sched_pending = False
            form_step(w, t)

    # report
    first_arrival = min(r.arrival for r in reqs)
    makespan = max(r.done_t for r in reqs) - first_arrival
    req_out = []
    completed = [r for r in reqs if r.reason is None]
    for r in reqs:
        if r.reason is not None:
            req_out.append(
                {
                    "id": r.id,
                    "worker": None,
                    "outcome": "rejected",
                    "reject_reason": r.reason,
                    "prompt_tokens": r.prompt,
                    "output_tokens": 0,
                    "arrival_us": r.arrival,
                    "terminal_us": r.arrival,
                    "first_scheduled_us": None,
                    "first_token_us": None,
                    "completion_us": None,
                    "queue_us": None,
                    "ttft_us": None,
                    "mean_itl_us": None,
                    "e2e_us": None,
                    "token_times_us": [],
                }
            )
        else:
            ft, ct = r.tokens[0], r.tokens[-1]
            n = len(r.tokens)
            req_out.append(
                {
                    "id": r.id,
                    "worker": r.worker,
                    "outcome": "completed",
                    "reject_reason": None,
                    "prompt_tokens": r.prompt,
                    "output_tokens": n,
                    "arrival_us": r.arrival,
                    "terminal_us": r.done_t,
                    "first_scheduled_us": r.first_sched,
                    "first_token_us": ft,
                    "completion_us": ct,
                    "queue_us": r.first_sched - r.arrival,
                    "ttft_us": ft - r.arrival,
                    "mean_itl_us": None if n == 1 else q(ct - ft, n - 1),
                    "e2e_us": ct - r.arrival,
                    "token_times_us": list(r.tokens),
                }
            )
    out_tokens = sum(len(r.tokens) for r in completed)
    gaps = []
    for r in completed:
        gaps.extend(b - a for a, b in zip(r.tokens, r.tokens[1:]))
    summary = {
        "requests": len(reqs),
        "completed": len(completed),
        "rejected": len(reqs) - len(completed),
        "rejected_by_reason": {k: sum(1 for r in reqs if r.reason == k) for k in REASONS},
        "prompt_tokens": sum(r.prompt for r in completed),
        "output_tokens": out_tokens,
        "steps": sum(w.steps for w in workers),
        "first_arrival_us": first_arrival,
        "makespan_us": makespan,
        "request_throughput_per_s": q(len(completed) * 1000000, makespan),
        "output_token_throughput_per_s": q(out_tokens * 1000000, makespan),
        "queue_us": stats([r.first_sched - r.arrival for r in completed]),
        "ttft_us": stats([r.tokens[0] - r.arrival for r in completed]),
        "e2e_us": stats([r.tokens[-1] - r.arrival for r in completed]),
        "itl_us": stats(gaps),
    }
    wout = [
        {
            "worker": w.i,
            "routed": w.routed,
            "completed": w.completed,
            "steps": w.steps,
            "busy_us": w.busy_us,
            "utilization": q(w.busy_us, makespan),
            "peak_running": w.peak_running,
            "peak_waiting": w.peak_waiting,
            "prefill_tokens": w.prefill_tokens,
            "decode_tokens": w.decode_tokens,
            "output_tokens": w.output_tokens,
        }
        for w in workers
    ]
    if trace_on:
        trace.sort(key=lambda s: (s["start_us"], s["worker"]))
    return summary, wout, req_out, (trace if trace_on else None)


def main(argv=None):
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    rp = sub.add_parser("replay")
    rp.add_argument("--scenario")
    rp.add_argument("--workload")
    rp.add_argument("--timing-profile")
    rp.add_argument("--output")
    rp.add_argument("--trace", action="store_true")
    rp.add_argument("--describe", action="store_true")
    a = ap.parse_args(argv)
    if a.describe:  # the conformance handshake (conformance/README.md)
        print(
            json.dumps(
                {
                    "name": "servesim-independent",
                    "version": "0.1.0",
                    "protocol_version": 1,
                    "schema_versions": {
                        k: ["1.0"] for k in ("scenario", "workload", "timing_profile", "report")
                    },
                    "features": ["prefill.chunked", "routing.random", "trace"],
                }
            )
        )
        return 0
    raw = {}
    docs = {}
    for k, p in (
        ("scenario", a.scenario),
        ("workload", a.workload),
        ("timing_profile", a.timing_profile),
    ):
        with open(p, "rb") as f:
            raw[k] = f.read()
        docs[k] = json.loads(raw[k].decode("utf-8"))
    try:
        summary, wout, rout, trace = simulate(
            docs["scenario"], docs["workload"], docs["timing_profile"], a.trace
        )
    except InvalidInput as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    report = {
        "document": "report",
        "schema_version": "1.0",
        "inputs": {k: {"sha256": hashlib.sha256(v).hexdigest()} for k, v in raw.items()},
        "summary": summary,
        "workers": wout,
        "requests": rout,
        "trace": trace,
    }
    data = rfc8785.dumps(report) + b"\n"
    d = os.path.dirname(os.path.abspath(a.output))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".cleanroom-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
