"""``trilog get-offsets``: a topic's partition offsets by time (like Kafka's
``GetOffsetShell``): the earliest, the latest, or the first at or after a timestamp, printed
``topic:partition:offset``.  ListOffsets to each partition's leader."""

from __future__ import annotations

import argparse
import sys

from trilog.cli._common import UsageError, add_cluster_args, cluster_kwargs, run_tool
from trilog.client import EARLIEST, LATEST, open_simple_consumer
from trilog.errors import UnknownTopicOrPartitionError

_NAMED_TIMES = {"earliest": EARLIEST, "-2": EARLIEST, "latest": LATEST, "-1": LATEST}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "get-offsets",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Print one line per partition of --topic, `topic:partition:offset`, like Kafka's\n"
            "GetOffsetShell. --time latest (the default, or -1): the log end offset, where\n"
            "the next record goes; earliest (or -2): the log start offset; a timestamp in\n"
            "ms since the epoch: the first offset whose record timestamp is at or after it\n"
            "(a partition without such a record prints nothing)."
        ),
        epilog=(
            "examples:\n"
            "  trilog get-offsets --topic orders\n"
            "  trilog get-offsets --topic orders --partitions 0,2 --time earliest\n"
            "  trilog get-offsets --topic orders --time 1714564800000"
        ),
    )
    add_cluster_args(p)
    p.add_argument("--topic", required=True, help="the topic")
    p.add_argument("--partitions", metavar="P[,P...]",
                   help="only these partitions (default: all of them)")
    p.add_argument("--time", default="latest", metavar="earliest|latest|MS",
                   help="earliest (-2), latest (-1, the default), or a timestamp in ms")
    p.set_defaults(run=run)


def run(args) -> int:
    return run_tool("trilog get-offsets", _main, args)


def parse_time(text: str) -> int:
    t = text.strip().lower()
    if t in _NAMED_TIMES:
        return _NAMED_TIMES[t]
    try:
        ms = int(t)
    except ValueError:
        raise UsageError(f"--time must be earliest, latest or a timestamp in ms, not {text!r}"
                         ) from None
    if ms < 0:
        raise UsageError(f"--time {text}: a timestamp is 0 or more (-1 latest, -2 earliest)")
    return ms


def parse_partitions(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        out = sorted({int(p) for p in text.split(",") if p.strip()})
    except ValueError:
        raise UsageError(f"--partitions must be numbers separated by commas, not {text!r}"
                         ) from None
    if not out or out[0] < 0:
        raise UsageError(f"--partitions {text!r}: partitions are numbers from 0")
    return out


async def _main(args) -> int:
    time = parse_time(args.time)
    wanted = parse_partitions(args.partitions)
    async with open_simple_consumer(**cluster_kwargs(args), client_id="trilog-get-offsets",
                                    allow_auto_create_topics=False) as consumer:
        try:
            partitions = await consumer.partitions_for(args.topic)
        except UnknownTopicOrPartitionError:
            raise UnknownTopicOrPartitionError(f"topic {args.topic!r} does not exist") from None
        if wanted is not None:
            missing = [p for p in wanted if p not in partitions]
            if missing:
                raise UnknownTopicOrPartitionError(
                    f"topic {args.topic!r} has no partition {missing[0]} (it has "
                    f"{len(partitions)})")
            partitions = tuple(wanted)
        lines = []
        for p in sorted(partitions):
            found = await consumer.offsets_before(args.topic, p, time)
            if found:
                lines.append(f"{args.topic}:{p}:{found[0]}")
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
    return 0
