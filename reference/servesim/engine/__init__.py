"""The engine: the logical-clock replay of a fleet (SPEC.md sections 2 to 6 and 11 to 13).

The event loop and its handlers, one per kind of event (``loop``); arrivals and what releases
them (``arrivals``); admission at arrival (``admission``); routing (``routing``) and what a
router sees (``fleet_view``); a worker's queues and counters (``worker``), the requests and
steps it holds (``requests``, ``step``); how it forms a step, one module per style
(``formation``); its KV memory (``memory``, ``block_memory`` on the block cache of ``kv``); runs of
identical decode steps (``decode_runs``); and the bookkeeping of token times (``token_times``,
``step_ends``).

It reads the contract's documents as data and knows nothing of the report's bytes, the tools,
the suite or the command line (``tests/test_layers.py``).
"""
