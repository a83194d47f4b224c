"""``trilog produce``: lines from stdin become records (like ``kafka-console-producer.sh``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

import trio

from trilog.cli._common import (
    UsageError,
    add_cluster_args,
    add_producer_args,
    cancel_on_sigint,
    describe,
    producer_kwargs,
    run_tool,
)
from trilog.client import BufferFullError, open_producer
from trilog.errors import TrilogError

#: how many distinct delivery errors are printed before they are only counted
_MAX_ERROR_LINES = 10


def add_parser(sub) -> None:
    p = sub.add_parser(
        "produce",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Read lines from stdin and send each as one record to --topic (the line without\n"
            "its newline is the value; with --key-separator the text before the first\n"
            "separator is the key). At end of input (Ctrl-D) or Ctrl-C, wait until every\n"
            "record sent is acknowledged, then exit. Like kafka-console-producer.sh.\n\n"
            "Exit status: 0 when every record was acknowledged; 1 when any failed (each\n"
            "distinct error is printed to stderr, with the number of failed records);\n"
            "2 for bad options."
        ),
        epilog=(
            "examples:\n"
            "  printf 'k1:hello\\nk2:world\\n' | trilog produce --topic events --key-separator :\n"
            "  trilog produce --topic logs --compression zstd --acks 1 < app.log\n\n"
            "Every codec (gzip, snappy, lz4, zstd) comes with trilog: nothing more to install."
        ),
    )
    p.add_argument("--topic", required=True, help="the topic to write (created if the broker "
                                                  "auto-creates topics)")
    add_cluster_args(p)
    p.add_argument("--key-separator", metavar="SEP",
                   help="split each line at the first SEP into key and value; a line without "
                        "SEP is an error")
    p.add_argument("--partition", type=int, metavar="N",
                   help="write every record to partition N (default: the partitioner: "
                        "by key hash, sticky batches for null keys)")
    add_producer_args(p)
    p.set_defaults(run=run)


def run(args) -> int:
    return run_tool("trilog produce", _main, args)


class _Failures:
    """Counts failed deliveries and prints each distinct error once (up to a limit)."""

    def __init__(self) -> None:
        self.count = 0
        self.rejected = 0  # records that failed before they were sent
        self.seen: Counter[str] = Counter()

    def add(self, error: BaseException, what: str = "", *, rejected: bool = False) -> None:
        self.count += 1
        self.rejected += rejected
        text = describe(error)
        self.seen[text] += 1
        if self.seen[text] == 1 and len(self.seen) <= _MAX_ERROR_LINES:
            print(f"trilog produce: {what}{text}", file=sys.stderr, flush=True)

    def on_delivery(self, outcome) -> None:
        if isinstance(outcome, BaseException):
            self.add(outcome)


async def _main(args) -> int:
    kwargs = producer_kwargs(args)
    separator = args.key_separator.encode() if args.key_separator else None
    if args.key_separator == "":
        raise UsageError("--key-separator must not be empty")
    failures = _Failures()
    sent = 0
    read_scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        await nursery.start(cancel_on_sigint, read_scope)
        async with open_producer(**kwargs, on_delivery=failures.on_delivery,
                                 client_id="trilog-console-producer") as producer:
            # Fails here, before reading any input, when no broker is reachable.
            partitions = await producer.partitions_for(args.topic)
            if args.partition is not None and args.partition not in partitions:
                raise UsageError(f"topic {args.topic!r} has partitions "
                                 f"{_ranges(partitions)}, not {args.partition}")
            with read_scope:
                async for number, line in _stdin_lines():
                    if separator is not None:
                        key, found, value = line.partition(separator)
                        if not found:
                            failures.add(ValueError(f"no key separator {args.key_separator!r}"),
                                         f"line {number}: ", rejected=True)
                            continue
                    else:
                        key, value = None, line
                    try:
                        try:
                            producer.send_nowait(args.topic, value, key,
                                                 partition=args.partition)
                        except BufferFullError:
                            await producer.send(args.topic, value, key, partition=args.partition)
                    except TrilogError as exc:
                        failures.add(exc, f"line {number}: ", rejected=True)
                        continue
                    sent += 1
            # Leaving the producer's block flushes: every record ends acknowledged or failed.
        nursery.cancel_scope.cancel()
    if failures.count:
        print(f"trilog produce: {failures.count} of {sent + failures.rejected} records failed",
              file=sys.stderr)
        return 1
    return 0


async def _stdin_lines():
    """``(line_number, line_bytes)`` for each line of stdin, read in a worker thread so the
    producer keeps sending meanwhile.  A line is yielded without its ``\\n`` (or ``\\r\\n``);
    a last line without a newline is still a line."""
    fd = sys.stdin.fileno()
    rest = b""
    number = 0
    while True:
        chunk = await trio.to_thread.run_sync(os.read, fd, 1 << 16, abandon_on_cancel=True)
        if not chunk:
            break
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        for line in lines:
            number += 1
            yield number, line[:-1] if line.endswith(b"\r") else line
        await trio.lowlevel.checkpoint()
    if rest:
        yield number + 1, rest[:-1] if rest.endswith(b"\r") else rest


def _ranges(partitions) -> str:
    return f"0..{max(partitions)}" if list(partitions) == list(range(len(partitions))) else \
        ", ".join(map(str, partitions))
