"""Errors as data: every problem names the file, the JSON pointer and what was expected.

The CLI turns any ``ServesimError`` into a message and exit code 2 (SPEC.md R5); nothing else in
the package prints.
"""

from __future__ import annotations

from dataclasses import dataclass


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


class ServesimError(Exception):
    """The root of every error servesim raises on purpose."""


class InvalidInput(ServesimError):
    """Input documents that the specification rejects (SPEC.md R1 to R5)."""

    def __init__(self, problems: list[InputProblem] | tuple[InputProblem, ...]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(problem) for problem in self.problems))


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
