"""servesim: a specified, deterministic LLM-serving fleet simulator.

The public API is small: ``replay`` turns three input files into report bytes, ``simulate``
runs the event loop on already-validated documents, and ``ServesimError`` is the root of every
error raised on purpose. The specification is SPEC.md; each rule (R1, R2, ...) is named in the
module that implements it.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from servesim.errors import InputProblem, InvalidInput, ServesimError, UnrepresentableTime
from servesim.replay import replay
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
    "replay",
    "simulate",
]
