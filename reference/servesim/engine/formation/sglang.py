"""SGLang's step formation (SPEC.md R89 to R92): prefill first, never mixed with decode.

A step is prefill-only when any candidate (the one chunked request, then the waiting queue from
its head) can be given an allotment: chunked by ``max_chunk_tokens`` as a budget of the whole
step, in whole pages, and admitted only while the page-rounded tokens it charges plus its
output reserve fit what the cache has left after an *estimate* of the output the decoding
requests will still produce (their remaining output, clipped, times the new-token ratio).
Otherwise it is decode-only, and when the decoding requests' next blocks are not there the one
with the fewest output tokens is retracted to the tail of the queue. The ratio lives on the
worker (``Worker.ratio``), as an integer numerator over ``RATIO_DENOMINATOR``, so that every
comparison is exact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servesim.contract.model import SchedulerLimits, SglangOptions
from servesim.engine.block_memory import BlockMemory
from servesim.engine.formation.batch import Batch
from servesim.engine.requests import RequestState

if TYPE_CHECKING:
    from servesim.engine.step import Step
    from servesim.engine.worker import Worker

#: R89's Q: the ratio is n / Q; the least grid on which init, min and decay are exact.
RATIO_DENOMINATOR = 300_000_000

#: R89: SGLang's SGLANG_RETRACT_DECODE_STEPS, the output its re-estimate allows each survivor.
RETRACT_DECODE_STEPS = 20


def ratio_constants(options: SglangOptions) -> tuple[int, int, int]:
    """R89: ``(n_init, n_min, n_decay)`` for ``conservativeness_permille`` c: init is
    ``min(0.7 * c / 1000, 1)``, min 14 % of it, and 600 decays lead from one to the other."""
    initial = min(210_000 * options.conservativeness_permille, RATIO_DENOMINATOR)
    least = initial * 14 // 100
    return initial, least, (initial - least) // 600


def produced(state: RequestState) -> int:
    """The output tokens a request has produced so far."""
    return state.token_times_us.count


def output_estimate(decoding: list[RequestState], clip: int) -> int:
    """R90's M: the output the decoding requests will still produce, each clipped at ``clip``."""
    return sum(min(state.request.max_output_tokens - produced(state), clip) for state in decoding)


class SglangFormation:
    """R90 and R91: ``formation.Formation`` for SGLang."""

    __slots__ = ("clip", "decay", "initial", "least", "limits")

    style = "sglang"
    decodes_every_step = False  # R90: a prefill-only step leaves them out

    def __init__(self, limits: SchedulerLimits) -> None:
        assert limits.sglang is not None, "R88: the sglang style has its options"
        assert limits.max_chunk_tokens is not None, "R88: the sglang style prefills in chunks"
        self.limits = limits
        self.clip = limits.sglang.clip_max_new_tokens
        self.initial, self.least, self.decay = ratio_constants(limits.sglang)

    def initial_ratio(self) -> int | None:
        """R89: n starts at ``n_init``."""
        return self.initial

    def form(self, worker: Worker, now_us: int) -> Batch:
        """R90: a prefill-only step if any candidate gets an allotment, else decode-only."""
        decoding = [state for state in worker.running if state.decoding]
        prefill = self._prefill(worker, now_us, decoding)
        if prefill:
            return [], prefill
        return self._decode(worker, decoding), []

    def _prefill(
        self, worker: Worker, now_us: int, decoding: list[RequestState]
    ) -> list[tuple[RequestState, int]]:
        """R90 rule 1: the allotments, in the order given; admitted requests join the running
        list. Admission stops at the first candidate refused (no skipping)."""
        memory = worker.memory
        cache = memory.cache if isinstance(memory, BlockMemory) else None
        page = 1 if cache is None else cache.block_tokens
        total = 0 if cache is None else (cache.free + cache.cached_count) * page  # T, once
        ratio = worker.ratio
        assert ratio is not None
        estimate = 0 if cache is None else ratio * output_estimate(decoding, self.clip)  # n * M
        seats = self.limits.max_num_seqs - len(decoding)
        left = self.limits.max_chunk_tokens
        assert left is not None
        spent = 0
        chunked = [state for state in worker.running if not state.decoding]  # at most one
        prefill: list[tuple[RequestState, int]] = []
        while len(prefill) < seats:
            fresh = not chunked
            if chunked:
                candidate = chunked.pop()
                target = candidate.prefill_target
                start = candidate.prefilled
            elif worker.waiting:
                candidate = worker.waiting[0]
                target = candidate.request.prompt_tokens + produced(candidate)  # R48's L
                start = memory.reusable(candidate, target)  # capped: one token is computed
            else:
                break
            extend = target - start
            chunk = extend if -(-extend // page) * page <= left else left // page * page
            if chunk == 0:
                break
            charged = -(-chunk // page) * page
            remaining = candidate.request.max_output_tokens - produced(candidate)
            reserve = min(remaining, self.clip) if chunk == extend else 0
            if cache is not None:
                q = RATIO_DENOMINATOR
                if (spent + charged + reserve) * q + estimate >= total * q:  # the estimate
                    break
                if fresh:
                    if memory.refusal(candidate, start + chunk):  # its new blocks
                        break
                elif not memory.grow(candidate, chunk):
                    break
            if fresh:
                self._admit(worker, candidate, now_us, target, start, chunk)
            elif cache is None:
                memory.grow(candidate, chunk)
            prefill.append((candidate, chunk))
            spent += charged + reserve
            left -= charged
            if chunk < extend:  # it is (or stays) the chunked request
                break
        return prefill

    @staticmethod
    def _admit(
        worker: Worker, state: RequestState, now_us: int, target: int, reused: int, chunk: int
    ) -> None:
        """R90 rule 1.6 and 1.7: it holds its hit blocks, takes its new ones and joins the
        tail of the running list in Prefill."""
        worker.waiting.popleft()
        worker.memory.admit(state, reused + chunk)
        state.prefill_target = target
        state.prefilled = reused
        if state.first_scheduled_us is None:  # a readmission keeps its first one
            state.first_scheduled_us = now_us
            state.reused_prompt_tokens = reused
        worker.running.append(state)

    def _decode(self, worker: Worker, decoding: list[RequestState]) -> list[RequestState]:
        """R90 rule 3 and R91: retract until every decoding request's next block is there,
        take them, and decay or re-estimate the ratio (R89)."""
        memory = worker.memory
        if isinstance(memory, BlockMemory):
            cache = memory.cache
            while _blocks_needed(memory, decoding) > cache.free + cache.cached_count:
                victim = _victim(worker, decoding)
                worker.retract(victim)
                if victim in decoding:
                    decoding.remove(victim)
        for state in decoding:
            grown = memory.grow(state, 1)
            assert grown, "R91: the retractions left room for every token"
        ratio = worker.ratio
        assert ratio is not None
        if worker.retracted:
            worker.ratio = _reestimate(decoding)
        else:
            worker.ratio = max(ratio - self.decay, self.least)
        return decoding

    def run_limit(self, worker: Worker, step: Step, traced: bool) -> int | None:
        """How many decode-only steps form alike from ``step`` on: each decays the ratio, so
        while some candidate could be admitted the next may differ, and a traced run would
        write one ratio for all its steps. A run is left to ``decode_runs`` only when no
        candidate exists (no chunked request; an empty queue or no seat) and it is not
        traced; its later decays are applied when it ends (``step_ended``)."""
        if traced or step.retracted:
            return 1
        if any(not state.decoding for state in worker.running):
            return 1
        if worker.waiting and len(step.decode) < self.limits.max_num_seqs:
            return 1
        return None

    def step_ended(self, worker: Worker, step: Step) -> None:
        """R89: a run's later decode steps decay the ratio too; a worker left without work
        resets it."""
        ratio = worker.ratio
        assert ratio is not None
        if step.repeat > 1:
            ratio = max(ratio - (step.repeat - 1) * self.decay, self.least)
        if not worker.running and not worker.waiting:
            ratio = self.initial
        worker.ratio = ratio


def _blocks_needed(memory: BlockMemory, decoding: list[RequestState]) -> int:
    """R90 rule 3's ``need``: the blocks one more cached token takes, over ``decoding``."""
    blocks_for = memory.cache.blocks_for
    return sum(blocks_for(state.cached_tokens + 1) - state.blocks.count for state in decoding)


def _victim(worker: Worker, decoding: list[RequestState]) -> RequestState:
    """R91: of two or more decoding requests, the fewest output tokens, then the most prompt
    tokens, then the latest in the running list; of one, the chunked request."""
    if len(decoding) >= 2:
        order = {id(state): index for index, state in enumerate(worker.running)}
        return min(
            decoding,
            key=lambda state: (
                produced(state),
                -state.request.prompt_tokens,
                -order[id(state)],
            ),
        )
    chunked = [state for state in worker.running if not state.decoding]
    assert chunked, "R91 rule 3: one request's next block is always there once it is alone"
    return chunked[0]


def _reestimate(survivors: list[RequestState]) -> int:
    """R89 rule 2: ``min(Q, ceil(Q * (dec + 20 k) / (mx + 1)))`` over the k survivors."""
    decoded = sum(produced(state) for state in survivors)
    most = sum(state.request.max_output_tokens for state in survivors)
    numerator = RATIO_DENOMINATOR * (decoded + RETRACT_DECODE_STEPS * len(survivors))
    return min(RATIO_DENOMINATOR, -(-numerator // (most + 1)))
