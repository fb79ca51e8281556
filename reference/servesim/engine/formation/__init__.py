"""Step formation: which requests a worker's next step runs, and with how many tokens.

SPEC.md R16 has a worker form a step at its scheduling event; how is the serving engine's
*style*. A ``Formation`` is asked for the step of one worker at one instant and may read and
change that worker's queues (``waiting``, ``running``), ask its memory for blocks
(``memory.Memory``), preempt (``Worker.preempt``, R49's actions) and record why admission
stopped (``Worker.refused_blocks``). It returns the step's decode set and prefill allotments;
the worker makes the ``Step`` and the event loop times it.

A style is a module: ``vllm`` (R17 to R19, with a cache R48 to R50) is the spec's. The decode
runs (``servesim.engine.decode_runs``) are exact for vLLM formation; a style whose decode-only
steps do not repeat while nothing joins or completes must say so there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from servesim.contract.model import SchedulerLimits
from servesim.engine.formation.batch import Batch
from servesim.engine.formation.vllm import VllmFormation

if TYPE_CHECKING:
    from servesim.engine.worker import Worker


class Formation(Protocol):
    """A formation policy: one object serves the whole fleet (it keeps no per-worker state)."""

    def form(self, worker: Worker, now_us: int) -> Batch:
        """The decode set and prefill allotments of ``worker``'s step starting at ``now_us``;
        admitted requests have moved from its waiting queue to its running list, and every
        block the step needs is taken (R46, R50)."""
        ...


def make_formation(limits: SchedulerLimits) -> Formation:
    """The scenario's formation policy: vLLM's, the only style the spec has yet."""
    return VllmFormation(limits)


__all__ = ["Batch", "Formation", "VllmFormation", "make_formation"]
