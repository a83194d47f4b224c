"""``trilog transactions``: list and describe transactions (like ``kafka-transactions.sh``).
The work is the admin client's (``list_transactions``, ``describe_transactions``); this
module parses options and prints Kafka's tables."""

from __future__ import annotations

import argparse
import sys
import time

from trilog.cli._common import (
    DEFAULT_BOOTSTRAP,
    UsageError,
    add_connection_args,
    bootstrap_list,
    connection_kwargs,
    run_tool,
)
from trilog.client import TransactionDescription, TransactionListing, open_admin

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = ("CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                    "TransactionState", "TransactionTimeoutMs",
                    "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                    "TopicPartitions")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "transactions",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "The transactions of transactional producers (a producer with a\n"
            "transactional.id: trilog's, kafka-python's, librdkafka's, Java's), as their\n"
            "coordinators know them. Exactly one action:\n\n"
            "  --list      every transactional id the brokers coordinate, with its producer\n"
            "              id and state (ListTransactions to each broker); --duration-filter\n"
            "              MS keeps only the transactions open for longer than MS.\n"
            "  --describe  one --transactional-id at its coordinator: producer id and epoch,\n"
            "              state, timeout, when the open transaction began and for how long,\n"
            "              and the partitions it writes to (DescribeTransactions).\n\n"
            "States are Kafka's: Empty (no transaction open), Ongoing, PrepareCommit,\n"
            "PrepareAbort (ending: markers being written), CompleteCommit, CompleteAbort,\n"
            "PrepareEpochFence, Dead. A transaction Ongoing for long holds read_committed\n"
            "consumers back at its first offset until it ends or its timeout aborts it.\n"
            "Tables as kafka-transactions.sh prints them."
        ),
        epilog=(
            "examples:\n"
            "  trilog transactions --list\n"
            "  trilog transactions --list --duration-filter 60000\n"
            "  trilog transactions --describe --transactional-id orders-app-0"
        ),
    )
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", type=bootstrap_list,
                   help=f"broker(s) of the cluster (default {DEFAULT_BOOTSTRAP})")
    add_connection_args(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true",
                        help="list the transactional ids every broker coordinates")
    action.add_argument("--describe", action="store_true",
                        help="describe --transactional-id at its coordinator")
    p.add_argument("--transactional-id", metavar="ID",
                   help="with --describe: the transactional id")
    p.add_argument("--duration-filter", type=int, metavar="MS",
                   help="with --list: only transactions open for longer than MS "
                        "milliseconds (negative: all)")
    p.add_argument("--timeout-ms", type=int, default=30_000, metavar="MS",
                   help="how long to wait for each answer (default 30000)")
    p.set_defaults(run=run)


def run(args) -> int:
    return run_tool("trilog transactions", _main, args)


def _check(args) -> None:
    if args.describe and not args.transactional_id:
        raise UsageError("--describe needs --transactional-id ID")
    if args.list and args.transactional_id:
        raise UsageError("--transactional-id goes with --describe, not --list")
    if args.describe and args.duration_filter is not None:
        raise UsageError("--duration-filter goes with --list, not --describe")
    if args.timeout_ms <= 0:
        raise UsageError("--timeout-ms must be positive")


async def _main(args) -> int:
    _check(args)
    async with open_admin(args.bootstrap_server or DEFAULT_BOOTSTRAP,
                          request_timeout_s=args.timeout_ms / 1000,
                          **connection_kwargs(args)) as admin:
        if args.list:
            duration = args.duration_filter
            listed = await admin.list_transactions(
                duration_ms=None if duration is None or duration < 0 else duration)
            print_table(LIST_HEADERS, list_rows(listed))
            return 0
        (found,) = await admin.describe_transactions([args.transactional_id])
    if found.error is not None:
        print(f"trilog transactions: failed to describe transaction state of "
              f"transactional-id `{found.transactional_id}`: {found.error}", file=sys.stderr)
        return 1
    print_table(DESCRIBE_HEADERS, [describe_row(found, int(time.time() * 1000))])
    return 0


def list_rows(listed: list[TransactionListing]) -> list[tuple[str, ...]]:
    return [(t.transactional_id, str(t.coordinator), str(t.producer_id), t.state)
            for t in listed]


def describe_row(d: TransactionDescription, now_ms: int) -> tuple[str, ...]:
    start = d.start_time_ms
    return (str(d.coordinator), d.transactional_id, str(d.producer_id), str(d.producer_epoch),
            d.state, str(d.timeout_ms), "None" if start is None else str(start),
            "None" if start is None else str(max(now_ms - start, 0)),
            ",".join(f"{t}-{p}" for t, p in d.partitions))


def print_table(headers, rows) -> None:
    """Kafka's ``ToolsUtils.prettyPrintTable``: each column as wide as its widest cell,
    left-aligned, a tab after each."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    for row in [tuple(headers), *rows]:
        print("".join(cell.ljust(width) + "\t" for cell, width in zip(row, widths)))
