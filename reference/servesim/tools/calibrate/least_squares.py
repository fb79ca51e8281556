"""Ordinary least squares for R44's regression, in floats (the fit is an estimate either way).

A column that is, up to rounding, a combination of the columns before it gets coefficient 0:
in the regression's column order (intercept, knots, D, C) that is, say, all lines with the same
D, or C proportional to D. Which column is dropped depends only on the column order, so the
same lines always give the same coefficients.
"""

from __future__ import annotations

from collections.abc import Sequence

#: A column is dropped when elimination leaves less than this share of its own weight.
_DEGENERATE = 1e-9


def least_squares(rows: Sequence[Sequence[float]], targets: Sequence[float]) -> list[float]:
    """The coefficients minimising the squared error; 0 for a column that is degenerate."""
    matrix, vector, scales = _normal_equations(rows, targets)
    kept = _independent_columns(matrix)
    reduced = [[matrix[i][j] for j in kept] for i in kept]
    solved = _gauss(reduced, [vector[i] for i in kept]) if kept else []
    coefficients = [0.0] * len(scales)
    for column, value in zip(kept, solved, strict=True):
        coefficients[column] = value / scales[column]
    return coefficients


def _normal_equations(
    rows: Sequence[Sequence[float]], targets: Sequence[float]
) -> tuple[list[list[float]], list[float], list[float]]:
    """``(XᵀX, Xᵀy, scales)`` of the columns scaled to a largest magnitude of 1, so that C (up to
    2^52) and the knot weights (at most 1) weigh alike; an all-zero column keeps scale 1."""
    width = len(rows[0])
    scales = [
        max((abs(row[column]) for row in rows), default=0.0) or 1.0 for column in range(width)
    ]
    matrix = [[0.0] * width for _ in range(width)]
    vector = [0.0] * width
    for row, target in zip(rows, targets, strict=True):
        scaled = [value / scale for value, scale in zip(row, scales, strict=True)]
        for i, left in enumerate(scaled):
            if left:
                vector[i] += left * target
                matrix_row = matrix[i]
                for j, right in enumerate(scaled):
                    matrix_row[j] += left * right
    return matrix, vector, scales


def _independent_columns(matrix: Sequence[Sequence[float]]) -> list[int]:
    """The columns kept, in order: symmetric elimination drops a column when what is left of its
    diagonal is below ``_DEGENERATE`` of what it started with (it adds nothing to the columns
    kept before it); the choice depends only on the column order, never on ties."""
    size = len(matrix)
    work = [list(row) for row in matrix]
    kept: list[int] = []
    for column in range(size):
        if not work[column][column] > _DEGENERATE * matrix[column][column]:
            continue  # also an all-zero column, whose diagonal is 0 from the start
        kept.append(column)
        pivot = work[column]
        for row in range(column + 1, size):
            factor = work[row][column] / pivot[column]
            for other in range(column, size):
                work[row][other] -= factor * pivot[other]
    return kept


def _gauss(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Solve a non-singular system by Gaussian elimination with partial pivoting."""
    size = len(vector)
    rows = [[*matrix[index], vector[index]] for index in range(size)]
    for column in range(size):
        best = max(range(column, size), key=lambda row: (abs(rows[row][column]), -row))
        rows[column], rows[best] = rows[best], rows[column]
        pivot = rows[column]
        for row in range(column + 1, size):
            factor = rows[row][column] / pivot[column]
            for other in range(column, size + 1):
                rows[row][other] -= factor * pivot[other]
    solution = [0.0] * size
    for row in reversed(range(size)):
        known = sum(rows[row][other] * solution[other] for other in range(row + 1, size))
        solution[row] = (rows[row][size] - known) / rows[row][row]
    return solution
