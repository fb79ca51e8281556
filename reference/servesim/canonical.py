"""The canonical byte form of a report (SPEC.md R23): RFC 8785 JSON and one final newline."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import rfc8785


def canonical_json(value: Any) -> bytes:
    """R23: RFC 8785 (JCS) serialisation of ``value`` followed by a single ``\\n``."""
    return rfc8785.dumps(value) + b"\n"


def write_atomically(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that no reader ever sees a partial file (R32).

    The bytes go to a temporary file in the same folder, which then replaces ``path`` in one
    rename; on any failure the temporary file is removed and ``path`` is untouched.
    """
    target = Path(path)
    handle, temporary = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=".partial", dir=target.parent
    )
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
