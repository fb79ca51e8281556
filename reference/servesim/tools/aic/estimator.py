"""The one place servesim touches NVIDIA's aiconfigurator-core (``servesim[aic]``), imported
only when ``servesim profile aic`` runs: a small typed boundary, so the rest of the reference and
its type checking never need the 80 MB wheel.

``StepEstimator`` is what the shape mapping (R74) calls; ``load`` compiles the real estimator
for one model, system, backend and version and parallelism, after checking the combination
against the support matrix the wheel ships (bad input is exit 2 naming what is supported);
``database_files`` lists the files R76's ``source_sha256`` digests; ``estimate_memory`` is
aiconfigurator's KV-cache memory estimate.
"""

from __future__ import annotations

import csv
import importlib
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

from servesim.contract.errors import ServesimError

#: The distribution the extra installs, and how to get it.
DISTRIBUTION = "aiconfigurator-core"
INSTALL_HINT = "pip install 'servesim[aic]' (aiconfigurator-core, about 80 MB)"

#: The memory fraction's meaning per backend, as aiconfigurator validates it: vLLM's
#: gpu_memory_utilization and SGLang's mem_fraction_static are of the GPU's total memory,
#: TensorRT-LLM's free_gpu_memory_fraction of what is free after the weights.
_FRACTION_KIND = {"vllm": "of_total", "sglang": "of_total", "trtllm": "of_free"}


class EstimatorMissing(ServesimError):
    """aiconfigurator-core is not installed."""


class UnsupportedSetting(ServesimError):
    """A model, system, backend, version or parallelism aiconfigurator does not support; the
    message names what is supported."""


class StepEstimator(Protocol):
    """The two estimator calls the shape mapping uses (R74), in milliseconds, as
    ``aiconfigurator_core.sdk.EngineHandle`` has them."""

    def mixed_step_breakdown(
        self, ctx_tokens: int, gen_tokens: int, isl: int, osl: int, prefix: int = 0
    ) -> tuple[float, float, float, float]:
        """(total, shared non-attention, context attention, decode attention) of one step."""

    def decode_step_latency(self, gen_tokens: int, isl: int, osl: int) -> float:
        """One decode-only step of ``gen_tokens`` requests."""


@dataclass(frozen=True, slots=True)
class Setting:
    """What the estimator is compiled for (R76)."""

    model: str
    system: str
    backend: str
    backend_version: str
    tp: int = 1
    attention_dp: int = 1

    def as_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "system": self.system,
            "backend": self.backend,
            "backend_version": self.backend_version,
            "tensor_parallel": self.tp,
            "attention_data_parallel": self.attention_dp,
        }


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise EstimatorMissing(
            f"servesim profile aic needs {DISTRIBUTION}, which is not installed "
            f"({error}); install it with {INSTALL_HINT}"
        ) from None


def version() -> str:
    """The installed aiconfigurator-core's version."""
    _import("aiconfigurator_core")
    return metadata.version(DISTRIBUTION)


def package_root() -> Path:
    """The installed package's folder (systems/, model_configs/)."""
    module = _import("aiconfigurator_core")
    return Path(module.__file__).parent


def _model_file_stem(model: str) -> str:
    return model.replace("/", "--")


def supported_models(root: Path) -> list[str]:
    """The models whose configuration the wheel ships (no download is ever made)."""
    return sorted(
        path.name[: -len("_config.json")].replace("--", "/", 1)
        for path in (root / "model_configs").glob("*_config.json")
        if not path.name.endswith("_hf_quant_config.json")
    )


def _support_rows(root: Path, system: str) -> list[dict[str, str]]:
    path = root / "systems" / "support_matrix" / f"{system}.csv"
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as file:
        return list(csv.DictReader(file))


def _listed(values: list[str]) -> str:
    return ", ".join(values) if values else "none"


def check_setting(setting: Setting, root: Path) -> None:
    """``UnsupportedSetting`` unless aiconfigurator's own support matrix lists the model on the
    system, backend and version as passing in aggregated mode; the message names what is."""
    perf_database = _import("aiconfigurator_core.sdk.perf_database")
    databases: Mapping[str, Mapping[str, list[str]]] = perf_database.get_supported_databases()
    models = supported_models(root)
    if setting.model not in models:
        raise UnsupportedSetting(
            f"--model {setting.model}: aiconfigurator-core has no configuration for it; "
            f"supported models: {_listed(models)}"
        )
    if setting.system not in databases:
        raise UnsupportedSetting(
            f"--system {setting.system}: aiconfigurator-core has no performance data for it; "
            f"supported systems: {_listed(sorted(databases))}"
        )
    backends = databases[setting.system]
    if setting.backend not in backends:
        raise UnsupportedSetting(
            f"--backend {setting.backend}: no data on {setting.system}; supported backends "
            f"there: {_listed(sorted(backends))}"
        )
    versions = sorted(backends[setting.backend])
    if setting.backend_version not in versions:
        raise UnsupportedSetting(
            f"--backend-version {setting.backend_version}: no {setting.backend} data on "
            f"{setting.system}; supported versions: {_listed(versions)}"
        )
    rows = [
        row
        for row in _support_rows(root, setting.system)
        if row["Backend"] == setting.backend
        and row["Version"] == setting.backend_version
        and row["Mode"] == "agg"
    ]
    passing = sorted({row["HuggingFaceID"] for row in rows if row["Status"] == "PASS"})
    if setting.model not in passing:
        statuses = sorted({row["Status"] for row in rows if row["HuggingFaceID"] == setting.model})
        said = f"says {', '.join(statuses)}" if statuses else "has no aggregated row for it"
        raise UnsupportedSetting(
            f"--model {setting.model} is not supported by aiconfigurator-core on "
            f"{setting.system} with {setting.backend} {setting.backend_version} (its support "
            f"matrix {said}); supported there: {_listed(passing)}"
        )
    for name, value in (("--tp", setting.tp), ("--attention-dp", setting.attention_dp)):
        if value < 1:
            raise UnsupportedSetting(f"{name} {value}: must be at least 1")


def default_version(system: str, backend: str) -> str | None:
    """aiconfigurator's latest database version for the system and backend, if any."""
    perf_database = _import("aiconfigurator_core.sdk.perf_database")
    try:
        found = perf_database.get_latest_database_version(system, backend)
    except Exception:  # an unknown system or backend; check_setting names what is supported
        return None
    return None if found is None else str(found)


class _Handle:
    """``StepEstimator`` over a compiled ``EngineHandle``."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def mixed_step_breakdown(
        self, ctx_tokens: int, gen_tokens: int, isl: int, osl: int, prefix: int = 0
    ) -> tuple[float, float, float, float]:
        total, shared, context, decode = self._handle.mixed_step_breakdown(
            ctx_tokens, gen_tokens, isl, osl, prefix
        )
        return float(total), float(shared), float(context), float(decode)

    def decode_step_latency(self, gen_tokens: int, isl: int, osl: int) -> float:
        return float(self._handle.decode_step_latency(gen_tokens, isl, osl))


def load(setting: Setting) -> StepEstimator:
    """The compiled estimator for ``setting``, checked first (``UnsupportedSetting``)."""
    root = package_root()
    check_setting(setting, root)
    # aiconfigurator logs each low-fidelity table it loads at WARNING; servesim's output is its
    # own summary, so they are kept off standard error.
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    engine = _import("aiconfigurator_core.sdk.engine")
    try:
        handle = engine.EngineHandle.compile(
            setting.model,
            setting.system,
            setting.backend,
            backend_version=setting.backend_version,
            tp_size=setting.tp,
            attention_dp_size=setting.attention_dp,
        )
    except (ValueError, KeyError, NotImplementedError, RuntimeError) as error:
        raise UnsupportedSetting(
            f"aiconfigurator-core cannot build {setting.model} on {setting.system} with "
            f"{setting.backend} {setting.backend_version}, tensor parallel {setting.tp}, "
            f"attention data parallel {setting.attention_dp}: {error}"
        ) from None
    return _Handle(handle)


def database_files(setting: Setting, root: Path) -> list[Path]:
    """R76: the files ``source_sha256`` digests, sorted by their path relative to ``root``: the
    system's description and its whole performance-data folder (every backend and version, as
    aiconfigurator falls back across them), the three shared system tables, and the model's
    configuration files."""
    systems = root / "systems"
    files = [
        systems / f"{setting.system}.yaml",
        systems / "query_versions.yaml",
        systems / "perf_data_reuse_manifest.yaml",
        systems / "attention_lane_defaults.yaml",
        *(path for path in (systems / "data" / setting.system).rglob("*") if path.is_file()),
        *sorted((root / "model_configs").glob(f"{_model_file_stem(setting.model)}_*.json")),
    ]
    present = [path for path in files if path.is_file()]
    return sorted(present, key=lambda path: path.relative_to(root).as_posix())


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """aiconfigurator's KV-cache memory estimate for one GPU (R76)."""

    fraction: float
    fraction_kind: str
    gpu_bytes: int
    kv_bytes: int
    kv_bytes_per_token: int
    kv_tokens: int
    weights_bytes: int | None


def estimate_memory(
    setting: Setting, *, max_num_seqs: int, max_batched_tokens: int, fraction: float
) -> MemoryEstimate:
    """R76: the KV cache a GPU holds at ``fraction`` of its memory, by aiconfigurator's memory
    model (weights, activations for the scheduler's limits, runtime and NCCL overheads)."""
    memory = _import("aiconfigurator_core.sdk.memory")
    kind = _FRACTION_KIND.get(setting.backend, "of_total")
    try:
        found: Mapping[str, Any] = memory.estimate_kv_cache(
            setting.model,
            setting.system,
            setting.backend,
            setting.backend_version,
            max_num_tokens=max_batched_tokens,
            max_batch_size=max_num_seqs,
            memory_fraction_kind=kind,
            memory_fraction_value=fraction,
            tp_size=setting.tp,
            attention_dp_size=setting.attention_dp,
        )
    except ValueError as error:
        raise UnsupportedSetting(f"aiconfigurator-core's memory estimate failed: {error}") from None
    breakdown = found.get("memory_breakdown") or {}
    weights = breakdown.get("weights_bytes")
    return MemoryEstimate(
        fraction=fraction,
        fraction_kind=kind,
        gpu_bytes=int(found["total_gpu_capacity_bytes"]),
        kv_bytes=int(found["total_kv_size_bytes"]),
        kv_bytes_per_token=int(found["kv_size_per_token_bytes"]),
        kv_tokens=int(found["total_kv_size_tokens"]),
        weights_bytes=None if weights is None else int(weights),
    )


def finite_positive(value: float) -> bool:
    """Whether an estimate can be a duration: a finite number above 0."""
    return math.isfinite(value) and value > 0


#: For the tests' fakes: a function from the estimator's arguments to milliseconds.
Latency = Callable[..., float]
