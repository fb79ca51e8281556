"""``servesim calibrate``: measured steps to a regression and a grid timing profile (SPEC.md R44).

Everything here is a pure function of the measurement file's bytes, the identity and the options,
so the same input gives the same profiles and summary, byte for byte. The least-squares fit uses
floats (it is an estimate either way); every number written is an integer, and the errors in the
summary are computed with the written profiles' own integer arithmetic (R41, R42).

One module per job, in the order of R44's steps; each states the decisions R44 leaves open
where it makes them:

- ``measurements``: reading the measurement lines, or a traced report's steps (R30);
- ``identity``: the calibration identity file, and the limits it sets (R40);
- ``options``: the options and their bounds (at least 2 knots and 2 grid points per axis);
- ``sampling``: step 1's seeded split, and the evenly spaced ranks of the knots and axes;
- ``regression`` (with ``least_squares``): step 2, the fit aimed at ``T - 0.5``, degenerate
  columns given coefficient 0;
- ``grid``: step 3;
- ``evaluation``: step 4, the errors on the held-out lines;
- ``profiles``: the documents written, read back before their errors are taken;
- ``summary``: the result, its table, its JSON and its warnings;
- ``run``: ``calibrate``, the steps in order.
"""

from servesim.tools.calibrate.identity import parse_identity
from servesim.tools.calibrate.measurements import InvalidMeasurements, Measurement
from servesim.tools.calibrate.options import MIN_GRID_POINTS, MIN_KNOTS, CalibrateOptions
from servesim.tools.calibrate.run import calibrate
from servesim.tools.calibrate.summary import Calibration

__all__ = [
    "MIN_GRID_POINTS",
    "MIN_KNOTS",
    "CalibrateOptions",
    "Calibration",
    "InvalidMeasurements",
    "Measurement",
    "calibrate",
    "parse_identity",
]
