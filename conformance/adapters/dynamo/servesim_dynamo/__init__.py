"""Dynamo's offline replay (ai-dynamo 1.6.1) run as a servesim implementation.

``mapping`` turns servesim's documents into Dynamo replay specifications (or says which feature
Dynamo cannot express exactly), ``dynamo_runtime`` runs them, ``timeline`` reads what Dynamo
recorded back into integer microseconds, and ``report`` writes the servesim report from those
timelines only. Nothing here imports Dynamo except ``dynamo_runtime``, so the mapping and the
report can be tested without it.
"""

NAME = "dynamo-replay"
DYNAMO_VERSION = "1.6.1"
