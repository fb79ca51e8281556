"""Upper bound on prefix reuse before/after identifying generated tokens' blocks (issue 28).

Infinite GPU cache, no eviction, requests processed one at a time in arrival order, every
identified block of a request registered before the next request is looked up (sessions never
overlap, so a turn's predecessor has completed). Reuse follows R48: the longest run of
registered leading blocks, capped at floor((P - 1) / B) blocks.

Variants (see docs/design/issue-28-kv-tiers.md, decision 1):
  V0  R47 as today: a turn's blocks are identified by its own prefix_hashes, prompt blocks only.
  V1  canonical hashes only (a partial hashed block takes the hash of the first later turn of
      its chain in which that hashed block is full), prompt blocks only.
  V2  generated blocks identified by the successor's list (no canonical hashes).
  V3  canonical hashes + generated blocks (the recommended rule).
  V4  aliases instead of canonical hashes: lookups use the turn's own list; every block of a
      continuing turn (prompt and generated, hits included) is registered under its own
      identity and also under the successor's (questions Q4).

Also counts, per continuing pair (k, k+1), the prompt blocks of turn k+1 that lie wholly in
positions turn k generated and computed ([P_k, P_k + out_k - 1)), and the block straddling P_k.

Sessions: WEKA files are sessions (main requests in order; each sub-agent's requests are a
session of their own, sharing the file's hash namespace). The Mooncake conversation trace has
no session_id: a request's predecessor is inferred as the earlier request q with the most full
hashed blocks (>= 1) such that the request's list starts with q's full-block hashes and its
prompt is at least P_q + out_q tokens (ties: the latest q). This is a heuristic.

Usage: python reuse_bound.py /work/shared/traces
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path


class Req:
    __slots__ = ("canon", "hashes", "out", "p", "pred", "succ")

    def __init__(self, p: int, out: int, hashes: list[int]) -> None:
        self.p = p
        self.out = out
        self.hashes = hashes
        self.succ: Req | None = None
        self.pred: Req | None = None
        self.canon: list[int] = hashes


def continues(a: Req, b: Req, h: int) -> bool:
    full = a.p // h
    return full >= 1 and len(b.hashes) >= full and b.hashes[:full] == a.hashes[:full] and b.p > a.p


def set_canon(reqs: list[Req], h: int) -> None:
    # process from last to first so the successor's canonical list is known
    for r in reversed(reqs):
        s = r.succ
        if s is None:
            r.canon = r.hashes
            continue
        c = list(r.hashes)
        for i in range(len(c)):
            full_here = (i + 1) * h <= r.p
            if not full_here and i < len(s.canon):
                c[i] = s.canon[i]
        r.canon = c


class Keys:
    """Intern prefix chains: key(i) of a list = id of (key(i-1), hash_i)."""

    def __init__(self) -> None:
        self.ids: dict[tuple[int, int], int] = {}

    def chain(self, hashes: list[int]) -> list[int]:
        out = []
        prev = -1
        for x in hashes:
            k = (prev, x)
            v = self.ids.get(k)
            if v is None:
                v = len(self.ids)
                self.ids[k] = v
            out.append(v)
            prev = v
        return out


def run(reqs: list[Req], h: int, b: int, variant: str, keys: Keys, registry: set) -> int:
    """Return reused tokens summed over reqs (registry shared by the caller)."""
    kr = h // b
    canonical = variant in ("V1", "V3")
    generated = variant in ("V2", "V3")
    alias = variant == "V4"
    total = 0
    for r in reqs:
        own = keys.chain(r.canon if canonical else r.hashes)
        cap = (r.p - 1) // b
        n_ident = min(r.p // b, kr * len(own))
        hit = 0
        while hit < min(cap, n_ident) and (hit, own[hit // kr]) in registry:
            hit += 1
        total += hit * b
        for j in range(n_ident):
            registry.add((j, own[j // kr]))
        if alias and r.succ is not None:
            s = r.succ
            slist = keys.chain(s.hashes)
            filled = (r.p + r.out - 1) // b
            limit = min(filled, s.p // b, kr * len(slist))
            for j in range(limit):
                registry.add((j, slist[j // kr]))
        if generated and r.succ is not None:
            s = r.succ
            slist = keys.chain(s.canon if canonical else s.hashes)
            filled = (r.p + r.out - 1) // b
            limit = min(filled, s.p // b, kr * len(slist))
            # every block the own list does not identify (the prompt's tail past its hashes,
            # the block straddling P_k, the generated blocks) takes the successor's identity
            for j in range(n_ident, limit):
                registry.add((j, slist[j // kr]))
    return total


def coverage(reqs: list[Req], b: int) -> tuple[int, int, int]:
    pure = mixed = pairs = 0
    for r in reqs:
        s = r.succ
        if s is None:
            continue
        pairs += 1
        gen_end = min(r.p + r.out - 1, s.p)
        first_full = -(-r.p // b)  # first block starting at or after P_k
        pure += max(0, gen_end // b - first_full)
        if r.p % b and (r.p // b + 1) * b <= gen_end:
            mixed += 1
    return pairs, pure * b, mixed * b


def weka_sessions(path: Path) -> tuple[list[list[Req]], int]:
    d = json.loads(path.read_text())
    sessions = []
    main = [Req(x["in"], x["out"], x["hash_ids"]) for x in d["requests"] if x["type"] in ("n", "s")]
    sessions.append(main)
    for x in d["requests"]:
        if x["type"] == "subagent":
            sub = [
                Req(y["in"], y["out"], y["hash_ids"])
                for y in x["requests"]
                if y["type"] in ("n", "s")
            ]
            if sub:
                sessions.append(sub)
    return sessions, d["block_size"]


def link(session: list[Req], h: int) -> None:
    for a, c in itertools.pairwise(session):
        if continues(a, c, h):
            a.succ = c
            c.pred = a


def mooncake(path: Path, h: int, min_full: int) -> list[Req]:
    reqs = []
    for line in path.read_text().splitlines():
        x = json.loads(line)
        reqs.append(Req(x["input_length"], x["output_length"], x["hash_ids"]))
    # infer predecessors: index requests by their full-block prefix chains
    keys = Keys()
    by_full_prefix: dict[int, Req] = {}  # key of q's full-block chain -> latest q
    for r in reqs:
        chain = keys.chain(r.hashes)
        best = None
        for n in range(len(chain), 0, -1):
            q = by_full_prefix.get(chain[n - 1])
            if q is not None and n >= min_full and q.p // h == n and r.p >= q.p + q.out:
                best = q
                break
        if best is not None:
            r.pred = best
            if best.succ is None:
                best.succ = r
        full = r.p // h
        if full >= 1:
            by_full_prefix[chain[full - 1]] = r
    return reqs


def report(
    name: str,
    groups: list[list[Req]],
    all_reqs: list[Req],
    h: int,
    b: int,
    separate_registries: list[list[list[Req]]],
) -> None:
    prompt = sum(r.p for r in all_reqs)
    later = sum(r.p for r in all_reqs if r.pred is not None)
    res = {}
    for v in ("V0", "V1", "V2", "V3", "V4"):
        tot = 0
        for fam in separate_registries:
            keys = Keys()
            reg: set = set()
            ordered = [r for sess in fam for r in sess]
            tot += run(ordered, h, b, v, keys, reg)
        res[v] = tot
    pairs = pure = mixed = 0
    for g in groups:
        p, u, m = coverage(g, b)
        pairs += p
        pure += u
        mixed += m
    print(f"## {name}  H={h} B={b}")
    print(
        f"requests {len(all_reqs)}  continuing pairs {pairs}  prompt tokens {prompt}"
        f"  (of turns with a predecessor {later})"
    )
    print(
        "turn k+1 prompt tokens in turn k's generated positions:"
        f" pure blocks {pure}, straddling blocks {mixed}"
    )
    for v in ("V0", "V1", "V2", "V3", "V4"):
        print(f"  {v}: reused {res[v]}  ratio {res[v] / prompt:.4f}")
    print()


def main() -> None:
    root = Path(sys.argv[1])
    # WEKA: one registry per file (hash ids are local to a session file); order: main session
    # then sub-agents (their arrival interleaving is not modelled; sub-agent lists share few blocks)
    fams = []
    groups = []
    all_reqs = []
    for f in sorted((root / "weka_agentic_sessions").glob("trace_*.json")):
        sessions, h = weka_sessions(f)
        for s in sessions:
            link(s, h)
            set_canon(s, h)
            groups.append(s)
            all_reqs.extend(s)
        fams.append(sessions)
    for b in (64, 16):
        report("WEKA agentic sessions (13 files)", groups, all_reqs, 64, b, fams)
    h = 512
    for min_full in (2, 1):
        reqs = mooncake(root / "mooncake" / "conversation_trace.jsonl", h, min_full)
        set_canon(reqs, h)
        n_pred = sum(1 for r in reqs if r.pred is not None)
        for b in (64, 16):
            name = (
                "Mooncake conversation trace (inferred predecessors,"
                f" MIN_FULL={min_full}, {n_pred} requests with one)"
            )
            report(name, [reqs], reqs, h, b, [[reqs]])


if __name__ == "__main__":
    main()
