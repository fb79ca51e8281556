"""The mutation tool's pre-screen: every golden case replayed in this one process.

Run with the mutated reference first on PYTHONPATH (``mutate.py`` does). Each case goes through
``servesim_cli.main.main(["replay", ...])`` as ``servesim conform`` would give it (inputs, and
``--trace`` when the case is traced); a valid case must exit 0 with exactly the expected bytes,
an invalid case exit 2, an out-of-coverage case exit 3. Stops at the first case that differs and
exits 1 naming it; exits 0 when every case agrees. Only ever used to *kill* mutants faster: a
mutant it does not kill is judged by a full ``servesim conform`` run.
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from pathlib import Path

from servesim_cli.main import main as servesim
from servesim_conformance.corpus import Expect, load_corpus
from servesim_conformance.runner import expected_bytes

_EXIT = {Expect.REPORT: 0, Expect.INVALID_INPUT: 2, Expect.OUT_OF_COVERAGE: 3}


def main() -> int:
    corpus = load_corpus(None)
    with tempfile.TemporaryDirectory(prefix="servesim-prescreen-") as temporary:
        output = Path(temporary) / "report.json"
        for case in corpus.select():
            paths = case.input_paths()
            arguments = ["replay", "--quiet", "--output", str(output)]
            for option, name in (
                ("--scenario", "scenario.json"),
                ("--workload", "workload.json"),
                ("--timing-profile", "timing-profile.json"),
            ):
                path = next((p for p in paths.values() if p.name == name), None)
                if path is not None:
                    arguments += [option, str(path)]
            for pool, profile in case.pool_profiles().items():  # R87: a profile per pool
                arguments += ["--timing-profile", f"{pool}={profile}"]
            if case.trace:
                arguments.append("--trace")
            output.unlink(missing_ok=True)
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                code = servesim(arguments)
            if code != _EXIT[case.expectation]:
                print(f"{case.id}: exit {code}")
                return 1
            if case.expectation is Expect.REPORT and (
                not output.exists() or output.read_bytes() != expected_bytes(case, ())
            ):
                print(f"{case.id}: report differs")
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
