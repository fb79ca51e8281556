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
    retractions: int = 0
    """R91, R95: the sglang style's retractions on the worker."""
    peak_reserved_blocks: int | None = None
    """R93, R95: with the trtllm style the largest held-plus-reserved blocks once a step is
    formed (0 before any); ``None`` with the other styles."""
