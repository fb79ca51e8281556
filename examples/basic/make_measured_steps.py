"""Write ``measured-steps.jsonl``: made-up measurements for ``servesim calibrate`` (SPEC.md R44).

The steps are timed by ``regression-profile.json`` (the "engine" being measured) on a lattice of
shapes the example scenario can form, three times each, with up to +-3% of noise from a seeded
SplitMix64, so the file is the same on every run. The tests import this module to make
measurements of their own. Run from anywhere: ``python examples/basic/make_measured_steps.py``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

from servesim.contract.documents import read_document
from servesim.contract.model import StepShape, TimingModel
from servesim.contract.timing_profile import build_timing_profile
from servesim.engine.routing import SplitMix64

HERE = Path(__file__).resolve().parent

#: Decoding requests, their context tokens and prefill tokens, within the scenario's limits
#: (max_num_seqs 4, max_batched_tokens 64, max_model_len 512): C is 0 exactly when D is 0 and
#: at most 512 per decoding request.
DECODE_REQUESTS = (0, 1, 2, 3, 4)
CONTEXT_TOKENS = (64, 256, 512, 1024, 2048)
PREFILL_TOKENS = (0, 8, 16, 32, 48, 64)


def lattice() -> Iterator[StepShape]:
    """The measured shapes, in a fixed order."""
    for decode in DECODE_REQUESTS:
        contexts = [c for c in CONTEXT_TOKENS if c <= 512 * decode] if decode else [0]
        for context in contexts:
            for prefill in PREFILL_TOKENS:
                yield StepShape(decode, context, prefill)


def measurements(
    truth: TimingModel, *, repetitions: int = 3, noise_permille: int = 30, seed: int = 2024
) -> Iterator[dict[str, int]]:
    """Each lattice shape ``repetitions`` times, its true duration scaled by a factor drawn
    uniformly from (1000 +- ``noise_permille``) / 1000 and rounded, at least 1 us."""
    generator = SplitMix64(seed)
    spread = 2 * noise_permille + 1
    for _ in range(repetitions):
        for shape in lattice():
            factor = 1000 + generator.next() % spread - noise_permille
            duration = max(1, (truth.step_duration_us(shape) * factor + 500) // 1000)
            yield {**shape.as_dict(), "duration_us": duration}


def jsonl(lines: Iterator[dict[str, int]]) -> bytes:
    """Measurement lines as JSON Lines, each ending with a newline."""
    return "".join(json.dumps(line) + "\n" for line in lines).encode("utf-8")


def main() -> int:
    truth = build_timing_profile(read_document(HERE / "regression-profile.json").value).model
    (HERE / "measured-steps.jsonl").write_bytes(jsonl(measurements(truth)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
