"""servesim: a specified, deterministic LLM-serving fleet simulator.

The public API is small: ``replay`` turns three input files into report bytes;
``load_document``/``read_document`` check one document (R1 to R4) and ``replay_documents``
replays checked documents; ``simulate`` is the event loop itself; ``ServesimError`` is the root
of every error raised on purpose. The specification is SPEC.md; each rule (R1, R2, ...) is
named in the module that implements it.
"""

from __future__ import annotations

from servesim.contract.documents import load_document, read_document
from servesim.contract.errors import InputProblem, InvalidInput, ServesimError, UnrepresentableTime
from servesim.engine.loop import simulate
from servesim.replay import replay, replay_documents


def __getattr__(name: str) -> str:
    """``__version__``, looked up on first use (PEP 562): ``importlib.metadata`` takes a fifth
    of the imports of a ``servesim replay``, which never prints the version."""
    if name != "__version__":
        raise AttributeError(f"module 'servesim' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("servesim")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0+unknown"
    globals()["__version__"] = found
    return found


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
