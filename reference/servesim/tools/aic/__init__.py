"""``servesim profile aic``: timing profiles for real GPUs and models from NVIDIA's
aiconfigurator-core estimator (SPEC.md R74 to R76), frozen into a grid (and a regression) with
the estimator's identity and digests, so that a replay on them is exact and reproducible.

- ``estimator``: the typed boundary to aiconfigurator-core, imported only here and only when
  the command runs (``servesim[aic]``); the support check, the database files, the memory;
- ``mapping``: R74, a step shape as estimator calls and the answer as a duration;
- ``axes``: R75, where the grid's points go, and the held-out shapes;
- ``build``: the profiles, their identity (R76) and their accuracy.
"""
