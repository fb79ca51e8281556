"""A report's headline figures, read once into a small frozen value (SPEC.md R25 to R29).

``read_figures(path)`` is the public entry: ``servesim summary``, ``servesim compare`` and any
other reader (plots, sweeps) get the same figures, computed the same way; ``FiguresTap`` gives
``servesim replay`` the figures of the report it writes, from the bytes on their way out.

The work is split by job: ``figures_model`` (the frozen values), ``figures_bytes`` (a report's
bytes parsed without its token times and trace), ``figures_derivation`` (the figures of a parsed
report, its sample checked against the schema), ``figures_tpot`` (per-request TPOT, exact) and
``figures_flat`` (every figure by name, label and unit, for tables and comparisons).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from servesim.contract.errors import InputProblem, InvalidInput
from servesim.contract.json_reading import parse_json
from servesim_cli.figures_bytes import Reducer, parsed, reduced_report
from servesim_cli.figures_derivation import figures_of
from servesim_cli.figures_flat import Figure, flat_figures
from servesim_cli.figures_model import (
    GoodputFigures,
    Inputs,
    KvCacheFigures,
    ReportFigures,
    Statistics,
    Value,
    WorkerSpread,
)

__all__ = [
    "Figure",
    "FiguresTap",
    "GoodputFigures",
    "Inputs",
    "KvCacheFigures",
    "ReportFigures",
    "Statistics",
    "Value",
    "WorkerSpread",
    "figures_of",
    "flat_figures",
    "read_figures",
]


def read_figures(path: str | Path) -> ReportFigures:
    """The figures of the report file at ``path``.

    Raises ``InvalidInput`` (problems naming the file and a JSON pointer) for a file that is not
    a readable report of a version this package reads (R2: 1.0 to 5.0). What the figures do not
    use is not checked (``servesim validate`` checks a whole report).
    """
    file = str(path)
    try:
        with open(path, "rb") as stream:
            reduced = reduced_report(stream)
        value = parsed(reduced) if reduced is not None else None
        if value is None:  # another layout, or not JSON: parse the whole file
            data = Path(path).read_bytes()
            value = parsed(data)
            if value is None:  # not JSON: the strict reader says where and why
                value = parse_json(data, file)
    except OSError as error:
        raise InvalidInput(
            [InputProblem(file, "", f"cannot read the file: {error.strerror}")]
        ) from None
    return figures_of(value, file)


class FiguresTap:
    """A report's figures taken from its bytes as they are written, so that ``servesim replay``
    can summarise what it wrote without reading it back (it may have gone to a pipe)."""

    def __init__(self, file: str) -> None:
        self._file = file
        self._reducer = Reducer()

    def passing(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """The report's chunks, unchanged, noted on their way."""
        for chunk in chunks:
            self._reducer.feed(chunk)
            yield chunk

    def figures(self) -> ReportFigures:
        """The figures, once every chunk has passed."""
        reduced = self._reducer.reduced()
        if reduced is None:
            raise ValueError("the report written is not canonical JSON (R23)")
        return figures_of(parsed(reduced), self._file)
