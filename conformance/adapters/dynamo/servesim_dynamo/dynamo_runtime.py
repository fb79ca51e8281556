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
