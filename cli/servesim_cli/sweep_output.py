"""The sweep's outputs: the table (text, CSV, JSON) and its plot.

Rows are sorted by point (the grid's order), values are the reports' own (integers in
microseconds, R24 quotients), and nothing depends on timing or on the order points finished in,
so the same sweep writes the same bytes.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from servesim.contract.canonical import canonical_json
from servesim_cli import sweep_best
from servesim_cli.sweep_file import PoolSizes, Setting, SweepPlan, Target, routing_member, show
from servesim_cli.sweep_run import RESULT_COLUMNS, PointResult
from servesim_cli.sweep_search import Search, meets


def _json_setting(value: Setting) -> Any:
    if isinstance(value, Fraction):
        return str(value)
    if isinstance(value, PoolSizes):
        return dict(value.sizes)
    if isinstance(value, tuple):
        return routing_member(value)
    return value


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"  # as in the JSON
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _pool_column(name: str) -> str:
    return f"pools.{name}"


def columns(plan: SweepPlan, target: Target | None) -> list[str]:
    """The table's columns: the swept axes (the pools axis as a column per pool, its workers),
    then ``meets_target`` with a target, ``best`` with a pools axis, then the results."""
    axes: list[str] = []
    for axis, _ in plan.axes:
        if axis == "pools":
            axes.extend(_pool_column(name) for name in plan.pool_names())
        else:
            axes.append(axis)
    extra = ["meets_target"] if target is not None else []
    if "pools" in dict(plan.axes):
        extra.append("best")
    return ["point", *axes, *extra, *RESULT_COLUMNS]


def _row(result: PointResult, target: Target | None, best: frozenset[int]) -> dict[str, Any]:
    row: dict[str, Any] = {"point": result.point.index}
    for axis, value in result.point.settings:
        if isinstance(value, PoolSizes):
            row.update((_pool_column(name), workers) for name, workers in value.sizes)
            row["best"] = result.point.index in best
        else:
            row[axis] = value
    if target is not None:
        row["meets_target"] = meets(result, target.conditions)
    row.update(result.columns)
    return row


def csv_bytes(plan: SweepPlan, results: Sequence[PointResult], target: Target | None) -> bytes:
    """One header line and one line per point."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    names = columns(plan, target)
    writer.writerow(names)
    best = sweep_best.best_indices(plan, results, target)
    for result in results:
        row = _row(result, target, best)
        writer.writerow(
            [show(row[name]) if name in dict(plan.axes) else _cell(row[name]) for name in names]
        )
    return buffer.getvalue().encode("utf-8")


def _answer(item: Search, target: Target) -> dict[str, Any]:
    def bracket(index: int) -> dict[str, Any] | None:
        if not 0 <= index < len(item.values):
            return None
        result = item.results[index]
        return {
            target.axis: item.values[index],
            "status": result.columns["status"],
            **{
                f"{c.metric}_{c.statistic}": result.columns[f"{c.metric}_{c.statistic}"]
                for c in target.conditions
            },
        }

    return {
        "settings": {axis: _json_setting(value) for axis, value in item.others},
        target.axis: item.answer,
        "meets": bracket(item.high),
        "below": bracket(item.low),
        "probes": len(item.results),
        "contradictions": [list(pair) for pair in item.contradictions()],
    }


def json_bytes(
    plan: SweepPlan,
    results: Sequence[PointResult],
    target: Target | None,
    searches: Sequence[Search] = (),
) -> bytes:
    """The table as canonical JSON (RFC 8785), with the target's answers when searched."""
    best = sweep_best.best_indices(plan, results, target)
    marked = "pools" in dict(plan.axes)
    groups = sweep_best.groups(plan, results, target)
    document: dict[str, Any] = {
        "document": "sweep_result",
        "sweep": plan.file,
        "axes": {axis: [_json_setting(value) for value in values] for axis, values in plan.axes},
        "points": [
            {
                "point": result.point.index,
                "settings": {axis: _json_setting(value) for axis, value in result.point.settings},
                **({"meets_target": meets(result, target.conditions)} if target else {}),
                **({"best": result.point.index in best} if marked else {}),
                **result.columns,
            }
            for result in results
        ],
        "target": None
        if target is None
        else {
            "axis": target.axis,
            "conditions": [
                {"metric": c.metric, "statistic": c.statistic, "at_most_us": c.at_most_us}
                for c in target.conditions
            ],
            "answers": [_answer(item, target) for item in searches]
            if target.axis != "pools"
            else [_split_answer(group, target) for group in groups],
        },
    }
    return canonical_json(document)


def _split_answer(group: sweep_best.Group, target: Target) -> dict[str, Any]:
    best = group.best
    return {
        "settings": {axis: _json_setting(value) for axis, value in group.others},
        "pools": None if best is None else _json_setting(_pools(best)),
        "best": None
        if best is None
        else {
            "point": best.point.index,
            "goodput_requests": best.columns["goodput_requests"],
            "completed": best.columns["completed"],
            "ttft_us_p99": best.columns["ttft_us_p99"],
            "itl_us_p99": best.columns["itl_us_p99"],
            **{
                f"{c.metric}_{c.statistic}": best.columns[f"{c.metric}_{c.statistic}"]
                for c in target.conditions
            },
        },
        "meeting": [_json_setting(_pools(result)) for result in group.eligible],
        "points": len(group.results),
    }


def _pools(result: PointResult) -> PoolSizes:
    value = result.point.get("pools")
    assert isinstance(value, PoolSizes)
    return value


def _ms(value: Any) -> str:
    return "-" if value is None else f"{value / 1000:,.1f}"


def _format(rows: list[list[str]]) -> str:
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _settings_text(settings: Sequence[tuple[str, Setting]]) -> list[str]:
    cells: list[str] = []
    for _, value in settings:
        if isinstance(value, PoolSizes):
            cells.extend(str(workers) for _, workers in value.sizes)
        else:
            cells.append(show(value))
    return cells


def text_table(
    plan: SweepPlan, results: Sequence[PointResult], target: Target | None = None
) -> str:
    """The main columns, for a person: settings, status, latencies in ms, throughput, use.
    With a pools axis, a column per pool (its workers), whether the point meets a target on
    pools, the goodput requests and the best point of each combination of the other axes
    (``*``, ``servesim_cli.sweep_best``)."""
    axes: list[str] = []
    for axis, _ in plan.axes:
        axes.extend(plan.pool_names() if axis == "pools" else [axis])
    pools = "pools" in dict(plan.axes)
    on_pools = target is not None and target.axis == "pools"
    marks = [*(["meets"] if on_pools else []), *(["best", "goodput"] if pools else [])]
    best = sweep_best.best_indices(plan, results, target)
    header = [
        *axes,
        *marks,
        "status",
        "ttft p50 ms",
        "ttft p99 ms",
        "e2e p50 ms",
        "e2e p99 ms",
        "itl p99 ms",
        "tok/s",
        "busy",
    ]
    rows = [header]
    for result in results:
        c = result.columns
        throughput = c["output_token_throughput_per_s"]
        utilization = c["utilization_mean"]
        marked: list[str] = []
        if on_pools:
            assert target is not None
            marked.append("yes" if meets(result, target.conditions) else "no")
        if pools:
            marked.append("*" if result.point.index in best else "")
            marked.append("-" if not result.ok else f"{sweep_best.goodput(result):,}")
        rows.append(
            [
                *_settings_text(result.point.settings),
                *marked,
                c["status"],
                _ms(c["ttft_us_p50"]),
                _ms(c["ttft_us_p99"]),
                _ms(c["e2e_us_p50"]),
                _ms(c["e2e_us_p99"]),
                _ms(c["itl_us_p99"]),
                "-" if throughput is None else f"{throughput:,.0f}",
                "-" if utilization is None else f"{utilization:.0%}",
            ]
        )
    table = _format(rows)
    if pools:
        among = " that meet the target" if on_pools else " replayed to the end"
        table += (
            f"\n\n* the best pools for its other settings, among the points{among}: "
            f"{sweep_best.ORDER}"
        )
    return table


def split_answers_text(plan: SweepPlan, results: Sequence[PointResult], target: Target) -> str:
    """One line per combination of the other axes: the best split that meets the target, and
    how many do."""
    conditions = " and ".join(str(condition) for condition in target.conditions)
    lines = [
        f"target: the best pools with {conditions}",
        "(not bisected: a split is not monotone, so every point was replayed; best: as * above)",
    ]
    found = sweep_best.groups(plan, results, target)
    header = [axis for axis, _ in found[0].others] if found else []
    names = [f"{c.statistic} {c.metric}" for c in target.conditions]
    rows = [[*header, "best pools", "goodput", *(f"{name} at best" for name in names), "meet"]]
    for group in found:
        best = group.best
        rows.append(
            [
                *(show(value) for _, value in group.others),
                "none" if best is None else show(_pools(best)),
                "-" if best is None else f"{sweep_best.goodput(best):,}",
                *(
                    "-" if best is None else _us(best.columns[f"{c.metric}_{c.statistic}"])
                    for c in target.conditions
                ),
                f"{len(group.eligible)} of {len(group.results)}",
            ]
        )
    lines.append(_format(rows))
    return "\n".join(lines)


def answers_text(target: Target, searches: Sequence[Search]) -> str:
    """One line per combination of the other axes: the answer and its bracket."""
    conditions = " and ".join(str(condition) for condition in target.conditions)
    lines = [
        f"target: smallest {target.axis} with {conditions}",
        f"(assumes these do not get worse with more {target.axis}; each answer is bracketed: "
        "the value below it was replayed and fails)",
    ]
    names = [f"{c.statistic} {c.metric}" for c in target.conditions]
    header = [axis for axis, _ in searches[0].others] if searches else []
    rows = [
        [*header, target.axis, *(f"{name} at answer" for name in names), "below answer", "probes"]
    ]
    for item in searches:
        at = item.results.get(item.high)
        below = item.results.get(item.low)
        rows.append(
            [
                *(show(value) for _, value in item.others),
                "none" if item.answer is None else str(item.answer),
                *(
                    "-" if at is None else _us(at.columns[f"{c.metric}_{c.statistic}"])
                    for c in target.conditions
                ),
                "-"
                if below is None
                else f"{target.axis} {item.values[item.low]}: "
                + ", ".join(
                    _us(below.columns[f"{c.metric}_{c.statistic}"]) for c in target.conditions
                ),
                f"{len(item.results)} of {len(item.values)}",
            ]
        )
    lines.append(_format(rows))
    for item in searches:
        for meeting, failing in item.contradictions():
            lines.append(
                f"warning: not monotone at {' '.join(f'{a}={show(v)}' for a, v in item.others)}: "
                f"{target.axis} {meeting} meets but {failing} does not"
            )
    return "\n".join(lines)


def _us(value: Any) -> str:
    return "-" if value is None else f"{value:,} us"


def plot_bytes(
    plan: SweepPlan, results: Sequence[PointResult], fmt: str, target: Target | None
) -> bytes:
    """p99 TTFT and E2E against one axis (workers or pools when swept), a curve per
    combination of the other axes; the target's thresholds as dashed lines."""
    from servesim_cli.plot import figure_bytes, new_figure

    varying = [axis for axis, values in plan.axes if len(values) > 1] or [plan.axes[-1][0]]
    x_axis = next((axis for axis in ("workers", "pools") if axis in varying), varying[0])
    figure = new_figure(11, 4)
    panels = figure.subplots(1, 2)
    curves: dict[tuple[tuple[str, Setting], ...], list[PointResult]] = {}
    for result in results:
        if result.ok:
            key = tuple((a, v) for a, v in result.point.settings if a != x_axis)
            curves.setdefault(key, []).append(result)
    for panel, metric, title in zip(
        panels, ("ttft_us_p99", "e2e_us_p99"), ("p99 TTFT", "p99 E2E"), strict=True
    ):
        for number, (key, members) in enumerate(curves.items()):
            members.sort(key=lambda result: _sort_key(result.point.get(x_axis)))
            xs = [_tick(member.point.get(x_axis)) for member in members]
            numeric = all(isinstance(member.point.get(x_axis), int) for member in members)
            xvalues: list[Any] = [member.point.get(x_axis) for member in members] if numeric else xs
            label = " ".join(f"{a}={show(v)}" for a, v in key) or "all points"
            (line,) = panel.plot(
                xvalues, [m.columns[metric] / 1000 for m in members], marker="o", label=label
            )
            line.set_gid(f"sweep-{metric}-{number}")
        if target is not None:
            for condition in target.conditions:
                if f"{condition.metric}_{condition.statistic}" == metric:
                    panel.axhline(condition.at_most_us / 1000, linestyle="--", color="grey")
        panel.set_yscale("log")
        panel.set_xlabel(
            f"pools ({' + '.join(plan.pool_names())} workers)" if x_axis == "pools" else x_axis
        )
        panel.set_ylabel(f"{title} (ms, log scale)")
        panel.set_title(title)
        panel.grid(True, which="both", alpha=0.3)
        if len(curves) > 1:
            panel.legend(fontsize="small")
    figure.suptitle(f"servesim sweep {plan.file}")
    return figure_bytes(figure, fmt)


def _tick(value: Setting | None) -> str:
    """An x tick: pool sizes as their counts (``2+6``), the axis label names the pools."""
    if isinstance(value, PoolSizes):
        return "+".join(str(workers) for _, workers in value.sizes)
    return show(value if value is not None else 0)


def _sort_key(value: Setting | None) -> tuple[int, Any]:
    if isinstance(value, int | Fraction):
        return (0, value)
    if isinstance(value, PoolSizes):
        return (1, tuple(workers for _, workers in value.sizes))
    return (2, show(value) if value is not None else "")
