"""A worker's KV cache: held, cached and free blocks, the prefix registry, eviction (SPEC.md §11).

Only the counters the report reads (R52) are here so far; the cache itself follows R45 to R51.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class KvCacheCounters:
    """R52: what one worker's report entry says of its cache."""

    peak_blocks_in_use: int = 0
    reused_tokens: int = 0
    preemptions: int = 0
    evictions: int = 0
