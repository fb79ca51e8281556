"""What a ``servesim`` subcommand is: a name, its description, its arguments and what it runs.

Each subcommand lives in a module of its own that exposes a ``Command``; ``main`` lists them by
name with a one-line help, and imports a command's module only when that command runs, so
``servesim replay`` never pays for the suite, the schema engine or the plotting code.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

#: Exit codes shared by every subcommand (SPEC.md section 8).
EXIT_OK = 0
EXIT_INTERNAL_ERROR = 1
EXIT_INVALID_INPUT = 2
EXIT_OUT_OF_COVERAGE = 3
#: The input was fine but the output could not be written (a missing folder, no permission).
EXIT_CANNOT_WRITE = 4
#: Stopped by SIGINT (128 + 2) or SIGTERM (128 + 15), as a shell reports them.
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


@dataclass(frozen=True)
class Command:
    """One subcommand of ``servesim``."""

    name: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    #: Runs the parsed command; gets its own parser for usage errors; returns the exit code.
    run: Callable[[argparse.Namespace, argparse.ArgumentParser], int]
