"""An implementation under test: a command, its ``--describe`` handshake, and one run of it.

The contract is toml-test's, made stricter: an argv list (never a shell string), the arguments of
``servesim replay``, exit 0 = report written, exit 2 = input rejected, anything else an error.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servesim_conformance.schemas import validate_harness_document

#: The harness protocol versions this harness speaks.
SUPPORTED_PROTOCOLS: tuple[int, ...] = (1,)

#: Default seconds one run of an implementation may take before it counts as a timeout.
DEFAULT_TIMEOUT_S = 10.0


class HarnessError(Exception):
    """The implementation cannot be tested at all (bad command, failed handshake)."""


@dataclass(frozen=True)
class Description:
    """What an implementation says of itself through ``--describe``."""

    name: str
    version: str
    protocol_version: int
    schema_versions: dict[str, list[str]]
    features: frozenset[str]
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Run:
    """What one process run did."""

    returncode: int | None
    """None when the run timed out."""
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False


@dataclass(frozen=True)
class Implementation:
    """A command to test, e.g. ``["servesim", "replay"]`` or ``["./my-sim"]``."""

    argv: tuple[str, ...]
    timeout_s: float = DEFAULT_TIMEOUT_S
    name: str = ""
    cwd: Path = field(default_factory=Path.cwd)
    """Where the command runs: where the user invoked the harness, so relative paths in the
    command work; every case's files are in their own temporary folder, named absolutely."""

    @classmethod
    def from_command_line(
        cls, command: str, *, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> Implementation:
        """Split ``command`` like a POSIX shell would, without running a shell."""
        argv = tuple(shlex.split(command))
        if not argv:
            raise HarnessError("the implementation command is empty")
        return cls(argv=argv, timeout_s=timeout_s)

    @classmethod
    def from_manifest(cls, path: Path) -> tuple[Implementation, Path | None]:
        """An implementation manifest: name, command, timeout and expected-failure file."""
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise HarnessError(
                f"{path}: cannot read the implementation manifest: {error}"
            ) from None
        problems = validate_harness_document("implementation", manifest)
        if problems:
            raise HarnessError(f"{path}: " + "; ".join(problems))
        expected = manifest.get("expected_failures")
        implementation = cls(
            argv=tuple(manifest["command"]),
            timeout_s=float(manifest.get("timeout_s", DEFAULT_TIMEOUT_S)),
            name=manifest["name"],
            cwd=path.parent.resolve(),
        )
        return implementation, (path.parent / expected) if expected else None

    def run(self, arguments: list[str]) -> Run:
        """Run the command with ``arguments``; on timeout kill its whole process group."""
        started = time.perf_counter()
        try:
            process = subprocess.Popen(
                [*self.argv, *arguments],
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                start_new_session=True,
            )
        except OSError as error:
            raise HarnessError(f"cannot start {self.argv[0]!r}: {error.strerror}") from None
        try:
            stdout, stderr = process.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
            return Run(None, stdout, stderr, time.perf_counter() - started, timed_out=True)
        return Run(process.returncode, stdout, stderr, time.perf_counter() - started)

    def describe(self) -> Description:
        """The ``--describe`` handshake; refuses protocol versions this harness does not know."""
        run = self.run(["--describe"])
        if run.timed_out or run.returncode != 0:
            status = "timed out" if run.timed_out else f"exited {run.returncode}"
            raise HarnessError(
                f"{shlex.join(self.argv)} --describe {status}; stderr: {run.stderr.strip()[-500:]}"
            )
        try:
            raw = json.loads(run.stdout)
        except ValueError as error:
            raise HarnessError(f"--describe did not print JSON ({error})") from None
        problems = validate_harness_document("describe", raw)
        if problems:
            raise HarnessError("--describe printed an invalid description: " + "; ".join(problems))
        if raw["protocol_version"] not in SUPPORTED_PROTOCOLS:
            raise HarnessError(
                f"the implementation speaks harness protocol {raw['protocol_version']}; this "
                f"harness speaks {', '.join(map(str, SUPPORTED_PROTOCOLS))}"
            )
        return Description(
            name=raw["name"],
            version=raw["version"],
            protocol_version=raw["protocol_version"],
            schema_versions=raw["schema_versions"],
            features=frozenset(raw["features"]),
            raw=raw,
        )
