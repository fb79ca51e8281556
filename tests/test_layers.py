"""Layers point one way: ``servesim_cli`` -> ``servesim_conformance`` -> ``servesim``.

The reference simulator must never depend on the suite or the command line (every other
implementation's CI installs the suite, and the reference is the spec's executable twin), and
the suite must not depend on the command line that sits above it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Package folder -> the packages above it, which it must never import.
FORBIDDEN = {
    ROOT / "reference" / "servesim": ("servesim_conformance", "servesim_cli"),
    ROOT / "conformance" / "servesim_conformance": ("servesim_cli",),
}


def imported_packages(source: Path) -> set[str]:
    """Top-level package of every import in a module, including imports inside functions."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN), ids=lambda path: path.name)
def test_no_module_imports_a_package_above_it(package: Path) -> None:
    offenders = [
        f"{module.relative_to(ROOT)} imports {name}"
        for module in sorted(package.rglob("*.py"))
        for name in sorted(imported_packages(module) & set(FORBIDDEN[package]))
    ]
    assert offenders == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The scan finds imports hidden inside functions, as the old ``_cli.py`` had them."""
    module = tmp_path / "module.py"
    module.write_text("def run():\n    from servesim_conformance.cli import add_arguments\n")
    assert "servesim_conformance" in imported_packages(module)


def test_replay_loads_neither_the_suite_nor_other_commands() -> None:
    """``servesim replay`` pays only for itself: the command line imports a subcommand's module
    when that subcommand runs (the suite, the schema engine and matplotlib cost seconds)."""
    import subprocess
    import sys

    probe = (
        "import sys\n"
        "from servesim_cli.main import build_parser, _chosen\n"
        "build_parser(_chosen(['replay', '--describe']))\n"
        "heavy = ('servesim_conformance', 'servesim_cli.sweep', 'servesim_cli.plot', "
        "'servesim_cli.matrix', 'servesim.calibrate', 'matplotlib', 'hypothesis')\n"
        "print(sorted(name for name in sys.modules if name.startswith(heavy)))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert completed.stdout.strip() == "[]"
