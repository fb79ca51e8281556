"""``servesim import``: a public request trace (Mooncake, Azure) becomes a workload document."""

from __future__ import annotations

import argparse
import math
import sys
from fractions import Fraction
from pathlib import Path
from typing import TextIO

from servesim.contract.documents import load_document
from servesim.contract.errors import ServesimError
from servesim.tools.importers import (
    MAX_HASH_BLOCK_TOKENS,
    MOONCAKE_HASH_BLOCK_TOKENS,
    READERS,
    ImportOptions,
    TooManyHashes,
    TraceRecord,
    hash_block_tokens,
    read_trace,
    select,
    workload_bytes,
)
from servesim.tools.weka_sessions import weka_records
from servesim_cli.command import EXIT_INVALID_INPUT, EXIT_OK, Command
from servesim_cli.messages import (
    STANDARD_OUTPUT,
    int_between,
    non_negative_fraction,
    positive_fraction,
    positive_int,
    report_invalid,
    write_output,
)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("format", choices=sorted([*READERS, "weka"]), help="the trace's format")
    parser.add_argument(
        "trace",
        metavar="FILE",
        nargs="+",
        help="the trace file; weka: one or more session files, each one session",
    )
    parser.add_argument(
        "-o", "--output", required=True, metavar="FILE", help="the workload to write ('-': stdout)"
    )
    parser.add_argument("--limit", type=positive_int, metavar="N", help="keep the first N requests")
    parser.add_argument(
        "--window",
        nargs=2,
        type=non_negative_fraction,
        metavar=("START", "END"),
        help="keep arrivals in [START, END) seconds after the first record, re-based to START",
    )
    parser.add_argument(
        "--speedup",
        type=positive_fraction,
        default=Fraction(1),
        metavar="FACTOR",
        help="divide every arrival and every session think time by FACTOR (rounded down to a "
        "microsecond); default 1",
    )
    parser.add_argument(
        "--stagger",
        type=non_negative_fraction,
        default=Fraction(0),
        metavar="SECONDS",
        help="weka: start the i-th session file's session i * SECONDS after the first "
        "(rounded down to a microsecond); default 0, all at once",
    )
    hashes = parser.add_mutually_exclusive_group()
    hashes.add_argument(
        "--hash-block-tokens",
        type=int_between(1, MAX_HASH_BLOCK_TOKENS),
        metavar="N",
        help="mooncake: the tokens each hash_ids entry covers, written as the workload's "
        f"prefix_hash_block_tokens; default {MOONCAKE_HASH_BLOCK_TOKENS}, the public Mooncake "
        "traces' block size",
    )
    hashes.add_argument(
        "--no-prefix-hashes",
        action="store_true",
        help="mooncake: drop hash_ids and write a workload 1.0 without prefix_hashes (for "
        "implementations that read only 1.0); Azure traces have no hashes either way",
    )
    parser.add_argument(
        "--session-prompts-extend",
        action="store_true",
        help="mooncake, a trace with session_id: say that each turn's prompt begins with the "
        "previous turn's prompt and answer, so that the answer's blocks are reused by the next "
        "turn (writes session_prompts_extend: true, a workload 1.3, SPEC.md R125, R142); on "
        "requests without sessions it writes nothing and warns",
    )
    parser.add_argument(
        "--infer-sessions",
        action="store_true",
        help="mooncake, a trace without session_id (refused on one with it): make sessions "
        "from the hashes, and write session_prompts_extend: true (a workload 1.3, R142). A "
        "line's predecessor is the latest earlier line whose full hashed blocks' hashes "
        "(its first floor(input_length / H) hash_ids, at least 2 of them) begin the line's "
        "hash_ids and whose input_length + output_length is at most the line's input_length. "
        "Linked lines form sessions s0, s1, ... in the order of their first line; lines "
        "linked to nothing stay requests of their own. It is a heuristic, with limits: a "
        "predecessor keeps only its first successor (in file order), and a later line whose "
        "predecessor it is starts a session of its own, so the answer's blocks serve only the "
        "first successor; each turn keeps its recorded time and gets no think time (it "
        "arrives then, but never before the previous answer, R59), because a recorded gap "
        "includes the predecessor's service time; equal hashes are taken to mean the prompt "
        "repeats the predecessor's answer at those positions, which the trace cannot show. "
        "Sessions are inferred among the requests --window and --limit keep",
    )


def _run(arguments: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    _check_combinations(arguments, parser)
    trace = ", ".join(arguments.trace)
    options = _options(arguments)
    try:
        records, blocks = _records(arguments, options)
        extend = arguments.infer_sessions or (
            arguments.session_prompts_extend and _has_sessions(records)
        )
        data, count = workload_bytes(arguments.format, iter(records), blocks, extend)
    except TooManyHashes as error:
        code = report_invalid(error)
        print(
            "servesim: hint: if the trace was hashed with blocks of another size, give it "
            "with --hash-block-tokens N",
            file=sys.stderr,
        )
        return code
    except ServesimError as error:
        return report_invalid(error)
    except OSError as error:
        print(f"servesim: cannot read {trace}: {error.strerror}", file=sys.stderr)
        return EXIT_INVALID_INPUT
    if count == 0:
        print(f"servesim: {trace}: no request is left to import", file=sys.stderr)
        return EXIT_INVALID_INPUT
    if arguments.session_prompts_extend and not extend:
        print(
            f"servesim: warning: {trace}: no request kept has a session_id, so "
            "--session-prompts-extend writes nothing (--infer-sessions makes sessions from "
            "the hashes)",
            file=sys.stderr,
        )
    status = _status(arguments.output, count, records, arguments.infer_sessions)
    return _write(arguments.output, trace, data, status)


def _has_sessions(records: list[TraceRecord]) -> bool:
    return any(record.session is not None for record in records)


def _check_combinations(arguments: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """The usage errors argparse cannot see option by option: they depend on the format or on
    two values together (``parser.error`` exits 2)."""
    window = arguments.window or (Fraction(0), None)
    if window[1] is not None and window[0] >= window[1]:
        parser.error(f"argument --window: START must be below END, found {window[0]} {window[1]}")
    if arguments.hash_block_tokens is not None and arguments.format == "weka":
        parser.error("argument --hash-block-tokens: weka files give their block_size")
    if arguments.hash_block_tokens is not None and arguments.format != "mooncake":
        parser.error(f"argument --hash-block-tokens: {arguments.format} traces have no hashes")
    if arguments.format != "weka" and len(arguments.trace) > 1:
        parser.error(f"argument FILE: {arguments.format} reads one trace file")
    if arguments.format != "weka" and arguments.stagger:
        parser.error("argument --stagger: only weka files are separate sessions")
    for name in ("session_prompts_extend", "infer_sessions"):
        option = "--" + name.replace("_", "-")
        if getattr(arguments, name) and arguments.format != "mooncake":
            parser.error(f"argument {option}: only for mooncake traces (R142)")
        if getattr(arguments, name) and arguments.no_prefix_hashes:
            parser.error(
                f"argument {option}: not allowed with --no-prefix-hashes (a turn continues "
                "another by its prefix hashes, R125)"
            )


def _options(arguments: argparse.Namespace) -> ImportOptions:
    """What the arguments keep of the trace, and the prefix hashes' block size."""
    window = arguments.window or (Fraction(0), None)
    block_tokens = arguments.hash_block_tokens or MOONCAKE_HASH_BLOCK_TOKENS
    return ImportOptions(
        limit=arguments.limit,
        window_start_s=window[0],
        window_end_s=window[1],
        speedup=arguments.speedup,
        hash_block_tokens=None if arguments.no_prefix_hashes else block_tokens,
        infer_sessions=arguments.infer_sessions,
    )


def _records(
    arguments: argparse.Namespace, options: ImportOptions
) -> tuple[list[TraceRecord], int | None]:
    """The records the options keep, and the workload's ``prefix_hash_block_tokens`` (``None``:
    the workload has no prefix hashes); weka's block size comes from its files."""
    if arguments.format == "weka":
        stagger_us = math.floor(arguments.stagger * 1_000_000)
        paths = [Path(path) for path in arguments.trace]
        turns, block_size = weka_records(paths, stagger_us, not arguments.no_prefix_hashes)
        records = list(select(iter(turns), options))
        return records, None if arguments.no_prefix_hashes else block_size
    records = list(read_trace(arguments.format, Path(arguments.trace[0]), options))
    return records, hash_block_tokens(arguments.format, options)


def _status(output: str, count: int, records: list[TraceRecord], inferred: bool) -> str:
    """The line that says what was written: requests, and sessions if there are any (inferred
    ones always, with the requests they hold)."""
    sessions = {record.session for record in records if record.session is not None}
    if inferred:
        turns = sum(record.session is not None for record in records)
        return f"{output}: {count} requests, {len(sessions)} sessions inferred ({turns} turns)"
    return f"{output}: {count} requests" + (f", {len(sessions)} sessions" if sessions else "")


def _write(output: str, trace: str, data: bytes, status: str) -> int:
    """The workload written, if it is valid, then its status line."""
    try:  # values beyond the schema's bounds (R3) are the trace's fault: say so, write nothing
        load_document(data, output, "workload")
    except ServesimError as error:
        print(f"servesim: {trace} does not make a valid workload:", file=sys.stderr)
        return report_invalid(error)
    written = write_output(output, data, "the workload")
    if written != EXIT_OK:
        return written
    print(status, file=_status_stream(output))
    return EXIT_OK


def _status_stream(output: str) -> TextIO:
    """Where a status line goes: stdout, unless the document itself is written there."""
    return sys.stderr if output == STANDARD_OUTPUT else sys.stdout


COMMAND = Command(
    name="import",
    description="Import a Mooncake (JSON Lines) or Azure LLM inference (CSV) trace, or WEKA "
    "agentic session files, as a workload. For Mooncake and Azure, arrivals are integer "
    "microseconds after the first record; request ids are <format>-L<line>. A Mooncake "
    "trace's hash_ids become each request's prefix_hashes (a workload 1.1 with "
    "prefix_hash_block_tokens, SPEC.md R47), unless --no-prefix-hashes. Mooncake lines with a "
    "session_id become the turns of one session, in file order (a workload 1.2, R65): turn 0 "
    "keeps its timestamp, a later turn gets turn 0's arrival and think_time_us = delay (ms) * "
    "1000, rounded down, so it arrives its delay after the previous turn's answer (R59); "
    "--speedup divides think times as it divides arrivals. Weka agentic session files (one "
    "session each, with prefix hashes of block_size tokens, scoped to their file) become "
    "sessions the same way, think_time in seconds, each starting --stagger after the one "
    "before; a sub-agent is a session of its own from its spawn. --session-prompts-extend and "
    "--infer-sessions (Mooncake, R142) write session_prompts_extend: true (a workload 1.3): "
    "each turn's prompt repeats the previous turn's prompt and answer. Exit 2 on a malformed "
    "record, naming the file and the line and field (or JSON pointer); nothing is written "
    "then.",
    add_arguments=_add_arguments,
    run=_run,
)
