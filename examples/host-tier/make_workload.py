"""Write ``workload.json`` for the host-tier example: conversations whose prompts extend.

``CONVERSATIONS`` conversations of ``TURNS`` turns share a system prompt of 32 tokens (hashes 1
and 2). Turn 0 adds a user message of ``FIRST_MESSAGE`` tokens; each later turn's prompt is the
previous prompt, the previous answer (``ANSWER`` tokens) and a new message of ``MESSAGE``
tokens, so ``session_prompts_extend`` is true (SPEC.md R125, a workload 1.3). Prefix hashes
cover blocks of 16 tokens: a full block at position i of conversation c has the hash
``1000 * (c + 1) + i`` in every turn that holds it, and a turn's last, partial block the hash
``1000 * (c + 1) + 500 + i`` (its content is not the full block's, as in a real trace; R126's
canonical hashes give it the later turn's identity). Conversation c starts at ``c * START_GAP_US``
and each later turn is sent ``THINK_US`` after the previous answer (R59).
Run from anywhere: ``python examples/host-tier/make_workload.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent

HASH_BLOCK_TOKENS = 16
SYSTEM = 32
CONVERSATIONS = 6
TURNS = 4
FIRST_MESSAGE = 40
MESSAGE = 24
ANSWER = 40
START_GAP_US = 10_000
THINK_US = 150_000


def hashes(conversation: int, prompt_tokens: int) -> list[int]:
    """The prompt's prefix hashes: the system prompt's, then the conversation's full blocks,
    then a partial last block's own hash."""
    base = 1000 * (conversation + 1)
    full = prompt_tokens // HASH_BLOCK_TOKENS
    values = [1, 2] + [base + i for i in range(2, full)]
    if prompt_tokens % HASH_BLOCK_TOKENS:
        values.append(base + 500 + full)
    return values


def requests() -> list[dict[str, object]]:
    """The turns, conversation by conversation (each session's turns in order, R59)."""
    out: list[dict[str, object]] = []
    for conversation in range(CONVERSATIONS):
        prompt = SYSTEM + FIRST_MESSAGE
        for turn in range(TURNS):
            request: dict[str, object] = {
                "id": f"c{conversation}-t{turn}",
                "arrival_us": conversation * START_GAP_US,
                "prompt_tokens": prompt,
                "max_output_tokens": ANSWER,
                "prefix_hashes": hashes(conversation, prompt),
                "session": f"c{conversation}",
            }
            if turn:
                request["think_time_us"] = THINK_US
            out.append(request)
            prompt += ANSWER + MESSAGE
    return out


def main() -> None:
    sessions = [{"id": f"c{conversation}"} for conversation in range(CONVERSATIONS)]
    document = {
        "document": "workload",
        "schema_version": "1.3",
        "prefix_hash_block_tokens": HASH_BLOCK_TOKENS,
        "session_prompts_extend": True,
        "sessions": sessions,
        "requests": requests(),
    }
    lines = ",\n".join("    " + json.dumps(request) for request in document["requests"])
    text = (
        '{\n  "document": "workload",\n  "schema_version": "1.3",\n'
        f'  "prefix_hash_block_tokens": {HASH_BLOCK_TOKENS},\n'
        '  "session_prompts_extend": true,\n'
        f'  "sessions": {json.dumps(sessions)},\n'
        '  "requests": [\n' + lines + "\n  ]\n}\n"
    )
    assert json.loads(text) == document
    (HERE / "workload.json").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
