"""``trilog delete-records``: delete the records of partitions below given offsets (like
``kafka-delete-records.sh``), from Kafka's offsets JSON file, through ``Admin.delete_records``
(DeleteRecords to each partition's leader)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from trilog.cli._common import (
    DEFAULT_BOOTSTRAP,
    UsageError,
    add_connection_args,
    bootstrap_list,
    connection_kwargs,
    run_tool,
)
from trilog.client import open_admin

EXAMPLE_JSON = '{"partitions": [{"topic": "orders", "partition": 0, "offset": 10}], "version": 1}'


def add_parser(sub) -> None:
    p = sub.add_parser(
        "delete-records",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Move each listed partition's log start offset to the given offset: the records\n"
            "below it are gone for every consumer, and segments wholly below it are deleted\n"
            "at once. Like kafka-delete-records.sh, the partitions and offsets come from a\n"
            "JSON file:\n\n"
            f"  {EXAMPLE_JSON}\n\n"
            "offset -1 means the partition's high watermark (delete everything in it).\n"
            "Exit status 1 if any partition failed (each failure is printed), 2 for a bad\n"
            "file or bad options."
        ),
        epilog="example:\n  trilog delete-records --offset-json-file delete.json",
    )
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", type=bootstrap_list,
                   help=f"broker(s) of the cluster (default {DEFAULT_BOOTSTRAP})")
    add_connection_args(p)
    p.add_argument("--offset-json-file", "--offsets-json", dest="offsets_json", required=True,
                   metavar="FILE", help="the JSON file of partitions and offsets ('-': stdin)")
    p.set_defaults(run=run)


def run(args) -> int:
    return run_tool("trilog delete-records", _main, args)


def read_offsets_json(path: str) -> dict[tuple[str, int], int]:
    """Kafka's offsets JSON -> ``{(topic, partition): offset}``; ``UsageError`` saying what
    is wrong with an unreadable or malformed file."""
    try:
        if path == "-":
            import sys

            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}"
                         ) from None
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{path} is not JSON: {exc}") from None
    entries = data.get("partitions") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"{path} has no \"partitions\" list; write e.g. {EXAMPLE_JSON}")
    out: dict[tuple[str, int], int] = {}
    for i, entry in enumerate(entries):
        try:
            topic, partition, offset = entry["topic"], entry["partition"], entry["offset"]
        except (TypeError, KeyError) as exc:
            raise UsageError(f"{path}: partitions[{i}] needs \"topic\", \"partition\" and "
                             f"\"offset\" (missing {exc})") from None
        if not isinstance(topic, str) or not topic:
            raise UsageError(f"{path}: partitions[{i}].topic must be a topic name")
        if type(partition) is not int or partition < 0:
            raise UsageError(f"{path}: partitions[{i}].partition must be a number >= 0")
        if type(offset) is not int or offset < -1:
            raise UsageError(f"{path}: partitions[{i}].offset must be a number >= -1")
        if (topic, partition) in out:
            raise UsageError(f"{path} lists {topic}-{partition} twice")
        out[(topic, partition)] = offset
    return out


async def _main(args) -> int:
    offsets = read_offsets_json(args.offsets_json)
    print("Executing records delete operation")
    async with open_admin(args.bootstrap_server or DEFAULT_BOOTSTRAP,
                          client_id="trilog-delete-records", **connection_kwargs(args)) as admin:
        results = await admin.delete_records(offsets)
    print("Records delete operation completed:")
    failed = 0
    for r in results:
        if r.error is None:
            print(f"partition: {r.topic}-{r.partition}\tlow_watermark: {r.low_watermark}")
        else:
            failed += 1
            print(f"partition: {r.topic}-{r.partition}\terror: {r.error}")
    return 1 if failed else 0
