"""The canonical byte form of a report (SPEC.md R23): RFC 8785 JSON and one final newline."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import rfc8785


def canonical_json(value: Any) -> bytes:
    """R23: RFC 8785 (JCS) serialisation of ``value`` followed by a single ``\\n``."""
    return canonical_bytes(value) + b"\n"


def canonical_bytes(value: Any) -> bytes:
    """RFC 8785 (JCS) serialisation of ``value``.

    The bytes are ``rfc8785.dumps``'s; for speed the bulk is written by the standard library's
    C encoder, which agrees with RFC 8785 on everything a report holds (sorted ASCII keys, no
    whitespace, the same string escapes, integers below 2**53), and only the few non-integer
    numbers are printed by ``rfc8785`` itself. Output that is not pure ASCII, where key order
    could differ, is written by ``rfc8785`` alone. ``value`` is not modified.
    """
    if type(value) is float:  # a lone number or string: no container to write around it
        return canonical_float(value)
    if type(value) is str and value.isascii():
        return json.dumps(value, ensure_ascii=False).encode("ascii")
    floats: list[float] = []
    prepared = _with_float_placeholders(value, floats)
    text = json.dumps(
        prepared,
        ensure_ascii=False,
        sort_keys=True,
        separators=(",", ":"),
        allow_nan=False,
        check_circular=False,
    )
    if not text.isascii():
        return rfc8785.dumps(value)
    if len(_PLACEHOLDER.findall(text)) != len(floats):  # a string looked like a placeholder
        return rfc8785.dumps(value)
    text = _PLACEHOLDER.sub(
        lambda match: canonical_float(floats[int(match.group(1))]).decode("ascii"), text
    )
    return text.encode("ascii")


def canonical_float(value: float) -> bytes:
    """RFC 8785's bytes for one float (``rfc8785.dumps``), faster where that is ``repr``'s.

    RFC 8785 writes a number as ECMAScript's Number::toString does: the fewest significant
    digits that read back as the value (the closest such to it), in plain decimal notation from
    1e-6 up to 1e21 and with an exponent outside. Python's ``repr`` chooses the same digits and
    writes them in plain decimal notation from 1e-4 up to 1e16, where the two differ only for an
    integral value (``repr`` adds ``.0``). A report's means and ratios (R24) are nearly all
    non-integral and in that range; the rest is left to ``rfc8785``, which also rejects NaN and
    the infinities.
    """
    if 1e-4 <= abs(value) < 1e16 and not value.is_integer():
        return repr(value).encode("ascii")
    return rfc8785.dumps(value)


_PLACEHOLDER = re.compile(r'"\\u0000(\d+)\\u0000"')
_SCALARS = frozenset({int, str, bool, type(None)})


def _with_float_placeholders(value: Any, floats: list[float]) -> Any:
    """``value`` with every float replaced by a placeholder string naming its index in
    ``floats``; containers without floats are returned as they are, not copied."""
    kind = type(value)
    if kind is float:
        floats.append(value)
        return f"\x00{len(floats) - 1}\x00"
    if kind is dict:
        items = {key: _with_float_placeholders(item, floats) for key, item in value.items()}
        same = all(items[key] is item for key, item in value.items())
        return value if same else items
    if kind is list:
        if set(map(type, value)) <= _SCALARS:
            return value
        converted = [_with_float_placeholders(item, floats) for item in value]
        return value if all(a is b for a, b in zip(converted, value, strict=True)) else converted
    return value


def canonical_array(values: Iterable[Any], *, batch: int = 2048) -> Iterator[bytes]:
    """The RFC 8785 bytes of a JSON array of ``values``, in pieces, without holding them all.

    The canonical form of an array is its elements' canonical forms, comma-separated, in
    brackets, so serialising it in batches gives the same bytes as serialising it at once.
    """
    yield b"["
    separator = b""
    for chunk in _batched(values, batch):
        yield separator + canonical_bytes(list(chunk))[1:-1]
        separator = b","
    yield b"]"


def encoded_array(items: Iterable[bytes], *, batch: int = 4096) -> Iterator[bytes]:
    """A JSON array of elements that are each canonical bytes already, in pieces."""
    yield b"["
    separator = b""
    for chunk in _batched(items, batch):
        yield separator + b",".join(chunk)
        separator = b","
    yield b"]"


def _batched(values: Iterable[Any], size: int) -> Iterator[tuple[Any, ...]]:
    """``itertools.batched``, which Python 3.11 lacks."""
    iterator = iter(values)
    while chunk := tuple(itertools.islice(iterator, size)):
        yield chunk


def write_atomically(path: str | Path, data: bytes | Iterable[bytes]) -> None:
    """Write ``data`` to ``path`` so that no reader ever sees a partial file (R32).

    The bytes go to a temporary file in the same folder, which then replaces the file in one
    rename; on any failure the temporary file is removed and the file is untouched. A symbolic
    link is written through, not replaced, and keeps pointing at the new file; something that
    is not a regular file (``/dev/stdout``, a pipe) is written directly, since it cannot be
    replaced. The new file gets the mode of the one it replaces, else the umask's default.
    """
    write_all_atomically([(path, data)])


def write_all_atomically(files: Sequence[tuple[str | Path, bytes | Iterable[bytes]]]) -> None:
    """``write_atomically`` for several files at once: all of them, or (on error) none.

    Every regular file is first written in full to its temporary file; only then are the
    files that cannot be replaced (devices, pipes) written, and last the temporary files
    renamed. A failure before the renames leaves every regular file untouched.
    """
    staged: list[tuple[str, Path]] = []
    direct: list[tuple[str | Path, bytes | Iterable[bytes]]] = []
    current: str | Path = ""
    try:
        for current, data in files:
            if os.path.exists(current) and not os.path.isfile(current):  # follows links
                direct.append((current, data))
            else:
                _stage(Path(os.path.realpath(current)), data, staged)
        for current, data in direct:
            with open(current, "wb") as stream:
                _write(stream, data)
        for temporary, target in staged:
            current = target
            os.replace(temporary, target)
    except BaseException as error:
        for temporary, _ in staged:
            Path(temporary).unlink(missing_ok=True)
        if isinstance(error, OSError):  # name the file asked for, not a temporary one
            raise OSError(error.errno, error.strerror, str(current)) from error
        raise


def _stage(target: Path, data: bytes | Iterable[bytes], staged: list[tuple[str, Path]]) -> None:
    """``data`` written and synced to a new temporary file beside ``target``, which is added
    to ``staged`` (whose owner removes it on failure) before anything can interrupt: a signal
    arriving between the file's creation and its listing would leave it behind (R32)."""
    with _signals_deferred():
        handle, temporary = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=".partial", dir=target.parent
        )
        staged.append((temporary, target))
    os.fchmod(handle, _mode_for(target))
    with os.fdopen(handle, "wb") as stream:
        _write(stream, data)
        stream.flush()
        os.fsync(stream.fileno())


_DEFERRED_SIGNALS = {signal.SIGINT, signal.SIGTERM}


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM held back for the duration (delivered, and their handlers run, when
    it ends), where the platform can hold them."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _write(stream: BinaryIO, data: bytes | Iterable[bytes]) -> None:
    if isinstance(data, bytes):
        stream.write(data)
    else:
        stream.writelines(data)


def _mode_for(target: Path) -> int:
    """The permission bits a new file at ``target`` should have."""
    try:
        return target.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
