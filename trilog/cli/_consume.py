"""``trilog consume``: print a topic's records (like ``kafka-console-consumer.sh``).

Without ``--group``, a simple consumer: it names partitions and offsets itself and keeps no
state in the cluster (no group, nothing committed).  Every partition of the topic (or the
one given) is followed with one long-poll ``multifetch`` per round, so records of all
partitions come out merged, each partition in offset order.

With ``--group G``, a member of consumer group G (``open_consumer_connector``, Kafka's group
protocol through the brokers, or the ZooKeeper connector with ``--zookeeper``): it reads the
partitions the group gives it, from the group's committed offsets, and commits what it
printed when it stops.
"""

from __future__ import annotations

import argparse
import string
import sys

import trio

from trilog.cli._common import (
    UsageError,
    add_cluster_args,
    cancel_on_sigint,
    cluster_kwargs,
    run_tool,
)
from trilog.client import EARLIEST, LATEST, open_consumer_connector, open_simple_consumer
from trilog.errors import OffsetOutOfRangeError, UnknownTopicOrPartitionError

FIELDS = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value",
          "headers")
DEFAULT_FORMAT = "{value}"
#: the longest a single long poll waits: how often --timeout-ms and Ctrl-C are looked at
_POLL_MS = 500
_FETCH_BYTES = 1 << 20


def add_parser(sub) -> None:
    p = sub.add_parser(
        "consume",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Print the records of --topic, one line each, as they arrive: every partition\n"
            "merged (each in offset order), or only --partition. Starts at the end of each\n"
            "partition (only new records) unless --from-beginning or --offset is given, like\n"
            "kafka-console-consumer.sh. Stops after --max-messages records, after\n"
            "--timeout-ms without a new record, or at Ctrl-C (exit status 0); a summary line\n"
            "goes to stderr. Without --group nothing is stored in the cluster.\n\n"
            "--group G reads as a member of consumer group G: the group shares the topic's\n"
            "partitions among its members, each starts from the group's committed offsets\n"
            "(--from-beginning: the earliest record when the group has none; else only new\n"
            "records), and the offsets of the records printed are committed at exit (also\n"
            "every --commit-interval-ms). Not with --partition or --offset.\n\n"
            "--isolation-level read_committed prints only the records of committed\n"
            "transactions (those of open transactions wait until they end, those of aborted\n"
            "ones are skipped) and starts from the last stable offset instead of the log\n"
            "end; read_uncommitted (the default) prints every record. Transaction markers\n"
            "are never printed.\n\n"
            f"--format fields: {', '.join('{' + f + '}' for f in FIELDS)}. key and value are\n"
            "decoded as UTF-8 (undecodable bytes become U+FFFD) and print None when null;\n"
            "timestamp is in ms since the epoch; \\t and \\n in FORMAT are a tab and a newline."
        ),
        epilog=(
            "examples:\n"
            "  trilog consume --topic events --from-beginning --max-messages 10\n"
            "  trilog consume --topic events --partition 0 --offset 42 "
            "--format '{offset}\\t{key}\\t{value}'\n"
            "  trilog consume --topic events --from-beginning --timeout-ms 2000 > dump.txt\n"
            "  trilog consume --topic events --group readers --from-beginning --max-messages 5\n"
            "  trilog consume --topic orders --from-beginning --isolation-level read_committed"
        ),
    )
    p.add_argument("--topic", required=True, help="the topic to read")
    add_cluster_args(p)
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest record still in the log")
    start.add_argument("--offset", metavar="N|earliest|latest",
                       help="start at offset N (of every partition read; usually with "
                            "--partition)")
    p.add_argument("--partition", type=int, metavar="P", help="read only partition P")
    p.add_argument("--group", metavar="GROUP",
                   help="read as a member of this consumer group, committing its offsets")
    p.add_argument("--commit-interval-ms", type=int, default=5000, metavar="MS",
                   help="with --group: how often to commit while reading (default 5000)")
    p.add_argument("--max-messages", type=int, metavar="N",
                   help="exit after printing N records")
    p.add_argument("--timeout-ms", type=int, metavar="MS",
                   help="exit when no new record arrived for MS milliseconds "
                        "(default: wait for ever)")
    p.add_argument("--isolation-level", default="read_uncommitted",
                   choices=("read_uncommitted", "read_committed"),
                   help="read_committed: only records of committed transactions; "
                        "read_uncommitted: every record (default)")
    p.add_argument("--format", default=DEFAULT_FORMAT, metavar="FORMAT",
                   help=f"a Python format string per record (default {DEFAULT_FORMAT!r}), "
                        "e.g. '{offset} {key} {value}'")
    p.set_defaults(run=run)


def run(args) -> int:
    # Ctrl-C is handled inside (clean stop, status 0); this covers one during start-up.
    return run_tool("trilog consume", _main, args, interrupted=0)


def compile_format(fmt: str):
    """FORMAT -> a function of a ``ConsumerRecord`` returning the line (no newline).

    Raises ``UsageError`` naming the problem for unknown fields or a malformed FORMAT.
    """
    fmt = fmt.replace("\\t", "\t").replace("\\n", "\n")
    try:
        names = {name.split(".")[0].split("[")[0]
                 for _, name, _, _ in string.Formatter().parse(fmt) if name is not None}
    except ValueError as exc:
        raise UsageError(f"bad --format {fmt!r}: {exc}") from None
    unknown = sorted(n for n in names if n not in FIELDS)
    if unknown or "" in names:
        what = ", ".join("{" + n + "}" for n in unknown) or "{} (positional)"
        raise UsageError(f"--format uses {what}; the fields are "
                         f"{', '.join('{' + f + '}' for f in FIELDS)}")
    render = fmt.format
    want_headers = "headers" in names

    def line(rec) -> str:
        key, value = rec.key, rec.value
        return render(
            topic=rec.topic, partition=rec.partition, offset=rec.offset,
            timestamp=rec.timestamp, timestamp_type=rec.timestamp_type,
            key=None if key is None else bytes(key).decode("utf-8", "replace"),
            value=None if value is None else bytes(value).decode("utf-8", "replace"),
            headers=_headers(rec.headers) if want_headers else "",
        )

    try:  # catches bad specs ({offset:q}) before any record is read
        from trilog.client import ConsumerRecord

        line(ConsumerRecord("t", 0, 0, 0, b"k", b"v", ()))
    except (ValueError, TypeError, IndexError, AttributeError, KeyError) as exc:
        raise UsageError(f"bad --format {fmt!r}: {exc}") from None
    return line


def _headers(headers) -> str:
    return ",".join(f"{h.key}={'None' if h.value is None else bytes(h.value).decode('utf-8', 'replace')}"
                    for h in headers)


def _start_offset(args) -> int:
    """``--offset`` as a number, EARLIEST or LATEST."""
    if args.from_beginning:
        return EARLIEST
    if args.offset is None:
        return LATEST
    text = args.offset.strip().lower()
    if text in ("earliest", "beginning"):
        return EARLIEST
    if text in ("latest", "end"):
        return LATEST
    try:
        offset = int(text)
    except ValueError:
        raise UsageError(f"--offset must be a number, earliest or latest, not {args.offset!r}"
                         ) from None
    if offset < 0:
        raise UsageError("--offset must not be negative")
    return offset


async def wait_for_topic(consumer, topic: str, timeout_ms: int | None, prog: str
                         ) -> tuple[tuple[int, ...], bool]:
    """The topic's partitions, waiting (and saying so once) while it does not exist yet;
    and whether it had to wait."""
    told = False
    with trio.move_on_after(timeout_ms / 1000 if timeout_ms is not None else float("inf")):
        while True:
            try:
                return await consumer.partitions_for(topic), told
            except UnknownTopicOrPartitionError:
                if not told:
                    print(f"{prog}: topic {topic!r} does not exist yet; waiting for it",
                          file=sys.stderr, flush=True)
                    told = True
            await trio.sleep(0.5)
    raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")


async def resolve_offsets(consumer, topic: str, partitions, start: int) -> dict[int, int]:
    """partition -> the first offset to fetch; an explicit offset is checked against the log."""
    positions = {}
    for p in partitions:
        if start in (EARLIEST, LATEST):
            (positions[p],) = await consumer.offsets_before(topic, p, start) or [0]
            continue
        first = (await consumer.offsets_before(topic, p, EARLIEST) or [0])[0]
        end = (await consumer.offsets_before(topic, p, LATEST) or [0])[0]
        if not first <= start <= end:
            raise OffsetOutOfRangeError(
                f"offset {start} is out of range for {topic}-{p}: it holds offsets "
                f"{first}..{end - 1}" if end > first else
                f"offset {start} is out of range for {topic}-{p}: it is empty, next offset {end}")
        positions[p] = start
    return positions


async def _main(args) -> int:
    prog = "trilog consume"
    line = compile_format(args.format)
    if args.max_messages is not None and args.max_messages < 0:
        raise UsageError("--max-messages must not be negative")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise UsageError("--timeout-ms must not be negative")
    if args.group is not None:
        return await _consume_group(args, line)
    start = _start_offset(args)
    printed = 0
    out = sys.stdout
    stop = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        await nursery.start(cancel_on_sigint, stop)
        async with open_simple_consumer(**cluster_kwargs(args),
                                        client_id="trilog-console-consumer",
                                        isolation_level=args.isolation_level) as consumer:
            with stop:
                partitions, waited = await wait_for_topic(consumer, args.topic,
                                                          args.timeout_ms, prog)
                if waited and start == LATEST:
                    start = EARLIEST  # a new topic: everything in it came after we started
                if args.partition is not None:
                    if args.partition not in partitions:
                        raise UsageError(
                            f"topic {args.topic!r} has no partition {args.partition} "
                            f"(it has {len(partitions)}: {', '.join(map(str, partitions))})")
                    partitions = (args.partition,)
                positions = await resolve_offsets(consumer, args.topic, partitions, start)
                limit = args.max_messages
                idle_since = trio.current_time()
                while limit is None or printed < limit:
                    wait_ms = _POLL_MS
                    if args.timeout_ms is not None:
                        left = args.timeout_ms / 1000 - (trio.current_time() - idle_since)
                        if left <= 0:
                            break
                        wait_ms = max(0, min(_POLL_MS, int(left * 1000)))
                    results = await consumer.multifetch(
                        [(args.topic, p, positions[p], _FETCH_BYTES) for p in partitions],
                        max_wait_ms=wait_ms, min_bytes=1)
                    lines: list[str] = []
                    for fetched in results:
                        for rec in fetched:
                            if limit is not None and printed + len(lines) >= limit:
                                break
                            lines.append(line(rec))
                        positions[fetched.partition] = fetched.next_offset
                    if lines:
                        lines.append("")
                        out.write("\n".join(lines))
                        out.flush()
                        printed += len(lines) - 1
                        idle_since = trio.current_time()
        nursery.cancel_scope.cancel()
    print(f"Processed a total of {printed} messages", file=sys.stderr)
    return 0



async def _consume_group(args, line) -> int:
    """``--group``: a group member's single stream over the partitions it is given."""
    if args.partition is not None or args.offset is not None:
        raise UsageError("--group reads the partitions the group assigns, from its committed "
                         "offsets: not with --partition or --offset")
    if not args.group:
        raise UsageError("--group must not be empty")
    if args.commit_interval_ms <= 0:
        raise UsageError("--commit-interval-ms must be positive")
    printed = 0
    limit = args.max_messages
    out = sys.stdout
    stop = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        await nursery.start(cancel_on_sigint, stop)
        with stop:
            async with open_consumer_connector(
                    args.group, **cluster_kwargs(args), topics={args.topic: 1},
                    auto_offset_reset="smallest" if args.from_beginning else "largest",
                    auto_commit_interval_ms=args.commit_interval_ms,
                    consumer_timeout_ms=-1 if args.timeout_ms is None else args.timeout_ms,
                    isolation_level=args.isolation_level,
                    client_id="trilog-console-consumer") as connector:
                stream = connector.streams[args.topic][0]
                if limit != 0:
                    async for record in stream:
                        out.write(line(record) + "\n")
                        printed += 1
                        if limit is not None and printed >= limit:
                            stream.mark_processed()  # committed as the connector closes
                            break
                    out.flush()
        nursery.cancel_scope.cancel()
    out.flush()
    print(f"Processed a total of {printed} messages", file=sys.stderr)
    return 0
