"""A worker's KV cache (SPEC.md section 11, R45 to R49 and R52's counters).

The names of a request's blocks from its prefix hashes (``identities``, R47), what a running
request holds (``held``, R46), the prefix registry with its hits and registration
(``registry``, R47, R48), the block pool with taking, release and LRU eviction (``cache``, R45,
R46, R49), and the counters the report reads (``counters``, R52). When a step is formed and what
it takes is the worker's (``servesim.engine.worker``, R50, R51).
"""
