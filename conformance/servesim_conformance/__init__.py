"""servesim's conformance suite: check any implementation, in any language, through a subprocess.

``Implementation`` is the command under test, ``load_corpus`` reads the golden corpus,
``run_case`` and ``run_cases`` judge it, and ``Outcome`` and ``CaseResult`` say what happened.
"""

from __future__ import annotations

from servesim_conformance.corpus import Case, Corpus, load_corpus
from servesim_conformance.implementation import Description, HarnessError, Implementation
from servesim_conformance.outcomes import CaseResult, Difference, Outcome
from servesim_conformance.runner import run_case, run_cases

__all__ = [
    "Case",
    "CaseResult",
    "Corpus",
    "Description",
    "Difference",
    "HarnessError",
    "Implementation",
    "Outcome",
    "load_corpus",
    "run_case",
    "run_cases",
]
