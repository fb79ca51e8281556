"""R52: what a worker's report entry says of its cache, counted as the replay goes.

The cache counts its evictions (R49), the worker the rest (R50); the report's writer reads them
and nothing else of the cache.
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
