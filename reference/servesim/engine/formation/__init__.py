"""Step formation: which requests a worker's next step runs, and with how many tokens.

SPEC.md R16 has a worker form a step at its scheduling event; how is the serving engine's
*style*. A ``Formation`` is asked for the step of one worker at one instant and may read and
change that worker's queues (``waiting``, ``running``), ask its memory for blocks
(``memory.Memory``), preempt (``Worker.preempt``, R49's actions) and record why admission
stopped (``Worker.refused_blocks``). It returns the step's decode set and prefill allotments;
the worker makes the ``Step`` and the event loop times it.

A style is a module (R88): ``vllm`` (R17 to R19, with a cache R48 to R50), ``sglang`` (R89 to
R92) and ``trtllm`` (R93). The decode runs (``servesim.engine.decode_runs``) are exact for vLLM
formation; a style whose decode-only steps do not repeat while nothing joins or completes says
so in its ``run_limit``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from servesim.contract.model import SchedulerLimits
from servesim.engine.formation.batch import Batch
from servesim.engine.formation.sglang import SglangFormation
from servesim.engine.formation.trtllm import TrtllmFormation
from servesim.engine.formation.vllm import VllmFormation

if TYPE_CHECKING:
    from servesim.engine.step import Step
    from servesim.engine.worker import Worker


class Formation(Protocol):
    """A formation policy: one object serves a pool (it keeps no per-worker state; the sglang
    ratio is the worker's, ``Worker.ratio``)."""

    style: str
    """R88, R95: the style's name, as the report writes it."""

    decodes_every_step: bool
    """Whether every Decode request decodes in every step of its worker (R17: vLLM's and
    TensorRT-LLM's), so that its previous token came when the step began; not with sglang,
    whose prefill-only steps leave the decoding requests out (R90). ``Worker`` counts R27's
    ITL gaps per step when it holds, per request when not."""

    def initial_ratio(self) -> int | None:
        """R89: a new worker's new-token ratio numerator; ``None`` for a style without one."""
        ...

    def run_limit(self, worker: Worker, step: Step, traced: bool) -> int | None:
        """At most how many decode-only steps, from ``step`` just formed, form alike by the
        style's own rules (1: form the next one by one); ``None``: no limit of its own."""
        ...

    def step_ended(self, worker: Worker, step: Step) -> None:
        """What the style changes at the end of ``worker``'s ``step`` (a run: its last)."""
        ...

    def form(self, worker: Worker, now_us: int) -> Batch:
        """The decode set and prefill allotments of ``worker``'s step starting at ``now_us``;
        admitted requests have moved from its waiting queue to its running list, and every
        block the step needs is taken (R46, R50)."""
        ...


def make_formation(limits: SchedulerLimits) -> Formation:
    """R88: the formation policy of the limits' style."""
    if limits.style == "sglang":
        return SglangFormation(limits)
    if limits.style == "trtllm":
        return TrtllmFormation(limits)
    return VllmFormation(limits)


__all__ = [
    "Batch",
    "Formation",
    "SglangFormation",
    "TrtllmFormation",
    "VllmFormation",
    "make_formation",
]
