"""The workload's own checks (R4: request ids, R47: prefix hashes, R59: sessions) and its
``Workload``.

A schema states each request alone; what one request says about another (an id used twice, a
later turn of a session arriving before an earlier one) is checked here, on a schema-valid
document, with every fault reported at the member to change.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from servesim.contract.errors import InputProblem, pointer
from servesim.contract.json_reading import as_json
from servesim.contract.model import Request, Workload


def workload_problems(value: dict[str, Any], file: str) -> list[InputProblem]:
    """R4: what a schema-valid workload breaks among its requests and sessions."""
    problems: list[InputProblem] = []
    requests = value["requests"]
    for index, first in repeated_ids(request["id"] for request in requests):
        problems.append(
            InputProblem(
                file,
                pointer(["requests", index, "id"]),
                f"duplicate request id {requests[index]['id']!r}; first used at "
                f"{pointer(['requests', first, 'id'])}",
            )
        )
    problems.extend(_prefix_hash_problems(value, file))
    problems.extend(_session_problems(value, file))
    return problems


def repeated_ids(ids: Iterable[str]) -> Iterator[tuple[int, int]]:
    """R4, R59: for each id used before, its index and the index of its first use."""
    first_seen: dict[str, int] = {}
    for index, item_id in enumerate(ids):
        first = first_seen.setdefault(item_id, index)
        if first != index:
            yield index, first


def _prefix_hash_problems(value: dict[str, Any], file: str) -> list[InputProblem]:
    """R4, R47: a request's prefix hashes need the workload's H, and cover no more blocks of H
    tokens than its prompt has."""
    problems: list[InputProblem] = []
    block_tokens = value.get("prefix_hash_block_tokens")
    for index, request in enumerate(value["requests"]):
        hashes = request.get("prefix_hashes")
        if hashes is None:
            continue
        where = pointer(["requests", index, "prefix_hashes"])
        if block_tokens is None:
            problems.append(
                InputProblem(
                    file,
                    where,
                    "prefix_hashes need the workload's prefix_hash_block_tokens (the tokens each "
                    "hash covers), which is missing",
                )
            )
            continue
        most = -(-request["prompt_tokens"] // block_tokens)
        if len(hashes) > most:
            problems.append(
                InputProblem(
                    file,
                    where,
                    f"{len(hashes)} hashes, but a prompt of {request['prompt_tokens']} tokens has "
                    f"at most {most} blocks of prefix_hash_block_tokens ({block_tokens}); expected "
                    f"at most {most}",
                )
            )
    return problems


def _session_problems(value: dict[str, Any], file: str) -> list[InputProblem]:
    """R4, R59: sessions have unique ids and at least one turn, every request names a session
    that exists, ``think_time_us`` belongs to a turn after the first, and a session's turns do
    not go back in time.

    Each fault is one problem, at the member to change: a request naming an unknown session is
    not a turn of anything, so it is not also judged as a turn.
    """
    sessions = value.get("sessions", ())
    declared: dict[str, int] = {}  # session id -> index of its first declaration
    for index, session in enumerate(sessions):
        declared.setdefault(session["id"], index)
    problems = [
        InputProblem(
            file,
            pointer(["sessions", index, "id"]),
            f"duplicate session id {as_json(sessions[index]['id'])}; first used at "
            f"{pointer(['sessions', first, 'id'])}",
        )
        for index, first in repeated_ids(session["id"] for session in sessions)
    ]
    requests = value["requests"]
    previous_turn: dict[str, int] = {}  # session id -> workload index of its latest turn
    for index in range(len(requests)):
        problem = _turn_problem(requests, index, declared, previous_turn, file)
        if problem is not None:
            problems.append(problem)
    problems.extend(
        InputProblem(
            file,
            pointer(["sessions", index]),
            f"session {as_json(session_id)} has no turn: no request names it; expected at "
            "least one request with this session",
        )
        for session_id, index in declared.items()
        if session_id not in previous_turn
    )
    return problems


def _turn_problem(
    requests: list[dict[str, Any]],
    index: int,
    declared: dict[str, int],
    previous_turn: dict[str, int],
    file: str,
) -> InputProblem | None:
    """R59 for the request at ``index`` as a turn of the session it names, if any.

    ``previous_turn`` (session id -> index of its latest turn so far) is updated here, since
    a turn is judged against the one before it; a request naming an unknown session is not
    recorded as a turn.
    """
    request = requests[index]
    session_id = request.get("session")
    if session_id is None:
        if "think_time_us" not in request:
            return None
        return InputProblem(
            file,
            pointer(["requests", index, "think_time_us"]),
            "think_time_us without session: only a session's later turns wait "
            "for a think time (R59); expected no think_time_us, or a session",
        )
    if session_id not in declared:
        known = "the workload has no sessions" if not declared else "not in /sessions"
        return InputProblem(
            file,
            pointer(["requests", index, "session"]),
            f"unknown session {as_json(session_id)} ({known}); expected the id of one "
            "of the workload's sessions",
        )
    before = previous_turn.get(session_id)
    previous_turn[session_id] = index
    if before is None:
        if "think_time_us" not in request:
            return None
        return InputProblem(
            file,
            pointer(["requests", index, "think_time_us"]),
            f"think_time_us on turn 0 of session {as_json(session_id)}: the first turn "
            "arrives at its arrival_us (R59); expected no think_time_us here",
        )
    return _turn_order_problem(requests, index, before, file)


def _turn_order_problem(
    requests: list[dict[str, Any]], index: int, before: int, file: str
) -> InputProblem | None:
    """R59: a session's turn (at ``index``) arrives no earlier than its previous turn."""
    arrival = requests[index]["arrival_us"]
    earlier = requests[before]["arrival_us"]
    if arrival >= earlier:
        return None
    return InputProblem(
        file,
        pointer(["requests", index, "arrival_us"]),
        f"{arrival} is smaller than the arrival_us of the previous turn of session "
        f"{as_json(requests[index]['session'])} ({earlier}, at "
        f"{pointer(['requests', before, 'arrival_us'])}); expected at least {earlier}",
    )


def build_workload(value: dict[str, Any]) -> Workload:
    """The ``Workload`` of a checked workload document (R59: a request's session by index)."""
    sessions = tuple(session["id"] for session in value.get("sessions", ()))
    session_index = {session: index for index, session in enumerate(sessions)}
    return Workload(
        requests=tuple(
            Request(
                id=item["id"],
                arrival_us=item["arrival_us"],
                prompt_tokens=item["prompt_tokens"],
                max_output_tokens=item["max_output_tokens"],
                prefix_hashes=tuple(item.get("prefix_hashes", ())),
                session=session_index[item["session"]] if "session" in item else None,
                think_time_us=item.get("think_time_us", 0),
            )
            for item in value["requests"]
        ),
        prefix_hash_block_tokens=value.get("prefix_hash_block_tokens"),
        sessions=sessions,
        session_prompts_extend=value.get("session_prompts_extend", False),
    )
