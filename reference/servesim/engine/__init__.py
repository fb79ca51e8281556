"""The engine: the logical-clock replay of a fleet (SPEC.md sections 2 to 6 and 11 to 13).

The event loop (``loop``), arrivals and what releases them (``arrivals``), admission at arrival
(``admission``), routing (``routing``), a worker's queues and its step formation (``worker``),
KV memory (``kv``) and the bookkeeping of token times (``token_times``, ``step_ends``).

It reads the contract's documents as data and knows nothing of the report's bytes, the tools,
the suite or the command line (``tests/test_layers.py``).
"""
