"""``trilog groups``: list and describe consumer groups, reset their offsets (like
``kafka-consumer-groups.sh``).  The work is ``trilog.client.open_group_admin``; this module
parses options and prints tables."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta

from trilog.cli._common import DEFAULT_BOOTSTRAP, UsageError, run_tool
from trilog.client import EARLIEST, LATEST, GroupDescription, ResetPlan, open_group_admin

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "groups",
        help="list and describe consumer groups, reset their offsets",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Consumer groups coordinated by brokers (--bootstrap-server: Kafka's group\n"
            "protocol, e.g. kafka-python's KafkaConsumer(group_id=...)) or by ZooKeeper\n"
            "(--zookeeper: trilog's ZooKeeper consumer connector, offsets under\n"
            "/consumers/<group>). Exactly one action: --list, --describe, --reset-offsets.\n"
            "Like kafka-consumer-groups.sh."
        ),
        epilog=(
            "examples:\n"
            "  trilog groups --list\n"
            "  trilog groups --describe --group readers\n"
            "  trilog groups --reset-offsets --group readers --topic events --to-earliest\n"
            "  trilog groups --reset-offsets --group readers --topic events --partition 0 \\\n"
            "      --to-datetime 2024-05-01T12:00:00Z --execute\n"
            "  trilog groups --zookeeper 127.0.0.1:2181 --describe --group connector-group\n\n"
            "--reset-offsets only prints the new offsets unless --execute is given, and\n"
            "--execute is refused while the group has active members: stop them first."
        ),
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                       help=f"broker(s) of the cluster (default {DEFAULT_BOOTSTRAP}): groups "
                            "that brokers coordinate")
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                       help="groups of the ZooKeeper consumer connector (/consumers/...)")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list group names")
    action.add_argument("--describe", action="store_true",
                        help="state, members, and each partition's offset, log end and lag")
    action.add_argument("--reset-offsets", action="store_true",
                        help="set the committed offsets of --group on --topic")
    p.add_argument("--group", action="append", metavar="GROUP",
                   help="the group (repeat it to describe several)")
    p.add_argument("--all-groups", action="store_true", help="with --describe: every group")
    p.add_argument("--topic", help="with --reset-offsets: the topic whose offsets to reset")
    p.add_argument("--partition", type=int, action="append", metavar="N",
                   help="with --reset-offsets: only partition N (repeatable; default: all)")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--to-earliest", action="store_true",
                        help="reset to the first offset of the log")
    target.add_argument("--to-latest", action="store_true",
                        help="reset to the log end (skip everything not yet consumed)")
    target.add_argument("--to-datetime", metavar="ISO8601",
                        help="reset to the first record at or after this time, e.g. "
                             "2024-05-01T12:00:00Z (no zone: local time)")
    target.add_argument("--to-offset", type=int, metavar="N",
                        help="reset to offset N (kept within the log's start..end)")
    run_mode = p.add_mutually_exclusive_group()
    run_mode.add_argument("--execute", action="store_true",
                          help="write the new offsets (default: only print them)")
    run_mode.add_argument("--dry-run", action="store_true",
                          help="only print the new offsets (the default)")
    p.add_argument("--timeout-ms", type=int, default=30_000, metavar="MS",
                   help="how long to wait to connect and for each answer (default 30000)")
    p.set_defaults(run=run)


def run(args) -> int:
    return run_tool("trilog groups", _main, args)


def _check(args) -> None:
    resetting = args.reset_offsets
    targets = [args.to_earliest, args.to_latest, args.to_datetime is not None,
               args.to_offset is not None]
    if args.describe and not (args.group or args.all_groups):
        raise UsageError("--describe needs --group GROUP or --all-groups")
    if args.all_groups and not args.describe:
        raise UsageError("--all-groups goes with --describe only")
    if args.list and args.group:
        raise UsageError("--list takes no --group")
    if not resetting and (any(targets) or args.execute or args.dry_run or args.topic
                          or args.partition):
        raise UsageError("--topic, --partition, --to-*, --execute and --dry-run go with "
                         "--reset-offsets only")
    if resetting:
        if not args.group or len(args.group) != 1:
            raise UsageError("--reset-offsets needs exactly one --group")
        if not args.topic:
            raise UsageError("--reset-offsets needs --topic")
        if not any(targets):
            raise UsageError("--reset-offsets needs one of --to-earliest, --to-latest, "
                             "--to-datetime, --to-offset")
        if args.to_offset is not None and args.to_offset < 0:
            raise UsageError("--to-offset must be 0 or more")
    if args.timeout_ms <= 0:
        raise UsageError("--timeout-ms must be positive")


def parse_datetime_ms(text: str) -> int:
    """ISO 8601 -> ms since the epoch; a time without a zone is local time (as Kafka)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"--to-datetime {text!r} is not an ISO 8601 date-time; write e.g. "
                         "2024-05-01T12:00:00, 2024-05-01T12:00:00.000+02:00 or "
                         "2024-05-01T10:00:00Z") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # the local zone
    return (moment - _EPOCH) // timedelta(milliseconds=1)


async def _main(args) -> int:
    _check(args)
    timestamp_ms = None
    if args.to_datetime is not None:
        timestamp_ms = parse_datetime_ms(args.to_datetime)
    elif args.to_earliest:
        timestamp_ms = EARLIEST
    elif args.to_latest:
        timestamp_ms = LATEST
    where = ({"zookeeper": args.zookeeper} if args.zookeeper is not None else
             {"bootstrap_servers": args.bootstrap_server or DEFAULT_BOOTSTRAP})
    async with open_group_admin(**where, request_timeout_ms=args.timeout_ms,
                                connect_timeout_ms=args.timeout_ms) as admin:
        if args.list:
            for name in await admin.list_groups():
                print(name)
        elif args.describe:
            groups = await admin.list_groups() if args.all_groups else args.group
            for i, group in enumerate(groups):
                if i:
                    print()
                _print_description(await admin.describe_group(group))
        else:
            plan = await admin.reset_offsets(args.group[0], args.topic, args.partition,
                                             offset=args.to_offset, timestamp_ms=timestamp_ms,
                                             execute=args.execute)
            _print_plan(plan, args.to_offset)
    return 0


def _print_description(d: GroupDescription) -> None:
    where = d.storage
    if d.coordinator is not None:
        c = d.coordinator
        where += f", coordinator {c.node_id} at {c.host}:{c.port}"
    protocol = "/".join(x for x in (d.protocol_type, d.protocol) if x)
    print(f"Group {d.group_id!r} ({where}): state {d.state}"
          + (f", protocol {protocol}" if protocol else "")
          + f", {len(d.members)} member(s)")
    if not d.members:
        print(f"Group {d.group_id!r} has no active members.")
    print()
    rows = [(d.group_id, p.topic, p.partition, p.current_offset, p.log_end_offset, p.lag,
             p.consumer_id, p.host, p.client_id) for p in d.partitions]
    _print_table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "CONSUMER-ID", "HOST", "CLIENT-ID"), rows)
    if d.members:
        print()
        _print_table(("CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"), [
            (m.member_id, m.host, m.client_id, len(m.assignment), _assignment(m.assignment))
            for m in d.members])


def _assignment(tps) -> str:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, []).append(partition)
    return " ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in sorted(by_topic.items()))


def _print_plan(plan: ResetPlan, requested: int | None) -> None:
    _print_table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"), [
        (plan.group_id, r.topic, r.partition, r.current_offset, r.new_offset)
        for r in plan.resets])
    if requested is not None:
        for r in plan.resets:
            if r.new_offset != requested:
                side = "below the log start" if requested < r.log_start_offset else \
                    "past the log end"
                print(f"trilog groups: {r.topic}-{r.partition}: offset {requested} is {side}; "
                      f"using {r.new_offset}", file=sys.stderr)
    if plan.executed:
        print(f"Reset {len(plan.resets)} offset(s) of group {plan.group_id!r}.")
        return
    if plan.active:
        print(f"trilog groups: group {plan.group_id!r} has {plan.active_members} active "
              f"member(s) (state {plan.state}): --execute is refused until they stop",
              file=sys.stderr)
    print("trilog groups: dry run, nothing written; add --execute to write these offsets",
          file=sys.stderr)


def _print_table(header, rows) -> None:
    cells = [list(header)] + [["-" if v is None or v == "" else str(v) for v in row]
                              for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
