"""Continuing turns, chains and canonical lists (SPEC.md R125 to R128, section 19).

Whether turn k+1 of a session continues turn k is a property of the workload alone (R125), so it
is found once, before the run, here: for each request, the hash list its identities are made
from (R126's canonical list, extended by its successor's for R127's generated tokens' blocks) and
how many tokens R127 lets it identify. A request no pair joins, and every request of a workload
without ``session_prompts_extend``, has no entry: R47 names its blocks unchanged (R128).
"""

from __future__ import annotations

from dataclasses import dataclass

from servesim.contract.model import Request, Workload


@dataclass(frozen=True, slots=True)
class ChainHashes:
    """What R126 and R127 say of one turn of a chain of two or more.

    ``hashes`` is the list its identities are made from: its canonical list (R126), or, when it
    has a successor with a longer list, that successor's canonical list, which begins with the
    same canonical hashes (R126: two turns of one chain agree on every block they share).
    """

    hashes: tuple[int, ...]
    own_hashes: int
    """n, the length of its own ``prefix_hashes`` (R47's bound ``k * n``)."""
    generated_tokens: int
    """R127: ``min(P_k + max_output_tokens_k, P_(k+1))``, the tokens whose full blocks it may
    identify beyond R47's; 0 for the last turn of its chain."""
    successor_hashes: int
    """R127: n', the length of its successor's ``prefix_hashes`` (0 for the last turn)."""


def continues(previous: Request, turn: Request, hash_block_tokens: int) -> bool:
    """R125: whether ``turn`` continues ``previous``, the turn directly before it in its
    session: both have hashes, its prompt is larger, and its hashes begin with the hashes of
    ``previous``'s full hashed blocks, of which there is at least one.

    Reading taken (ref-questions.md Q1): when ``previous`` has fewer hashes than full hashed
    blocks, its first ``floor(P_k / H)`` hashes do not exist, and the pair does not continue.
    """
    full = previous.prompt_tokens // hash_block_tokens
    if not previous.prefix_hashes or not turn.prefix_hashes or full == 0:
        return False
    if turn.prompt_tokens <= previous.prompt_tokens or len(previous.prefix_hashes) < full:
        return False
    return turn.prefix_hashes[:full] == previous.prefix_hashes[:full]


def chains(workload: Workload) -> list[list[int]]:
    """R125: the chains of two or more turns, each as its requests' positions in turn order
    (chains in the order of their first turn's position)."""
    hash_block_tokens = workload.prefix_hash_block_tokens
    if not workload.session_prompts_extend or not workload.sessions or hash_block_tokens is None:
        return []
    last: dict[int, int] = {}  # session -> the position of its latest turn so far
    chain_of: dict[int, list[int]] = {}  # a chain's last position -> the chain
    found: list[list[int]] = []
    requests = workload.requests
    for position, request in enumerate(requests):
        session = request.session
        if session is None:
            continue
        previous = last.get(session)
        last[session] = position
        if previous is None or not continues(requests[previous], request, hash_block_tokens):
            continue
        chain = chain_of.pop(previous, None)
        if chain is None:
            chain = [previous]
            found.append(chain)
        chain.append(position)
        chain_of[position] = chain
    found.sort(key=lambda chain: chain[0])
    return found


def canonical_lists(turns: list[Request], hash_block_tokens: int) -> list[tuple[int, ...]]:
    """R126: each turn's canonical list, for one chain's turns in order.

    Hashed block i of turn t takes the i-th hash of the first turn s at or after t whose prompt
    holds it in full (prompts grow along a chain, R125, so that is the first found going
    forward); without one, the i-th hash of the last turn of the chain whose list has one.
    Reading taken (ref-questions Q13): a turn whose prompt holds block i in full but whose list
    has no i-th hash does not qualify (it has no i-th hash to give).
    """
    lists: list[tuple[int, ...]] = []
    for index, turn in enumerate(turns):
        canonical = list(turn.prefix_hashes)
        for i in range(turn.prompt_tokens // hash_block_tokens, len(canonical)):  # partial
            later = turns[index:]
            holder = next(
                (
                    s
                    for s in later
                    if (i + 1) * hash_block_tokens <= s.prompt_tokens and len(s.prefix_hashes) > i
                ),
                None,
            )
            if holder is None:
                holder = [s for s in later if len(s.prefix_hashes) > i][-1]
            canonical[i] = holder.prefix_hashes[i]
        lists.append(tuple(canonical))
    return lists


def continuing_turns(workload: Workload) -> dict[int, ChainHashes]:
    """R125 to R127: each request of a chain of two or more (by position) and what names its
    blocks; empty for a workload without ``session_prompts_extend`` (R128)."""
    hash_block_tokens = workload.prefix_hash_block_tokens
    found: dict[int, ChainHashes] = {}
    for chain in chains(workload):
        assert hash_block_tokens is not None
        turns = [workload.requests[position] for position in chain]
        lists = canonical_lists(turns, hash_block_tokens)
        for index, position in enumerate(chain):
            turn, canonical = turns[index], lists[index]
            if index + 1 == len(chain):
                found[position] = ChainHashes(canonical, len(canonical), 0, 0)
                continue
            successor, following = turns[index + 1], lists[index + 1]
            shared = min(len(canonical), len(following))
            assert canonical[:shared] == following[:shared], "R126: a chain agrees on its blocks"
            found[position] = ChainHashes(
                following if len(following) > len(canonical) else canonical,
                len(canonical),
                min(turn.prompt_tokens + turn.max_output_tokens, successor.prompt_tokens),
                len(following),
            )
    return found
