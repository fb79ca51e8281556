"""Layers point one way, between packages and inside the reference.

Between packages: ``servesim_cli`` -> ``servesim_conformance`` -> ``servesim``. The reference
simulator must never depend on the suite or the command line (every other implementation's CI
installs the suite, and the reference is the spec's executable twin), and the suite must not
depend on the command line that sits above it.

Inside the reference, by concern (README's module table): ``contract`` (documents, versions,
canonical bytes, errors) below ``engine`` (the replay) below ``report`` (its bytes); the
top-level ``replay`` and ``describe`` join them; ``tools`` (importers, calibration) sit above
all of these, and nothing of the simulator imports a tool.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "reference" / "servesim"

#: Package folder -> the packages above it, which it must never import.
FORBIDDEN = {
    REFERENCE: ("servesim_conformance", "servesim_cli"),
    ROOT / "conformance" / "servesim_conformance": ("servesim_cli",),
}

_TOP = ("servesim.replay", "servesim.describe")

#: Reference sub-package -> the modules above it (by dotted prefix), which it must never import.
FORBIDDEN_INSIDE = {
    "contract": ("servesim.engine", "servesim.report", "servesim.tools", *_TOP),
    "engine": ("servesim.report", "servesim.tools", *_TOP),
    "report": ("servesim.tools", *_TOP),
    "tools": (),
    "": ("servesim.tools",),  # servesim/__init__.py, replay.py, describe.py
}


def imported_modules(source: Path) -> set[str]:
    """Every module named by an import in a module, including imports inside functions:
    ``import a.b`` gives ``a.b``, ``from a.b import c`` gives ``a.b`` and ``a.b.c`` (``c`` may
    be a module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def imported_packages(source: Path) -> set[str]:
    """Top-level package of every import in a module."""
    return {name.split(".")[0] for name in imported_modules(source)}


@pytest.mark.parametrize("package", sorted(FORBIDDEN), ids=lambda path: path.name)
def test_no_module_imports_a_package_above_it(package: Path) -> None:
    offenders = [
        f"{module.relative_to(ROOT)} imports {name}"
        for module in sorted(package.rglob("*.py"))
        for name in sorted(imported_packages(module) & set(FORBIDDEN[package]))
    ]
    assert offenders == []


def _layer(module: Path) -> str:
    """The reference sub-package a module belongs to; ``""`` for the package's top level."""
    parts = module.relative_to(REFERENCE).parts
    return parts[0] if len(parts) > 1 else ""


def _is_under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("layer", sorted(FORBIDDEN_INSIDE), ids=lambda name: name or "top")
def test_no_reference_module_imports_a_layer_above_it(layer: str) -> None:
    modules = [path for path in sorted(REFERENCE.rglob("*.py")) if _layer(path) == layer]
    assert modules, f"no module in layer {layer!r}: the layout changed without this test"
    offenders = [
        f"{module.relative_to(ROOT)} imports {name}"
        for module in modules
        for name in sorted(imported_modules(module))
        if any(_is_under(name, above) for above in FORBIDDEN_INSIDE[layer])
    ]
    assert offenders == []


def test_every_reference_module_is_in_a_known_layer() -> None:
    """A new sub-package gets its place in the layers before it gets code."""
    layers = {_layer(path) for path in REFERENCE.rglob("*.py")}
    assert layers <= set(FORBIDDEN_INSIDE)


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The scan finds imports hidden inside functions, as the old ``_cli.py`` had them."""
    module = tmp_path / "module.py"
    module.write_text("def run():\n    from servesim_conformance.cli import add_arguments\n")
    assert "servesim_conformance" in imported_packages(module)


def test_the_check_sees_an_upward_import_between_layers(tmp_path: Path) -> None:
    """``from servesim import report`` names the report layer as surely as
    ``import servesim.report.writer`` does."""
    module = tmp_path / "module.py"
    module.write_text("from servesim import report\nimport servesim.tools.calibrate\n")
    names = imported_modules(module)
    assert any(_is_under(name, "servesim.report") for name in names)
    assert any(_is_under(name, "servesim.tools") for name in names)


#: What ``servesim replay`` must not load, each with everything under it: the suite, the other
#: commands, the calibration package (all its modules) and the libraries they bring.
HEAVY = (
    "servesim_conformance",
    "servesim_cli.sweep",
    "servesim_cli.plot",
    "servesim_cli.matrix",
    "servesim.tools.calibrate",
    "matplotlib",
    "hypothesis",
)


def _heavy_modules_loaded(command: str) -> list[str]:
    """The modules under ``HEAVY`` that building ``servesim COMMAND``'s parser loads."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from servesim_cli.main import build_parser, _chosen\n"
        f"build_parser(_chosen([{command!r}, '--describe']))\n"
        f"heavy = {HEAVY!r}\n"
        "print('\\n'.join(sorted(name for name in sys.modules\n"
        "                  if any(name == h or name.startswith(h + '.') for h in heavy))))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    return completed.stdout.split()


def test_replay_loads_neither_the_suite_nor_other_commands() -> None:
    """``servesim replay`` pays only for itself: the command line imports a subcommand's module
    when that subcommand runs (the suite, the schema engine and matplotlib cost seconds)."""
    assert _heavy_modules_loaded("replay") == []


def test_the_probe_sees_every_module_of_the_calibration_package() -> None:
    """The probe above is not empty for want of looking: ``servesim calibrate`` loads the
    calibration package, and the probe finds each of its modules, so none of them can creep
    into ``replay`` unseen."""
    package = REFERENCE / "tools" / "calibrate"
    modules = {f"servesim.tools.calibrate.{path.stem}" for path in package.glob("[!_]*.py")}
    assert len(modules) > 1, "the calibration package moved: HEAVY must follow it"
    assert modules <= set(_heavy_modules_loaded("calibrate"))
