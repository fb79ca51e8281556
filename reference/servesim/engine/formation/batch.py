"""What a formation policy returns: a step's requests (SPEC.md R17 to R19)."""

from __future__ import annotations

from servesim.engine.requests import RequestState

Batch = tuple[list[RequestState], list[tuple[RequestState, int]]]
"""A formed step's requests: those that decode one token (R17), in running order, and the
prefill allotments (R18, R19), in running order once the step is formed."""
