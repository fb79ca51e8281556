"""R4's checks of a scenario's host tiers (SPEC.md R129; section 19).

What a scenario 1.8's schema cannot compare: a cache with ``host`` has ``prefix_caching`` on,
every pool that uses such a cache forms its steps in the ``"vllm"`` style, and no host tier
meets a fleet that changes (scaling or failures, section 18), which this version does not
specify. Each problem is ``(JSON pointer, reason)``, reported at the ``host`` member.
"""

from __future__ import annotations

from typing import Any


def _hosts(value: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every cache with ``host``, as ``(pointer of its host member, the cache)``, in document
    order: the top-level ``kv_cache`` and the pools' where the document has them (ref-questions
    Q7: the order of the members as read)."""
    found: list[tuple[str, dict[str, Any]]] = []
    for name, member in value.items():
        if name == "kv_cache" and member.get("host") is not None:
            found.append(("/kv_cache/host", member))
        elif name == "fleet":
            for index, pool in enumerate(member.get("pools", ())):
                cache = pool.get("kv_cache")
                if cache is not None and cache.get("host") is not None:
                    found.append((f"/fleet/pools/{index}/kv_cache/host", cache))
    return found


def _styles_using(value: dict[str, Any], pointer: str) -> list[str]:
    """R77, R88: the styles of the pools whose cache is the one whose host member is at
    ``pointer`` (a pool without its own ``kv_cache`` uses the scenario's)."""
    scheduler = value["scheduler"]
    pools = value["fleet"].get("pools")
    if pools is None:
        return [scheduler.get("style", "vllm")]
    styles: list[str] = []
    for index, pool in enumerate(pools):
        own = "kv_cache" in pool
        if own and pointer != f"/fleet/pools/{index}/kv_cache/host":
            continue
        if not own and pointer != "/kv_cache/host":
            continue
        styles.append(pool.get("scheduler", scheduler).get("style", "vllm"))
    return styles


def _changes_fleet(value: dict[str, Any]) -> bool:
    """Section 18: scaling (any pool, or the fleet's) or failures."""
    fleet = value["fleet"]
    if "failures" in value or "scaling" in fleet:
        return True
    return any("scaling" in pool for pool in fleet.get("pools", ()))


def host_problems(value: dict[str, Any]) -> list[tuple[str, str]]:
    """R4, R129: every problem of the scenario's host tiers, at their ``host`` members."""
    hosts = _hosts(value)
    problems: list[tuple[str, str]] = []
    for pointer, cache in hosts:
        if not cache["prefix_caching"]:
            problems.append(
                (
                    pointer,
                    "a host tier needs prefix caching: this cache has prefix_caching false (R129)",
                )
            )
        others = sorted({style for style in _styles_using(value, pointer) if style != "vllm"})
        if others:
            problems.append(
                (
                    pointer,
                    f'a host tier needs the "vllm" style: a pool using this cache has style '
                    f'"{others[0]}" (R129)',
                )
            )
    if hosts and _changes_fleet(value):
        problems.append(
            (
                hosts[0][0],
                "a host tier with a fleet that changes (scaling or failures) is not specified "
                "yet (R129)",
            )
        )
    return problems
