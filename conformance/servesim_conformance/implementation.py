"""An implementation under test: a command, its ``--describe`` handshake, and one run of it
(SPEC.md section 14: R66 one run, R67 the describe answer, R68 the protocols).

The contract is toml-test's, made stricter: an argv list (never a shell string), the arguments of
``servesim replay``, exit 0 = report written, exit 2 = input rejected, exit 3 = a step outside the
timing profile's coverage (protocol 2 only, R43), anything else an error.
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

from servesim.contract.migrations import version_key
from servesim.contract.schemas import SUPPORTED_VERSIONS
from servesim_conformance.features import available_features, unknown_features_message
from servesim_conformance.schemas import validate_harness_document

#: The harness protocol versions this harness speaks: 1 (exit codes 0 and 2), 2 (adds exit
#: code 3, R38), 3 (protocol 2's command line; its harness documents close the feature list
#: and add agreement figures to the run report) and 4 (protocol 3's command line and documents;
#: ``timing.synthetic_linear`` is had only when declared, ``features.OMISSIBLE_FROM``).
SUPPORTED_PROTOCOLS: tuple[int, ...] = (1, 2, 3, 4, 5)

#: The first protocol with exit code 3 (R43): out-of-coverage cases need it.
OUT_OF_COVERAGE_PROTOCOL = 2

#: The input kinds; every implementation reads their version 1.0 (R38), so every implementation
#: can run the 1.0 golden inputs.
INPUT_KINDS: tuple[str, ...] = ("scenario", "workload", "timing_profile")

#: The report versions the harness can read, validate and migrate to the current one before it
#: compares (R37, R38): the released report versions, no more.
READABLE_REPORT_VERSIONS: tuple[str, ...] = SUPPORTED_VERSIONS["report"]

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

    def declares(self, kind: str, version: str) -> bool:
        """Whether it reads ``version`` of an input ``kind``, or writes it for the report."""
        return version in self.schema_versions.get(kind, [])

    @property
    def available(self) -> frozenset[str]:
        """The features it has: those it declares, and the baseline ones it cannot leave out at
        its protocol (every baseline one before protocol 4; R38)."""
        return available_features(self.features, self.protocol_version)

    @property
    def exits_out_of_coverage(self) -> bool:
        """Whether it speaks a protocol with exit code 3 (R38, R43)."""
        return self.protocol_version >= OUT_OF_COVERAGE_PROTOCOL


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
        features = raw.get("features") if isinstance(raw, dict) else None
        unknown = unknown_features_message(
            features if isinstance(features, list) else [], where="--describe"
        )
        if unknown is not None:  # before the schema, whose enum message lists no suggestion
            raise HarnessError(unknown)
        problems = validate_harness_document("describe", raw)
        if problems:
            raise HarnessError("--describe printed an invalid description: " + "; ".join(problems))
        if raw["protocol_version"] not in SUPPORTED_PROTOCOLS:
            raise HarnessError(
                f"the implementation speaks harness protocol {raw['protocol_version']}; this "
                f"harness speaks {', '.join(map(str, SUPPORTED_PROTOCOLS))}"
            )
        problems = version_problems(raw["schema_versions"])
        problems += protocol_problems(
            raw["protocol_version"], raw["schema_versions"], raw["features"]
        )
        if problems:
            raise HarnessError(
                "--describe declares unusable schema versions: " + "; ".join(problems)
            )
        return Description(
            name=raw["name"],
            version=raw["version"],
            protocol_version=raw["protocol_version"],
            schema_versions=raw["schema_versions"],
            features=frozenset(raw["features"]),
            raw=raw,
        )


#: Features whose cases may stop with exit code 3 (R43), which protocol 1 does not have.
MEASURED_FEATURES = ("timing.grid", "timing.regression")

#: Tags added to the closed list by a later protocol, and that protocol (R68): an
#: implementation that speaks an older one cannot declare them.
NEWER_FEATURES: dict[str, int] = {"timing.per_pool": 5}


def protocol_problems(
    protocol: int, schema_versions: dict[str, list[str]], features: list[str]
) -> list[str]:
    """R38: timing with measured profiles needs protocol 2, which has exit code 3 (R43); and
    R87: ``timing.per_pool`` is a tag of protocol 5, not on the list of an older protocol.

    Otherwise a protocol-1 implementation that never stops outside the coverage would pass: its
    out-of-coverage cases are skipped, and the other cases never leave the coverage.
    """
    problems = []
    for feature, since in NEWER_FEATURES.items():
        if feature in features and protocol < since:
            problems.append(
                f"it declares {feature} but speaks protocol {protocol}; the tag is new in "
                f"protocol {since} (R68, R87)"
            )
    if protocol >= 2:
        return problems
    measured = [feature for feature in MEASURED_FEATURES if feature in features]
    if "1.1" in schema_versions["timing_profile"]:
        measured.append("timing profile 1.1")
    if not measured:
        return problems
    return [
        *problems,
        f"it declares {', '.join(measured)} but speaks protocol 1; measured timing profiles "
        "need protocol 2, whose exit code 3 stops a replay outside the coverage (R43)",
    ]


def version_problems(schema_versions: dict[str, list[str]]) -> list[str]:
    """What makes declared schema versions unusable (R38), as messages; none when they are fine.

    Every implementation reads 1.0 of every input kind, so that the 1.0 golden inputs run
    everywhere; the report versions must be released ones, which the harness can validate and
    migrate before comparing; a reader of timing profile 1.1 writes a report that can echo
    its calibration (2.0 or later); a reader of scenario or workload 1.1 one that can say
    what the KV cache did (3.0 or later, R52); a reader of scenario 1.2 one that can say
    what state-aware routing saw (4.0 or later, R57); a reader of scenario 1.3 or workload
    1.2 one with a cut-off outcome, sessions and goodput (5.0 or later, R64); and a reader of
    scenario 1.4 one with pools and ranks (6.0 or later, R85, R86); and a reader of scenario 1.5
    one with scheduler styles (7.0, R95, R96); a reader of scenario 1.6 one with handoffs (8.0 or
    later, R108); a reader of scenario 1.7 one with a fleet that changes (9.0 or later, R124);
    and a reader of scenario 1.8 one with the host tier (10.0, R141).
    """
    problems = []
    unread = [kind for kind in INPUT_KINDS if "1.0" not in schema_versions[kind]]
    if unread:
        problems.append(
            f"version 1.0 is not declared for: {', '.join(unread)}; every implementation must "
            "read 1.0 of every input kind (scenario, workload, timing_profile)"
        )
    unknown = [v for v in schema_versions["report"] if v not in READABLE_REPORT_VERSIONS]
    if unknown:
        problems.append(
            f"report versions that are not released: {', '.join(unknown)}; an implementation "
            f"may write: {', '.join(READABLE_REPORT_VERSIONS)}"
        )
    if "1.1" in schema_versions["timing_profile"] and not any(
        version_key(v) >= (2, 0) for v in schema_versions["report"]
    ):
        problems.append(
            "it reads timing profile 1.1 but writes no report 2.0; a report 1.0 cannot echo a "
            "calibration"
        )
    cache_inputs = [kind for kind in ("scenario", "workload") if "1.1" in schema_versions[kind]]
    if cache_inputs and not any(version_key(v) >= (3, 0) for v in schema_versions["report"]):
        problems.append(
            f"it reads {' and '.join(cache_inputs)} 1.1 but writes no report 3.0; an older report "
            "cannot say what the KV cache did (R52)"
        )
    if "1.2" in schema_versions["scenario"] and not any(
        version_key(v) >= (4, 0) for v in schema_versions["report"]
    ):
        problems.append(
            "it reads scenario 1.2 but writes no report 4.0; an older report cannot say what "
            "state-aware routing saw (R57)"
        )
    section_13 = [
        f"{kind} {version}"
        for kind, version in (("scenario", "1.3"), ("workload", "1.2"))
        if version in schema_versions[kind]
    ]
    if section_13 and not any(version_key(v) >= (5, 0) for v in schema_versions["report"]):
        problems.append(
            f"it reads {' and '.join(section_13)} but writes no report 5.0; an older report has "
            "no cut-off outcome, session or goodput (R64)"
        )
    if "1.4" in schema_versions["scenario"] and not any(
        version_key(v) >= (6, 0) for v in schema_versions["report"]
    ):
        problems.append(
            "it reads scenario 1.4 but writes no report 6.0; an older report has no pools or "
            "ranks (R85, R86)"
        )
    if "1.5" in schema_versions["scenario"] and not any(
        version_key(v) >= (7, 0) for v in schema_versions["report"]
    ):
        problems.append(
            "it reads scenario 1.5 but writes no report 7.0; an older report has no scheduler "
            "styles (R95, R96)"
        )
    if "1.6" in schema_versions["scenario"] and not any(
        version_key(v) >= (8, 0) for v in schema_versions["report"]
    ):
        problems.append(
            "it reads scenario 1.6 but writes no report 8.0; an older report has no handoffs "
            "(R107, R108)"
        )
    if "1.7" in schema_versions["scenario"] and not any(
        version_key(v) >= (9, 0) for v in schema_versions["report"]
    ):
        problems.append(
            "it reads scenario 1.7 but writes no report 9.0; an older report has no failed "
            "outcome, migrations or worker time (R123, R124)"
        )
    if "1.8" in schema_versions["scenario"] and "10.0" not in schema_versions["report"]:
        problems.append(
            "it reads scenario 1.8 but writes no report 10.0; an older report has no host "
            "tier (R140, R141)"
        )
    return problems
