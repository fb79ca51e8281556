"""An implementation under test: a command, its ``--describe`` handshake, and one run of it.

The contract is toml-test's, made stricter: an argv list (never a shell string), the arguments of
``servesim replay``, exit 0 = report written, exit 2 = input rejected, anything else an error.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from servesim_conformance.schemas import validate_harness_document

#: The harness protocol versions this harness speaks.
SUPPORTED_PROTOCOLS: tuple[int, ...] = (1,)

#: Default seconds one run of an implementation may take before it counts as a timeout.
DEFAULT_TIMEOUT_S = 10.0


#: How much of an implementation's standard output and error the harness keeps (the tail).
OUTPUT_LIMIT = 1 << 20


def _kill_group(group: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is already gone
        os.killpg(group, signal.SIGKILL)


def _tail(stream: IO[bytes]) -> str:
    size = stream.seek(0, os.SEEK_END)
    stream.seek(max(0, size - OUTPUT_LIMIT))
    return stream.read().decode("utf-8", errors="replace")


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
        """Run the command with ``arguments``; afterwards kill whatever it left running.

        Output goes to temporary files, of which only the last ``OUTPUT_LIMIT`` bytes are kept,
        so a chatty implementation cannot exhaust the harness's memory. The command runs in its
        own process group, which is killed on timeout and after every run, so that neither a
        hung child nor a stray grandchild outlives the case.
        """
        started = time.perf_counter()
        with tempfile.TemporaryFile() as stdout, tempfile.TemporaryFile() as stderr:
            try:
                process = subprocess.Popen(
                    [*self.argv, *arguments],
                    cwd=self.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=stdout,
                    stderr=stderr,
                    start_new_session=True,
                )
            except OSError as error:
                raise HarnessError(f"cannot start {self.argv[0]!r}: {error.strerror}") from None
            timed_out = False
            try:
                process.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            _kill_group(process.pid)
            process.wait()
            duration = time.perf_counter() - started
            return Run(
                None if timed_out else process.returncode,
                _tail(stdout),
                _tail(stderr),
                duration,
                timed_out=timed_out,
            )

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
        unread = sorted(
            kind for kind, versions in raw["schema_versions"].items() if "1.0" not in versions
        )
        if unread:  # R38: under protocol 1 every implementation reads and writes 1.0
            raise HarnessError(
                f"--describe does not declare schema version 1.0 for: {', '.join(unread)}; "
                "protocol 1 requires it for every document kind"
            )
        return Description(
            name=raw["name"],
            version=raw["version"],
            protocol_version=raw["protocol_version"],
            schema_versions=raw["schema_versions"],
            features=frozenset(raw["features"]),
            raw=raw,
        )
