"""The report: a finished replay turned into the report document's canonical bytes (SPEC.md
section 7, R62 to R64).

It reads the engine's result and the contract's canonical writers; the engine never sees it.
"""
