#!/usr/bin/env python3
"""Clean-room servesim replay, written from SPEC.md sections 2-7, 10 to 13 and 15 to 18 and the
issue-28 text of section 19 (R125 to R140: continuing turns and the host KV tier) only.

An outside implementation, for showing how the conformance suite checks one: it was written
from the specification without reading the reference, and it does not validate its input
(sections 1 and 8; of the input rules it checks only R40's agreements of a measured timing
profile, the schema versions it reads, section 11's members with R4's checks of them,
section 12's routing members, section 13's members with R4's checks of them, section 15's
pools with R77's checks and R84's --timing-profile arguments, section 16's style and sglang
members with R88's checks, and section 17's role, kv_transfer and routing.decode with R97's
and R99's checks, section 18's scaling and failures with R110's, R115's and R116's checks, and
section 19's kv_cache.host and session_prompts_extend with R129's checks), so the suite's invalid
tier finds that. With --report-version 10.0 it reads scenarios 1.0 to 1.8 (1.8: section 19's host
tier) and workloads 1.0 to 1.3 (1.3: continuing turns) and writes report 10.0 (R140, R141), the current one and the default. With --report-version 9.0 it reads
scenarios 1.0 to 1.7 (1.7: the fleet that changes of section 18, scaling, failures, migration
and recovery; 1.6: the disaggregated prefill and
decode of section 17; 1.5: the scheduler styles vllm, sglang and trtllm of section 16; 1.4:
the pools, ranks and weighted round robin of section 15; 1.3: the closed loop, the stop time
and the objectives of section 13; 1.2: the state-aware routing of section 12), workloads 1.0
to 1.2 (1.2: section 13's sessions; 1.1 and scenario 1.1: the KV cache, prefix caching and
preemption of section 11) and timing profiles 1.0 and 1.1 (the synthetic_linear, grid and
regression models), one for every pool or one per pool (--timing-profile POOL=FILE, R84), and
writes report 9.0 (R123, R124). With --report-version 8.0 it writes report
8.0 and reads scenarios up to 1.6; with 7.0 report 7.0 and scenarios up to 1.5; with 6.0
report 6.0 and scenarios up to 1.4; with 5.0 report 5.0 and scenarios up to 1.3; with 4.0
report 4.0, scenarios up to 1.2 and workloads up to 1.1; with 3.0 report 3.0, scenarios and
workloads up to 1.1; with 2.0 report 2.0 and 1.0 inputs only (R2, R38). It speaks
conformance protocol 5 (exit 3 when a step's shape is outside the profile's coverage, R43;
timing.per_pool, R87). See README.md, QUESTIONS-kv.md,
QUESTIONS-routing.md, QUESTIONS-sessions.md, QUESTIONS-pools.md, QUESTIONS-styles.md,
QUESTIONS-disagg.md, QUESTIONS-fleet.md and QUESTIONS-host.md beside it.
"""

import argparse, hashlib, heapq, json, os, sys, tempfile
from fractions import Fraction
import rfc8785

MAX_T = 2**53 - 1
Q = 300_000_000  # R89: the new-token ratio's fixed denominator
MASK = 2**64 - 1
REASONS = [
    "empty_prompt",
    "zero_max_output_tokens",
    "context_exceeds_max_model_len",
    "prefill_exceeds_step_budget",
    "exceeds_kv_cache",
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
        self.recorded = d["arrival_us"]  # the workload's arrival_us
        self.arrival = None  # when it actually arrived (R26, R60); None until it does
        self.session = d.get("session")  # R59
        self.think = d.get("think_time_us", 0)
        self.next_turn = None  # the session's next turn (R59)
        self.unit = None  # the unit it belongs to (R61)
        self.prompt = d["prompt_tokens"]
        self.max_out = d["max_output_tokens"]
        self.hashes = d.get("prefix_hashes", [])
        self.worker = None
        self.reason = None
        self.target = self.prompt  # L: the tokens to compute before the next token (R48)
        self.cached = 0  # cached tokens (R46); without a cache, the tokens computed so far
        self.blocks = []  # held blocks, block j at index j (R46)
        self.tokens = []
        self.first_sched = None
        self.done_t = None
        self.reused = 0  # reused_prompt_tokens: h*B at the first admission (R48)
        self.running = False  # in its worker's running list
        self.preemptions = 0
        self.retractions = 0  # R91, R95: times it was a victim of a retraction (sglang)
        self.cached_at_routing = None  # R57
        self.cut = False  # cut off at the stop time (R62)
        # Section 17 (a disaggregated fleet): R100's hidden token counts as a produced token
        # on the decode side (R105), never as a client token (self.tokens holds client tokens)
        self.hidden = 0
        self.prank = None  # its prefill scheduler (R99)
        self.pblocks = []  # the blocks it keeps there once Held (R100), released at R104
        self.prefill_end = None  # R100
        self.drank = None  # its decode scheduler (R99), once routed on the decode side
        self.dhits = 0  # its decode hit blocks (R102)
        self.reserved = None  # R102: when it got its reservation
        self.ttokens = self.tus = self.dreused = None  # R103, R102: known at the reservation
        self.t_end = None  # R104: its transfer end, once processed
        self.activation = None  # R104
        self.done_worker = None  # the worker it completed on (R107: a pool's completed tokens)
        # Section 18: migrations (R118), the failure that ended it, lost and recomputed tokens
        self.migrations = []  # R123's entries
        self.fail_reason = None
        self.lost = 0
        self.recomputed = 0
        self.rc = None  # this attempt's (lost mark, covered intervals) after a migration
        self.recompute = False  # R50: a request recomputing after a preemption (or R118)
        self.failed = False
        self.rank = None
        self.stage = None  # R121: "held", "pending", "transferring", "ready" or "decode"
        self.t_gen = 0  # counts its transfers: a discarded one's end does nothing
        # Section 19 (R125 to R140): its canonical list (R126) and, when its successor
        # continues it, (min(P_k + max_output_tokens_k, P_k+1), the successor's canonical list)
        # for its generated tokens' blocks (R127); its host tier figures (R137, R140)
        self.canon = self.hashes
        self.succ = None
        self.host_reused = 0  # host_reused_prompt_tokens: m*B at its first admission
        self.load_wait = 0  # the sum of its completed loads' end minus submission
        self.host_seen = False  # routed to a scheduler with a host pool (load_wait_us not null)
        self.load = None  # its load in flight or completed: (g, m, entries), while loading
        self.loaded = False  # R134: loaded (its load completed), still in the loading list
        self.load_key = None  # (end, submission number) of its last load's completion

    def produced(self):  # the tokens it produced, the hidden one included (R48, R105)
        return len(self.tokens) + self.hidden

    @property
    def decoding(self):  # Decode state: everything up to the last produced token is computed
        return self.cached >= self.target


class Block:
    """One physical block of a worker's cache (R45): held, cached or free."""

    def __init__(self):
        self.holders = 0
        self.identity = None  # its key in the registry while registered (R47)
        self.release_no = None  # while cached (R46)


class Entry:
    """One entry of a host pool (R129): an identity, pending or resident, and its pin count."""

    def __init__(self, identity):
        self.identity = identity
        self.pending = True
        self.pins = 0
        self.recency = None  # its host recency number (R132), once it has one


class HostPool:
    """A scheduler's host pool (R129) with its two FIFO lanes (R130) and its counters (R140)."""

    def __init__(self, spec, B):
        self.cap = spec["blocks"]
        self.block_bytes = B * spec["bytes_per_token"]
        self.W = {"store": spec["store_bytes_per_s"], "load": spec["load_bytes_per_s"]}
        self.lane_end = {"store": 0, "load": 0}  # E: the end of the lane's last transfer
        self.entries = {}  # identity -> Entry, at most one entry per identity
        self.counter = 0  # the next host recency number (R132)
        self.stores = self.stored_blocks = self.loads = self.loaded_blocks = 0
        self.reused_tokens = self.evictions = self.skipped_blocks = 0

    def number(self, entries):  # R132: from the last block to the first
        for e in reversed(entries):
            e.recency = self.counter
            self.counter += 1


class Cache:
    """A worker's KV cache, R45 to R49, kept literally: blocks are made when first taken."""

    def __init__(self, blocks, block_tokens):
        self.size = blocks
        self.B = block_tokens
        self.untouched = blocks  # free blocks never taken yet
        self.free_list = []  # free blocks taken before (all free blocks are alike)
        self.cached = {}  # release number -> block, in increasing release number
        self.registry = {}  # identity -> block (R47)
        self.next_release = 0
        self.held = 0
        self.peak = 0
        self.reused_tokens = self.preemptions = self.evictions = 0
        self.retractions = 0  # R95: R91's victims on this cache (sglang)
        self.peak_reserved = 0  # R95: trtllm's held plus reserved blocks, once a step is formed

    def free(self):
        return self.untouched + len(self.free_list)

    def check(self):  # R45: held + cached + free = blocks
        assert self.held + len(self.cached) + self.free() == self.size

    def take(self):  # R49: a free block if there is one, else evict the least recently released
        if self.untouched > 0:
            self.untouched -= 1
            b = Block()
        elif self.free_list:
            b = self.free_list.pop()
        else:
            first = min(self.cached)  # release numbers are unique: no tie
            b = self.cached.pop(first)
            b.release_no = None
            del self.registry[b.identity]
            b.identity = None
            self.evictions += 1
        b.holders = 1
        self.held += 1
        return b

    def wipe(self):  # R117 step 3: every block free, the registry empty, no release
        self.untouched = self.size
        self.free_list = []
        self.cached = {}
        self.registry = {}
        self.next_release = 0
        self.held = 0

    def hold(self, b):  # become one more holder of a registered block (R48)
        if b.holders == 0:
            del self.cached[b.release_no]
            b.release_no = None
            self.held += 1
        b.holders += 1

    def release(self, r):  # R46: from the last block to the first
        for b in reversed(r.blocks):
            b.holders -= 1
            if b.holders == 0:
                self.held -= 1
                if b.identity is not None:
                    b.release_no = self.next_release
                    self.next_release += 1
                    self.cached[b.release_no] = b
                else:
                    self.free_list.append(b)
        r.blocks = []


def ceil_div(a, b):
    return -(-a // b)


def footprint(r, B, role=None):  # R93: f_r, a request's to-completion blocks
    # R100: on a prefill scheduler a request is one whose max_output_tokens is 1
    if role == "prefill":  # R121: a migrated request's L in place of prompt_tokens
        return ceil_div(r.prompt + len(r.tokens) + 1, B)
    return ceil_div(r.prompt + r.max_out, B)


# The input versions read with each report version written (R2, R38: reading scenario or
# workload 1.1 needs report 3.0 or later, reading scenario 1.2 needs report 4.0).
READS = {
    "2.0": {"scenario": ["1.0"], "workload": ["1.0"]},
    "3.0": {"scenario": ["1.0", "1.1"], "workload": ["1.0", "1.1"]},
    "4.0": {"scenario": ["1.0", "1.1", "1.2"], "workload": ["1.0", "1.1"]},
    # R38: reading scenario 1.3 or workload 1.2 needs report 5.0
    "5.0": {"scenario": ["1.0", "1.1", "1.2", "1.3"], "workload": ["1.0", "1.1", "1.2"]},
    # R86: reading scenario 1.4 (pools, dp_size, weighted round robin) needs report 6.0
    "6.0": {
        "scenario": ["1.0", "1.1", "1.2", "1.3", "1.4"],
        "workload": ["1.0", "1.1", "1.2"],
    },
    # R96: reading scenario 1.5 (scheduler styles, section 16) needs report 7.0
    "7.0": {
        "scenario": ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5"],
        "workload": ["1.0", "1.1", "1.2"],
    },
    # R108: reading scenario 1.6 (disaggregated prefill and decode, section 17) needs report 8.0
    "8.0": {
        "scenario": ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6"],
        "workload": ["1.0", "1.1", "1.2"],
    },
    # R124: reading scenario 1.7 (a fleet that changes, section 18) needs report 9.0
    "9.0": {
        "scenario": ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7"],
        "workload": ["1.0", "1.1", "1.2"],
    },
    # R141 (draft H17): reading scenario 1.8 (the host KV tier, section 19) needs report 10.0;
    # this implementation reads workload 1.3 (continuing turns) only when writing 10.0
    "10.0": {
        "scenario": ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7", "1.8"],
        "workload": ["1.0", "1.1", "1.2", "1.3"],
    },
}


STATE_AWARE = ("least_loaded", "cache_aware")  # section 12
WEIGHTS = ("prefill_weight", "load_weight")  # R56


POOL_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def is_pool_name(x):  # R77: 1 to 64 characters, each an ASCII letter, digit, "_" or "-"
    return isinstance(x, str) and 1 <= len(x) <= 64 and all(c in POOL_NAME_CHARS for c in x)


class Pool:
    """A pool (R77): its name, workers, ranks per worker, weight, limits, cache and profile."""

    def __init__(self, name, workers, dp_size, weight, limits, kv, role=None):
        self.name = name
        self.workers = workers
        self.dp_size = dp_size
        self.weight = weight
        self.limits = limits  # the scheduler it uses: its own or the scenario's
        self.kv = kv  # the kv_cache it uses: its own, the scenario's or None
        # R88: the style of its limits ("vllm" when absent: a pool's own scheduler does not
        # inherit the scenario's style), and scheduler.sglang's two knobs with their defaults
        self.style = limits.get("style", "vllm")
        sglang = limits.get("sglang", {})
        self.clip = sglang.get("clip_max_new_tokens", 4096)
        self.cons = sglang.get("conservativeness_permille", 1000)
        self.tp = self.tp_path = self.tp_raw = self.timer = None  # its timing profile (R84)
        self.role = role  # R97: "prefill", "decode" or None (aggregated)
        self.scaling = None  # R110: its scaling, or None


def pools_of(scn):
    """R77: the fleet as pools. fleet.workers (with fleet.dp_size, 1 when absent) is one pool
    named "default" with the scenario's scheduler and kv_cache and weight 1."""
    fleet = scn["fleet"]
    if "pools" not in fleet:
        p = Pool(
            "default",
            fleet["workers"],
            fleet.get("dp_size", 1),
            1,
            scn["scheduler"],
            scn.get("kv_cache"),
        )
        p.scaling = fleet.get("scaling")
        return [p]
    out = [
        Pool(
            p["name"],
            p["workers"],
            p.get("dp_size", 1),
            p.get("weight", 1),
            p.get("scheduler", scn["scheduler"]),
            p.get("kv_cache", scn.get("kv_cache")),
            p.get("role"),  # R97
        )
        for p in fleet["pools"]
    ]
    for p, d in zip(out, fleet["pools"]):
        p.scaling = d.get("scaling")
    return out


class Rank:
    """One scheduler (R78): a rank q of a worker, with its own waiting queue and running list,
    its pool's limits and its own cache (registry, release numbers, counters). With dp_size 1
    it is the worker of sections 2 to 13."""

    def __init__(self, worker, q, pool, H):
        self.worker = worker
        self.q = q
        self.pool = pool
        self.waiting = []  # FIFO
        self.running = []
        self.routed = self.completed = self.steps = self.busy_us = 0
        self.peak_running = self.peak_waiting = 0
        self.prefill_tokens = self.decode_tokens = self.output_tokens = 0
        self.step = None  # its step in the pass in flight: (decode, allot, duration)
        self.outstanding = 0  # R54, R82: routed here and not completed
        self.load_blocks = 0  # R54, R82: their prompts in blocks (with a cache)
        self.resq = []  # R102: the reservation queue (Pending requests), decode ranks only
        self.resv = []  # R102: its Transferring and Ready requests, in reservation order
        self.handed_off = self.activated = 0  # R107
        self.held = set()  # a prefill rank's requests whose blocks it keeps (R100, R112)
        kv = pool.kv
        self.cache = None if kv is None else Cache(kv["blocks"], kv["block_tokens"])
        if self.cache is not None:
            self.cache.caching = bool(kv["prefix_caching"])
            self.cache.k = H // kv["block_tokens"] if H else None  # R47: blocks per hash
        # R129: its own host pool and lanes when its cache has host; R134: its loading list
        # (loading and loaded requests, in the order they started loading)
        self.host = (
            None if kv is None or "host" not in kv else HostPool(kv["host"], kv["block_tokens"])
        )
        self.loading = []
        if pool.style == "sglang":  # R89, R94: each rank's own new-token ratio n / Q
            self.n_init = min(210000 * pool.cons, Q)
            self.n_min = self.n_init * 14 // 100
            self.n_decay = (self.n_init - self.n_min) // 600
            assert self.n_init * 14 % 100 == 0  # R89: all three are integers
            assert (self.n_init - self.n_min) % 600 == 0
            self.n = self.n_init


class Worker:
    """A worker (R78): global index i, its pool, its index within the pool and its ranks,
    which share one pass barrier (R83)."""

    def __init__(self, i, pool, pool_worker, H):
        self.i = i
        self.pool = pool
        self.pool_worker = pool_worker
        self.ranks = [Rank(self, q, pool, H) for q in range(pool.dp_size)]
        self.busy = False  # a pass is in flight (R83)
        self.sched_pending = False
        self.steps = self.busy_us = 0  # its passes and their durations (R85)
        self.peak_running = self.peak_waiting = self.peak_blocks = 0  # totals over ranks (R85)
        self.peak_reserved = 0  # R95: trtllm's held plus reserved blocks, totalled over ranks
        self.inflight = None  # the pass in flight: (start, end, [rank with a step, ...])
        self.rotation = 0  # R80: requests the policy placed here so far
        self.current = 0  # R81: the current weight
        self.ready = []  # R104: its Ready requests, activated at its pass in flight's end
        # Section 18 (R109, R123)
        self.state = "active"
        self.life = [["active", 0]]
        self.created = 0
        self.gen = 0  # counts its startups: a startup end of an older one does nothing
        self.pass_no = 0  # counts its passes: a cut pass's completion event is discarded
        self.failures = self.migrated_out = self.failed_requests = self.lost_tokens = 0
        self.entries = []  # the trace entries of its pass in flight

    def has_requests(self):  # R112: anything on any rank, a prefill side's Held included
        return any(rk.waiting or rk.running or rk.resq or rk.resv or rk.held for rk in self.ranks)

    def waiting_total(self):
        return sum(len(rk.waiting) for rk in self.ranks)


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
            probs.append(
                "/model/coverage/%s: min %d is greater than max %d"
                % (k, cov[k]["min"], cov[k]["max"])
            )
    if kind == "grid":
        axes = m["axes"]
        for k in DIMS:
            a = axes[k]
            if any(a[i] >= a[i + 1] for i in range(len(a) - 1)):
                probs.append("/model/axes/%s: not strictly increasing" % k)
            if cov[k]["min"] != a[0] or cov[k]["max"] != a[-1]:
                probs.append(
                    "/model/coverage/%s: expected exactly [%d, %d], the axis's first "
                    "and last point" % (k, a[0], a[-1])
                )
        nd, nc, npf = (len(axes[k]) for k in DIMS)
        dur = m["duration_us"]
        if len(dur) != nd:
            probs.append(
                "/model/duration_us: %d entries, expected %d (decode_requests points)"
                % (len(dur), nd)
            )
        for d, row in enumerate(dur):
            if len(row) != nc:
                probs.append(
                    "/model/duration_us/%d: %d entries, expected %d (context_tokens "
                    "points)" % (d, len(row), nc)
                )
            for c, cell in enumerate(row):
                if len(cell) != npf:
                    probs.append(
                        "/model/duration_us/%d/%d: %d entries, expected %d "
                        "(prefill_tokens points)" % (d, c, len(cell), npf)
                    )
    else:
        kn = [k["tokens"] for k in m["prefill_knots"]]
        if any(kn[i] >= kn[i + 1] for i in range(len(kn) - 1)):
            probs.append("/model/prefill_knots: tokens not strictly increasing")
        if cov["prefill_tokens"]["min"] != kn[0] or cov["prefill_tokens"]["max"] != kn[-1]:
            probs.append(
                "/model/coverage/prefill_tokens: expected exactly [%d, %d], the first "
                "and last knot's tokens" % (kn[0], kn[-1])
            )
    lim = tp["calibration"]["limits"]
    if cov["decode_requests"]["max"] > lim["max_num_seqs"]:
        probs.append(
            "/model/coverage/decode_requests/max: greater than "
            "calibration.limits.max_num_seqs %d" % lim["max_num_seqs"]
        )
    if cov["prefill_tokens"]["max"] > lim["max_batched_tokens"]:
        probs.append(
            "/model/coverage/prefill_tokens/max: greater than "
            "calibration.limits.max_batched_tokens %d" % lim["max_batched_tokens"]
        )
    if cov["context_tokens"]["max"] > lim["max_num_seqs"] * lim["max_model_len"]:
        probs.append(
            "/model/coverage/context_tokens/max: greater than max_num_seqs * "
            "max_model_len = %d" % (lim["max_num_seqs"] * lim["max_model_len"])
        )
    return probs


def is_int(x, lo, hi):  # R1: a JSON integer, not a boolean, not 1.0
    return type(x) is int and lo <= x <= hi


def check_kv(scn, wl, reads):
    """The checks of section 11's members (R2, R3, R4, R53): a list of (role, pointer,
    expected). reads maps "scenario" and "workload" to the versions read. The rest of R1 to
    R4 is not checked here (README.md)."""
    probs = []
    for role, doc in (("scenario", scn), ("workload", wl)):
        v = doc.get("schema_version")
        if v not in reads[role]:
            newer = [x for x in READS if v in READS[x][role]]
            hint = (
                "; it reads %s %s when asked for report %s (--report-version %s, R38)"
                % (role, v, newer[0], newer[0])
                if newer
                else ""
            )
            probs.append(
                (
                    role,
                    "/schema_version",
                    "one of the versions this implementation "
                    "reads, %s (R2); got %s%s" % (", ".join(reads[role]), json.dumps(v), hint),
                )
            )
    if probs:
        return probs
    kv = scn.get("kv_cache")
    if "kv_cache" in scn:
        if scn["schema_version"] == "1.0":
            probs.append(
                (
                    "scenario",
                    "/kv_cache",
                    'no kv_cache in a scenario 1.0: it needs schema_version "1.1" (R53)',
                )
            )
        elif not isinstance(kv, dict):
            probs.append(
                ("scenario", "/kv_cache", "an object {blocks, block_tokens, prefix_caching} (R45)")
            )
        else:
            for m in ("blocks", "block_tokens", "prefix_caching"):
                if m not in kv:
                    probs.append(("scenario", "/kv_cache", "the required member %s (R45)" % m))
            for m in sorted(kv):
                if m not in ("blocks", "block_tokens", "prefix_caching", "host"):  # host: R129
                    probs.append(
                        (
                            "scenario",
                            "/kv_cache/" + m.replace("~", "~0").replace("/", "~1"),
                            "no such member (R3)",
                        )
                    )
            if "blocks" in kv and not is_int(kv["blocks"], 1, 2**32 - 1):
                probs.append(("scenario", "/kv_cache/blocks", "an integer 1 to 2^32-1 (R45)"))
            if "block_tokens" in kv and not is_int(kv["block_tokens"], 1, 2**20):
                probs.append(("scenario", "/kv_cache/block_tokens", "an integer 1 to 2^20 (R45)"))
            if "prefix_caching" in kv and type(kv["prefix_caching"]) is not bool:
                probs.append(("scenario", "/kv_cache/prefix_caching", "true or false (R45)"))
    wv = wl["schema_version"]
    H = wl.get("prefix_hash_block_tokens")
    if "prefix_hash_block_tokens" in wl:
        if wv == "1.0":
            probs.append(
                (
                    "workload",
                    "/prefix_hash_block_tokens",
                    "no prefix_hash_block_tokens "
                    'in a workload 1.0: it needs schema_version "1.1" (R53)',
                )
            )
        elif not is_int(H, 1, 2**20):
            probs.append(("workload", "/prefix_hash_block_tokens", "an integer 1 to 2^20 (R47)"))
    for i, r in enumerate(wl.get("requests", [])):
        if not isinstance(r, dict) or "prefix_hashes" not in r:
            continue
        ptr = "/requests/%d/prefix_hashes" % i
        hs = r["prefix_hashes"]
        if wv == "1.0":
            probs.append(
                (
                    "workload",
                    ptr,
                    'no prefix_hashes in a workload 1.0: it needs schema_version "1.1" (R53)',
                )
            )
            continue
        if not isinstance(hs, list):
            probs.append(("workload", ptr, "a list of integers 0 to 2^53-1 (R47)"))
            continue
        for n, x in enumerate(hs):
            if not is_int(x, 0, 2**53 - 1):
                probs.append(("workload", "%s/%d" % (ptr, n), "an integer 0 to 2^53-1 (R47)"))
        if "prefix_hash_block_tokens" not in wl:
            probs.append(
                (
                    "workload",
                    ptr,
                    "prefix_hashes only with the workload's prefix_hash_block_tokens (R4)",
                )
            )
        elif is_int(H, 1, 2**20) and type(r.get("prompt_tokens")) is int:
            most = -(-r["prompt_tokens"] // H)
            if len(hs) > most:
                probs.append(
                    (
                        "workload",
                        ptr,
                        "at most ceil(prompt_tokens / "
                        "prefix_hash_block_tokens) = %d hashes, got %d (R4)" % (most, len(hs)),
                    )
                )
    if (
        isinstance(kv, dict)
        and is_int(kv.get("block_tokens"), 1, 2**20)
        and is_int(H, 1, 2**20)
        and H % kv["block_tokens"] != 0
    ):
        probs.append(
            (
                "workload",
                "/prefix_hash_block_tokens",
                "a multiple of the scenario's "
                "kv_cache.block_tokens %d, got %d (R4, R47)" % (kv["block_tokens"], H),
            )
        )
    return probs


def check_routing(scn):
    """The checks of section 12's members (R3, R55, R56, R57): a list of (role, pointer,
    expected). Only what section 12 adds is checked; round_robin and random are left as
    before (README.md)."""
    probs = []
    routing = scn.get("routing")
    if not isinstance(routing, dict):
        return probs
    policy = routing.get("policy")
    version = scn.get("schema_version")
    if policy == "weighted_round_robin":  # R81: scenario 1.4, no other member
        if version not in ("1.4", "1.5", "1.6", "1.7", "1.8"):
            probs.append(
                (
                    "scenario",
                    "/routing/policy",
                    '"weighted_round_robin" only in a scenario 1.4 (R86); got a scenario %s'
                    % version,
                )
            )
        for m in sorted(routing):
            if m != "policy":
                probs.append(
                    (
                        "scenario",
                        "/routing/" + pointer_token(m),
                        'no such member with policy "weighted_round_robin" (R81)',
                    )
                )
        return probs
    if policy not in ("round_robin", "random", *STATE_AWARE):
        probs.append(
            (
                "scenario",
                "/routing/policy",
                '"round_robin", "random" or (scenario 1.2) "least_loaded" or "cache_aware" '
                "(R3); got %s" % json.dumps(policy),
            )
        )
    elif policy in STATE_AWARE and version in ("1.0", "1.1"):
        probs.append(
            (
                "scenario",
                "/routing/policy",
                '"round_robin" or "random" in a scenario %s: %s needs schema_version "1.2" '
                "(R57)" % (version, json.dumps(policy)),
            )
        )
    for m in sorted(routing):
        ptr = "/routing/" + m.replace("~", "~0").replace("/", "~1")
        if m == "decode" or m == "policy" or (policy not in STATE_AWARE and m not in WEIGHTS):
            continue  # round_robin and random: their members are not checked here; R99's
            # routing.decode is checked by check_disagg
        if m == "seed":  # R58: a state-aware policy may have a seed
            if not is_int(routing[m], 0, 2**64 - 1):
                probs.append(("scenario", ptr, "an integer 0 to 2^64-1 (R3, R58)"))
            continue
        if m not in WEIGHTS:
            probs.append(
                (
                    "scenario",
                    ptr,
                    "no such member with policy %s (R3, R55, R56)" % json.dumps(policy),
                )
            )
        elif policy != "cache_aware":
            probs.append(
                (
                    "scenario",
                    ptr,
                    "no %s with policy %s: only cache_aware has weights (R56)"
                    % (m, json.dumps(policy)),
                )
            )
        elif not is_int(routing[m], 0, 65536):
            probs.append(("scenario", ptr, "an integer 0 to 65536 (R56)"))
    if policy == "cache_aware":
        weights = [routing.get(m, 1) for m in WEIGHTS]
        if weights == [0, 0] and all(type(x) is int for x in weights):
            probs.append(
                ("scenario", "/routing", "prefill_weight and load_weight not both 0 (R56)")
            )
        kv = scn.get("kv_cache")
        if isinstance(scn.get("fleet"), dict) and "pools" in scn["fleet"]:
            pass  # R77: each pool's cache, checked by check_pools
        elif not isinstance(kv, dict):
            probs.append(
                (
                    "scenario",
                    "/routing/policy",
                    "a scenario with kv_cache and prefix_caching true for policy "
                    '"cache_aware" (R56); this one has no kv_cache',
                )
            )
        elif kv.get("prefix_caching") is not True:
            probs.append(
                (
                    "scenario",
                    "/kv_cache/prefix_caching",
                    'true: routing policy "cache_aware" needs prefix caching (R56)',
                )
            )
    return probs


def check_pools(scn, wl):
    """The checks of section 15's members (R3, R4, R77, R86): a list of (role, pointer,
    expected). The pools' own scheduler and kv_cache are checked only for R4's agreements."""
    probs = []
    fleet = scn.get("fleet")
    if not isinstance(fleet, dict):
        return probs
    v14 = scn.get("schema_version") in ("1.4", "1.5", "1.6", "1.7", "1.8")
    policy = scn.get("routing", {}).get("policy") if isinstance(scn.get("routing"), dict) else None
    if "dp_size" in fleet:
        if not v14:
            probs.append(
                ("scenario", "/fleet/dp_size", 'no dp_size before schema_version "1.4" (R86)')
            )
        elif "pools" in fleet:
            probs.append(("scenario", "/fleet/dp_size", "no fleet.dp_size with fleet.pools (R77)"))
        elif not is_int(fleet["dp_size"], 1, 1024):
            probs.append(("scenario", "/fleet/dp_size", "an integer 1 to 1024 (R77)"))
    if "pools" not in fleet:
        return probs
    if not v14:
        probs.append(("scenario", "/fleet/pools", 'no pools before schema_version "1.4" (R86)'))
        return probs
    if "workers" in fleet:
        probs.append(("scenario", "/fleet", "exactly one of workers and pools (R77)"))
    pools = fleet["pools"]
    if not isinstance(pools, list) or not 1 <= len(pools) <= 256:
        probs.append(("scenario", "/fleet/pools", "a list of 1 to 256 pools (R77)"))
        return probs
    seen = set()
    ok = True
    H = wl.get("prefix_hash_block_tokens") if isinstance(wl, dict) else None
    members = ("name", "workers", "dp_size", "scheduler", "kv_cache", "weight", "role", "scaling")
    for i, p in enumerate(pools):
        at = "/fleet/pools/%d" % i
        if not isinstance(p, dict):
            probs.append(("scenario", at, "a pool object (R77)"))
            ok = False
            continue
        for m in sorted(p):
            if m not in members:
                probs.append(("scenario", at + "/" + pointer_token(m), "no such member (R3)"))
        for m in ("name", "workers"):
            if m not in p:
                probs.append(("scenario", at, "the required member %s (R77)" % m))
                ok = False
        if "name" in p:
            if not is_pool_name(p["name"]):
                probs.append(
                    ("scenario", at + "/name", "1 to 64 ASCII letters, digits, _ or - (R77)")
                )
            elif p["name"] in seen:
                probs.append(("scenario", at + "/name", "a name no earlier pool has (R4, R77)"))
            else:
                seen.add(p["name"])
        if "workers" in p and not is_int(p["workers"], 1, 65536):
            probs.append(("scenario", at + "/workers", "an integer 1 to 65536 (R77)"))
            ok = False
        if "dp_size" in p and not is_int(p["dp_size"], 1, 1024):
            probs.append(("scenario", at + "/dp_size", "an integer 1 to 1024 (R77)"))
            ok = False
        if "weight" in p:
            if policy != "weighted_round_robin":
                probs.append(
                    (
                        "scenario",
                        at + "/weight",
                        'no weight unless routing.policy is "weighted_round_robin" (R4, R77)',
                    )
                )
            elif not is_int(p["weight"], 1, 65536):
                probs.append(("scenario", at + "/weight", "an integer 1 to 65536 (R77)"))
        sch = p.get("scheduler")
        if isinstance(sch, dict):
            mns, mbt = sch.get("max_num_seqs"), sch.get("max_batched_tokens")
            if type(mns) is int and type(mbt) is int and mbt < mns:
                probs.append(
                    (
                        "scenario",
                        at + "/scheduler/max_batched_tokens",
                        "at least max_num_seqs (R4, R77)",
                    )
                )
        kv = p.get("kv_cache")
        if "kv_cache" in p and not (
            isinstance(kv, dict)
            and set(kv) - {"host"} == {"blocks", "block_tokens", "prefix_caching"}  # host: R129
            and is_int(kv["blocks"], 1, 2**32 - 1)
            and is_int(kv["block_tokens"], 1, 2**20)
            and type(kv["prefix_caching"]) is bool
        ):
            probs.append(
                (
                    "scenario",
                    at + "/kv_cache",
                    "an object {blocks, block_tokens, prefix_caching} (R45, R77)",
                )
            )
        elif isinstance(kv, dict) and is_int(H, 1, 2**20) and H % kv["block_tokens"] != 0:
            probs.append(
                (
                    "workload",
                    "/prefix_hash_block_tokens",
                    "a multiple of pool %s's kv_cache.block_tokens %d, got %d (R4, R77)"
                    % (p.get("name"), kv["block_tokens"], H),
                )
            )
    if ok:
        if sum(p["workers"] for p in pools) > 65536:
            probs.append(("scenario", "/fleet/pools", "at most 65536 workers in all (R4, R77)"))
        elif sum(p["workers"] * p.get("dp_size", 1) for p in pools) > 2**20:
            probs.append(("scenario", "/fleet/pools", "at most 2^20 ranks in all (R4, R77)"))
    if policy == "cache_aware":  # R77: every pool a prefix cache, one block size
        B = None
        disagg = any(isinstance(p, dict) and "role" in p for p in pools)
        for i, p in enumerate(pools):
            if not isinstance(p, dict):
                continue
            if disagg and p.get("role") != "prefill":
                continue  # R97: R77's rules on caches apply to the prefill pools only
            own = "kv_cache" in p
            kv = p["kv_cache"] if own else scn.get("kv_cache")
            at = "/fleet/pools/%d" % i + ("/kv_cache" if own else "")
            if not isinstance(kv, dict) or kv.get("prefix_caching") is not True:
                probs.append(
                    (
                        "scenario",
                        at,
                        'a cache with prefix_caching true for policy "cache_aware" (R4, R77)',
                    )
                )
                break
            if B is None:
                B = kv.get("block_tokens")
            elif kv.get("block_tokens") != B:
                probs.append(
                    (
                        "scenario",
                        at,
                        'the same block_tokens as every pool under "cache_aware" (R4, R77)',
                    )
                )
                break
    return probs


def is_id(x):  # R3, R59: 1 to 128 characters from "!" to "~"
    return isinstance(x, str) and 1 <= len(x) <= 128 and all("!" <= c <= "~" for c in x)


def pointer_token(m):  # RFC 6901
    return m.replace("~", "~0").replace("/", "~1")


def check_sessions(scn, wl):
    """The checks of section 13's members (R3, R4, R59, R61 to R64): a list of (role,
    pointer, expected). Only what section 13 adds is checked (README.md)."""
    probs = []
    sv, wv = scn.get("schema_version"), wl.get("schema_version")
    # scenario: closed_loop (R61), stop_at_us (R62), slo (R63), each needing 1.3 (R64)
    for m in ("closed_loop", "stop_at_us", "slo"):
        if m in scn and sv not in ("1.3", "1.4", "1.5", "1.6", "1.7", "1.8"):
            probs.append(
                (
                    "scenario",
                    "/" + m,
                    'no %s in a scenario %s: it needs schema_version "1.3" (R64)' % (m, sv),
                )
            )
    if sv in ("1.3", "1.4", "1.5", "1.6", "1.7", "1.8"):
        if "closed_loop" in scn:
            cl = scn["closed_loop"]
            if not isinstance(cl, dict):
                probs.append(("scenario", "/closed_loop", "an object {max_in_flight} (R61)"))
            else:
                if "max_in_flight" not in cl:
                    probs.append(
                        ("scenario", "/closed_loop", "the required member max_in_flight (R61)")
                    )
                elif not is_int(cl["max_in_flight"], 1, 2**32 - 1):
                    probs.append(
                        (
                            "scenario",
                            "/closed_loop/max_in_flight",
                            "an integer 1 to 2^32-1 (R61)",
                        )
                    )
                for m in sorted(cl):
                    if m != "max_in_flight":
                        probs.append(
                            ("scenario", "/closed_loop/" + pointer_token(m), "no such member (R3)")
                        )
        if "stop_at_us" in scn and not is_int(scn["stop_at_us"], 1, MAX_T):
            probs.append(("scenario", "/stop_at_us", "an integer 1 to 2^53-1 (R62)"))
        if "slo" in scn:
            slo = scn["slo"]
            bounds = ("ttft_us", "mean_itl_us", "e2e_us")
            if not isinstance(slo, dict):
                probs.append(
                    ("scenario", "/slo", "an object with ttft_us, mean_itl_us or e2e_us (R63)")
                )
            else:
                if not any(m in slo for m in bounds):
                    probs.append(
                        (
                            "scenario",
                            "/slo",
                            "at least one of ttft_us, mean_itl_us and e2e_us (R63)",
                        )
                    )
                for m in sorted(slo):
                    ptr = "/slo/" + pointer_token(m)
                    if m not in bounds:
                        probs.append(("scenario", ptr, "no such member (R3)"))
                    elif not is_int(slo[m], 0, MAX_T):
                        probs.append(("scenario", ptr, "an integer 0 to 2^53-1 (R63)"))
    # workload: sessions, session and think_time_us (R59), needing 1.2 (R64)
    reqs = wl.get("requests")
    reqs = reqs if isinstance(reqs, list) else []
    if wv not in ("1.2", "1.3"):
        if "sessions" in wl:
            probs.append(
                (
                    "workload",
                    "/sessions",
                    'no sessions in a workload %s: it needs schema_version "1.2" (R64)' % wv,
                )
            )
        for i, r in enumerate(reqs):
            for m in ("session", "think_time_us"):
                if isinstance(r, dict) and m in r:
                    probs.append(
                        (
                            "workload",
                            "/requests/%d/%s" % (i, m),
                            'no %s in a workload %s: it needs schema_version "1.2" (R64)' % (m, wv),
                        )
                    )
    else:
        ids = {}  # session id -> its position in sessions
        if "sessions" in wl:
            ss = wl["sessions"]
            if not isinstance(ss, list) or not ss:
                probs.append(("workload", "/sessions", "a list of at least one {id} (R59)"))
                ss = []
            for j, x in enumerate(ss):
                if not isinstance(x, dict) or "id" not in x:
                    probs.append(("workload", "/sessions/%d" % j, "an object {id} (R59)"))
                    continue
                for m in sorted(x):
                    if m != "id":
                        probs.append(
                            (
                                "workload",
                                "/sessions/%d/%s" % (j, pointer_token(m)),
                                "no such member (R3)",
                            )
                        )
                if not is_id(x["id"]):
                    probs.append(
                        (
                            "workload",
                            "/sessions/%d/id" % j,
                            'an id of 1 to 128 characters from "!" to "~" (R59)',
                        )
                    )
                elif x["id"] in ids:
                    probs.append(
                        (
                            "workload",
                            "/sessions/%d/id" % j,
                            "a session id not used before; %s is also /sessions/%d (R4, R59)"
                            % (json.dumps(x["id"]), ids[x["id"]]),
                        )
                    )
                else:
                    ids[x["id"]] = j
        turns = {}  # session id -> positions of its turns, in workload order
        for i, r in enumerate(reqs):
            if not isinstance(r, dict):
                continue
            if "session" in r:
                sid = r["session"]
                if not is_id(sid):
                    probs.append(
                        (
                            "workload",
                            "/requests/%d/session" % i,
                            'a session id of 1 to 128 characters from "!" to "~" (R59)',
                        )
                    )
                elif sid not in ids:
                    probs.append(
                        (
                            "workload",
                            "/requests/%d/session" % i,
                            "the id of a session in the workload's sessions; %s is not one "
                            "(R4, R59)" % json.dumps(sid),
                        )
                    )
                else:
                    turns.setdefault(sid, []).append(i)
            if "think_time_us" in r:
                ptr = "/requests/%d/think_time_us" % i
                if not is_int(r["think_time_us"], 0, MAX_T):
                    probs.append(("workload", ptr, "an integer 0 to 2^53-1 (R59)"))
                if "session" not in r:
                    probs.append(("workload", ptr, "think_time_us only with session (R4, R59)"))
                elif r["session"] in turns and turns[r["session"]] == [i]:
                    probs.append(
                        (
                            "workload",
                            ptr,
                            "no think_time_us on a session's turn 0 (R4, R59)",
                        )
                    )
        for sid, j in ids.items():
            if sid not in turns:
                probs.append(
                    (
                        "workload",
                        "/sessions/%d" % j,
                        "a session with at least one turn; no request names %s (R4, R59)"
                        % json.dumps(sid),
                    )
                )
        for sid, positions in turns.items():
            for prev, cur in zip(positions, positions[1:]):
                a, b = reqs[prev].get("arrival_us"), reqs[cur].get("arrival_us")
                if type(a) is int and type(b) is int and b < a:
                    probs.append(
                        (
                            "workload",
                            "/requests/%d/arrival_us" % cur,
                            "an arrival_us at least the previous turn's (/requests/%d), %d; "
                            "got %d (R4, R59)" % (prev, a, b),
                        )
                    )
    # scenario and workload together: R62's stop time after the first arrival (R4)
    stop = scn.get("stop_at_us")
    arrivals = [r.get("arrival_us") for r in reqs if isinstance(r, dict)]
    arrivals = [a for a in arrivals if type(a) is int]
    if (
        sv in ("1.3", "1.4", "1.5", "1.6", "1.7", "1.8")
        and is_int(stop, 1, MAX_T)
        and arrivals
        and stop <= min(arrivals)
    ):
        probs.append(
            (
                "scenario",
                "/stop_at_us",
                "a stop time greater than the workload's smallest arrival_us, %d; got %d "
                "(R4, R62)" % (min(arrivals), stop),
            )
        )
    return probs


STYLES = ("vllm", "sglang", "trtllm")  # R88
ROLES = ("prefill", "decode")  # R97
DECODE_POLICIES = ("round_robin", "random", "least_loaded")  # R99


def check_disagg(scn):
    """The checks of section 17's members (R3, R4, R97, R99, R108): a list of (role, pointer,
    expected)."""
    probs = []
    sv = scn.get("schema_version")
    fleet = scn.get("fleet") if isinstance(scn.get("fleet"), dict) else {}
    pools = fleet.get("pools") if isinstance(fleet.get("pools"), list) else []
    routing = scn.get("routing") if isinstance(scn.get("routing"), dict) else {}
    if sv not in (
        "1.6",
        "1.7",
        "1.8",
    ):  # R108: role, kv_transfer and routing.decode make the scenario 1.6
        late = [("/kv_transfer", "kv_transfer", "kv_transfer" in scn)]
        late.append(("/routing/decode", "routing.decode", "decode" in routing))
        for i, p in enumerate(pools):
            if isinstance(p, dict):
                late.append(("/fleet/pools/%d/role" % i, "role", "role" in p))
        for at, what, there in late:
            if there:
                probs.append(
                    (
                        "scenario",
                        at,
                        'no %s in a scenario %s: it needs schema_version "1.6" (R108)' % (what, sv),
                    )
                )
        return probs
    with_role = [isinstance(p, dict) and "role" in p for p in pools]
    disagg = any(with_role)
    if not disagg:  # aggregated: no kv_transfer, no routing.decode (R97)
        if "kv_transfer" in scn:
            probs.append(
                ("scenario", "/kv_transfer", "no kv_transfer in an aggregated scenario (R4, R97)")
            )
        if "decode" in routing:
            probs.append(
                (
                    "scenario",
                    "/routing/decode",
                    "no routing.decode in an aggregated scenario (R4, R97)",
                )
            )
        return probs
    roles = []
    missing = False  # R97: only the first pool without a role is reported
    for i, p in enumerate(pools):
        at = "/fleet/pools/%d" % i
        if not isinstance(p, dict):
            continue
        if "role" not in p:
            if not missing:
                probs.append(
                    ("scenario", at, "a role: every pool has one once any pool has (R4, R97)")
                )
            missing = True
            continue
        if p["role"] not in ROLES:
            probs.append(("scenario", at + "/role", '"prefill" or "decode" (R97)'))
            continue
        roles.append(p["role"])
        if p["role"] == "decode" and "weight" in p:
            probs.append(("scenario", at + "/weight", "no weight on a decode pool (R4, R97, R99)"))
        if "kv_cache" not in p and not isinstance(scn.get("kv_cache"), dict):
            probs.append(
                (
                    "scenario",
                    at,
                    "a cache (its own kv_cache or the scenario's) in a disaggregated "
                    "scenario (R4, R97)",
                )
            )
        own = "scheduler" in p
        sch = p["scheduler"] if own else scn.get("scheduler")
        if isinstance(sch, dict) and sch.get("style") == "sglang":
            probs.append(
                (
                    "scenario",
                    (at + "/scheduler" if own else "/scheduler") + "/style",
                    '"vllm" or "trtllm": no style "sglang" in a disaggregated scenario (R4, R97)',
                )
            )
    if "workers" in fleet:
        probs.append(("scenario", "/fleet", "pools, not workers, in a disaggregated fleet (R97)"))
    if all(with_role) and not all(x in roles for x in ROLES):
        probs.append(
            (
                "scenario",
                "/fleet/pools",
                "at least one pool of each role (R4, R97); got %s" % ", ".join(sorted(set(roles))),
            )
        )
    if "kv_transfer" not in scn:
        probs.append(("scenario", "", "the member kv_transfer in a disaggregated scenario (R97)"))
    else:
        kt = scn["kv_transfer"]
        bounds = {
            "bytes_per_token": (1, 2**32 - 1),
            "bandwidth_bytes_per_s": (1, MAX_T),
            "base_latency_us": (0, MAX_T),
        }
        if not isinstance(kt, dict):
            probs.append(("scenario", "/kv_transfer", "an object (R97)"))
        else:
            for m, (lo, hi) in bounds.items():
                if m not in kt:
                    probs.append(("scenario", "/kv_transfer", "the required member %s (R97)" % m))
                elif not is_int(kt[m], lo, hi):
                    probs.append(
                        (
                            "scenario",
                            "/kv_transfer/" + m,
                            "an integer %d to %d (R97)" % (lo, hi),
                        )
                    )
            if "mode" in kt and kt["mode"] not in ("destination_missing", "full_prompt"):
                probs.append(
                    (
                        "scenario",
                        "/kv_transfer/mode",
                        '"destination_missing" or "full_prompt" (R103)',
                    )
                )
            for m in sorted(kt):
                if m not in bounds and m != "mode":
                    probs.append(
                        ("scenario", "/kv_transfer/" + pointer_token(m), "no such member (R3)")
                    )
    if "decode" in routing:
        dec = routing["decode"]
        if not isinstance(dec, dict):
            probs.append(("scenario", "/routing/decode", "an object {policy} (R99)"))
        else:
            pol = dec.get("policy")
            if "policy" not in dec:
                probs.append(("scenario", "/routing/decode", "the required member policy (R99)"))
            elif pol not in DECODE_POLICIES:
                probs.append(
                    (
                        "scenario",
                        "/routing/decode/policy",
                        '"round_robin", "random" or "least_loaded" (R99); got %s' % json.dumps(pol),
                    )
                )
            if "seed" in dec:
                if pol == "round_robin":
                    probs.append(
                        ("scenario", "/routing/decode/seed", 'no seed with "round_robin" (R99)')
                    )
                elif not is_int(dec["seed"], 0, 2**64 - 1):
                    probs.append(
                        ("scenario", "/routing/decode/seed", "an integer 0 to 2^64-1 (R99)")
                    )
            elif pol == "random":
                probs.append(("scenario", "/routing/decode", 'the member seed with "random" (R99)'))
            for m in sorted(dec):
                if m not in ("policy", "seed"):
                    probs.append(
                        ("scenario", "/routing/decode/" + pointer_token(m), "no such member (R3)")
                    )
    return probs


def check_styles(scn):
    """The checks of section 16's members (R2, R3, R4, R88, R96): a list of (role, pointer,
    expected). Each scheduler object (the scenario's and every pool's own) is checked for
    style and sglang; R88's two agreements of R4 are checked against the limits every pool
    uses, with its cache, once per scheduler object (README.md, QUESTIONS-styles.md)."""
    probs = []
    v15 = scn.get("schema_version") in ("1.5", "1.6", "1.7", "1.8")
    fleet = scn.get("fleet") if isinstance(scn.get("fleet"), dict) else {}
    pools = fleet.get("pools") if isinstance(fleet.get("pools"), list) else []
    places = [("/scheduler", scn.get("scheduler"))]
    for i, p in enumerate(pools):
        if isinstance(p, dict) and "scheduler" in p:
            places.append(("/fleet/pools/%d/scheduler" % i, p["scheduler"]))
    broken = set()  # scheduler pointers whose style members are broken
    for at, sch in places:
        if not isinstance(sch, dict):
            continue
        if not v15:
            for m in ("style", "sglang"):
                if m in sch:
                    probs.append(
                        (
                            "scenario",
                            at + "/" + m,
                            'no %s in a scenario %s: it needs schema_version "1.5" (R96)'
                            % (m, scn.get("schema_version")),
                        )
                    )
                    broken.add(at)
            continue
        style = sch.get("style", "vllm")
        if style not in STYLES:
            probs.append(
                (
                    "scenario",
                    at + "/style",
                    '"vllm", "sglang" or "trtllm" (R88); got %s' % json.dumps(style),
                )
            )
            broken.add(at)
            continue
        if "sglang" in sch:
            if style != "sglang":
                probs.append(
                    (
                        "scenario",
                        at + ("/style" if "style" in sch else ""),
                        'style "sglang" for the options %s/sglang (R88); the style is %s'
                        % (at, json.dumps(style) if "style" in sch else 'absent ("vllm")'),
                    )
                )
                broken.add(at)
            opts = sch["sglang"]
            if not isinstance(opts, dict):
                probs.append(
                    (
                        "scenario",
                        at + "/sglang",
                        "an object {clip_max_new_tokens, conservativeness_permille} (R88)",
                    )
                )
                broken.add(at)
            else:
                for m in sorted(opts):
                    ptr = at + "/sglang/" + pointer_token(m)
                    if m == "clip_max_new_tokens":
                        if not is_int(opts[m], 1, 2**32 - 1):
                            probs.append(("scenario", ptr, "an integer 1 to 2^32-1 (R88)"))
                            broken.add(at)
                    elif m == "conservativeness_permille":
                        if not is_int(opts[m], 1, 10000):
                            probs.append(("scenario", ptr, "an integer 1 to 10000 (R88)"))
                            broken.add(at)
                    else:
                        probs.append(("scenario", ptr, "no such member (R3)"))
                        broken.add(at)
        if style == "sglang":
            pre = sch.get("prefill")
            if isinstance(pre, dict) and pre.get("mode") != "chunked":
                probs.append(
                    (
                        "scenario",
                        at + "/prefill/mode",
                        '"chunked" with style "sglang" (R88); got %s' % json.dumps(pre.get("mode")),
                    )
                )
                broken.add(at)
    if probs:
        return probs
    # R88's agreements (R4), for each pool whose limits have style "sglang", against its
    # limits and its cache, reported once at the limits' pointer
    uses = []  # (pointer of the limits, limits, the pool's cache, where that cache is)
    if "pools" in fleet:
        for i, p in enumerate(pools):
            if not isinstance(p, dict):
                continue
            if "scheduler" in p:
                at, sch = "/fleet/pools/%d/scheduler" % i, p["scheduler"]
            else:
                at, sch = "/scheduler", scn.get("scheduler")
            if "kv_cache" in p:
                kv, kv_at = (
                    p["kv_cache"],
                    "pool %s's (at /fleet/pools/%d/kv_cache)" % (p.get("name"), i),
                )
            else:
                kv, kv_at = scn.get("kv_cache"), "the scenario's"
            uses.append((at, sch, kv, kv_at))
    else:
        uses.append(("/scheduler", scn.get("scheduler"), scn.get("kv_cache"), "the scenario's"))
    said = set()
    for at, sch, kv, kv_at in uses:
        if at in said or not isinstance(sch, dict) or sch.get("style") != "sglang":
            continue
        pre = sch.get("prefill")
        mct = pre.get("max_chunk_tokens") if isinstance(pre, dict) else None
        mbt = sch.get("max_batched_tokens")
        if type(mct) is not int:
            continue
        ptr = at + "/prefill/max_chunk_tokens"
        if type(mbt) is int and mct > mbt:
            probs.append(
                (
                    "scenario",
                    ptr,
                    'at most max_batched_tokens %d with style "sglang"; got %d (R4, R88)'
                    % (mbt, mct),
                )
            )
            said.add(at)
        elif (
            isinstance(kv, dict)
            and is_int(kv.get("block_tokens"), 1, 2**20)
            and mct % kv["block_tokens"] != 0
        ):
            probs.append(
                (
                    "scenario",
                    ptr,
                    'a multiple of %s kv_cache.block_tokens %d with style "sglang"; got '
                    "%d (R4, R88)" % (kv_at, kv["block_tokens"], mct),
                )
            )
            said.add(at)
    return probs


def static_creations(pool_scaling, initial, fails):
    """R116's static existence for one pool without autoscale: replay its decisions, startup
    ends, failures and recovery starts in R113's order without requests. fails is a list of
    (position, at_us, pool_worker, recover_after_us or None) in list order. Returns the
    positions of the failures naming a pool_worker not created by their instant."""
    S = pool_scaling.get("startup_us", 0) if pool_scaling else 0
    schedule = pool_scaling.get("schedule", []) if pool_scaling else []
    state = ["active"] * initial
    gen = [0] * initial
    heap = []  # (time, priority, order, seq, what)
    n = [0]

    def push(t, prio, order, what):
        if t <= MAX_T:
            heapq.heappush(heap, (t, prio, order, n[0], what))
            n[0] += 1

    for pos, at, pw, rec in fails:
        push(at, 1, pos, ("fail", pw, rec, pos))
    for e in schedule:
        push(e["at_us"], 6, 0, ("target", e["target"]))
    bad = []
    while heap:
        t, _, _, _, what = heapq.heappop(heap)
        if what[0] == "fail":
            _, pw, rec, pos = what
            if pw >= len(state):
                bad.append(pos)
                continue
            if state[pw] in ("removed", "failed"):
                continue
            was = state[pw]
            state[pw] = "failed"
            gen[pw] += 1
            if rec is not None and was != "draining":
                push(t + rec, 2, pw, ("recover", pw))
        elif what[0] == "recover":
            pw = what[1]
            gen[pw] += 1
            if S == 0:
                state[pw] = "active"
            else:
                state[pw] = "starting"
                push(t + S, 2, pw, ("up", pw, gen[pw]))
        elif what[0] == "up":
            _, pw, g = what
            if state[pw] == "starting" and gen[pw] == g:
                state[pw] = "active"
        else:
            target = what[1]
            e = sum(1 for s in state if s in ("active", "starting"))
            if target > e:
                for _ in range(target - e):
                    if len(state) > 2**20:
                        return bad  # R110: beyond the limit the run stops (exit 2) anyway
                    state.append("starting" if S else "active")
                    gen.append(0)
                    if S:
                        push(t + S, 2, len(state) - 1, ("up", len(state) - 1, 0))
            elif target < e:
                k = e - target
                for i in range(len(state) - 1, -1, -1):
                    if k and state[i] == "starting":
                        state[i] = "removed"
                        k -= 1
                for i in range(len(state) - 1, -1, -1):
                    if k and state[i] == "active":
                        state[i] = "draining"
                        k -= 1
    return bad


def check_fleet(scn):
    """The checks of section 18's members (R3, R4, R110, R115, R116, R118, R124): a list of
    (role, pointer, expected)."""
    probs = []
    sv = scn.get("schema_version")
    fleet = scn.get("fleet") if isinstance(scn.get("fleet"), dict) else {}
    pools = fleet.get("pools") if isinstance(fleet.get("pools"), list) else None
    # (pointer of the pool, name, initial workers, scaling or None, has a cache)
    entries = []
    if pools is None:
        entries.append(
            ("/fleet", "default", fleet.get("workers"), fleet.get("scaling"), "kv_cache" in scn)
        )
    else:
        if "scaling" in fleet:
            probs.append(
                ("scenario", "/fleet/scaling", "no fleet.scaling beside fleet.pools (R110)")
            )
        for i, p in enumerate(pools):
            if isinstance(p, dict):
                cache = "kv_cache" in p or "kv_cache" in scn
                entries.append(
                    (
                        "/fleet/pools/%d" % i,
                        p.get("name"),
                        p.get("workers"),
                        p.get("scaling"),
                        cache,
                    )
                )
    present = [(at + "/scaling") for at, _, _, sc, _ in entries if sc is not None]
    if "failures" in scn:
        present.append("/failures")
    if sv not in ("1.7", "1.8"):
        for at in present:
            probs.append(
                (
                    "scenario",
                    at,
                    'no %s in a scenario %s: it needs schema_version "1.7" (R124)'
                    % (at.rsplit("/", 1)[1], sv),
                )
            )
        return probs
    autoscaled = set()
    for at, name, initial, sc, cache in entries:
        if sc is None:
            continue
        at = at + "/scaling"
        if not isinstance(sc, dict) or set(sc) - {"startup_us", "schedule", "autoscale"}:
            probs.append(("scenario", at, "an object {startup_us, schedule or autoscale} (R110)"))
            continue
        if "startup_us" in sc and not is_int(sc["startup_us"], 0, MAX_T):
            probs.append(("scenario", at + "/startup_us", "an integer 0 to 2^53-1 (R110)"))
        if "schedule" in sc and "autoscale" in sc:
            probs.append(("scenario", at, "at most one of schedule and autoscale (R110)"))
            continue
        if "schedule" in sc:
            sch = sc["schedule"]
            if not isinstance(sch, list) or not 1 <= len(sch) <= 65536:
                probs.append(("scenario", at + "/schedule", "a list of 1 to 65,536 entries (R110)"))
                continue
            prev = None
            for j, e in enumerate(sch):
                ptr = "%s/schedule/%d" % (at, j)
                if not isinstance(e, dict) or set(e) != {"at_us", "target"}:
                    probs.append(("scenario", ptr, "an object {at_us, target} (R110)"))
                    prev = None
                    continue
                if not is_int(e["at_us"], 0, MAX_T):
                    probs.append(("scenario", ptr + "/at_us", "an integer 0 to 2^53-1 (R110)"))
                    prev = None
                    continue
                if not is_int(e["target"], 0, 65536):
                    probs.append(("scenario", ptr + "/target", "an integer 0 to 65,536 (R110)"))
                if prev is not None and e["at_us"] <= prev:
                    probs.append(
                        (
                            "scenario",
                            ptr + "/at_us",
                            "a time greater than the previous entry's %d (R4, R110)" % prev,
                        )
                    )
                    break
                prev = e["at_us"]
        if "autoscale" in sc:
            autoscaled.add(name)
            a = sc["autoscale"]
            ap = at + "/autoscale"
            if not isinstance(a, dict):
                probs.append(("scenario", ap, "an object (R115)"))
                continue
            ranges = {
                "interval_us": (1, MAX_T, True),
                "up_permille": (0, 2**32 - 1, True),
                "down_permille": (0, 2**32 - 1, True),
                "min": (1, 65536, True),
                "max": (1, 65536, True),
                "step": (1, 65536, False),
                "cooldown_us": (0, MAX_T, False),
            }
            ok = True
            for k in a:
                if k not in ranges and k != "metric":
                    probs.append(("scenario", ap + "/" + k, "no member %s in autoscale (R115)" % k))
                    ok = False
            for k, (lo, hi, req) in ranges.items():
                if k not in a:
                    if req:
                        probs.append(("scenario", ap, "a member %s (R115)" % k))
                        ok = False
                elif not is_int(a[k], lo, hi):
                    probs.append(
                        ("scenario", ap + "/" + k, "an integer %d to %d (R115)" % (lo, hi))
                    )
                    ok = False
            metrics = ("waiting_per_worker", "outstanding_per_worker", "kv_use")
            if a.get("metric") not in metrics:
                probs.append(("scenario", ap + "/metric", "one of %s (R115)" % ", ".join(metrics)))
                ok = False
            if not ok:
                continue
            if a["down_permille"] >= a["up_permille"]:
                probs.append(
                    ("scenario", ap + "/down_permille", "less than up_permille (R4, R115)")
                )
            if a["min"] > a["max"]:
                probs.append(("scenario", ap + "/min", "at most max (R4, R115)"))
            elif is_int(initial, 1, 65536) and not a["min"] <= initial <= a["max"]:
                wat = "/fleet/workers" if pools is None else at.rsplit("/", 1)[0] + "/workers"
                probs.append(
                    (
                        "scenario",
                        wat,
                        "initial workers between autoscale's min %d and max %d (R4, R115)"
                        % (a["min"], a["max"]),
                    )
                )
            if a["metric"] == "kv_use" and not cache:
                probs.append(
                    ("scenario", ap + "/metric", 'a pool with a kv_cache for "kv_use" (R4, R115)')
                )
    if "failures" not in scn:
        return probs
    fl = scn["failures"]
    if not isinstance(fl, dict) or set(fl) - {"events", "policy", "max_migrations"}:
        probs.append(("scenario", "/failures", "an object {events, policy, max_migrations} (R116)"))
        return probs
    if fl.get("policy") not in ("migrate", "fail"):
        probs.append(("scenario", "/failures/policy", '"migrate" or "fail" (R118)'))
    elif fl["policy"] == "migrate":
        if "max_migrations" not in fl:
            probs.append(("scenario", "/failures", 'max_migrations with policy "migrate" (R118)'))
        elif not is_int(fl["max_migrations"], 1, 2**32 - 1):
            probs.append(("scenario", "/failures/max_migrations", "an integer 1 to 2^32-1 (R118)"))
    elif "max_migrations" in fl:
        probs.append(
            ("scenario", "/failures/max_migrations", 'no max_migrations with policy "fail" (R118)')
        )
    evs = fl.get("events")
    if not isinstance(evs, list) or not 1 <= len(evs) <= 65536:
        probs.append(("scenario", "/failures/events", "a list of 1 to 65,536 failures (R116)"))
        return probs
    names = {name: (initial, sc) for _, name, initial, sc, _ in entries}
    good = []
    for i, e in enumerate(evs):
        ptr = "/failures/events/%d" % i
        if (
            not isinstance(e, dict)
            or not {"pool", "pool_worker", "at_us"} <= set(e)
            or set(e) - {"pool", "pool_worker", "at_us", "recover_after_us"}
        ):
            probs.append(
                ("scenario", ptr, "an object {pool, pool_worker, at_us, recover_after_us} (R116)")
            )
            continue
        bad = False
        if not is_pool_name(e["pool"]):
            probs.append(("scenario", ptr + "/pool", "a pool name (R77, R116)"))
            bad = True
        elif e["pool"] not in names:
            probs.append(("scenario", ptr + "/pool", "the name of a pool (R4, R116)"))
            bad = True
        if not is_int(e["pool_worker"], 0, 2**20 - 1):
            probs.append(("scenario", ptr + "/pool_worker", "an integer 0 to 2^20-1 (R116)"))
            bad = True
        if not is_int(e["at_us"], 0, MAX_T):
            probs.append(("scenario", ptr + "/at_us", "an integer 0 to 2^53-1 (R116)"))
            bad = True
        if "recover_after_us" in e and not is_int(e["recover_after_us"], 1, MAX_T):
            probs.append(("scenario", ptr + "/recover_after_us", "an integer 1 to 2^53-1 (R116)"))
            bad = True
        if not bad:
            good.append((i, e))
    last = {}
    for i, e in good:  # R4: the events of one worker in list order
        key = (e["pool"], e["pool_worker"])
        if key in last:
            prev = last[key]
            if (
                "recover_after_us" not in prev
                or e["at_us"] <= prev["at_us"] + prev["recover_after_us"]
            ):
                probs.append(
                    (
                        "scenario",
                        "/failures/events/%d/at_us" % i,
                        "a failure of pool %s worker %d after the previous one's recovery "
                        "(R4, R116)" % key,
                    )
                )
                continue
        last[key] = e
    if probs:
        return probs
    for _, name, initial, sc, _ in entries:  # R116: static existence, without autoscale
        if name in autoscaled or not is_int(initial, 1, 65536):
            continue
        fails = [
            (i, e["at_us"], e["pool_worker"], e.get("recover_after_us"))
            for i, e in good
            if e["pool"] == name
        ]
        if fails:
            for i in sorted(static_creations(sc, initial, fails)):
                probs.append(
                    (
                        "scenario",
                        "/failures/events/%d/pool_worker" % i,
                        "a worker pool %s has created by %d us (R4, R116)"
                        % (name, evs[i]["at_us"]),
                    )
                )
    return probs


HOST_MEMBERS = {  # R129 (draft H5): each required, integer ranges
    "blocks": 2**32 - 1,
    "bytes_per_token": 2**32 - 1,
    "store_bytes_per_s": MAX_T,
    "load_bytes_per_s": MAX_T,
}


def host_places(scn):
    """Every kv_cache.host member of the scenario, in document order: (pointer, host, the
    cache's pointer, the cache)."""
    out = []
    for key in scn:  # json.loads keeps the document's member order
        if key == "kv_cache" and isinstance(scn[key], dict) and "host" in scn[key]:
            out.append(("/kv_cache/host", scn[key]["host"], "/kv_cache", scn[key]))
        elif key == "fleet" and isinstance(scn[key], dict):
            pools = scn[key].get("pools")
            for i, p in enumerate(pools if isinstance(pools, list) else []):
                kv = p.get("kv_cache") if isinstance(p, dict) else None
                if isinstance(kv, dict) and "host" in kv:
                    at = "/fleet/pools/%d/kv_cache" % i
                    out.append((at + "/host", kv["host"], at, kv))
    return out


def check_host(scn, wl):
    """The checks of section 19's members (R3, R4, R125, R129, R141; mapping item 3): a list of
    (role, pointer, expected)."""
    probs = []
    wv = wl.get("schema_version")
    if "session_prompts_extend" in wl:
        if wv != "1.3":
            probs.append(
                (
                    "workload",
                    "/session_prompts_extend",
                    'no session_prompts_extend in a workload %s: it needs schema_version "1.3" '
                    "(R141)" % wv,
                )
            )
        elif type(wl["session_prompts_extend"]) is not bool:
            probs.append(("workload", "/session_prompts_extend", "true or false (R125)"))
    sv = scn.get("schema_version")
    places = host_places(scn)
    if sv != "1.8":
        for at, _, _, _ in places:
            probs.append(
                (
                    "scenario",
                    at,
                    'no kv_cache.host in a scenario %s: it needs schema_version "1.8" (R141)' % sv,
                )
            )
        return probs
    good = []
    for at, host, kv_at, kv in places:
        if not isinstance(host, dict):
            probs.append(
                (
                    "scenario",
                    at,
                    "an object {blocks, bytes_per_token, store_bytes_per_s, "
                    "load_bytes_per_s} (R129)",
                )
            )
            continue
        bad = False
        for m in sorted(host):
            if m not in HOST_MEMBERS:
                probs.append(("scenario", at + "/" + pointer_token(m), "no such member (R3)"))
                bad = True
        for m, hi in HOST_MEMBERS.items():
            if m not in host:
                probs.append(("scenario", at, "the required member %s (R129)" % m))
                bad = True
            elif not is_int(host[m], 1, hi):
                probs.append(("scenario", at + "/" + m, "an integer 1 to %d (R129)" % hi))
                bad = True
        if not bad:
            good.append((at, kv_at, kv))
    if probs:
        return probs
    for at, kv_at, kv in good:  # R4, R129: prefix caching on
        if kv.get("prefix_caching") is not True:
            probs.append(
                (
                    "scenario",
                    at,
                    "a cache with prefix_caching true for a host tier (R4, R129); %s has "
                    "prefix_caching false" % kv_at,
                )
            )
    # R4, R129: every pool that uses a cache with host has limits of style "vllm"
    fleet = scn.get("fleet") if isinstance(scn.get("fleet"), dict) else {}
    uses = []  # (the host's pointer, the style of the limits of a pool that uses it)
    top = "/kv_cache/host"
    if isinstance(fleet.get("pools"), list):
        for i, p in enumerate(fleet["pools"]):
            if not isinstance(p, dict):
                continue
            sch = p.get("scheduler", scn.get("scheduler"))
            style = sch.get("style", "vllm") if isinstance(sch, dict) else "vllm"
            own = p.get("kv_cache")
            if isinstance(own, dict):
                if "host" in own:
                    uses.append(("/fleet/pools/%d/kv_cache/host" % i, style, p.get("name")))
            elif isinstance(scn.get("kv_cache"), dict) and "host" in scn["kv_cache"]:
                uses.append((top, style, p.get("name")))
    elif isinstance(scn.get("kv_cache"), dict) and "host" in scn["kv_cache"]:
        sch = scn.get("scheduler")
        uses.append((top, sch.get("style", "vllm") if isinstance(sch, dict) else "vllm", None))
    said = {at for _, at, _ in probs}
    for at, style, name in uses:
        if style != "vllm" and at not in said:
            said.add(at)
            probs.append(
                (
                    "scenario",
                    at,
                    'a cache with a host tier used only by pools of style "vllm" (R4, R129); '
                    "%s has style %s"
                    % ("the fleet" if name is None else "pool " + str(name), json.dumps(style)),
                )
            )
    # mapping item 3: no host tier with a fleet that changes (R4, R129)
    changing = "failures" in scn or "scaling" in fleet
    if isinstance(fleet.get("pools"), list):
        changing = changing or any(isinstance(p, dict) and "scaling" in p for p in fleet["pools"])
    if places and changing:
        probs.append(
            (
                "scenario",
                places[0][0],
                "no host tier in a fleet that changes (scaling or failures): the host tier "
                "with a changing fleet is not specified yet (R4, R129)",
            )
        )
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


def uncovered_message(pool, shape, worker, rank, start):  # R43's stderr message
    tp = pool.tp
    cov = tp["model"]["coverage"]
    outside = []
    for k, v in zip(DIMS, shape):
        lo, hi = cov[k]["min"], cov[k]["max"]
        if not lo <= v <= hi:
            outside.append("%s %d is outside the covered range [%d, %d]" % (k, v, lo, hi))
    return (
        "error: step shape (decode_requests %d, context_tokens %d, prefill_tokens %d) formed by "
        "worker %d rank %d (pool %s) at %d us is outside the timing profile's coverage: %s; "
        "profile %s, calibration %s (R43, R83)"
        % (
            shape
            + (
                worker,
                rank,
                pool.name,
                start,
                "; ".join(outside),
                pool.tp_path,
                json.dumps(tp.get("calibration"), sort_keys=True),
            )
        )
    )


def simulate(scn, wl, pools, trace_on, report_version="3.0"):
    """The event loop (R7). pools are pools_of(scn), each with its timing profile (R84)."""
    prefill_weight = scn["routing"].get("prefill_weight", 1)  # R56: 1 when absent
    load_weight = scn["routing"].get("load_weight", 1)
    H = wl.get("prefix_hash_block_tokens")

    closed = scn.get("closed_loop")  # R61
    stop = scn.get("stop_at_us")  # R62
    reqs = [Req(i, d) for i, d in enumerate(wl["requests"])]
    # R78: workers numbered across pools in pool order
    workers = []
    for p in pools:
        p.members = []  # its workers in creation order: pool_worker is the position (R111)
        p.c = None  # R115: when the policy last changed its count
        p.live = p.peak_workers = p.workers  # starting, active or draining (R123)
        for j in range(p.workers):
            workers.append(Worker(len(workers), p, j, H))
            p.members.append(workers[-1])
    n_ranks = [sum(w.pool.dp_size for w in workers)]
    fleet = {
        k: 0
        for k in (
            "scale_ups",
            "scale_downs",
            "cancelled",
            "drained",
            "failures",
            "ignored_failures",
            "recoveries",
        )
    }
    failures = scn.get("failures")
    open_reqs = [len(reqs)]  # requests not yet terminal (R113's fleet events)
    draining = []  # R112
    # R97: a fleet whose pools have roles is disaggregated; R99: each side is routed as if
    # the fleet were its pools alone, with its own count, generator and rank rotations
    disagg = any(p.role is not None for p in pools)
    kvt = scn.get("kv_transfer")  # R97, R103

    class Side:
        def __init__(self, ps, routing):
            self.pools = ps
            self.policy = routing["policy"]
            # R15, R58: one generator per side, with "random" or a state-aware policy with a seed
            self.rng = splitmix(routing["seed"]) if "seed" in routing else None
            self.last = None  # R114: the global index of the worker the last request joined

        def candidates(self):  # R114: its routable workers in global index order
            return [w for w in workers if w.state == "active" and w.pool in self.pools]

    if disagg:
        pside = Side([p for p in pools if p.role == "prefill"], scn["routing"])
        # R99: without routing.decode the decode side is routed by round robin
        dside = Side(
            [p for p in pools if p.role == "decode"],
            scn["routing"].get("decode", {"policy": "round_robin"}),
        )
    else:
        pside = Side(list(pools), scn["routing"])
        dside = None
    heap = []
    seq = [0]

    def push(t, prio, payload, order=None):
        # R113: priorities 0 step completion, 1 worker failure, 2 worker transition, 3 transfer
        # end, 4 arrival, 5 scheduling, 6 scaling decision; a completion's order is its
        # creation order, a transfer end's and an arrival's its request's workload position
        # (R60, R104), a scheduling event's its worker's index (R83); the fleet events give
        # theirs (the failure's position, the worker's index, the pool's index)
        if order is None:
            order = payload.i if prio == 5 else payload.idx if prio in (3, 4) else seq[0]
        heapq.heappush(heap, (t, prio, order, seq[0], payload))
        seq[0] += 1

    # R59, R61: the units, in order of position: each session (its turns in workload order) and
    # each request without a session
    units = []
    by_session = {}
    for r in reqs:
        if r.session is None:
            units.append([r])
        elif r.session in by_session:
            prev = by_session[r.session][-1]
            prev.next_turn = r
            by_session[r.session].append(r)
        else:
            by_session[r.session] = [r]
            units.append(by_session[r.session])
    for u in units:
        for r in u:
            r.unit = u
    if wl.get("session_prompts_extend") is True:  # R125 to R127
        raw = wl["requests"]

        def continues(a, b):  # R125: turn b (the next of a's session) continues turn a
            if "prefix_hashes" not in raw[a.idx] or "prefix_hashes" not in raw[b.idx]:
                return False
            f = a.prompt // H
            if b.prompt <= a.prompt or f < 1 or len(a.hashes) < f:  # QUESTIONS-host.md Q1
                return False
            return b.hashes[:f] == a.hashes[:f]

        for turns in by_session.values():
            chains = [[turns[0]]]
            for a, b in zip(turns, turns[1:]):
                if continues(a, b):
                    chains[-1].append(b)
                else:
                    chains.append([b])
            for chain in chains:
                if len(chain) < 2:
                    continue
                for x, t in enumerate(chain):  # R126: the canonical list
                    canon = []
                    for i in range(len(t.hashes)):
                        later = [
                            s for s in chain[x:] if len(s.hashes) > i and (i + 1) * H <= s.prompt
                        ]  # QUESTIONS-host.md Q2: a turn with an i-th hash
                        if later:
                            canon.append(later[0].hashes[i])
                        else:
                            last = [s for s in chain if len(s.hashes) > i][-1]
                            canon.append(last.hashes[i])
                    t.canon = canon
                for a, b in zip(chain, chain[1:]):  # R127
                    a.succ = (min(a.prompt + a.max_out, b.prompt), b.canon)
    next_unit = [0]  # the next unit not yet released (closed loop)

    def arrive_at(r, t):
        """Create r's arrival event at t (R60); beyond 2^53-1 us it cannot be simulated (R6)
        unless the stop time comes first, and then it is simply never processed (R59)."""
        if t > MAX_T:
            if stop is not None:
                return
            raise InvalidInput(
                "request %s would arrive at %s us, after 2^53-1 us (R6, R59)" % (r.id, t)
            )
        push(t, 4, r)

    def release_unit(t):  # R61: the next unit's first request arrives at the release
        if next_unit[0] < len(units):
            arrive_at(units[next_unit[0]][0], t)
            next_unit[0] += 1

    if closed is None:
        for u in units:  # every first request arrives at its recorded time (R59)
            arrive_at(u[0], u[0].recorded)
    else:
        t0 = min(r.recorded for r in reqs)  # R61
        for _ in range(closed["max_in_flight"]):
            release_unit(t0)

    def terminal(r, t):
        """r reached its terminal state at t (completed, rejected or failed, R120): release
        what follows it, its session's next turn (R59) or, under a closed loop, the next unit
        (R61)."""
        open_reqs[0] -= 1
        nxt = r.next_turn
        if nxt is not None:
            if closed is None:
                arrive_at(nxt, max(nxt.recorded, t + nxt.think))
            else:
                arrive_at(nxt, t + nxt.think)
        elif closed is not None:
            release_unit(t)

    trace = []
    rv = int(report_version.split(".")[0])  # the report's major version

    def has_work_rk(rk):  # R16, R83, R135: its running list, waiting queue or loaded requests
        return bool(rk.running or rk.waiting or any(x.loaded for x in rk.loading))

    def maybe_schedule(w, now):  # R16, R83: an idle worker with work on any rank
        has_work = any(has_work_rk(rk) for rk in w.ranks)
        if not w.busy and has_work and not w.sched_pending:
            w.sched_pending = True
            push(now, 5, w)

    def identity(r, j, c):  # R47 in cache c: None when block j of r is not identified
        if not c.caching or not r.hashes:
            return None
        B, k = c.B, c.k
        if (j + 1) * B <= r.prompt and j < k * len(r.canon):  # R47 with R126's canonical list
            return (j, tuple(r.canon[: j // k + 1]))
        if r.succ is not None:  # R127: a block of turn k that turn k+1 names
            lim, sc = r.succ
            if (j + 1) * B <= lim and j < k * len(sc):
                return (j, tuple(sc[: j // k + 1]))
        return None

    def cached_at(rk, r):  # R54, R82's cached(w, q, r): rank q's own registry as it is now
        c = rk.cache
        h = 0
        while True:  # R54: R127's blocks count too, so h may pass floor(prompt / B)
            ident = identity(r, h, c)  # None without prefix caching or beyond the hashes
            if ident is None or ident not in c.registry:
                break
            h += 1
        return h

    xfer_no = [0]  # R136: host transfers submitted so far, over the whole fleet
    host_log = []  # R140: host_transfers, in submission order

    def submit(rk, kind, r, idx, entries, now):
        """R130: a transfer of len(idx) blocks on one lane of rk, submitted at now; its host
        transfer completion event (R136) has its submission number as order."""
        hp = rk.host
        n = len(idx)
        start = max(now, hp.lane_end[kind])
        W = hp.W[kind]
        end = start + ceil_div(n * hp.block_bytes * 1000000, W)
        if end > MAX_T:  # R130: R6's error, found at submission
            raise InvalidInput(
                "a host %s transfer of request %s would end at %d us, after 2^53-1 us (R6, R130)"
                % (kind, r.id, end)
            )
        hp.lane_end[kind] = end
        order = xfer_no[0]
        xfer_no[0] += 1
        host_log.append(
            {
                "kind": kind,
                "worker": rk.worker.i,
                "rank": rk.q,
                "request": r.id,
                "blocks": list(idx),
                "submitted_us": now,
                "start_us": start,
                "end_us": end,
            }
        )
        push(end, -1, ("host", kind, rk, r, entries, now), order)
        return end, order

    def offer(rk, r, reg, now):
        """R131: r offers the blocks it registered, [(j, identity)] in block order."""
        hp = rk.host
        if hp is None or not reg:
            return
        idx, ents = [], []
        for pos, (j, ident) in enumerate(reg):
            if ident in hp.entries:
                continue  # an entry (pending or resident) has it: left out
            if len(hp.entries) >= hp.cap:
                cands = [e for e in hp.entries.values() if not e.pending and e.pins == 0]
                if not cands:  # every entry pending or pinned: skipped, with the rest
                    hp.skipped_blocks += 1 + sum(
                        1 for _, x in reg[pos + 1 :] if x not in hp.entries
                    )  # QUESTIONS-host.md Q3
                    break
                victim = min(cands, key=lambda e: e.recency)  # host eviction (R131, R132)
                del hp.entries[victim.identity]
                hp.evictions += 1
            e = Entry(ident)
            hp.entries[ident] = e
            idx.append(j)
            ents.append(e)
        if ents:
            hp.stores += 1
            hp.stored_blocks += len(ents)
            submit(rk, "store", r, idx, ents, now)

    def touch(rk, r, L, g, m):
        """R133: r's identified blocks 0 to floor((L-1)/B)-1 outside its host run [g, g+m)
        with a resident, unpinned entry get new host recency numbers (last block first)."""
        hp, c = rk.host, rk.cache
        ents = []
        for j in range((L - 1) // c.B):
            if g <= j < g + m:
                continue
            ident = identity(r, j, c)
            e = hp.entries.get(ident) if ident is not None else None
            if e is not None and not e.pending and e.pins == 0:
                ents.append(e)
        hp.number(ents)

    def host_done(payload, t):
        """R132, R134, R136: a host transfer completes at t."""
        _, kind, rk, r, entries, submitted = payload
        hp = rk.host
        if kind == "store":  # its entries become resident
            for e in entries:
                e.pending = False
            hp.number(entries)
            return
        unpinned = []
        for e in entries:
            e.pins -= 1
            if e.pins == 0:
                unpinned.append(e)
        hp.number(unpinned)
        c = rk.cache
        g, m, _ = r.load
        for j in range(g, g + m):  # R134: its destination blocks, in block order
            ident = identity(r, j, c)
            if ident not in c.registry:
                c.registry[ident] = r.blocks[j]
                r.blocks[j].identity = ident
        r.loaded = True
        r.load_key = (t, r.load_order)
        r.load_wait += t - submitted  # R140
        maybe_schedule(rk.worker, t)

    def rotate(w):  # R80: the j-th request placed on w joins rank j mod dp_size
        rk = w.ranks[w.rotation % len(w.ranks)]
        w.rotation += 1
        return rk

    def route(r, side):
        """R12, R80 to R82, R99, R114: the rank a request joins on a side, chosen among the
        side's candidates; None when there is none (no turn, draw or weight is taken)."""
        policy, rng = side.policy, side.rng
        cands = side.candidates()
        if not cands:
            return None
        schedulers = [rk for w in cands for rk in w.ranks]  # R82: worker, then rank
        if policy == "round_robin":  # R13, R80, R114: the next index after the last
            w = cands[0]
            if side.last is not None:
                w = next((x for x in cands if x.i > side.last), cands[0])
            side.last = w.i
            return rotate(w)
        if policy == "random":  # R15, R80, R114
            return rotate(cands[next(rng) % len(cands)])
        if policy == "weighted_round_robin":  # R81, R114: over the candidates
            W = sum(w.pool.weight for w in cands)
            for w in cands:
                w.current += w.pool.weight
            best = cands[0]
            for w in cands:
                if w.current > best.current:  # strictly larger: the lowest index keeps a tie
                    best = w
            best.current -= W
            return rotate(best)
        if policy == "least_loaded":  # R55, R82 (R99: outstanding on the side's own terms)
            costs = [rk.outstanding for rk in schedulers]
        elif policy == "cache_aware":  # R56, R82 (R77: one block size under cache_aware)
            costs = [
                prefill_weight * (ceil_div(r.prompt, rk.cache.B) - cached_at(rk, r))
                + load_weight * rk.load_blocks
                for rk in schedulers
            ]
        else:
            raise AssertionError("unknown routing policy %r" % policy)
        # R58, R82: the tied schedulers in (worker, rank) order; the first, or the one a draw
        # picks (each routed request takes a draw when there is a seed, tie or not)
        tied = [i for i, c in enumerate(costs) if c == min(costs)]
        best = schedulers[tied[0] if rng is None else tied[next(rng) % len(tied)]]
        if side is dside:
            return best  # R107: cached_blocks_at_routing stays the prefill side's
        if best.cache is not None and best.cache.caching:  # R57, R82: of the rank it joined
            r.cached_at_routing = cached_at(best, r)
        return best

    def note_waiting(rk):  # R29 on the rank's own queue; R85's total over the worker's ranks
        rk.peak_waiting = max(rk.peak_waiting, len(rk.waiting))
        w = rk.worker
        w.peak_waiting = max(w.peak_waiting, w.waiting_total())

    def preempt(rk, v, preempted):  # R49, the victim's four actions in order
        rk.running.remove(v)
        v.running = False
        rk.cache.release(v)
        v.cached = 0
        v.target = v.prompt + v.produced()  # R105: the hidden token included
        rk.waiting.insert(0, v)  # R78: the head of its own rank's queue
        note_waiting(rk)  # QUESTIONS-kv.md, Q3
        v.preemptions += 1
        v.recompute = True  # R50
        rk.cache.preemptions += 1
        preempted.append(v.id)

    def obtain(rk, r, new_cached, given, preempted):
        """R49: give running request r the blocks for new_cached cached tokens, preempting
        victims while they cannot be had; False when r itself was the victim."""
        c = rk.cache
        n = ceil_div(new_cached, c.B) - len(r.blocks)
        while c.free() + len(c.cached) < n:
            victim = r
            for x in reversed(rk.running):
                if x is not r and x not in given:
                    victim = x
                    break
            preempt(rk, victim, preempted)
            if victim is r:
                return False
        for _ in range(n):
            r.blocks.append(c.take())
        return True

    def form_step(rk, now):
        """Sections 5 and 11 for one rank, with its own queues, its pool's limits and its own
        cache (R78, R83). Returns (decode, allot, preempted, shape, blocks in use)."""
        lim = rk.pool.limits
        if rk.pool.style == "sglang":
            return form_sglang(rk, now)
        trtllm = rk.pool.style == "trtllm"  # R93: the vLLM step, one admission condition apart
        max_seqs = lim["max_num_seqs"]
        mode = lim["prefill"]["mode"]
        mct = lim["prefill"].get("max_chunk_tokens")
        cache = rk.cache
        B = cache.B if cache is not None else None
        budget = lim["max_batched_tokens"]
        given = set()  # requests given a decode token or an allotment in this step
        preempted = []
        decode = []
        # R135: before R50 step 1, the loaded requests join the running list, in the order of
        # their loads' completions, in Prefill with (g + m) * B cached tokens
        for r in sorted((x for x in rk.loading if x.loaded), key=lambda x: x.load_key):
            rk.loading.remove(r)
            r.loaded = False
            g, m, _ = r.load
            r.load = None
            r.cached = (g + m) * B
            rk.running.append(r)
            r.running = True
            if r.first_sched is None:  # its first admission (R137): counted when it joins
                r.first_sched = now  # QUESTIONS-host.md Q4
                r.reused = (g + m) * B
                r.host_reused = m * B
            cache.reused_tokens += (g + m) * B
            rk.host.reused_tokens += m * B
        # R17 / R50.1: decode first
        for r in list(rk.running):
            if not r.running or not r.decoding:
                continue  # preempted by an earlier request, or in Prefill
            if cache is not None and not obtain(rk, r, r.cached + 1, given, preempted):
                continue
            assert not (trtllm and preempted), "R93: trtllm never preempts"
            decode.append(r)
            given.add(r)
            budget -= 1
        allot = []  # (request, allotment, cached tokens before)
        # R18 / R50.2: running prefills
        for r in list(rk.running):
            if not r.running or r.decoding or r in given:
                continue
            if budget <= 0:
                break
            rem = r.target - r.cached
            a = min(rem, mct, budget) if mode == "chunked" else min(rem, budget)
            if cache is not None and not obtain(rk, r, r.cached + a, given, preempted):
                continue
            assert not (trtllm and preempted), "R93: trtllm never preempts"
            allot.append((r, a, r.cached))
            given.add(r)
            budget -= a
        for r in decode:
            r.cached += 1  # R46: the step computes the last produced token's keys and values
        for r, a, _ in allot:
            r.cached += a
        # R19 / R50.3: admission, only when nobody was preempted
        # R102: a Transferring or Ready request takes a seat, and while the reservation queue
        # is not empty the decode scheduler admits nobody
        while (
            not preempted
            and not rk.resq
            and rk.waiting
            and budget > 0
            and len(rk.running) + len(rk.resv) + len(rk.loading) < max_seqs  # R134's seats
        ):
            hd = rk.waiting[0]
            L = hd.prompt + hd.produced()  # R48 (R105: the hidden token included)
            hits = []
            if cache is not None:
                while len(hits) < (L - 1) // B:
                    ident = identity(hd, len(hits), cache)
                    if ident is None or ident not in cache.registry:
                        break
                    hits.append(cache.registry[ident])
            h = len(hits)
            if rk.host is not None:  # R133: the host run after the GPU hit
                run = []
                while h + len(run) < (L - 1) // B:
                    ident = identity(hd, h + len(run), cache)
                    e = rk.host.entries.get(ident) if ident is not None else None
                    if e is None or e.pending:
                        break
                    run.append(e)
                m = len(run)
                if m > 0:  # R134: a load, its allotment not computed
                    own_cached = sum(1 for b in hits if b.holders == 0)
                    if m > cache.free() + len(cache.cached) - own_cached:
                        break
                    rk.waiting.pop(0)
                    hd.target = L
                    for b in hits:
                        cache.hold(b)
                    hd.blocks = list(hits)
                    for _ in range(m):
                        hd.blocks.append(cache.take())
                    for e in run:
                        e.pins += 1
                    touch(rk, hd, L, h, m)
                    rk.host.loads += 1
                    rk.host.loaded_blocks += m
                    hd.load = (h, m, run)
                    hd.loaded = False
                    _, hd.load_order = submit(rk, "load", hd, range(h, h + m), run, now)
                    rk.loading.append(hd)
                    continue
            rem = L - h * B if cache is not None else L
            if mode == "chunked":
                a = min(rem, mct, budget)
            elif hd.recompute:
                a = min(rem, budget)  # R50.3, R118: a recompute in "whole" mode
            else:
                a = rem if rem <= budget else 0
            if a == 0:
                break
            if cache is not None:
                need = ceil_div(h * B + a, B) - h
                if trtllm:  # R93: the whole footprint against the available blocks
                    held_hits = sum(1 for b in hits if b.holders > 0)  # a: credited
                    role = rk.pool.role
                    if footprint(hd, B, role) - held_hits > cache.free() + len(cache.cached) - sum(
                        footprint(x, B, role) - len(x.blocks) for x in rk.running + rk.resv
                    ):
                        break
                else:
                    own_cached = sum(1 for b in hits if b.holders == 0)
                    if need > cache.free() + len(cache.cached) - own_cached:
                        break
            rk.waiting.pop(0)
            hd.target = L
            hd.cached = 0
            if cache is not None:
                for b in hits:
                    cache.hold(b)
                hd.blocks = list(hits)
                for _ in range(need):
                    hd.blocks.append(cache.take())
                hd.cached = h * B
                if hd.first_sched is None:  # its first admission (R48, R118)
                    hd.reused = h * B
                cache.reused_tokens += h * B
                if rk.host is not None:  # R133: admitted with m = 0
                    touch(rk, hd, L, h, 0)
            rk.running.append(hd)
            hd.running = True
            if hd.first_sched is None:
                hd.first_sched = now
            allot.append((hd, a, hd.cached))
            hd.cached += a
            budget -= a
        D = len(decode)
        C = sum(r.prompt + r.produced() for r in decode)  # R22: context at the step's start
        P = sum(a for _, a, _ in allot)
        # R101, R138: only a disaggregated fleet or a scheduler with a host pool forms a step
        # without one
        assert D + P >= 1 or disagg or rk.host is not None
        if D + P == 0:  # R101: not started, so not counted in the peaks
            return None
        rk.peak_running = max(rk.peak_running, len(rk.running))
        in_use = None
        if cache is not None:
            cache.check()
            in_use = cache.held
            cache.peak = max(cache.peak, in_use)
            for r in rk.running:  # R21: a running request holds the blocks of its cached tokens
                assert len(r.blocks) == ceil_div(r.cached, B)
            if trtllm:  # R95: held plus every running request's reservation, once formed
                reserved = reserved_blocks(rk)
                assert reserved <= cache.size  # R93
                cache.peak_reserved = max(cache.peak_reserved, reserved)
        return decode, allot, preempted, (D, C, P), in_use, [], None

    def reserved_blocks(rk):  # R93: held + the sum over running requests of f_r - h_r
        # R102: under trtllm the decode scheduler's Transferring and Ready requests count too
        B = rk.cache.B
        return rk.cache.held + sum(
            footprint(r, B, rk.pool.role) - len(r.blocks) for r in rk.running + rk.resv
        )

    def retract(rk, v, retracted):  # R91, the victim's actions in order
        rk.running.remove(v)
        v.running = False
        rk.cache.release(v)  # R46: registered blocks become cached, the others free
        v.cached = 0
        v.target = v.prompt + len(v.tokens)
        rk.waiting.append(v)  # at the tail of its own rank's queue
        note_waiting(rk)  # a join of the queue for peak_waiting (R29)
        v.retractions += 1
        rk.cache.retractions += 1
        retracted.append(v.id)

    def form_sglang(rk, now):
        """R90 (with R89's ratio and R91's retraction) for one rank of style "sglang". Returns
        what form_step returns: (decode, allot, [], shape, blocks in use, retracted, n used)."""
        pool = rk.pool
        lim = pool.limits
        cache = rk.cache
        B = cache.B if cache is not None else 1  # section 16.1: without a cache, B = 1
        n = rk.n  # the value when the step starts to be formed (R89)
        decoding = [r for r in rk.running if r.decoding]
        chunked = [r for r in rk.running if not r.decoding]  # the chunked request, if any
        assert len(chunked) <= 1
        clip = pool.clip
        M = sum(min(r.max_out - len(r.tokens), clip) for r in decoding)
        # rule 1: prefill admission
        seats = lim["max_num_seqs"] - len(decoding)
        rem_chunk = lim["prefill"]["max_chunk_tokens"]
        spent = 0
        T = (cache.free() + len(cache.cached)) * B if cache is not None else None  # once
        allot = []  # (request, allotment, cached tokens before)
        candidates_left = list(chunked)  # the chunked request first, then the queue's head
        while len(allot) < seats:
            if candidates_left:
                x = candidates_left.pop()
                fresh = False
            elif rk.waiting:
                x = rk.waiting[0]
                fresh = True
            else:
                break
            L = x.prompt + len(x.tokens)
            hits = []
            if not fresh:  # 1.1: the chunked request starts at its cached tokens
                start = x.cached
                assert start % B == 0
            else:  # 1.1: offered admission, its hit by R48 (at most floor((L - 1) / B) blocks)
                if cache is not None:
                    while len(hits) < (L - 1) // B:
                        ident = identity(x, len(hits), cache)
                        if ident is None or ident not in cache.registry:
                            break
                        hits.append(cache.registry[ident])
                start = len(hits) * B
            extend = L - start  # 1.2
            assert extend >= 1
            if ceil_div(extend, B) * B <= rem_chunk:  # 1.3
                chunk = extend
            else:
                chunk = rem_chunk // B * B
                if chunk == 0:
                    break
            charged = ceil_div(chunk, B) * B  # 1.4
            reserve = min(x.max_out - len(x.tokens), clip) if chunk == extend else 0
            if cache is not None:
                # 1.5: the estimate, multiplied through by Q (exact integers)
                if (spent + charged + reserve) * Q + n * M >= T * Q:
                    break
                # 1.6: the blocks, beside x's own cached hit blocks
                e = sum(1 for b in hits if b.holders == 0)
                if charged // B > cache.free() + len(cache.cached) - e:
                    break
            if fresh:  # admitted: it leaves the waiting queue and joins the running list
                rk.waiting.pop(0)
                x.target = L
                x.cached = 0
                if cache is not None:
                    for b in hits:
                        cache.hold(b)
                    x.blocks = list(hits)
                    x.cached = start
                    if x.first_sched is None:  # its first admission (R48, R118)
                        x.reused = start
                    cache.reused_tokens += start
                rk.running.append(x)
                x.running = True
                if x.first_sched is None:
                    x.first_sched = now
            if cache is not None:
                for _ in range(charged // B):
                    x.blocks.append(cache.take())
            allot.append((x, chunk, x.cached))  # 1.7
            x.cached += chunk
            spent += charged + reserve
            rem_chunk -= charged
            if chunk < extend:  # x is (or stays) the chunked request
                break
        retracted = []
        decode = []
        if allot:  # rule 2: a prefill-only step; n does not change
            pass
        elif decoding:  # rule 3: a decode-only step
            if cache is not None:

                def need():
                    return sum(ceil_div(r.cached + 1, B) - ceil_div(r.cached, B) for r in decoding)

                while need() > cache.free() + len(cache.cached):
                    if len(decoding) >= 2:  # R91.1: fewest produced, most prompt, latest
                        pos = {id(r): i for i, r in enumerate(rk.running)}
                        victim = min(
                            decoding, key=lambda r: (len(r.tokens), -r.prompt, -pos[id(r)])
                        )
                        decoding.remove(victim)
                    else:  # R91.2: the chunked request; R91.3 says one remains
                        victim = next(r for r in rk.running if not r.decoding)
                    retract(rk, victim, retracted)
                for r in decoding:  # in running order, R49's rule without preemption
                    for _ in range(ceil_div(r.cached + 1, B) - ceil_div(r.cached, B)):
                        r.blocks.append(cache.take())
            decode = decoding
            if retracted:  # R89.2: re-estimate over the k requests that remain
                k = len(decoding)
                dec = sum(len(r.tokens) for r in decoding)
                mx = sum(r.max_out for r in decoding)
                rk.n = min(Q, ceil_div(Q * (dec + 20 * k), mx + 1))
            else:  # R89.1: decay
                rk.n = max(rk.n - rk.n_decay, rk.n_min)
        else:  # rule 4: no step; R90 proves it never happens to a rank with work
            raise AssertionError("R90: a rank with work formed no step")
        for r in decode:
            r.cached += 1  # R46
        rk.peak_running = max(rk.peak_running, len(rk.running))
        D = len(decode)
        C = sum(r.prompt + len(r.tokens) for r in decode)
        P = sum(a for _, a, _ in allot)
        assert D + P >= 1
        assert not (D and P)  # R90: never a mixed step
        in_use = None
        if cache is not None:
            cache.check()
            in_use = cache.held
            cache.peak = max(cache.peak, in_use)
            for r in rk.running:
                assert len(r.blocks) == ceil_div(r.cached, B)
        return decode, allot, [], (D, C, P), in_use, retracted, n

    def start_pass(w, now):
        """R83: every rank with work forms its step now, in rank order; the pass ends at the
        start plus the longest step's duration under the pool's profile (R84)."""
        formed = []
        for rk in w.ranks:
            if has_work_rk(rk):
                st = form_step(rk, now)
                if st is not None:
                    formed.append((rk, st))
                else:  # R101: a step without a token is not started; R102 (c): try the queue
                    try_queue(rk, now)
        if not formed:  # R101: a worker none of whose ranks starts a step stays idle
            return
        # R85: the worker's peaks are totals over its ranks once the pass is formed
        w.peak_running = max(w.peak_running, sum(len(rk.running) for rk in w.ranks))
        if w.pool.kv is not None:
            w.peak_blocks = max(w.peak_blocks, sum(rk.cache.held for rk in w.ranks))
            if w.pool.style == "trtllm":  # R95: the total over its ranks once a pass is formed
                w.peak_reserved = max(w.peak_reserved, sum(reserved_blocks(rk) for rk in w.ranks))
        p = w.pool
        durations = []
        for rk, st in formed:  # R43: coverage first, the first uncovered step in rank order
            d = p.timer(*st[3])
            if d is None:
                raise OutOfCoverage(uncovered_message(p, st[3], w.i, rk.q, now))
            durations.append(d)
        end = now + max(durations)
        if end > MAX_T:
            raise InvalidInput("a pass would end after 2^53-1 us (R6)")
        w.busy = True
        w.steps += 1
        w.busy_us += end - now  # a pass cut by the stop time gives back what lies after it
        w.inflight = (now, end, [rk for rk, _ in formed])
        w.entries = []
        w.pass_no += 1
        for (rk, (decode, allot, preempted, shape, in_use, retracted, n)), d in zip(
            formed, durations
        ):
            rk.steps += 1
            rk.busy_us += d
            rk.step = (decode, allot, d)
            if trace_on:
                entry = {
                    "worker": w.i,
                    "start_us": now,
                    "end_us": end,  # R85: the end of its pass, when its tokens come
                    "decode_requests": [r.id for r in decode],
                    "prefill": [{"id": r.id, "tokens": a} for r, a, _ in allot],
                    "prefill_tokens": shape[2],
                    "batched_tokens": shape[0] + shape[2],
                    "shape": {
                        "decode_requests": shape[0],
                        "context_tokens": shape[1],
                        "prefill_tokens": shape[2],
                    },
                }
                if rv >= 3:  # R52
                    entry["kv_blocks_in_use"] = in_use
                    entry["preempted"] = preempted
                if rv >= 6:  # R85
                    entry["rank"] = rk.q
                    entry["duration_us"] = d
                if rv >= 7:  # R95
                    D, P = shape[0], shape[2]
                    entry["kind"] = "mixed" if D and P else ("decode" if D else "prefill")
                    entry["retracted"] = retracted
                    entry["new_token_ratio"] = None if n is None else q(n, Q)
                entry["cut_us"] = None  # R123: set when the pass is cut
                trace.append(entry)
                w.entries.append(entry)
        push(end, 0, (w, w.pass_no))

    def end_step(rk, now):
        """R20, R51 for one rank's step at its pass's end; returns the requests it completed."""
        decode, allot, _ = rk.step
        rk.step = None
        # R29, R62: a step's tokens count when it ends (a cut step never does)
        rk.decode_tokens += len(decode)
        rk.prefill_tokens += sum(a for _, a, _ in allot)
        for r, a, before in allot:  # R118: what this attempt computed below its migration's mark
            note_allot(r, before, a)
        for r in decode:
            r.tokens.append(now)
            rk.output_tokens += 1
        prefill_side = rk.pool.role == "prefill"
        made_held = set()
        for r, a, before in allot:
            if before < r.target <= before + a:  # its prefill or recompute completes (R20, R51)
                if prefill_side:  # R100: the hidden token, no client token; r becomes Held
                    made_held.add(r)
                else:
                    r.tokens.append(now)
                    rk.output_tokens += 1
        in_step = set(decode) | {r for r, _, _ in allot}
        step_reqs = [r for r in rk.running if r in in_step]
        held = [r for r in step_reqs if r in made_held]  # in the step's running order (R100)
        keep = []
        done = []
        c = rk.cache
        for r in rk.running:
            if r in made_held:  # R100: it leaves the running list and keeps its blocks
                r.running = False
                rk.held.add(r)
                r.stage = "held"
                # R107, R121: a new handoff (after a migration) replaces the last one's stages
                r.drank = r.reserved = r.t_end = r.activation = None
                r.ttokens = r.tus = r.dreused = None
                r.prefill_end = now
                rk.handed_off += 1
                rk.outstanding -= 1  # R99: a prefill scheduler's outstanding ends here
                if c is not None:
                    rk.load_blocks -= ceil_div(r.prompt, c.B)
            elif len(r.tokens) == r.max_out:
                r.running = False
                r.done_t = now
                r.done_worker = rk.worker.i
                rk.completed += 1
                rk.outstanding -= 1  # R54: a completed request is no longer outstanding
                if c is not None:
                    rk.load_blocks -= ceil_div(r.prompt, c.B)
                done.append(r)
            else:
                keep.append(r)
        rk.running = keep
        if c is not None:
            B = c.B
            # R51, R47: registration, each request of the step in running order
            fills = {id(r): (r.cached - 1, r.cached) for r in decode}
            for r, a, before in allot:
                fills[id(r)] = (before, before + a)
            regs = []  # R131: what each request registered at this step end, in block order
            for r in step_reqs:
                lo, hi = fills[id(r)]
                reg = []
                for j in range(len(r.blocks)):
                    if lo < (j + 1) * B <= hi:
                        ident = identity(r, j, c)
                        if ident is not None and ident not in c.registry:
                            c.registry[ident] = r.blocks[j]
                            r.blocks[j].identity = ident
                            reg.append((j, ident))
                regs.append((r, reg))
            for r in done:  # then the completed requests release their blocks (R46)
                c.release(r)
            for r in held:  # R100: a Held request keeps them, as blocks of its prefill side
                r.pblocks, r.blocks = r.blocks, []
            c.check()
            for r, reg in regs:  # R131: then each offers them to the host pool, in running order
                offer(rk, r, reg, now)
        return done, held

    def end_pass(w, now):
        """R83: at the pass end every step of the pass ends, in rank order; only then is the
        worker idle again."""
        _, _, ranks = w.inflight
        w.inflight = None
        done = []
        held = []
        for rk in ranks:
            d, h = end_step(rk, now)
            done += d
            held += h
            if rk.pool.style == "sglang" and not rk.running and not rk.waiting:
                rk.n = rk.n_init  # R89.3, R94: the rank is left without work
        w.busy = False
        if w.ready:  # R104: the Ready requests, in order of their transfer ends
            ready = sorted(w.ready, key=lambda r: (r.t_end, r.idx))
            w.ready = []
            for r in ready:
                activate(r, now)
        for r in held:  # R100: rank order, then each step's running order, one at a time
            hand_off(r, now)
        if w.pool.role == "decode":  # R102 (b): the ranks' queues in rank order
            for rk in w.ranks:
                try_queue(rk, now)
        maybe_schedule(w, now)
        for r in done:  # R59, R61: what a completion releases arrives as an event of now
            terminal(r, now)

    def hand_off(r, now):
        """R99, R100: route a Held request on the decode side; it joins the tail of that
        scheduler's reservation queue (Pending, R98), which is tried (R102 (a))."""
        rk = route(r, dside)
        if rk is None:  # R114: no routable decode scheduler; its prefill side releases
            fail(r, now, "no_routable_worker")
            release_prefill(r, now)
            return
        r.drank = rk
        if rk.host is not None:
            r.host_seen = True  # R140: its decode scheduler has a host pool
        rk.routed += 1
        rk.outstanding += 1  # R99: routed here by the decode side and not terminal
        rk.load_blocks += ceil_div(r.prompt, rk.cache.B)  # R54 over the same requests
        r.stage = "pending"
        rk.resq.append(r)  # R102: no join of the waiting queue (peak_waiting, R29)
        try_queue(rk, now)

    def try_queue(rk, now):
        """R102: offer the head of rk's reservation queue a reservation while one is given."""
        c = rk.cache
        while rk.resq:
            r = rk.resq[0]
            # a seat: the running list plus the Transferring and Ready requests
            if len(rk.running) + len(rk.resv) >= rk.pool.limits["max_num_seqs"]:
                return
            B = c.B
            hits = []
            if rk.pool.style == "trtllm":  # R93 with hit 0 (FreshOnly), f the whole footprint
                available = (
                    c.free()
                    + len(c.cached)
                    - sum(footprint(x, B) - len(x.blocks) for x in rk.running + rk.resv)
                )
                if footprint(r, B) > available:
                    return
                n = ceil_div(r.prompt + len(r.tokens), B)  # R121: L
            else:  # "vllm": the decode hit (a whole prompt may be a hit), then n more blocks
                while len(hits) < r.prompt // B:
                    ident = identity(r, len(hits), c)
                    if ident is None or ident not in c.registry:
                        break
                    hits.append(c.registry[ident])
                n = ceil_div(r.prompt + len(r.tokens), B) - len(hits)  # R121: L
                own_cached = sum(1 for b in hits if b.holders == 0)
                if n > c.free() + len(c.cached) - own_cached:
                    return
            rk.resq.pop(0)
            for b in hits:  # a holder of its hit blocks (a cached one becomes held)
                c.hold(b)
            r.blocks = list(hits)
            for _ in range(n):  # R49's rule: a free block, else an eviction; no preemption
                r.blocks.append(c.take())
            r.dhits = len(hits)
            r.dreused = len(hits) * B
            c.reused_tokens += r.dreused  # R107: a worker's reused_tokens counts it
            rk.resv.append(r)  # Transferring from now (R103)
            r.stage = "transferring"
            r.reserved = now
            # R103: the transfer time, in exact integers
            full = kvt.get("mode", "destination_missing") == "full_prompt"
            L = r.prompt + len(r.tokens)  # R121: L in place of prompt_tokens
            r.ttokens = L if full else L - r.dreused
            num = r.ttokens * kvt["bytes_per_token"] * 1000000
            den = kvt["bandwidth_bytes_per_s"]
            r.tus = kvt["base_latency_us"] + (num + den - 1) // den
            end = now + r.tus
            if end > MAX_T:  # R103: R6's error, found when the transfer starts
                raise InvalidInput(
                    "request %s's transfer would end at %d us, after 2^53-1 us (R6, R103)"
                    % (r.id, end)
                )
            r.t_gen += 1
            push(end, 3, (r, r.t_gen), r.idx)  # R104: the transfer end event
            c.check()

    def transfer_end(r, now):
        """R104: activate r at once if its decode worker has no pass in flight, else it is
        Ready until that pass ends."""
        r.t_end = now
        w = r.drank.worker
        if w.busy:
            w.ready.append(r)
            r.stage = "ready"
        else:
            activate(r, now)

    def activate(r, now):
        """R104: r joins the tail of its decode scheduler's running list in Decode."""
        rk = r.drank
        c = rk.cache
        rk.resv.remove(r)
        r.stage = "decode"
        rk.running.append(r)
        r.running = True
        r.cached = r.prompt + len(r.tokens)  # its cached tokens are its prompt (R121: its L)
        r.target = r.cached
        r.hidden = 1  # R105: the hidden token counts as a token it produced
        reg = []
        for j in range(r.dhits, len(r.blocks)):  # R47: the blocks it took, in block order
            ident = identity(r, j, c)
            if ident is not None and (j + 1) * c.B <= r.cached and ident not in c.registry:
                c.registry[ident] = r.blocks[j]
                r.blocks[j].identity = ident
                reg.append((j, ident))
        offer(rk, r, reg, now)  # R131, R139: a decode scheduler stores at an activation
        r.activation = now
        rk.activated += 1
        release_prefill(r, now)  # then its prefill scheduler releases its blocks (R46)
        maybe_schedule(r.prank.worker, now)  # R101: the release schedules the prefill worker
        maybe_schedule(rk.worker, now)  # R16

    def reject_reason(r):
        """R10, R79: reasons 1 and 2 do not depend on the fleet; 3 to 5 hold when they hold
        for at least one pool, the first in R10's order being reported."""
        if r.prompt == 0:
            return REASONS[0]
        if r.max_out == 0:
            return REASONS[1]

        # R100: a prefill pool judges the request with max_output_tokens 1, a decode pool the
        # request as written, and reason 4 concerns a prefill only
        def out(p):
            return 1 if p.role == "prefill" else r.max_out

        for p in pools:
            mml = p.limits["max_model_len"]
            if r.prompt > mml or out(p) > mml - r.prompt:
                return REASONS[2]
        for p in pools:
            whole = p.limits["prefill"]["mode"] == "whole"
            if p.role != "decode" and whole and r.prompt > p.limits["max_batched_tokens"]:
                return REASONS[3]
        for p in pools:
            kv = p.kv
            if not kv:
                continue
            B = kv["block_tokens"]
            slack = B if p.style == "sglang" else 0  # R90: a page of slack with sglang
            if r.prompt + out(p) + slack > kv["blocks"] * B:
                return REASONS[4]
        return None

    # ---- Section 18: a fleet that changes (R109 to R122) ----
    LIVE = ("starting", "active", "draining")
    fpolicy = failures["policy"] if failures else None
    max_mig = failures.get("max_migrations") if failures else None
    pool_by_name = {p.name: p for p in pools}

    def startup(p):  # R110: 0 when absent
        return (p.scaling or {}).get("startup_us", 0)

    def note_allot(r, before, a):
        """R118: the positions below a migration's lost tokens that an allotment of the new
        attempt computes, each once; counted when its step ends (a step cut by a failure or a
        stop time computes none)."""
        if r.rc is None:
            return
        mark, cov = r.rc
        lo, hi = before, min(before + a, mark)
        if lo >= hi:
            return
        new = hi - lo
        for x, y in cov:  # cov: disjoint intervals already counted
            new -= max(0, min(y, hi) - max(x, lo))
        r.recomputed += new
        merged = []
        for x, y in sorted([*cov, (lo, hi)]):
            if merged and x <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], y))
            else:
                merged.append((x, y))
        r.rc = (mark, merged)

    def set_state(w, st, t):  # R109, R123: a state change, in its lifecycle
        p = w.pool
        was_live = w.state in LIVE
        w.state = st
        w.life.append([st, t])
        if was_live and st not in LIVE:
            p.live -= 1
        elif st in LIVE and not was_live:
            p.live += 1
            p.peak_workers = max(p.peak_workers, p.live)
        if st != "active":
            w.current = 0  # R114: a worker that stops being a candidate loses its weight
        if st == "draining":
            draining.append(w)

    def effective(p):  # R109: active or starting
        return sum(1 for w in p.members if w.state in ("active", "starting"))

    def add_worker(p, t):  # R111
        if len(workers) + 1 > 2**20 or n_ranks[0] + p.dp_size > 2**20:
            raise InvalidInput(
                "a scaling decision of pool %s at %d us would create more than 2^20 workers "
                "or ranks (R6, R110)" % (p.name, t)
            )
        w = Worker(len(workers), p, len(p.members), H)
        workers.append(w)
        p.members.append(w)
        n_ranks[0] += p.dp_size
        w.created = t
        fleet["scale_ups"] += 1
        S = startup(p)
        w.state = "active" if S == 0 else "starting"
        w.life = [[w.state, t]]
        p.live += 1
        p.peak_workers = max(p.peak_workers, p.live)
        if S and t + S <= MAX_T:  # a startup end after 2^53-1 us never happens
            push(t + S, 2, ("up", w, w.gen), w.i)

    def apply_target(p, target, t):  # R110 to R112
        e = effective(p)
        if target > e:
            for _ in range(target - e):
                add_worker(p, t)
        elif target < e:
            k = e - target
            fleet["scale_downs"] += k
            for w in sorted(p.members, key=lambda x: -x.i):  # R112: cancel, highest first
                if k and w.state == "starting":
                    set_state(w, "removed", t)
                    fleet["cancelled"] += 1
                    k -= 1
            for w in sorted(p.members, key=lambda x: -x.i):  # then drain, highest first
                if k and w.state == "active":
                    set_state(w, "draining", t)
                    k -= 1
            check_drained(t)

    def check_drained(t):  # R112: removed once it has no pass and no request
        for w in list(draining):
            if w.state != "draining":
                draining.remove(w)
            elif not w.busy and not w.ready and not w.has_requests():
                draining.remove(w)
                set_state(w, "removed", t)
                fleet["drained"] += 1

    def fail(r, t, reason):  # R118: the terminal state Failed
        r.failed = True
        r.fail_reason = reason
        r.running = False
        r.done_t = t
        r.stage = None
        terminal(r, t)

    def release_prefill(r, now):  # R46, R104: its prefill scheduler releases its blocks
        rk = r.prank
        if r not in rk.held:
            return  # released already, or lost with a failed prefill worker (R121)
        rk.held.discard(r)
        blocks, r.blocks = r.blocks, r.pblocks
        rk.cache.release(r)
        r.blocks = blocks
        r.pblocks = []
        rk.cache.check()
        # R101: a release schedules the prefill worker (an activation's, and one at a failure
        # elsewhere, R114, R121)
        maybe_schedule(rk.worker, now)

    def migrate(r, t, w, rk, lost):  # R118: a migration arrival of r at t
        r.migrations.append(
            {
                "at_us": t,
                "worker": w.i,
                "pool": w.pool.name,
                "rank": rk.q,
                "output_tokens": len(r.tokens),
                "lost_tokens": lost,
            }
        )
        w.migrated_out += 1
        r.rc = (lost, [])
        r.recompute = r.preemptions > 0 or len(r.tokens) > 0  # R50 as R118 amends it
        r.running = False
        r.blocks = []
        r.pblocks = []
        r.cached = 0
        r.hidden = 0  # R121: the hidden token is hidden again
        r.target = r.prompt + len(r.tokens)
        r.stage = None
        push(t, 4, ("mig", r), r.idx)

    def worker_failure(k, t):  # R117
        ev = failures["events"][k]
        p = pool_by_name[ev["pool"]]
        pw = ev["pool_worker"]
        w = p.members[pw] if pw < len(p.members) else None
        if w is None or w.state in ("removed", "failed"):
            fleet["ignored_failures"] += 1  # R116, R117
            return
        fleet["failures"] += 1
        w.failures += 1
        was = w.state
        if w.inflight is not None:  # 1. the pass in flight is cut (R62 with F for D)
            start, end, ranks = w.inflight
            assert start < t < end
            w.busy_us -= end - t
            for rk in ranks:
                d = rk.step[2]
                rk.busy_us -= d - min(d, t - start)
                rk.step = None
            for entry in w.entries:
                entry["cut_us"] = t
            w.inflight = None
            w.busy = False
            w.entries = []
            w.pass_no += 1  # its completion event is discarded
        # 2. the requests on w: (request, rank, lost tokens, re-handed?)
        hit = []
        changed = []  # decode schedulers whose queue or blocks changed (R121)
        freed = set()  # those whose reserved blocks were released (R101)
        for rk in w.ranks:
            for r in rk.waiting + rk.running:
                hit.append((r, rk, r.cached, False))
            for r in list(rk.held):  # R121: a prefill worker's Held, Pending, Transferring
                if r.stage == "ready":
                    r.pblocks = []  # its KV is on its decode worker; the release does nothing
                    continue
                d = r.drank
                if r.stage == "pending":
                    d.resq.remove(r)
                elif r.stage == "transferring":
                    r.t_gen += 1  # its transfer end is discarded
                    d.resv.remove(r)
                    d.cache.release(r)  # R46: not registered, so they become free
                    d.cache.check()
                    freed.add(d)
                if r.stage in ("pending", "transferring"):
                    d.outstanding -= 1
                    d.load_blocks -= ceil_div(r.prompt, d.cache.B)
                    if d not in changed:
                        changed.append(d)
                hit.append((r, rk, r.prompt + len(r.tokens), False))
            for r in rk.resq + rk.resv:  # R121: a decode worker's Pending, Transferring, Ready
                if r.stage == "transferring":
                    r.t_gen += 1
                r.blocks = []
                hit.append((r, rk, 0, True))
        w.ready = []
        for rk in w.ranks:
            rk.waiting, rk.running, rk.resq, rk.resv = [], [], [], []
            rk.held = set()
            rk.outstanding = rk.load_blocks = 0
            rk.step = None
        # w is no candidate from F on (R114), nor for its own re-handings (R121): a re-handed
        # request is routed among the others. Its state is recorded now; steps 2 and 3 do not
        # depend on when.
        set_state(w, "failed", t)  # 4. the state
        hit.sort(key=lambda x: x[0].idx)
        for r, rk, lost, rehand in hit:
            r.lost += lost
            w.lost_tokens += lost
            r.running = False
            if fpolicy == "migrate" and len(r.migrations) < max_mig:
                if rehand:  # R121: Held again on its prefill scheduler, routed again
                    r.migrations.append(
                        {
                            "at_us": t,
                            "worker": w.i,
                            "pool": w.pool.name,
                            "rank": rk.q,
                            "output_tokens": len(r.tokens),
                            "lost_tokens": 0,
                        }
                    )
                    w.migrated_out += 1
                    r.stage = "held"
                    # R121: a re-handing that finds no routable decode scheduler leaves its
                    # handoff as it was (to d, every stage it had reached): kept until routed
                    kept = (r.reserved, r.t_end, r.activation, r.ttokens, r.tus, r.dreused)
                    r.reserved = r.t_end = r.activation = None
                    r.ttokens = r.tus = r.dreused = None
                    r.dhits = 0
                    hand_off(r, t)
                    if r.failed:
                        (r.reserved, r.t_end, r.activation, r.ttokens, r.tus, r.dreused) = kept
                else:
                    migrate(r, t, w, rk, lost)
            else:
                w.failed_requests += 1
                fail(r, t, "worker_failure" if fpolicy == "fail" else "migration_limit")
                if rehand:
                    release_prefill(r, t)
                r.blocks = []
                r.pblocks = []
        for rk in w.ranks:  # 3. the cache is lost
            if rk.cache is not None:
                rk.cache.wipe()
        w.gen += 1  # a startup end of a starting worker does nothing
        rec = ev.get("recover_after_us")
        if rec is not None and was != "draining" and t + rec <= MAX_T:
            push(t + rec, 2, ("recover", w, None), w.i)
        for rk in sorted(changed, key=lambda x: (x.worker.i, x.q)):  # R121's fourth moment
            if rk.worker.state != "failed":
                try_queue(rk, t)
                if rk in freed:  # R101: blocks released at a failure elsewhere schedule it
                    maybe_schedule(rk.worker, t)

    def transition(kind, w, g, t):  # R111, R119
        if kind == "up":
            if w.state == "starting" and w.gen == g:
                set_state(w, "active", t)
            return
        assert w.state == "failed"
        fleet["recoveries"] += 1
        w.rotation = 0  # R114: a recovered worker's rank rotation starts at rank 0
        w.current = 0
        for rk in w.ranks:
            if rk.pool.style == "sglang":
                rk.n = rk.n_init  # R119: R89's ratio at its initial value
        S = startup(w.pool)
        if S == 0:
            set_state(w, "active", t)
        else:
            set_state(w, "starting", t)
            w.gen += 1
            if t + S <= MAX_T:
                push(t + S, 2, ("up", w, w.gen), w.i)

    def metric(p, kind):  # R115: (num, d) over the pool's active workers
        act = [w for w in p.members if w.state == "active"]
        ranks = [rk for w in act for rk in w.ranks]
        if kind == "waiting_per_worker":
            return sum(len(rk.waiting) + len(rk.resq) for rk in ranks), len(act)
        if kind == "outstanding_per_worker":
            return sum(rk.outstanding for rk in ranks), len(act)
        return sum(rk.cache.held for rk in ranks), sum(rk.cache.size for rk in ranks)

    def tick(p, k, t):  # R115: the decision at a tick
        a = p.scaling["autoscale"]
        lo, hi = a["min"], a["max"]
        e = effective(p)
        target = None
        if e < lo:
            target = lo
        elif e > hi:
            target = hi
        elif p.c is not None and t < p.c + a.get("cooldown_us", 0):
            target = None
        else:
            num, d = metric(p, a["metric"])
            high = d > 0 and num * 1000 > a["up_permille"] * d
            low = d > 0 and num * 1000 < a["down_permille"] * d
            if high and e < hi:
                target = min(e + a.get("step", 1), hi)
            elif low and e > lo:
                target = max(e - a.get("step", 1), lo)
        if target is not None and target != e:
            apply_target(p, target, t)
            p.c = t
        nxt = (k + 1) * a["interval_us"]
        if nxt <= MAX_T:
            push(nxt, 6, ("tick", p, k + 1), pools.index(p))

    for pi, p in enumerate(pools):  # R110, R115: the pools' decisions
        sc = p.scaling or {}
        for entry in sc.get("schedule", []):
            push(entry["at_us"], 6, ("target", p, entry["target"]), pi)
        if "autoscale" in sc and sc["autoscale"]["interval_us"] <= MAX_T:
            push(sc["autoscale"]["interval_us"], 6, ("tick", p, 1), pi)
    if failures:  # R116: each failure at its time, ordered by its position
        for k, ev in enumerate(failures["events"]):
            push(ev["at_us"], 1, ("fail", k), k)

    def join(r, rk, t):  # R12, R29: r joins the tail of rk's waiting queue
        r.prank = rk
        w = rk.worker
        r.worker = w.i
        r.rank = rk.q
        rk.routed += 1
        rk.outstanding += 1
        if rk.cache is not None:
            rk.load_blocks += ceil_div(r.prompt, rk.cache.B)
        if rk.host is not None:
            r.host_seen = True  # R140: load_wait_us is not null
        rk.waiting.append(r)
        note_waiting(rk)
        maybe_schedule(w, t)

    while heap:
        t, prio, _, _, payload = heapq.heappop(heap)
        if stop is not None and (t > stop or (t == stop and prio not in (-1, 0, 3))):
            # R62, R104, R113, R139: completions and transfer ends at or before the stop time
            continue
        if prio in (1, 2, 6) and open_reqs[0] == 0:
            continue  # R113: a fleet event after the last terminal time is dropped
        if prio == -1:  # R136: a host transfer completion, before every other kind at t
            host_done(payload, t)
        elif prio == 0:
            w, no = payload
            if no == w.pass_no and w.inflight is not None:
                end_pass(w, t)
        elif prio == 1:
            worker_failure(payload[1], t)
        elif prio == 2:
            transition(payload[0], payload[1], payload[2], t)
        elif prio == 3:
            r, g = payload
            if g == r.t_gen:
                transfer_end(r, t)
        elif prio == 4 and isinstance(payload, tuple):  # a migration arrival (R118)
            r = payload[1]
            rk = route(r, pside)
            if rk is None:
                fail(r, t, "no_routable_worker")
            else:
                join(r, rk, t)
        elif prio == 4:
            r = payload
            r.arrival = t  # R26, R60: when it actually arrived
            r.reason = reject_reason(r)
            rk = None
            if r.reason is None:
                rk = route(r, pside)  # R99: on the prefill side in a disaggregated fleet
                if rk is None:
                    r.reason = "no_routable_worker"  # R114: R10's sixth reason
            if r.reason is not None:
                r.done_t = r.arrival
                terminal(r, t)  # R61: it ends at once, and its successor is released now
            else:
                join(r, rk, t)
        elif prio == 5:
            w = payload
            w.sched_pending = False
            if w.state in ("active", "draining"):
                start_pass(w, t)
        elif payload[0] == "target":
            apply_target(payload[1], payload[2], t)
        else:
            tick(payload[1], payload[2], t)
        if draining:
            check_drained(t)

    if stop is not None:  # R62: nothing is left to process; cut off what has not ended
        for w in workers:
            if w.inflight is not None:  # a cut pass: busy time counts up to the stop time
                start, end, ranks = w.inflight
                assert start < stop < end
                w.busy_us -= end - stop
                for rk in ranks:  # R85: a cut step counts min(d_r, D - start)
                    d = rk.step[2]
                    rk.busy_us -= d - min(d, stop - start)
                for entry in w.entries:
                    entry["cut_us"] = stop
        for r in reqs:
            if r.reason is None and r.done_t is None:
                r.cut = True
                r.done_t = stop
    return build_report(
        reqs,
        workers,
        pools,
        trace if trace_on else None,
        report_version,
        scn.get("slo"),
        kvt,
        fleet,
        host_log,
    )


def meets(r, slo):
    """R63: completed, and each given bound holds inclusively (the mean ITL in integers)."""
    if r.reason is not None or r.cut or r.failed:  # R120: a failed request never meets them
        return False
    ft, ct, n = r.tokens[0], r.tokens[-1], len(r.tokens)
    if "ttft_us" in slo and ft - r.arrival > slo["ttft_us"]:
        return False
    if "e2e_us" in slo and ct - r.arrival > slo["e2e_us"]:
        return False
    if "mean_itl_us" in slo and ct - ft > slo["mean_itl_us"] * (n - 1):
        return False
    return True


def tpot_stats(completed):
    """R63: R27 over the exact per-request means, each chosen sample and the exact mean rounded
    once (R24)."""
    samples = sorted(
        Fraction(r.tokens[-1] - r.tokens[0], len(r.tokens) - 1)
        for r in completed
        if len(r.tokens) >= 2
    )
    n = len(samples)
    if n == 0:
        return stats([])
    out = {
        "count": n,
        "min": float(samples[0]),  # Fraction -> float is correctly rounded (R24)
        "max": float(samples[-1]),
        "mean": float(sum(samples, Fraction(0)) / n),
    }
    for p in (50, 90, 95, 99):
        r = max(1, -(-(p * n) // 100))
        out["p%d" % p] = float(samples[r - 1])
    return out


def handoff_of(r):
    """R107: a request's handoff, null until its prefill ended; a member of a stage not reached
    (by a stop time) is null."""
    if r.prefill_end is None:
        return None
    rk = r.drank
    return {
        "prefill_end_us": r.prefill_end,
        "decode_worker": None if rk is None else rk.worker.i,
        "decode_pool": None if rk is None else rk.pool.name,
        "decode_rank": None if rk is None else rk.q,
        "reserved_us": r.reserved,
        "transfer_start_us": r.reserved,  # R107: the reservation, in this version
        "transfer_end_us": r.t_end,
        "activation_us": r.activation,
        "transferred_tokens": r.ttokens,
        "transfer_us": r.tus,
        "decode_reused_tokens": r.dreused,
    }


def worker_times(w, lo, hi):
    """R122: the time within [lo, hi] the worker spent in each state, from its lifecycle."""
    out = dict.fromkeys(("starting", "active", "draining", "failed", "removed"), 0)
    life = w.life
    for j, (st, at) in enumerate(life):
        end = life[j + 1][1] if j + 1 < len(life) else None
        a = max(at, lo)
        b = hi if end is None else min(end, hi)
        if b > a:
            out[st] += b - a
    return out


HOST_COUNTS = (
    "stores",
    "stored_blocks",
    "loads",
    "loaded_blocks",
    "reused_tokens",
    "evictions",
    "skipped_blocks",
)


def host_figures(parts):
    """R140: a host object from [(HostPool counters as a dict, block_bytes)]: the counts summed,
    the gigabytes R24 of the summed blocks times their block_bytes over 10^9."""
    out = {k: sum(d[k] for d, _ in parts) for k in HOST_COUNTS}
    out["stored_gigabytes"] = q(sum(d["stored_blocks"] * bb for d, bb in parts), 10**9)
    out["loaded_gigabytes"] = q(sum(d["loaded_blocks"] * bb for d, bb in parts), 10**9)
    return out


def host_counts(hp):
    return {k: getattr(hp, k) for k in HOST_COUNTS}


def build_report(
    reqs, workers, pools, trace, report_version, slo=None, kvt=None, fleet=None, host_log=None
):
    rv = int(report_version.split(".")[0])
    v3 = rv >= 3  # R52's members
    v4 = rv >= 4  # R57's member
    v5 = rv >= 5  # R64's members
    v6 = rv >= 6  # R85's members
    v7 = rv >= 7  # R95's members
    v8 = rv >= 8  # R107's members
    v9 = rv >= 9  # R123's members
    v10 = rv >= 10  # R140's members
    # R64: the earliest arrival of a request that arrived; the latest terminal time of all
    first_arrival = min(r.arrival for r in reqs if r.arrival is not None)
    makespan = max(r.done_t for r in reqs) - first_arrival
    req_out = []
    completed = [r for r in reqs if r.reason is None and not r.cut and not r.failed]
    for r in reqs:
        if r.cut or r.failed:  # R62, R118: what it did before, and no completion
            ft = r.tokens[0] if r.tokens else None
            e = {
                "id": r.id,
                "worker": r.worker,
                "outcome": "failed" if r.failed else "cut_off",
                "reject_reason": None,
                "prompt_tokens": r.prompt,
                "output_tokens": len(r.tokens),
                "arrival_us": r.arrival,
                "terminal_us": r.done_t,
                "first_scheduled_us": r.first_sched,
                "first_token_us": ft,
                "completion_us": None,
                "queue_us": None if r.first_sched is None else r.first_sched - r.arrival,
                "ttft_us": None if ft is None else ft - r.arrival,
                "mean_itl_us": None,
                "e2e_us": None,
                "token_times_us": list(r.tokens),
            }
        elif r.reason is not None:
            e = {
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
        else:
            ft, ct = r.tokens[0], r.tokens[-1]
            n = len(r.tokens)
            e = {
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
        if v3:  # R52
            e["reused_prompt_tokens"] = r.reused
            e["preemptions"] = r.preemptions
        if v4:  # R57: null when rejected, for other policies and without prefix caching
            e["cached_blocks_at_routing"] = r.cached_at_routing
        if v5:  # R64
            e["session"] = r.session
            if slo is not None:
                e["slo_met"] = meets(r, slo)
        if v6:  # R85: the pool of its worker and the rank it joined, null when not routed
            e["pool"] = None if e["worker"] is None else workers[r.worker].pool.name
            e["rank"] = None if e["worker"] is None else r.rank
        if v7:  # R95: R91's retractions (R52's preemptions stay R49's)
            e["retractions"] = r.retractions
        if v8:  # R107
            e["handoff"] = handoff_of(r)
        if v9:  # R123
            e["migrations"] = r.migrations
            e["fail_reason"] = r.fail_reason
            e["lost_tokens"] = r.lost
            e["recomputed_tokens"] = r.recomputed
        if v10:  # R140
            e["host_reused_prompt_tokens"] = r.host_reused
            e["load_wait_us"] = r.load_wait if r.host_seen else None
        req_out.append(e)
    out_tokens = sum(len(r.tokens) for r in completed)
    prompt_tokens = sum(r.prompt for r in completed)
    gaps = []
    for r in completed:
        gaps.extend(b - a for a, b in zip(r.tokens, r.tokens[1:]))
    reasons = REASONS if v3 else REASONS[:4]
    if v9:
        reasons = [*REASONS, "no_routable_worker"]  # R114
    summary = {
        "requests": len(reqs),
        "completed": len(completed),
        "rejected": sum(1 for r in reqs if r.reason is not None),
        "rejected_by_reason": {x: sum(1 for r in reqs if r.reason == x) for x in reasons},
        "prompt_tokens": prompt_tokens,
        "output_tokens": out_tokens,
        "steps": sum(w.steps for w in workers),  # R85: passes
        "first_arrival_us": first_arrival,
        "makespan_us": makespan,
        "request_throughput_per_s": q(len(completed) * 1000000, makespan),
        "output_token_throughput_per_s": q(out_tokens * 1000000, makespan),
        "queue_us": stats([r.first_sched - r.arrival for r in completed]),
        "ttft_us": stats([r.tokens[0] - r.arrival for r in completed]),
        "e2e_us": stats([r.tokens[-1] - r.arrival for r in completed]),
        "itl_us": stats(gaps),
    }
    if v5:  # R63, R64
        summary["cut_off"] = sum(1 for r in reqs if r.cut)
        summary["tpot_us"] = tpot_stats(completed)
        if slo is not None:
            good = [r for r in completed if meets(r, slo)]
            good_tokens = sum(len(r.tokens) for r in good)
            summary["goodput"] = {
                "requests": len(good),
                "output_tokens": good_tokens,
                "request_throughput_per_s": q(len(good) * 1000000, makespan),
                "output_token_throughput_per_s": q(good_tokens * 1000000, makespan),
            }
    # R122: the accounting window and each worker's time in it
    times = {w.i: worker_times(w, first_arrival, first_arrival + makespan) for w in workers}
    wus = {
        w.i: times[w.i]["starting"] + times[w.i]["active"] + times[w.i]["draining"] for w in workers
    }
    if not v9:  # before report 9.0 the fleet never changes: worker_us is makespan_us
        wus = {w.i: makespan for w in workers}
    if v9:
        summary["failed"] = sum(1 for r in reqs if r.failed)
        summary["failed_by_reason"] = {
            x: sum(1 for r in reqs if r.fail_reason == x)
            for x in ("worker_failure", "migration_limit", "no_routable_worker")
        }
        summary["migrations"] = sum(len(r.migrations) for r in reqs)
        summary["lost_tokens"] = sum(r.lost for r in reqs)
        summary["recomputed_tokens"] = sum(r.recomputed for r in reqs)
        summary["worker_us"] = sum(wus.values())
        summary["worker_hours"] = q(summary["worker_us"], 3_600_000_000)
        summary["fleet"] = dict(fleet)
    caches = [rk.cache for w in workers for rk in w.ranks if rk.cache is not None]
    if v3:
        if not any(p.kv is not None for p in pools):  # R85: null when no pool has a cache
            summary["kv_cache"] = None
        else:
            reused = sum(r.reused for r in completed)
            summary["kv_cache"] = {
                "reused_prompt_tokens": reused,
                "prefix_reuse_ratio": q(reused, prompt_tokens),
                "preemptions": sum(c.preemptions for c in caches),
                "evictions": sum(c.evictions for c in caches),
            }
            if v7:  # R95: the sum over workers
                summary["kv_cache"]["retractions"] = sum(c.retractions for c in caches)
            if v10:  # R140
                hr = sum(r.host_reused for r in completed)
                summary["kv_cache"]["host_reused_prompt_tokens"] = hr
                summary["kv_cache"]["host_reuse_ratio"] = q(hr, prompt_tokens)
                summary["kv_cache"]["gpu_reuse_ratio"] = q(reused - hr, prompt_tokens)
                parts = [
                    (host_counts(rk.host), rk.host.block_bytes)
                    for w in workers
                    for rk in w.ranks
                    if rk.host is not None
                ]
                summary["kv_cache"]["host"] = host_figures(parts) if parts else None
    if v8:  # R107: null in an aggregated run
        if kvt is None:
            summary["transfers"] = None
        else:
            ended = [r for r in reqs if r.t_end is not None]
            tokens = sum(r.ttokens for r in ended)
            summary["transfers"] = {
                "count": len(ended),
                "tokens": tokens,
                "gigabytes": q(tokens * kvt["bytes_per_token"], 10**9),
                "transfer_us": stats([r.tus for r in ended]),
                "reservation_wait_us": stats(
                    [r.reserved - r.prefill_end for r in reqs if r.reserved is not None]
                ),
            }

    def cache_figures(peak, cs, style, peak_reserved):  # R52's figures over the caches cs
        out = {
            "peak_blocks_in_use": peak,
            "reused_tokens": sum(c.reused_tokens for c in cs),
            "preemptions": sum(c.preemptions for c in cs),
            "evictions": sum(c.evictions for c in cs),
        }
        if v7:  # R95: peak_reserved_blocks only with trtllm
            out["retractions"] = sum(c.retractions for c in cs)
            out["peak_reserved_blocks"] = peak_reserved if style == "trtllm" else None
        return out

    wout = []
    for w in workers:
        rs = w.ranks
        e = {
            "worker": w.i,
            "routed": sum(rk.routed for rk in rs),
            "completed": sum(rk.completed for rk in rs),
            "steps": w.steps,  # R85: its passes
            "busy_us": w.busy_us,
            "utilization": q(w.busy_us, wus[w.i]),  # R122
            "peak_running": w.peak_running,
            "peak_waiting": w.peak_waiting,
            "prefill_tokens": sum(rk.prefill_tokens for rk in rs),
            "decode_tokens": sum(rk.decode_tokens for rk in rs),
            "output_tokens": sum(rk.output_tokens for rk in rs),
        }
        if v3:
            has_cache = w.pool.kv is not None
            e["kv_cache"] = (
                cache_figures(w.peak_blocks, [rk.cache for rk in rs], w.pool.style, w.peak_reserved)
                if has_cache
                else None
            )
        if v6:  # R85
            e["pool"] = w.pool.name
            e["pool_worker"] = w.pool_worker
            e["ranks"] = [
                {
                    "rank": rk.q,
                    "routed": rk.routed,
                    "completed": rk.completed,
                    "steps": rk.steps,
                    "busy_us": rk.busy_us,
                    "utilization": q(rk.busy_us, wus[w.i]),  # R122
                    "peak_running": rk.peak_running,
                    "peak_waiting": rk.peak_waiting,
                    "prefill_tokens": rk.prefill_tokens,
                    "decode_tokens": rk.decode_tokens,
                    "output_tokens": rk.output_tokens,
                    "kv_cache": None
                    if rk.cache is None
                    else cache_figures(
                        rk.cache.peak, [rk.cache], w.pool.style, rk.cache.peak_reserved
                    ),
                }
                for rk in rs
            ]
        if v7:  # R95
            e["style"] = w.pool.style
        if v8:  # R107: 0 in an aggregated run
            e["handed_off"] = sum(rk.handed_off for rk in rs)
            e["activated"] = sum(rk.activated for rk in rs)
            for rk, entry in zip(rs, e["ranks"]):
                entry["handed_off"] = rk.handed_off
                entry["activated"] = rk.activated
        if v9:  # R123
            tw = times[w.i]
            e["lifecycle"] = [{"state": st, "at_us": at} for st, at in w.life]
            e["created_us"] = w.created
            e["worker_us"] = wus[w.i]
            e["starting_us"] = tw["starting"]
            e["active_us"] = tw["active"]
            e["draining_us"] = tw["draining"]
            e["failed_us"] = tw["failed"]
            e["failures"] = w.failures
            e["migrated_out"] = w.migrated_out
            e["failed_requests"] = w.failed_requests
            e["lost_tokens"] = w.lost_tokens
        if v10:  # R140: the sums over its ranks
            e["host"] = (
                None
                if rs[0].host is None
                else host_figures([(host_counts(rk.host), rk.host.block_bytes) for rk in rs])
            )
            for rk, entry in zip(rs, e["ranks"]):
                entry["host"] = (
                    None
                    if rk.host is None
                    else host_figures([(host_counts(rk.host), rk.host.block_bytes)])
                )
        wout.append(e)
    pout = None
    if v6:  # R85: one entry per pool, in pool order
        pout = []
        for p in pools:
            mine = [e for w, e in zip(workers, wout) if w.pool is p]
            # R107: over the requests that completed on its workers (the decode side's)
            done = [r for r in completed if workers[r.done_worker].pool is p]
            n_done = sum(e["completed"] for e in mine)
            p_out = sum(len(r.tokens) for r in done)
            busy = sum(e["busy_us"] for e in mine)
            p_wus = sum(wus[w.i] for w in workers if w.pool is p)
            kv = None
            if p.kv is not None:
                kv = {
                    "peak_blocks_in_use": max(e["kv_cache"]["peak_blocks_in_use"] for e in mine),
                    "reused_tokens": sum(e["kv_cache"]["reused_tokens"] for e in mine),
                    "preemptions": sum(e["kv_cache"]["preemptions"] for e in mine),
                    "evictions": sum(e["kv_cache"]["evictions"] for e in mine),
                }
                if v7:  # R95: the sum of its workers' retractions, the largest of their peaks
                    kv["retractions"] = sum(e["kv_cache"]["retractions"] for e in mine)
                    kv["peak_reserved_blocks"] = (
                        max(e["kv_cache"]["peak_reserved_blocks"] for e in mine)
                        if p.style == "trtllm"
                        else None
                    )
            pout.append(
                {
                    "name": p.name,
                    "workers": p.workers,
                    "dp_size": p.dp_size,
                    "routed": sum(e["routed"] for e in mine),
                    "completed": n_done,
                    "prompt_tokens": sum(r.prompt for r in done),
                    "output_tokens": p_out,
                    "steps": sum(e["steps"] for e in mine),
                    "busy_us": busy,
                    "utilization": q(busy, p_wus),  # R122
                    "request_throughput_per_s": q(n_done * 1000000, makespan),
                    "output_token_throughput_per_s": q(p_out * 1000000, makespan),
                    "kv_cache": kv,
                }
            )
            if v7:  # R95
                pout[-1]["style"] = p.style
            if v8:  # R107
                pout[-1]["handed_off"] = sum(e["handed_off"] for e in mine)
                pout[-1]["activated"] = sum(e["activated"] for e in mine)
                pout[-1]["role"] = p.role
            if v9:  # R123
                pout[-1]["workers_created"] = len(p.members)
                pout[-1]["peak_workers"] = p.peak_workers
                pout[-1]["worker_us"] = p_wus
                pout[-1]["worker_hours"] = q(p_wus, 3_600_000_000)
                pout[-1]["failures"] = sum(e["failures"] for e in mine)
                pout[-1]["migrations"] = sum(e["migrated_out"] for e in mine)
                pout[-1]["failed"] = sum(e["failed_requests"] for e in mine)
            if v10:  # R140: the sums over its workers
                mine_w = [w for w in workers if w.pool is p]
                pout[-1]["host"] = (
                    None
                    if p.kv is None or "host" not in p.kv
                    else host_figures(
                        [
                            (host_counts(rk.host), rk.host.block_bytes)
                            for w in mine_w
                            for rk in w.ranks
                        ]
                    )
                )
    if trace is not None:
        # R85: in order of (start_us, worker, rank); the sort is stable, and a worker's steps
        # of one pass are appended in rank order
        trace.sort(key=lambda s: (s["start_us"], s["worker"]))
        if not v9:
            for entry in trace:
                del entry["cut_us"]
    hosts = None
    if v10:  # R140: null without the trace
        # R140: by submitted_us, worker, rank; one scheduler's transfers of an instant in
        # submission order (a stable sort of the submission log)
        hosts = (
            None
            if trace is None
            else sorted(host_log or [], key=lambda h: (h["submitted_us"], h["worker"], h["rank"]))
        )
    return summary, wout, req_out, trace, pout, hosts


def profile_arguments(args):
    """R84: split the --timing-profile arguments into the single form and the named form
    (POOL=FILE when the text before the first "=" is a valid pool name). Returns (single file
    or None, {pool: file}, problem or None)."""
    singles, named = [], {}
    for arg in args:
        head, sep, tail = arg.partition("=")
        if sep and is_pool_name(head):
            if head in named:
                return None, None, "pool %s is named twice by --timing-profile (R84)" % head
            named[head] = tail
        else:
            singles.append(arg)
    if singles and named:
        return None, None, "--timing-profile is given both as FILE and as POOL=FILE (R84)"
    if len(singles) > 1:
        return None, None, "--timing-profile FILE is given more than once (R84)"
    if not singles and not named:
        return None, None, "no --timing-profile given"
    return (singles[0] if singles else None), named, None


def main(argv=None):
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    rp = sub.add_parser("replay")
    rp.add_argument("--scenario")
    rp.add_argument("--workload")
    rp.add_argument("--timing-profile", action="append", default=[])  # R84: FILE or POOL=FILE
    rp.add_argument("--output")
    rp.add_argument("--trace", action="store_true")
    rp.add_argument("--describe", action="store_true")
    rp.add_argument(
        "--report-version",
        choices=sorted(READS),
        default="10.0",
        help="report 10.0 (the default, R31, R141; reads scenario 1.0 to 1.8 and workload 1.0 "
        "to 1.3), 9.0 (R124; reads scenario 1.0 to 1.7 and workload 1.0 to 1.2), 8.0 (R108; reads scenario 1.0 to 1.6 and workload 1.0 to 1.2), 7.0 (R96; "
        "reads scenario 1.0 to 1.5 and workload 1.0 to 1.2), 6.0 (R86; reads scenario 1.0 to "
        "1.4 and workload 1.0 to 1.2), 5.0 (reads "
        "scenario 1.0 to 1.3 and workload 1.0 to 1.2), 4.0 (reads scenario 1.0 to 1.2 and "
        "workload 1.0 and 1.1), 3.0 (reads scenario and workload 1.0 and 1.1) or 2.0 (reads "
        "them at 1.0 only, R2, R38)",
    )
    a = ap.parse_args(argv)
    reads = READS[a.report_version]
    if a.describe:  # the conformance handshake (conformance/README.md), protocol 5 (R87)
        print(
            json.dumps(
                {
                    "name": "servesim-independent",
                    "version": "0.8.0",
                    "protocol_version": 5,
                    "schema_versions": {
                        "scenario": reads["scenario"],
                        "workload": reads["workload"],
                        "timing_profile": ["1.0", "1.1"],
                        "report": [a.report_version],
                    },
                    "features": [
                        "prefill.chunked",
                        "routing.random",
                        "timing.grid",
                        "timing.per_pool",
                        "timing.regression",
                        "timing.synthetic_linear",
                        "trace",
                    ],
                }
            )
        )
        return 0
    raw = {}
    docs = {}
    for k, p in (("scenario", a.scenario), ("workload", a.workload)):
        with open(p, "rb") as f:
            raw[k] = f.read()
        docs[k] = json.loads(raw[k].decode("utf-8"))
    paths = {"scenario": a.scenario, "workload": a.workload}
    problems = check_kv(docs["scenario"], docs["workload"], reads)
    if not any(pointer == "/schema_version" for _, pointer, _ in problems):
        problems += check_pools(docs["scenario"], docs["workload"])
        problems += check_routing(docs["scenario"])
        problems += check_sessions(docs["scenario"], docs["workload"])
        problems += check_styles(docs["scenario"])
        problems += check_disagg(docs["scenario"])
        problems += check_fleet(docs["scenario"])
        problems += check_host(docs["scenario"], docs["workload"])
    if problems:
        for role, pointer, expected in problems:
            print("error: %s: %s: expected %s" % (paths[role], pointer, expected), file=sys.stderr)
        return 2
    pools = pools_of(docs["scenario"])
    single, named, problem = profile_arguments(a.timing_profile)
    if problem is None and single is None:
        names = [p.name for p in pools]
        extra = sorted(set(named) - set(names))
        missing = [x for x in names if x not in named]
        if extra:
            problem = "--timing-profile %s=...: a profile for no pool (R84)" % extra[0]
        elif missing:
            problem = "pool %s has no --timing-profile %s=FILE (R84)" % (missing[0], missing[0])
    if problem is not None:
        print("error: %s" % problem, file=sys.stderr)
        return 2
    files = {}  # path -> (raw, document): the single form times every pool (R84)
    for p in pools:
        path = single if single is not None else named[p.name]
        if path not in files:
            with open(path, "rb") as f:
                data = f.read()
            tp = json.loads(data.decode("utf-8"))
            problems = check_measured(tp)
            if problems:  # R84: each profile checked on its own, naming its file and pool
                for pr in problems:
                    who = "" if single is not None else " (pool %s)" % p.name
                    print("error: %s%s: %s (R40)" % (path, who, pr), file=sys.stderr)
                return 2
            files[path] = (data, tp)
        p.tp_raw, p.tp = files[path]
        p.tp_path = path
        p.timer = make_timer(p.tp)
    version = a.report_version
    try:
        summary, wout, rout, trace, pout, hosts = simulate(
            docs["scenario"], docs["workload"], pools, a.trace, version
        )
    except InvalidInput as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    except OutOfCoverage as e:
        print(str(e), file=sys.stderr)
        return 3
    inputs = {k: {"sha256": hashlib.sha256(v).hexdigest()} for k, v in raw.items()}

    def profile_identity(p):  # R25
        return {
            "sha256": hashlib.sha256(p.tp_raw).hexdigest(),
            "calibration": p.tp.get("calibration"),
        }

    # R85: the single form's identity, null when profiles are named per pool
    inputs["timing_profile"] = profile_identity(pools[0]) if single is not None else None
    if int(version.split(".")[0]) >= 6:
        inputs["timing_profiles"] = [dict(pool=p.name, **profile_identity(p)) for p in pools]
    report = {
        "document": "report",
        "schema_version": version,
        "inputs": inputs,
        "summary": summary,
        "workers": wout,
        "requests": rout,
        "trace": trace,
    }
    if pout is not None:
        report["pools"] = pout
    if int(version.split(".")[0]) >= 10:  # R140
        report["host_transfers"] = hosts
    data = rfc8785.dumps(report) + b"\n"
    d = os.path.dirname(os.path.abspath(a.output))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".cleanroom-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
