#!/usr/bin/env python3
"""Clean-room servesim replay, written from SPEC.md sections 2-7 and 10 only.

An outside implementation, for showing how the conformance suite checks one: it was written
from the specification without reading the reference, and it does not validate its input
(sections 1 and 8; of the input rules it checks only R40's agreements of a measured timing
profile), so the suite's invalid tier finds that. It reads timing profiles 1.0 and 1.1 (the
synthetic_linear, grid and regression models), writes report 2.0 and speaks conformance
protocol 2 (exit 3 when a step's shape is outside the profile's coverage, R43). See README.md
beside it.
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


class OutOfCoverage(Exception):  # R43: exit 3
    pass


DIMS = ("decode_requests", "context_tokens", "prefill_tokens")


def check_measured(tp):  # R40, the agreements beyond the schema (R4); list of problems
    m = tp["model"]
    kind = m["kind"]
    if kind == "synthetic_linear":
        return []
    probs = []
    cov = m["coverage"]
    for k in DIMS:
        if cov[k]["min"] > cov[k]["max"]:
            probs.append("/model/coverage/%s: min %d is greater than max %d"
                         % (k, cov[k]["min"], cov[k]["max"]))
    if kind == "grid":
        axes = m["axes"]
        for k in DIMS:
            a = axes[k]
            if any(a[i] >= a[i + 1] for i in range(len(a) - 1)):
                probs.append("/model/axes/%s: not strictly increasing" % k)
            if cov[k]["min"] != a[0] or cov[k]["max"] != a[-1]:
                probs.append("/model/coverage/%s: expected exactly [%d, %d], the axis's first "
                             "and last point" % (k, a[0], a[-1]))
        nd, nc, npf = (len(axes[k]) for k in DIMS)
        dur = m["duration_us"]
        if len(dur) != nd:
            probs.append("/model/duration_us: %d entries, expected %d (decode_requests points)"
                         % (len(dur), nd))
        for d, row in enumerate(dur):
            if len(row) != nc:
                probs.append("/model/duration_us/%d: %d entries, expected %d (context_tokens "
                             "points)" % (d, len(row), nc))
            for c, cell in enumerate(row):
                if len(cell) != npf:
                    probs.append("/model/duration_us/%d/%d: %d entries, expected %d "
                                 "(prefill_tokens points)" % (d, c, len(cell), npf))
    else:
        kn = [k["tokens"] for k in m["prefill_knots"]]
        if any(kn[i] >= kn[i + 1] for i in range(len(kn) - 1)):
            probs.append("/model/prefill_knots: tokens not strictly increasing")
        if cov["prefill_tokens"]["min"] != kn[0] or cov["prefill_tokens"]["max"] != kn[-1]:
            probs.append("/model/coverage/prefill_tokens: expected exactly [%d, %d], the first "
                         "and last knot's tokens" % (kn[0], kn[-1]))
    lim = tp["calibration"]["limits"]
    if cov["decode_requests"]["max"] > lim["max_num_seqs"]:
        probs.append("/model/coverage/decode_requests/max: greater than "
                     "calibration.limits.max_num_seqs %d" % lim["max_num_seqs"])
    if cov["prefill_tokens"]["max"] > lim["max_batched_tokens"]:
        probs.append("/model/coverage/prefill_tokens/max: greater than "
                     "calibration.limits.max_batched_tokens %d" % lim["max_batched_tokens"])
    if cov["context_tokens"]["max"] > lim["max_num_seqs"] * lim["max_model_len"]:
        probs.append("/model/coverage/context_tokens/max: greater than max_num_seqs * "
                     "max_model_len = %d" % (lim["max_num_seqs"] * lim["max_model_len"]))
    return probs


def lerp(x, y, num, den):  # R41 step 2; den == 0 means the bracket (i, i)
    if den == 0:
        return x
    if y >= x:
        return x + ((y - x) * num + den // 2) // den
    return x - ((x - y) * num + den // 2) // den


def bracket(axis, v):  # R41 step 1: (lo, hi, num, den); v lies within the axis (R40, R43)
    for i, a in enumerate(axis):
        if a == v:
            return i, i, 0, 0
        if a > v:
            return i - 1, i, v - axis[i - 1], a - axis[i - 1]
    raise AssertionError("coordinate beyond the axis")


def make_timer(tp):
    """A function from the shape (D, C, P) to the step's duration in us (R22, R41, R42), or
    None when the shape is outside the coverage (R43)."""
    m = tp["model"]
    kind = m["kind"]
    if kind == "synthetic_linear":
        ovh, pns, dns = m["step_overhead_ns"], m["prefill_token_ns"], m["decode_token_ns"]
        return lambda D, C, P: (ovh + P * pns + D * dns + 999) // 1000
    cov = m["coverage"]
    (dlo, dhi), (clo, chi), (plo, phi) = ((cov[k]["min"], cov[k]["max"]) for k in DIMS)

    def covered(D, C, P):
        return dlo <= D <= dhi and clo <= C <= chi and plo <= P <= phi

    if kind == "grid":
        ad, ac, ap = (m["axes"][k] for k in DIMS)
        g = m["duration_us"]

        def grid(D, C, P):
            if not covered(D, C, P):
                return None
            d0, d1, dn, dd = bracket(ad, D)
            c0, c1, cn, cd = bracket(ac, C)
            p0, p1, pn, pd = bracket(ap, P)
            by_d = []
            for d in (d0, d1):
                by_c = [lerp(g[d][c][p0], g[d][c][p1], pn, pd) for c in (c0, c1)]
                by_d.append(lerp(by_c[0], by_c[1], cn, cd))
            return lerp(by_d[0], by_d[1], dn, dd)

        return grid
    knots = m["prefill_knots"]
    icpt, drn, ctps = m["intercept_ns"], m["decode_request_ns"], m["context_token_ps"]
    kt = [k["tokens"] for k in knots]

    def regression(D, C, P):
        if not covered(D, C, P):
            return None
        i0, i1, num, den = bracket(kt, P)
        prefill_ns = lerp(knots[i0]["ns"], knots[i1]["ns"], num, den)
        total_ps = 1000 * (icpt + prefill_ns + D * drn) + C * ctps
        return (total_ps + 999999) // 1000000

    return regression


def uncovered_message(tp, tp_path, shape, worker, start):  # R43's stderr message
    cov = tp["model"]["coverage"]
    outside = []
    for k, v in zip(DIMS, shape):
        lo, hi = cov[k]["min"], cov[k]["max"]
        if not lo <= v <= hi:
            outside.append("%s %d is outside the covered range [%d, %d]" % (k, v, lo, hi))
    return (
        "error: step shape (decode_requests %d, context_tokens %d, prefill_tokens %d) formed by "
        "worker %d at %d us is outside the timing profile's coverage: %s; profile %s, "
        "calibration %s (R43)"
        % (shape + (worker, start, "; ".join(outside), tp_path,
                    json.dumps(tp.get("calibration"), sort_keys=True)))
    )


def simulate(scn, wl, tp, trace_on, tp_path="timing profile"):
    N = scn["fleet"]["workers"]
    policy = scn["routing"]["policy"]
    rng = splitmix(scn["routing"]["seed"]) if policy == "random" else None
    sch = scn["scheduler"]
    max_seqs = sch["max_num_seqs"]
    mbt = sch["max_batched_tokens"]
    mml = sch["max_model_len"]
    mode = sch["prefill"]["mode"]
    mct = sch["prefill"].get("max_chunk_tokens")
    timer = make_timer(tp)

    reqs = [Req(i, d) for i, d in enumerate(wl["requests"])]
    workers = [Worker(i) for i in range(N)]
    heap = []
    seq = [0]

    def push(t, prio, payload):
        # R7: scheduling events at one instant go by worker index; the rest by creation order
        order = payload.i if prio == 2 else seq[0]
        heapq.heappush(heap, (t, prio, order, payload))
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
        C = sum(r.prompt + len(r.tokens) for r in decode)  # R22: context at the step's start
        P = sum(a for _, a in allot)
        assert D + P >= 1
        dur = timer(D, C, P)
        if dur is None:
            raise OutOfCoverage(uncovered_message(tp, tp_path, (D, C, P), w.i, now))
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
                    "shape": {"decode_requests": D, "context_tokens": C, "prefill_tokens": P},
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
                    "version": "0.2.0",
                    "protocol_version": 2,
                    "schema_versions": {
                        "scenario": ["1.0"],
                        "workload": ["1.0"],
                        "timing_profile": ["1.0", "1.1"],
                        "report": ["2.0"],
                    },
                    "features": [
                        "prefill.chunked",
                        "routing.random",
                        "timing.grid",
                        "timing.regression",
                        "trace",
                    ],
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
    tp = docs["timing_profile"]
    problems = check_measured(tp)
    if problems:
        for pr in problems:
            print("error: %s: %s (R40)" % (a.timing_profile, pr), file=sys.stderr)
        return 2
    try:
        summary, wout, rout, trace = simulate(
            docs["scenario"], docs["workload"], tp, a.trace, a.timing_profile
        )
    except InvalidInput as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    except OutOfCoverage as e:
        print(str(e), file=sys.stderr)
        return 3
    inputs = {k: {"sha256": hashlib.sha256(v).hexdigest()} for k, v in raw.items()}
    inputs["timing_profile"]["calibration"] = tp.get("calibration")  # R25
    report = {
        "document": "report",
        "schema_version": "2.0",
        "inputs": inputs,
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
