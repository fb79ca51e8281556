"""What every report of a disaggregated fleet must show (SPEC.md section 17, R97 to R107).

Each check reads only the scenario and the report, so it holds any implementation to the rules,
not to the reference's code:

- a request's stamps come in the order of its phases (R98): prefill end, reservation, transfer
  end, activation, then its client tokens, none before its activation (R104, R105);
- its transfer lasts what R103's formula gives on the report's own numbers, and sends what
  its mode says (R102, R103);
- no prefill worker emits a client token or completes a request, and no decode worker is
  routed an arrival (R99, R100, R107);
- the counts add up: every handoff is one prefill worker's ``handed_off``, every activation
  one decode worker's ``activated``, and the summary's transfers are the requests' (R107);
- every request that was handed off has a handoff, and only those (R100).

One terminal state per request and R21's budgets are the general and pool invariants'.
"""

from __future__ import annotations

from servesim_conformance.pool_invariants import worker_pools
from servesim_conformance.violations import Document, require


def worker_roles(scenario: Document) -> list[str | None]:
    """R78, R97: each worker's role, in global order."""
    roles = {pool["name"]: pool.get("role") for pool in scenario["fleet"].get("pools", [])}
    return [roles.get(pool.name) for pool in worker_pools(scenario)]


def transfer_us(scenario: Document, tokens: int) -> int:
    """R103: ``L + ceil(t * b * 10^6 / W)``, in exact integers."""
    transfer = scenario["kv_transfer"]
    sent = tokens * int(transfer["bytes_per_token"]) * 1_000_000
    return int(transfer["base_latency_us"]) + -(-sent // int(transfer["bandwidth_bytes_per_s"]))


def check_stamps(scenario: Document, report: Document) -> None:
    """R98, R103 to R105: each handoff's stamps in phase order, its transfer's duration and
    tokens by R103, and its client tokens after its activation."""
    full = scenario["kv_transfer"].get("mode") == "full_prompt"
    roles = worker_roles(scenario)
    for entry in report["requests"]:
        handoff = entry["handoff"]
        rid = entry["id"]
        if handoff is None:
            require(
                not entry["token_times_us"] or entry["worker"] is None,
                "R105",
                f"{rid}: client tokens without a handoff",
            )
            continue
        require(roles[entry["worker"]] == "prefill", "R99", f"{rid}: routed to a decode worker")
        first = entry["first_scheduled_us"]
        require(first is not None and first < handoff["prefill_end_us"], "R100", f"{rid}: prefill")
        stamps = [
            handoff[name]
            for name in ("prefill_end_us", "reserved_us", "transfer_end_us", "activation_us")
        ]
        reached = [stamp for stamp in stamps if stamp is not None]
        require(stamps[: len(reached)] == reached, "R107", f"{rid}: a stage skipped: {stamps}")
        require(reached == sorted(reached), "R98", f"{rid}: stamps out of order: {stamps}")
        require(handoff["transfer_start_us"] == handoff["reserved_us"], "R107", f"{rid}: start")
        if handoff["decode_worker"] is not None:
            require(
                roles[handoff["decode_worker"]] == "decode",
                "R99",
                f"{rid}: decoded off a decode pool",
            )
        if handoff["reserved_us"] is not None:
            tokens = handoff["transferred_tokens"]
            reused = handoff["decode_reused_tokens"]
            expected = entry["prompt_tokens"] if full else entry["prompt_tokens"] - reused
            require(tokens == expected, "R103", f"{rid}: sent {tokens}, expected {expected}")
            duration = transfer_us(scenario, tokens)
            require(handoff["transfer_us"] == duration, "R103", f"{rid}: transfer {duration}")
            end = handoff["transfer_end_us"]
            require(
                end is None or end == handoff["reserved_us"] + duration, "R103", f"{rid}: end {end}"
            )
        tokens_at = entry["token_times_us"]
        if tokens_at:
            activation = handoff["activation_us"]
            require(
                activation is not None and tokens_at[0] > activation,
                "R105",
                f"{rid}: a client token at {tokens_at[0]}, activated at {activation}",
            )


def check_workers(scenario: Document, report: Document) -> None:
    """R99, R100, R107: prefill workers emit no client token and complete nothing; the
    handoff counts of workers and pools are the requests'."""
    roles = worker_roles(scenario)
    handed = [0] * len(roles)
    activated = [0] * len(roles)
    for entry in report["requests"]:
        handoff = entry["handoff"]
        if handoff is not None:
            handed[entry["worker"]] += 1
            if handoff["activation_us"] is not None:
                activated[handoff["decode_worker"]] += 1
    for worker, role in zip(report["workers"], roles, strict=True):
        index = worker["worker"]
        if role == "prefill":
            for member in ("completed", "decode_tokens", "output_tokens", "activated"):
                require(worker[member] == 0, "R107", f"prefill worker {index}: {member}")
        require(worker["handed_off"] == handed[index], "R107", f"worker {index}: handed_off")
        require(worker["activated"] == activated[index], "R107", f"worker {index}: activated")
        for name in ("handed_off", "activated"):
            summed = sum(rank[name] for rank in worker["ranks"])
            require(summed == worker[name], "R107", f"worker {index}: ranks' {name}")


def check_transfers(report: Document) -> None:
    """R107: the summary's transfers are the requests' that ended, and its reservation waits
    those of the requests reserved."""
    handoffs = [entry["handoff"] for entry in report["requests"] if entry["handoff"]]
    ended = [each for each in handoffs if each["transfer_end_us"] is not None]
    transfers = report["summary"]["transfers"]
    require(transfers is not None, "R107", "a disaggregated run's summary has transfers")
    require(transfers["count"] == len(ended), "R107", f"transfers.count {transfers['count']}")
    tokens = sum(each["transferred_tokens"] for each in ended)
    require(transfers["tokens"] == tokens, "R107", f"transfers.tokens {transfers['tokens']}")
    reserved = [each for each in handoffs if each["reserved_us"] is not None]
    waits = transfers["reservation_wait_us"]["count"]
    require(waits == len(reserved), "R107", f"reservation_wait_us.count {waits}")


def check_disaggregated_report(scenario: Document, report: Document) -> None:
    """Every invariant above, for a scenario whose pools have roles (R97)."""
    check_stamps(scenario, report)
    check_workers(scenario, report)
    check_transfers(report)
