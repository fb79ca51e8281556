"""Mutation testing of the reference, judged by ``servesim conform`` alone.

Why a small mutator of our own rather than mutmut or cosmic-ray: both judge a mutant by running
a test command of the project (pytest, usually) in the mutated tree, and both rewrite or import
the package in place. What we want to measure is the power of the *golden corpus* as an outside
implementer meets it: the only judge is ``servesim conform`` running the mutated reference as a
subprocess (``python -m servesim_cli replay``), never the unit tests. That takes a few hundred
lines of standard-library ``ast``, deterministic and with nothing to install.

Mutants (each exactly one change, enumerated in a fixed order: by line, column, operator):

* comparisons: ``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=``, ``is`` <-> ``is not``,
  ``in`` <-> ``not in``;
* arithmetic (also augmented assignment): ``+`` <-> ``-``, ``*`` -> ``//``, ``//`` -> ``*``,
  ``%`` -> ``//``;
* integer constants: ``n + 1`` and ``n - 1``;
* boolean operators: ``and`` <-> ``or``; ``not x`` -> ``x``; ``True`` <-> ``False``;
* ``min`` <-> ``max`` (calls of the built-in names);
* ``return X`` -> ``return None`` in functions whose return annotation admits ``None`` (elsewhere
  the mutant only crashes, which says nothing about the corpus).

Never mutated: docstrings and other strings, f-strings, ``assert`` statements, ``raise``
statements (their messages), type annotations, ``if TYPE_CHECKING:`` blocks, ``__all__``, and
calls of ``print``/logging. A mutant's id is ``module:line:col:operator`` with the position of
the node in the original source, so ids are stable as long as the file is.

Judging (see ``python conformance/mutation/mutate.py --help``): each mutant is written into a
private copy of ``reference/``; a pre-screen replays every golden case in *one* process with the
mutated package first on ``sys.path`` (``prescreen.py``) and stops at the first case whose bytes
or exit code differ (``servesim conform`` has no fail-fast, and a full run is about a minute).
A mutant the pre-screen kills is killed. A mutant the pre-screen does not kill is judged by a full
``servesim conform --impl 'env PYTHONPATH=<copy>... python -m servesim_cli replay'`` run: killed
if that exits non-zero, survived only if it exits 0. So every survivor is confirmed by
``servesim conform`` itself. A mutant that runs past the time limit (an endless loop, usually) is
killed by timeout and counted apart.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import dataclasses
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
REFERENCE = ROOT / "reference"
ENGINE = REFERENCE / "servesim" / "engine"
EQUIVALENT = HERE / "equivalent.json"

_COMPARE_SWAPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_BINOP_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
    ast.Mod: ast.FloorDiv,
}
_SYMBOLS: dict[type[ast.AST], str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Is: "is",
    ast.IsNot: "is-not",
    ast.In: "in",
    ast.NotIn: "not-in",
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.FloorDiv: "//",
    ast.Mod: "%",
}
_QUIET_CALLS = frozenset({"print", "debug", "info", "warning", "error", "exception", "warn"})


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One change to one module: ``id`` is ``module:line:col:operator``."""

    module: str
    line: int
    col: int
    operator: str

    @property
    def id(self) -> str:
        return f"{self.module}:{self.line}:{self.col}:{self.operator}"


def _is_docstring(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _skipped(node: ast.AST) -> bool:
    """Subtrees never mutated: asserts, raises, strings, logging, TYPE_CHECKING, __all__."""
    if isinstance(node, ast.Assert | ast.Raise | ast.JoinedStr) or _is_docstring(node):
        return True
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
        return True
    if isinstance(node, ast.Assign) and any(
        isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
    ):
        return True
    if isinstance(node, ast.Call):
        function = node.func
        name = function.id if isinstance(function, ast.Name) else None
        if isinstance(function, ast.Attribute):
            name = function.attr
        return name in _QUIET_CALLS
    return False


def _admits_none(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    if function.returns is None:
        return False
    text = ast.unparse(function.returns)
    return text != "None" and ("None" in text or "Optional" in text)


def _children(node: ast.AST) -> Iterator[ast.AST]:
    """The child nodes to visit, leaving out annotations (arguments, returns, AnnAssign)."""
    for name, value in ast.iter_fields(node):
        if name in {"annotation", "returns", "type_comment", "type_params"}:
            continue
        if isinstance(value, ast.AST):
            yield value
        elif isinstance(value, list):
            yield from (item for item in value if isinstance(item, ast.AST))


def _candidates(node: ast.AST, returns_none: bool) -> Iterator[tuple[ast.AST, str]]:
    """(node, operator) for each mutation of ``node`` itself."""
    if isinstance(node, ast.Compare):
        for index, op in enumerate(node.ops):
            swapped = _COMPARE_SWAPS.get(type(op))
            if swapped is not None:
                suffix = f"#{index}" if index else ""
                yield node, f"{_SYMBOLS[type(op)]}->{_SYMBOLS[swapped]}{suffix}"
    elif isinstance(node, ast.BinOp | ast.AugAssign):
        swapped_op = _BINOP_SWAPS.get(type(node.op))
        if swapped_op is not None:
            yield node, f"{_SYMBOLS[type(node.op)]}->{_SYMBOLS[swapped_op]}"
    elif isinstance(node, ast.BoolOp):
        yield node, "and->or" if isinstance(node.op, ast.And) else "or->and"
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield node, "drop-not"
    elif isinstance(node, ast.Constant):
        if isinstance(node.value, bool):
            yield node, "true->false" if node.value else "false->true"
        elif isinstance(node.value, int):
            yield node, "int+1"
            yield node, "int-1"
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in {"min", "max"}
    ):
        yield node, "min->max" if node.func.id == "min" else "max->min"
    elif (
        isinstance(node, ast.Return)
        and returns_none
        and node.value is not None
        and not (isinstance(node.value, ast.Constant) and node.value.value is None)
    ):
        yield node, "return->None"


def _walk(tree: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """Every (node, operator) of ``tree`` in a fixed order, skipping what is never mutated."""
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, returns_none = stack.pop()
        if _skipped(node):
            continue
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            returns_none = _admits_none(node)
        yield from _candidates(node, returns_none)
        stack.extend((child, returns_none) for child in reversed(list(_children(node))))


def _key(node: ast.AST) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


def enumerate_mutants(source: str, module: str) -> list[Mutant]:
    """Every mutant of ``source`` (the text of ``module``), in a fixed order."""
    found = {Mutant(module, *_key(node), operator) for node, operator in _walk(ast.parse(source))}
    return sorted(found, key=lambda mutant: (mutant.line, mutant.col, mutant.operator))


def _mutate(node: ast.AST, operator: str) -> ast.AST:
    """Apply ``operator`` to ``node``; the node to put in its place."""
    if isinstance(node, ast.Compare):
        index = int(operator.split("#")[1]) if "#" in operator else 0
        node.ops[index] = _COMPARE_SWAPS[type(node.ops[index])]()
    elif isinstance(node, ast.BinOp | ast.AugAssign):
        node.op = _BINOP_SWAPS[type(node.op)]()
    elif isinstance(node, ast.BoolOp):
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif isinstance(node, ast.UnaryOp):
        return node.operand
    elif isinstance(node, ast.Constant):
        if isinstance(node.value, bool):
            node.value = not node.value
        elif isinstance(node.value, int):
            node.value = node.value + (1 if operator == "int+1" else -1)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        node.func.id = "max" if node.func.id == "min" else "min"
    elif isinstance(node, ast.Return):
        node.value = ast.Constant(None)
    return node


class _Replace(ast.NodeTransformer):
    def __init__(self, target: ast.AST, operator: str) -> None:
        self.target = target
        self.operator = operator

    def visit(self, node: ast.AST) -> ast.AST:
        if node is self.target:
            return _mutate(node, self.operator)
        result: ast.AST = self.generic_visit(node)
        return result


def mutated_source(source: str, mutant: Mutant) -> str:
    """``source`` with ``mutant`` applied (re-printed by ``ast.unparse``)."""
    tree = ast.parse(source)
    for node, operator in _walk(tree):
        if _key(node) == (mutant.line, mutant.col) and operator == mutant.operator:
            new_tree = _Replace(node, operator).visit(tree)
            return ast.unparse(ast.fix_missing_locations(new_tree)) + "\n"
    raise ValueError(f"no such mutant: {mutant.id}")


# --- running -------------------------------------------------------------------------------


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(REFERENCE).with_suffix("").parts)


def engine_modules() -> list[Path]:
    return sorted(
        path for path in ENGINE.rglob("*.py") if path.name != "__init__.py" or path.stat().st_size
    )


@dataclasses.dataclass
class Result:
    id: str
    module: str
    status: str  # killed, survived, timeout, equivalent
    judge: str  # prescreen or conform
    detail: str
    seconds: float


def _pythonpath(reference: Path) -> str:
    return os.pathsep.join([str(reference), str(ROOT / "cli"), str(ROOT / "conformance")])


def _judge(mutant: Mutant, path: Path, copy: Path, timeout: float) -> Result:
    """Write the mutant into ``copy`` (a copy of reference/), judge it, restore the file."""
    relative = path.relative_to(REFERENCE)
    target = copy / relative
    original = path.read_text()
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": _pythonpath(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    target.write_text(mutated_source(original, mutant))

    def result(status: str, judge: str, detail: str) -> Result:
        seconds = round(time.monotonic() - started, 1)
        return Result(mutant.id, mutant.module, status, judge, detail, seconds)

    try:
        try:
            screen = _prescreen(env, timeout)
        except subprocess.TimeoutExpired:
            return result("timeout", "prescreen", f"past {timeout:g} s")
        if screen.returncode != 0:
            lines = (screen.stdout + screen.stderr).strip().splitlines()
            return result("killed", "prescreen", lines[-1][:200] if lines else "")
        impl = shlex.join(
            [
                "env",
                f"PYTHONPATH={env['PYTHONPATH']}",
                "PYTHONDONTWRITEBYTECODE=1",
                *(sys.executable, "-m", "servesim_cli", "replay"),
            ]
        )
        plain = {**os.environ, "PYTHONPATH": _pythonpath(REFERENCE)}
        try:
            conform = subprocess.run(
                [sys.executable, "-m", "servesim_cli", "conform", "--impl", impl],
                env=plain,
                capture_output=True,
                text=True,
                timeout=timeout * 10,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return result("timeout", "conform", f"past {timeout * 10:g} s")
        if conform.returncode != 0:
            lines = conform.stdout.strip().splitlines()
            return result("killed", "conform", lines[-1][:200] if lines else "")
        return result("survived", "conform", conform.stdout.strip().splitlines()[-1])
    finally:
        target.write_text(original)


def _worker_copy() -> Path:
    """A private copy of reference/ (its ``servesim`` package), beside a link to the schemas
    where the package looks for them in a checkout (``reference/../schemas``)."""
    folder = Path(tempfile.mkdtemp(prefix="servesim-mutant-"))
    copy = folder / "reference"
    shutil.copytree(
        REFERENCE / "servesim",
        copy / "servesim",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    (folder / "schemas").symlink_to(ROOT / "schemas")
    return copy


def _prescreen(env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    """One run of ``prescreen.py`` (every case in one process) under ``env``'s PYTHONPATH."""
    return subprocess.run(
        [sys.executable, str(HERE / "prescreen.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _baseline(copy: Path, timeout: float) -> None:
    """The unmutated copy must pass the pre-screen, or every mutant would count as killed."""
    env = {**os.environ, "PYTHONPATH": _pythonpath(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    run = _prescreen(env, timeout)
    if run.returncode != 0:
        raise SystemExit(f"the unmutated reference fails the pre-screen: {run.stdout}{run.stderr}")


def load_equivalent() -> dict[str, str]:
    if not EQUIVALENT.exists():
        return {}
    return {entry["id"]: entry["reason"] for entry in json.loads(EQUIVALENT.read_text())}


def _summary(
    results: list[Result], totals: dict[str, int], sample: int | str | None, seed: int, wall: float
) -> str:
    lines = [
        "# Mutation testing of the reference, judged by `servesim conform`",
        "",
        f"Sample: {_sample_text(sample, seed)}; wall time {wall / 60:.1f} min.",
        "",
        "| module | mutants (all) | judged | killed | timeouts | equivalent | survived "
        "| kill rate |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for module in sorted(totals):
        mine = [result for result in results if result.module == module]
        count = {status: sum(r.status == status for r in mine) for status in _STATUSES}
        relevant = len(mine) - count["equivalent"]
        dead = count["killed"] + count["timeout"]
        rate = f"{100 * dead / relevant:.1f} %" if relevant else "-"
        lines.append(
            f"| {module} | {totals[module]} | {len(mine)} | {count['killed']} | "
            f"{count['timeout']} | {count['equivalent']} | {count['survived']} | {rate} |"
        )
    lines += [
        "",
        "Kill rate = (killed + timeouts) / (judged - equivalent). A survivor passed a full "
        "`servesim conform` run.",
    ]
    survivors = [r for r in results if r.status == "survived"]
    if survivors:
        lines += ["", "## Survivors", ""] + [f"- `{r.id}`" for r in survivors]
    stale = [r for r in results if r.detail.startswith("STALE")]
    if stale:
        lines += ["", "## Stale entries of equivalent.json (killed)", ""]
        lines += [f"- `{r.id}`: {r.detail}" for r in stale]
    return "\n".join(lines) + "\n"


_STATUSES = ("killed", "timeout", "equivalent", "survived")


def _sample_text(sample: int | str | None, seed: int) -> str:
    """How the judged mutants were chosen: every one, a seeded sample, or (``combine``) text."""
    if sample is None:
        return "every mutant"
    return sample if isinstance(sample, str) else f"{sample} per module, seed {seed}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "modules",
        nargs="*",
        help="module files or dotted names (default: every engine module)",
    )
    parser.add_argument("--sample", type=int, help="judge N mutants per module, drawn by seed")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sample (default 0)")
    parser.add_argument("--jobs", type=int, default=2, help="mutants judged at once (default 2)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="pre-screen limit in seconds, about 1 s unmutated (default 30; conform: 10x)",
    )
    parser.add_argument("--list", action="store_true", help="print the mutant ids and stop")
    parser.add_argument(
        "--id",
        action="append",
        dest="ids",
        metavar="ID",
        help="judge only this mutant (module:line:col:operator; repeatable; overrides --sample)",
    )
    parser.add_argument(
        "--recheck-equivalent",
        action="store_true",
        help="judge the mutants equivalent.json lists too, and flag any that is killed (STALE)",
    )
    parser.add_argument(
        "--resummarise",
        action="store_true",
        help="judge nothing: rewrite the summary in --output with today's equivalent list",
    )
    parser.add_argument(
        "--combine",
        action="append",
        type=Path,
        metavar="FOLDER",
        help="judge nothing: merge the results of earlier runs' --output folders (repeatable; "
        "a mutant judged twice keeps its last result) into --output, with today's equivalent list",
    )
    parser.add_argument("--output", type=Path, default=Path("mutation-results"), help="folder")
    arguments = parser.parse_args(argv)
    if arguments.resummarise:
        print(resummarise(arguments.output))
        return 0
    if arguments.combine:
        print(combine(arguments.combine, arguments.output))
        return 0

    named = arguments.modules or sorted({i.rsplit(":", 3)[0] for i in arguments.ids or ()})
    paths = [_path(m) for m in named] if named else engine_modules()
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        parser.error(f"no such module: {', '.join(missing)}")
    equivalent = load_equivalent()
    totals: dict[str, int] = {}
    chosen: list[tuple[Mutant, Path]] = []
    for path in paths:
        mutants = enumerate_mutants(path.read_text(), module_name(path))
        totals[module_name(path)] = len(mutants)
        if arguments.ids:
            mutants = [mutant for mutant in mutants if mutant.id in arguments.ids]
        elif arguments.sample is not None and len(mutants) > arguments.sample:
            drawn = random.Random(f"{arguments.seed}:{module_name(path)}").sample(
                range(len(mutants)), arguments.sample
            )
            mutants = [mutants[index] for index in sorted(drawn)]
        chosen += [(mutant, path) for mutant in mutants]
    unknown = set(arguments.ids or ()) - {mutant.id for mutant, _ in chosen}
    if unknown:
        parser.error(f"no such mutant: {', '.join(sorted(unknown))}")
    if arguments.list:
        for mutant, _ in chosen:
            print(mutant.id)
        return 0

    started = time.monotonic()
    listed = {} if arguments.recheck_equivalent else equivalent
    results: list[Result] = [
        Result(m.id, m.module, "equivalent", "list", equivalent[m.id], 0.0)
        for m, _ in chosen
        if m.id in listed
    ]
    todo = [(m, p) for m, p in chosen if m.id not in listed]
    copies = [_worker_copy() for _ in range(arguments.jobs)]
    free = list(copies)
    _baseline(copies[0], arguments.timeout)
    try:
        with concurrent.futures.ThreadPoolExecutor(arguments.jobs) as pool:
            pending: dict[concurrent.futures.Future[Result], Path] = {}
            queue = list(todo)
            while queue or pending:
                while queue and free:
                    mutant, path = queue.pop(0)
                    copy = free.pop()
                    future = pool.submit(_judge, mutant, path, copy, arguments.timeout)
                    pending[future] = copy
                done, _ = concurrent.futures.wait(
                    pending, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for future in done:
                    free.append(pending.pop(future))
                    outcome = future.result()
                    results.append(outcome)
                    print(
                        f"{outcome.status:>9} {outcome.seconds:6.1f}s {outcome.id}  "
                        f"{outcome.detail}",
                        flush=True,
                    )
    finally:
        for copy in copies:
            shutil.rmtree(copy.parent, ignore_errors=True)
    wall = time.monotonic() - started
    for result in results:
        if result.judge != "list" and result.id in equivalent:
            if result.status == "survived":  # rechecked: it still survives, for the listed reason
                result.status, result.detail = "equivalent", equivalent[result.id]
            else:
                result.detail = f"STALE: listed as equivalent but {result.status}; {result.detail}"
    order = {mutant.id: index for index, (mutant, _) in enumerate(chosen)}
    results.sort(key=lambda result: order[result.id])
    run = {"sample": arguments.sample, "seed": arguments.seed, "wall_s": round(wall, 1)}
    print(_write(arguments.output, results, {**run, "totals": totals}))
    return 0


def _write(output: Path, results: list[Result], run: dict[str, Any]) -> str:
    """Write ``run.json``, ``results.json``, ``survivors.json`` and ``summary.md``."""
    output.mkdir(parents=True, exist_ok=True)
    summary = _summary(results, run["totals"], run["sample"], run["seed"], run["wall_s"])
    (output / "summary.md").write_text(summary)
    (output / "run.json").write_text(json.dumps(run, indent=2) + "\n")
    for name, chosen in (
        ("results.json", results),
        ("survivors.json", [r for r in results if r.status == "survived"]),
    ):
        (output / name).write_text(json.dumps([dataclasses.asdict(r) for r in chosen], indent=2))
    return summary


def resummarise(output: Path) -> str:
    """Rewrite a run's summary with today's equivalent list: a survivor the list now explains
    counts as equivalent (judged already; the list only says why it survives)."""
    equivalent = load_equivalent()
    results = [Result(**entry) for entry in json.loads((output / "results.json").read_text())]
    for result in results:
        if result.status == "survived" and result.id in equivalent:
            result.status, result.judge, result.detail = "equivalent", "list", equivalent[result.id]
    return _write(output, results, json.loads((output / "run.json").read_text()))


def combine(folders: list[Path], output: Path) -> str:
    """One summary of several runs (each an ``--output`` folder): their results, a mutant
    judged in more than one keeping the last folder's, every module's total, their summed wall
    time; then ``resummarise``, so that a survivor today's list explains counts as equivalent."""
    by_id: dict[str, Result] = {}
    totals: dict[str, int] = {}
    wall = 0.0
    for folder in folders:
        run = json.loads((folder / "run.json").read_text())
        totals.update(run["totals"])
        wall += run["wall_s"]
        for entry in json.loads((folder / "results.json").read_text()):
            by_id[entry["id"]] = Result(**entry)
    run = {"sample": f"{len(folders)} runs combined", "seed": 0, "wall_s": round(wall, 1)}
    _write(output, list(by_id.values()), {**run, "totals": totals})
    return resummarise(output)


def _path(module: str) -> Path:
    if module.endswith(".py"):
        return Path(module).resolve()
    return REFERENCE.joinpath(*module.split(".")).with_suffix(".py")


if __name__ == "__main__":
    sys.exit(main())
