"""``trilog produce``: lines from stdin become records (like ``kafka-console-producer.sh``).

Also home of the helpers the client tools share (``trilog consume``, ``trilog perf``): the
``--bootstrap-server``/``--zookeeper`` options, codec checking, and ``run_tool``, which runs a
tool's trio main and turns trilog's errors into one line on stderr and an exit code.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from trilog._concurrency import unwrap_exception_group
from trilog.client import BufferFullError, open_producer
from trilog.errors import ApiError, TrilogError
from trilog.records import CODEC_NAMES, codec_for_name, is_available

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
COMPRESSION_CHOICES = sorted(CODEC_NAMES.values())
_ACKS = {"0": 0, "1": 1, "-1": -1, "all": -1}
#: how many distinct delivery errors are printed before they are only counted
_MAX_ERROR_LINES = 10
_CODEC_LIBRARIES = {"snappy": "pip install python-snappy (or cramjam)",
                    "zstd": "pip install zstandard (or cramjam)"}


# -- helpers shared by the client tools --------------------------------------------------------


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                       help=f"broker(s) to start from (default {DEFAULT_BOOTSTRAP})")
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                       help="find the brokers in ZooKeeper instead")


def cluster_kwargs(args) -> dict[str, Any]:
    if args.zookeeper is not None:
        return {"zookeeper": args.zookeeper}
    return {"bootstrap_servers": args.bootstrap_server or DEFAULT_BOOTSTRAP}


def where(args) -> str:
    return f"ZooKeeper {args.zookeeper}" if args.zookeeper else \
        (args.bootstrap_server or DEFAULT_BOOTSTRAP)


def add_producer_args(p: argparse.ArgumentParser, *, acks_default: str = "1") -> None:
    p.add_argument("--acks", default=acks_default, choices=list(_ACKS),
                   help=f"acknowledgements to wait for: 0 none, 1 the leader, -1/all every "
                        f"in-sync replica (default {acks_default})")
    p.add_argument("--compression", default="none", metavar="CODEC",
                   help=f"batch compression: {', '.join(COMPRESSION_CHOICES)} (default none)")
    p.add_argument("--linger-ms", type=float, default=5, metavar="MS",
                   help="how long a batch waits for more records (default 5)")
    p.add_argument("--batch-size", type=int, default=65536, metavar="BYTES",
                   help="the largest batch per partition (default 65536)")
    p.add_argument("--delivery-timeout-ms", type=int, default=120_000, metavar="MS",
                   help="give up on a record not acknowledged within this (default 120000)")


def producer_kwargs(args) -> dict[str, Any]:
    return {
        **cluster_kwargs(args),
        "acks": _ACKS[args.acks],
        "compression_type": check_codec(args.compression),
        "linger_ms": args.linger_ms,
        "batch_size": args.batch_size,
        "delivery_timeout_ms": args.delivery_timeout_ms,
    }


def check_codec(name: str) -> str | None:
    """``--compression`` -> ``compression_type``; ``UsageError`` for unknown or missing codecs."""
    try:
        codec = codec_for_name(name)
    except ValueError:
        raise UsageError(f"unknown compression {name!r}; choose one of "
                         f"{', '.join(COMPRESSION_CHOICES)}") from None
    if not is_available(codec):
        raise UsageError(f"compression {name!r} needs a library that is not installed: "
                         f"{_CODEC_LIBRARIES.get(name.lower(), '')}")
    return None if name.lower() == "none" else name.lower()


class UsageError(Exception):
    """A bad combination of options found after argparse: message to stderr, exit 2."""


def run_tool(prog: str, main: Callable[..., Awaitable[int]], *args,
             interrupted: int = 130) -> int:
    """``trio.run(main, *args)`` with a tool's error handling: one line on stderr and exit
    code 1 for a failure, 2 for a usage error, ``interrupted`` for a Ctrl-C that ``main``
    did not handle itself."""
    try:
        with unwrap_exception_group():
            return trio.run(main, *args)
    except UsageError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return interrupted
    except BrokenPipeError:
        # The reader went away (`| head`): not an error; keep Python quiet at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (TrilogError, OSError, ValueError, TypeError) as exc:
        print(f"{prog}: {describe(exc)}", file=sys.stderr)
        return 1


def describe(exc: BaseException) -> str:
    """One line for an error: its message, and Kafka's name for a broker's error code."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, ApiError) and exc.code > 0 and exc.name not in text:
        text += f" [{exc.name}]"
    return text


async def cancel_on_sigint(scope: trio.CancelScope, *, task_status=trio.TASK_STATUS_IGNORED
                           ) -> None:
    """Cancel ``scope`` at the first SIGINT/SIGTERM; a second one interrupts at once."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for _ in signals:
            if scope.cancel_called:
                raise KeyboardInterrupt
            scope.cancel()


# -- trilog produce ---------------------------------------------------------------------------


def add_parser(sub) -> None:
    p = sub.add_parser(
        "produce",
        help="send lines from stdin as records",
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
            "  trilog produce --topic logs --compression lz4 --acks all < app.log\n\n"
            "snappy needs python-snappy or cramjam; zstd needs zstandard or cramjam."
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
