"""servesim: a specified, deterministic LLM-serving fleet simulator.

The public API is small: ``replay`` turns three input files into report bytes;
``load_document``/``read_document`` check one document (R1 to R4) and ``replay_documents``
replays checked documents; ``simulate`` is the event loop itself; ``ServesimError`` is the root
of every error raised on purpose. The specification is SPEC.md; each rule (R1, R2, ...) is
named in the module that implements it.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from servesim.documents import load_document, read_document
from servesim.errors import InputProblem, InvalidInput, ServesimError, UnrepresentableTime
from servesim.replay import replay, replay_documents
from servesim.simulation import simulate

try:
    __version__ = version("servesim")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "InputProblem",
    "InvalidInput",
    "ServesimError",
    "UnrepresentableTime",
    "__version__",
    "load_document",
    "read_document",
    "replay",
    "replay_documents",
    "simulate",
]
