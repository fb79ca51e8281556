"""The contract: what a document is, before anything is simulated (SPEC.md sections 1, 7 to 10).

Reading (strict JSON, kind and version, schema, semantic checks: R1 to R4), the documents as
data (``model``), the schemas and which versions are read, migrations between versions (R37),
canonical bytes and atomic writing (R23, R32), errors as data (R5, R6, R43), and the report
statistics that a migration computes as well as the writer (R27, R63).

The bottom layer: it imports nothing else of ``servesim`` (``tests/test_layers.py``).
"""
