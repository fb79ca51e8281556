"""Errors as data: every problem names the file, the JSON pointer and what was expected.

The CLI turns any ``ServesimError`` into a message and an exit code: 2 for input the specification
rejects (SPEC.md R5), 3 for a step outside a measured profile's coverage (R43); nothing else in the
package prints.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jsonpointer import JsonPointer

if TYPE_CHECKING:
    from servesim.contract.model import Coverage, StepShape

#: How many problems one error message lists before summarising the rest.
MAX_LISTED_PROBLEMS = 20


@dataclass(frozen=True, order=True)
class InputProblem:
    """One thing wrong with one input document.

    ``pointer`` is an RFC 6901 JSON pointer into the document ("" is the whole document), so a
    reader can find the offending value without guessing.
    """

    file: str
    pointer: str
    message: str

    def __str__(self) -> str:
        where = self.pointer if self.pointer else "(document root)"
        return f"{self.file}: at {where}: {self.message}"


def pointer(parts: Iterable[str | int]) -> str:
    """The RFC 6901 JSON pointer for a path of keys and indices."""
    return str(JsonPointer.from_parts([str(part) for part in parts]).path)


class ServesimError(Exception):
    """The root of every error servesim raises on purpose."""


class InvalidInput(ServesimError):
    """Input documents that the specification rejects (SPEC.md R1 to R5)."""

    def __init__(self, problems: list[InputProblem] | tuple[InputProblem, ...]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(problem) for problem in self.problems))


def raise_if_any(problems: list[InputProblem]) -> None:
    """Raise ``InvalidInput`` with ``problems``, if there are any: the first
    ``MAX_LISTED_PROBLEMS`` of them, then one line counting the rest, so that a file with
    thousands of faults gives a message a reader can still read."""
    if not problems:
        return
    listed = problems[:MAX_LISTED_PROBLEMS]
    if len(problems) > len(listed):
        more = len(problems) - len(listed)
        last = listed[-1]
        listed.append(InputProblem(last.file, "", f"... and {more} more problems"))
    raise InvalidInput(listed)


class UnrepresentableTime(ServesimError):
    """The inputs drive simulated time past 2**53 - 1 microseconds (SPEC.md R6)."""

    def __init__(self, *, worker: int, start_us: int, duration_us: int) -> None:
        self.worker = worker
        self.start_us = start_us
        self.duration_us = duration_us
        super().__init__(
            f"a step of worker {worker} starting at {start_us} us and lasting {duration_us} us "
            "would end after 9007199254740991 us, the largest time a report can hold (SPEC.md R6)"
        )


class UnrepresentableTransfer(UnrepresentableTime):
    """A KV transfer would end after 2**53 - 1 microseconds (SPEC.md R103, R6): found when it
    starts, as a step's end is found when the step is formed."""

    def __init__(self, *, request: str, start_us: int, duration_us: int) -> None:
        self.request = request
        self.start_us = start_us
        self.duration_us = duration_us
        ServesimError.__init__(
            self,
            f"the KV transfer of request {request!r} starting at {start_us} us and lasting "
            f"{duration_us} us would end after 9007199254740991 us, the largest time a report "
            "can hold (SPEC.md R6, R103)",
        )


class UnrepresentableHostTransfer(UnrepresentableTime):
    """A host transfer would end after 2**53 - 1 microseconds (SPEC.md R130, R6): found at its
    submission, also under a stop time."""

    def __init__(self, *, kind: str, request: str, submitted_us: int, end_us: int) -> None:
        self.kind = kind
        self.request = request
        self.submitted_us = submitted_us
        self.end_us = end_us
        ServesimError.__init__(
            self,
            f"the host {kind} of request {request!r} submitted at {submitted_us} us would end "
            f"at {end_us} us, after 9007199254740991 us, the largest time a report can hold "
            "(SPEC.md R6, R130)",
        )


class UnrepresentableArrival(UnrepresentableTime):
    """A session's turn or a closed loop's unit would arrive after 2**53 - 1 microseconds
    (SPEC.md R59, R6): found when it is released, as a step's end is found when it is formed."""

    def __init__(self, *, request: str, arrival_us: int) -> None:
        self.request = request
        self.arrival_us = arrival_us
        ServesimError.__init__(
            self,
            f"request {request!r} would arrive at {arrival_us} us, after 9007199254740991 us, "
            "the largest time a report can hold (SPEC.md R6, R59)",
        )


class UnrepresentableFleet(UnrepresentableTime):
    """A scaling decision would create more than 2**20 workers, or ranks, in one run (SPEC.md
    R110, R6's case): found when the decision is processed."""

    def __init__(self, *, pool: str, at_us: int, workers: int, ranks: int) -> None:
        self.pool = pool
        self.at_us = at_us
        ServesimError.__init__(
            self,
            f"the scaling decision of pool {pool!r} at {at_us} us would bring the workers "
            f"created in the run to {workers} and their ranks to {ranks}; at most 1048576 of "
            "each can be simulated (SPEC.md R110, R6)",
        )


class UnrepresentableSum(ServesimError):
    """A sum the report holds (R122: a pool's or the summary's ``worker_us``) would pass
    2**53 - 1 (SPEC.md R6's case, exit 2, nothing written)."""

    def __init__(self, *, pointer: str, value: int) -> None:
        self.pointer = pointer
        self.value = value
        super().__init__(
            f"the report's {pointer} would be {value}, more than 9007199254740991, the largest "
            "integer a report can hold (SPEC.md R6, R122)"
        )


class OutOfCoverage(ServesimError):
    """A step's shape lies outside the measured profile's coverage (SPEC.md R43).

    Not invalid input: the documents are valid, they ask for timing the profile does not have.
    The error carries what a reader needs to see why, as data: the shape, the coverage, where
    the step is, and the profile's calibration identity.
    """

    def __init__(
        self,
        *,
        shape: StepShape,
        coverage: Coverage,
        worker: int,
        start_us: int,
        calibration: Mapping[str, Any] | None,
    ) -> None:
        self.shape = shape
        self.coverage = coverage
        self.worker = worker
        self.start_us = start_us
        self.calibration = calibration
        self.outside = coverage.outside(shape)
        super().__init__(
            f"the step of worker {worker} starting at {start_us} us has a shape outside the "
            f"timing profile's coverage (SPEC.md R43): "
            + ", ".join(self._coordinate(name) for name in self.outside)
        )

    def _coordinate(self, name: str) -> str:
        interval = getattr(self.coverage, name)
        return f"{name} {getattr(self.shape, name)} is not in {interval.min}..{interval.max}"

    def lines(self, profile_file: str) -> list[str]:
        """The error as the lines the command line prints under its heading."""
        shape = ", ".join(f"{name} {value}" for name, value in self.shape.as_dict().items())
        covered = ", ".join(
            f"{name} {getattr(self.coverage, name).min}..{getattr(self.coverage, name).max}"
            for name in self.shape.as_dict()
        )
        lines = [
            f"worker {self.worker}, step starting at {self.start_us} us",
            f"shape: {shape}",
            *(f"outside: {self._coordinate(name)}" for name in self.outside),
            f"covered: {covered}",
            f"profile: {profile_file}",
        ]
        if self.calibration is not None:
            identity = self.calibration
            lines.append(
                f"calibration: {identity['engine']} {identity['engine_version']}, "
                f"{identity['model']} @ {identity['model_revision']}, {identity['gpu']}, "
                f"server config sha256 {identity['server_config_sha256']}, "
                f"source sha256 {identity['source_sha256']}"
            )
        return lines
