"""What every report of a fleet with scheduler styles must show (SPEC.md section 16, R88 to R95).

Each check reads only the scenario and the report (its trace where it says so), so it holds any
implementation to the rules, not to the reference's code:

- a trace entry's ``kind`` is its shape's, and a worker's ``style`` is its pool's (R88, R95);
- the sglang style never mixes prefill and decode, never preempts, and traces the new-token
  ratio it used, within R89's range (R89, R90, R91);
- the trtllm style never preempts, and its held plus reserved blocks never exceed the cache
  (R93, R95);
- only the sglang style retracts, and a request's ``retractions`` are the trace entries that
  list it in ``retracted`` (R91, R95).

R21's budgets per step and one terminal state per request are the pool invariants' and the
general invariants' (``pool_invariants.check_rank_limits``, ``invariants``).
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

from servesim_conformance.pool_invariants import worker_pools
from servesim_conformance.violations import Document, require

#: R89: the ratio is n / Q.
RATIO_DENOMINATOR = 300_000_000


def styles_of_workers(scenario: Document) -> list[str]:
    """R88: each worker's style, by global index: its pool's limits' ``style``, ``"vllm"``
    when absent (a pool's own limits do not inherit the scenario's)."""
    return [pool.limits.get("style", "vllm") for pool in worker_pools(scenario)]


def _trace(report: Document) -> list[Document]:
    trace: list[Document] = report["trace"] or []
    return trace


def ratio_range(limits: Document) -> tuple[Fraction, Fraction]:
    """R89: the least and the greatest ratio the sglang style can use: n_min / Q (14 % of the
    initial ratio) and 1 (a re-estimate may reach it)."""
    permille = limits.get("sglang", {}).get("conservativeness_permille", 1000)
    initial = min(210_000 * permille, RATIO_DENOMINATOR)
    return Fraction(initial * 14 // 100, RATIO_DENOMINATOR), Fraction(1)


def check_kinds_and_styles(scenario: Document, report: Document) -> None:
    """R95: every trace entry's kind follows from its shape, and each worker's and pool's
    ``style`` is the one its limits name (R88)."""
    for index, step in enumerate(_trace(report)):
        shape = step["shape"]
        decode, prefill = shape["decode_requests"] > 0, shape["prefill_tokens"] > 0
        kind = "mixed" if decode and prefill else "decode" if decode else "prefill"
        require(step["kind"] == kind, "R95", f"trace step {index}: kind {step['kind']}, not {kind}")
    styles = styles_of_workers(scenario)
    for entry in report["workers"]:
        expected = styles[entry["worker"]]
        require(entry["style"] == expected, "R88", f"worker {entry['worker']}: not {expected}")
    for pool in report["pools"]:
        limits = next(p.limits for p in worker_pools(scenario) if p.name == pool["name"])
        expected = limits.get("style", "vllm")
        require(pool["style"] == expected, "R88", f"pool {pool['name']}: not {expected}")


def check_sglang_steps(scenario: Document, report: Document) -> None:
    """R89, R90, R91: an sglang worker's steps are prefill-only or decode-only, preempt
    nobody, and trace the ratio they used, within R89's range; other styles' steps retract
    nobody and trace no ratio."""
    pools = worker_pools(scenario)
    for index, step in enumerate(_trace(report)):
        limits = pools[step["worker"]].limits
        where = f"trace step {index} (worker {step['worker']}, rank {step['rank']})"
        ratio = step["new_token_ratio"]
        if limits.get("style") == "sglang":
            require(step["kind"] != "mixed", "R90", f"{where}: an sglang step mixes")
            require(step["preempted"] == [], "R91", f"{where}: the sglang style preempted")
            least, most = ratio_range(limits)
            within = ratio is not None and least <= Fraction(ratio) <= most
            require(within, "R89", f"{where}: new_token_ratio {ratio} outside [{least}, {most}]")
        else:
            require(step["retracted"] == [], "R91", f"{where}: only the sglang style retracts")
            require(ratio is None, "R95", f"{where}: a new_token_ratio without the sglang style")


def check_trtllm_caches(scenario: Document, report: Document) -> None:
    """R93, R95: a trtllm worker (and each of its ranks) preempts nobody, and its peak held
    plus reserved blocks is at most its cache's blocks; other styles report it null."""
    pools = worker_pools(scenario)
    for entry in report["workers"]:
        pool = pools[entry["worker"]]
        trtllm = pool.limits.get("style") == "trtllm"
        for holder in [entry, *entry["ranks"]]:
            cache = holder["kv_cache"]
            if cache is None:
                continue
            where = f"worker {entry['worker']}" + (
                f" rank {holder['rank']}" if "rank" in holder else ""
            )
            peak = cache["peak_reserved_blocks"]
            if not trtllm:
                require(peak is None, "R95", f"{where}: peak_reserved_blocks without trtllm")
                continue
            require(cache["preemptions"] == 0, "R93", f"{where}: the trtllm style preempted")
            assert pool.cache is not None
            blocks = pool.cache["blocks"]
            if "rank" not in holder:  # a worker's total is over its ranks' caches (R85)
                blocks *= pool.dp_size
            require(
                peak is not None and peak <= blocks,
                "R93",
                f"{where}: peak_reserved_blocks {peak} over its {blocks} blocks",
            )
    for index, step in enumerate(_trace(report)):
        if pools[step["worker"]].limits.get("style") == "trtllm":
            require(step["preempted"] == [], "R93", f"trace step {index}: trtllm preempted")


def check_retractions(scenario: Document, report: Document) -> None:
    """R91, R95: a request's ``retractions`` count the trace entries listing it in
    ``retracted``; only a request on an sglang worker has any; the caches' retractions add
    up to the requests'."""
    styles = styles_of_workers(scenario)
    listed: Counter[str] = Counter(rid for step in _trace(report) for rid in step["retracted"])
    total = 0
    for entry in report["requests"]:
        count = entry["retractions"]
        total += count
        require(count == listed[entry["id"]], "R95", f"{entry['id']}: retractions {count}")
        if count:
            sglang = entry["worker"] is not None and styles[entry["worker"]] == "sglang"
            require(sglang, "R91", f"{entry['id']}: retracted on a worker without sglang")
    cache = report["summary"]["kv_cache"]
    summed = 0 if cache is None else cache["retractions"]
    require(summed == total, "R95", f"summary retractions {summed}, the requests' {total}")


def check_style_report(scenario: Document, report: Document) -> None:
    """Every style invariant above; the report must have been written with ``--trace``."""
    require(report["trace"] is not None, "R30", "--trace was given but trace is null")
    check_kinds_and_styles(scenario, report)
    check_sglang_steps(scenario, report)
    check_trtllm_caches(scenario, report)
    check_retractions(scenario, report)
