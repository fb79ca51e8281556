"""Running Dynamo: the only module that imports it.

``run_replay_with_artifacts_json`` is AISimulate's runtime function compiled into ai-dynamo's
``dynamo/_core.abi3.so`` (registered there as the module ``_runtime``, not exposed by
``dynamo.replay``): it takes a ReplaySpec with request ids and returns the report plus every
output token's time. It is undocumented and may change between releases; ai-dynamo 1.6.1 is
pinned for that reason. It replays one worker; the adapter runs it once per worker.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import json
import os
from functools import cache
from types import ModuleType
from typing import Any

from servesim_dynamo.timeline import DynamoResult


@cache
def runtime() -> ModuleType:
    """AISimulate's ``_runtime`` module, loaded from ai-dynamo's native library."""
    # Dynamo logs each request it rejects as a warning on standard error, where the harness
    # keeps the adapter's own message; DYN_LOG=warn (or debug) in the environment shows them.
    os.environ.setdefault("DYN_LOG", "error")
    try:
        core = importlib.import_module("dynamo._core")
    except ImportError as error:
        raise DynamoResult(
            f"ai-dynamo is not installed ({error}); run the adapter with `tox -e dynamo` or "
            "pip install --no-deps ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1 typing-extensions"
        ) from None
    name = "aisimulate_core._runtime"
    library = str(core.__file__)
    loader = importlib.machinery.ExtensionFileLoader(name, library)
    spec = importlib.util.spec_from_file_location(name, library, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def version() -> str:
    """The installed ai-dynamo version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as package_version

    try:
        return package_version("ai-dynamo")
    except PackageNotFoundError:
        return "not installed"


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """One worker's replay: ``{"report": ..., "artifacts": ...}``, or DynamoResult."""
    try:
        output = runtime().run_replay_with_artifacts_json(json.dumps(spec))
    except RuntimeError as error:
        raise DynamoResult(f"Dynamo's replay failed: {error}") from None
    result: dict[str, Any] = json.loads(output)
    return result


def run_trace(
    rows: list[dict[str, Any]],
    engine: dict[str, Any],
    workers: int,
    *,
    concurrency: int | None,
    block_size: int,
    dp_size: int = 1,
) -> list[dict[str, Any]]:
    """Dynamo's documented multi-worker replay of a Mooncake trace (``run_trace_replay``, round
    robin) with multi-turn sessions (``session_id``, ``delay``) and, given ``concurrency``, its
    closed loop (``replay_concurrency``), each worker with ``dp_size`` attention-DP ranks (one
    scheduler and cache per rank, one pass barrier per worker): the per-request records, in no
    particular order."""
    return _replay_trace(
        rows,
        "replay",
        extra_engine_args={"engine": engine, "dp_size": dp_size},
        num_workers=workers,
        trace_block_size=block_size,
        replay_concurrency=concurrency,
    )


def run_disagg(
    rows: list[dict[str, Any]],
    prefill_engine: dict[str, Any],
    decode_engine: dict[str, Any],
    prefill_workers: int,
    decode_workers: int,
    *,
    block_size: int,
    concurrency: int | None = None,
    dp_sizes: tuple[int, int] = (1, 1),
) -> list[dict[str, Any]]:
    """Dynamo's documented disaggregated replay of a Mooncake trace (``run_trace_replay`` with
    ``prefill_engine_args`` and ``decode_engine_args``, round robin on both sides): the
    per-request records, in no particular order."""
    return _replay_trace(
        rows,
        "disaggregated replay",
        prefill_engine_args=_with_ranks(prefill_engine, dp_sizes[0]),
        decode_engine_args=_with_ranks(decode_engine, dp_sizes[1]),
        num_prefill_workers=prefill_workers,
        num_decode_workers=decode_workers,
        trace_block_size=block_size,
        replay_concurrency=concurrency,
    )


def _replay_trace(rows: list[dict[str, Any]], what: str, **arguments: Any) -> list[dict[str, Any]]:
    """``run_trace_replay`` of ``rows`` written as a Mooncake trace file, round robin, with
    ``arguments``: its per-request records; a failure of Dynamo's ``what`` as DynamoResult."""
    import tempfile

    os.environ.setdefault("DYN_LOG", "error")
    try:
        from dynamo.replay import run_trace_replay
    except ImportError as error:
        raise DynamoResult(f"ai-dynamo is not installed ({error})") from None
    with tempfile.TemporaryDirectory(prefix="servesim-dynamo-") as folder:
        path = os.path.join(folder, "trace.jsonl")
        with open(path, "w", encoding="utf-8") as trace:
            trace.writelines(json.dumps(row) + "\n" for row in rows)
        try:
            report = run_trace_replay(
                [path], router_mode="round_robin", capture_per_request=True, **arguments
            )
        except Exception as error:  # Dynamo raises bare Exception for a bad trace too
            raise DynamoResult(f"Dynamo's {what} failed: {error}") from None
    value = report.to_dict() if hasattr(report, "to_dict") else report
    records: list[dict[str, Any]] = list(value["per_request"])
    return records


def _with_ranks(engine: dict[str, Any], dp_size: int) -> dict[str, Any]:
    """One side's engine arguments, with ``dp_size`` attention-DP ranks per worker."""
    return {"engine": engine} if dp_size == 1 else {"engine": engine, "dp_size": dp_size}
