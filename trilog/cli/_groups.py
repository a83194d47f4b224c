"""``trilog groups``: list, describe and delete consumer groups, reset their offsets (like
``kafka-consumer-groups.sh``).  The work is ``trilog.client.open_group_admin``; this module
parses options and prints tables."""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import UTC, datetime, timedelta

from trilog.cli._common import (
    DEFAULT_BOOTSTRAP,
    UsageError,
    add_connection_args,
    bootstrap_list,
    connection_kwargs,
    run_tool,
)
from trilog.client import EARLIEST, LATEST, GroupDescription, ResetPlan, open_group_admin

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "groups",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Consumer groups coordinated by brokers (--bootstrap-server: Kafka's group\n"
            "protocol, e.g. kafka-python's KafkaConsumer(group_id=...)) or by ZooKeeper\n"
            "(--zookeeper: trilog's ZooKeeper consumer connector, offsets under\n"
            "/consumers/<group>). Exactly one action: --list, --describe, --reset-offsets,\n"
            "--delete.\n"
            "Like kafka-consumer-groups.sh."
        ),
        epilog=(
            "examples:\n"
            "  trilog groups --list\n"
            "  trilog groups --describe --group readers\n"
            "  trilog groups --reset-offsets --group readers --topic events --to-earliest\n"
            "  trilog groups --reset-offsets --group readers --topic events --partition 0 \\\n"
            "      --to-datetime 2024-05-01T12:00:00Z --execute\n"
            "  trilog groups --reset-offsets --group readers --all-topics --shift-by -10 "
            "--execute\n"
            "  trilog groups --reset-offsets --group readers --topic events --by-duration PT1H\n"
            "  trilog groups --delete --group readers --group old-readers\n"
            "  trilog groups --zookeeper 127.0.0.1:2181 --describe --group connector-group\n\n"
            "--reset-offsets only prints the new offsets unless --execute is given, and\n"
            "--execute is refused while the group has active members: stop them first.\n"
            "--delete removes a group and its committed offsets; also refused while it has\n"
            "active members."
        ),
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", type=bootstrap_list,
                       help=f"broker(s) of the cluster (default {DEFAULT_BOOTSTRAP}): groups "
                            "that brokers coordinate")
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                       help="groups of the ZooKeeper consumer connector (/consumers/...)")
    add_connection_args(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list group names")
    action.add_argument("--describe", action="store_true",
                        help="state, members, and each partition's offset, log end and lag")
    action.add_argument("--reset-offsets", action="store_true",
                        help="set the committed offsets of --group on --topic (or on "
                             "--all-topics)")
    action.add_argument("--delete", action="store_true",
                        help="delete --group (repeatable) with its committed offsets")
    p.add_argument("--group", action="append", metavar="GROUP",
                   help="the group (repeat it to describe or delete several)")
    p.add_argument("--all-groups", action="store_true", help="with --describe: every group")
    p.add_argument("--topic", help="with --reset-offsets: the topic whose offsets to reset")
    p.add_argument("--all-topics", action="store_true",
                   help="with --reset-offsets: every topic the group has committed offsets "
                        "for")
    p.add_argument("--partition", type=int, action="append", metavar="N",
                   help="with --reset-offsets: only partition N (repeatable; default: all)")
    _add_reset_args(p)
    p.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"),
                   default="read_uncommitted",
                   help="with --describe: whose LOG-END-OFFSET and LAG (read_committed: up "
                        "to the last stable offset, what a read_committed consumer can read "
                        "past no open transaction; default read_uncommitted, as Kafka's tool)")
    p.add_argument("--timeout-ms", type=int, default=30_000, metavar="MS",
                   help="how long to wait to connect and for each answer (default 30000)")
    p.set_defaults(run=run)


def _add_reset_args(p: argparse.ArgumentParser) -> None:
    """``--reset-offsets``' target (exactly one) and run mode."""
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
    target.add_argument("--shift-by", type=int, metavar="N",
                        help="move each committed offset by N (negative: back), kept within "
                             "the log's start..end")
    target.add_argument("--by-duration", metavar="DURATION",
                        help="reset to the first record at or after now minus DURATION: "
                             "ISO 8601 as Kafka (PT1H30M, P1DT12H) or short (1h30m, 2d, 45s)")
    run_mode = p.add_mutually_exclusive_group()
    run_mode.add_argument("--execute", action="store_true",
                          help="write the new offsets (default: only print them)")
    run_mode.add_argument("--dry-run", action="store_true",
                          help="only print the new offsets (the default)")


def run(args) -> int:
    return run_tool("trilog groups", _main, args)


def _check(args) -> None:
    resetting = args.reset_offsets
    targets = [args.to_earliest, args.to_latest, args.to_datetime is not None,
               args.to_offset is not None, args.shift_by is not None,
               args.by_duration is not None]
    if args.describe and not (args.group or args.all_groups):
        raise UsageError("--describe needs --group GROUP or --all-groups")
    if args.all_groups and not args.describe:
        raise UsageError("--all-groups goes with --describe only")
    if args.list and args.group:
        raise UsageError("--list takes no --group")
    if not resetting and (any(targets) or args.execute or args.dry_run or args.topic
                          or args.partition or args.all_topics):
        raise UsageError("--topic, --all-topics, --partition, --to-*, --shift-by, "
                         "--by-duration, --execute and --dry-run go with --reset-offsets only")
    if args.delete and not args.group:
        raise UsageError("--delete needs --group GROUP (repeatable)")
    if resetting:
        if not args.group or len(args.group) != 1:
            raise UsageError("--reset-offsets needs exactly one --group")
        if bool(args.topic) == args.all_topics:
            raise UsageError("--reset-offsets needs --topic TOPIC or --all-topics")
        if args.all_topics and args.partition:
            raise UsageError("--partition goes with --topic, not --all-topics")
        if not any(targets):
            raise UsageError("--reset-offsets needs one of --to-earliest, --to-latest, "
                             "--to-datetime, --to-offset, --shift-by, --by-duration")
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


_ISO_DURATION = re.compile(
    r"P(?:(?P<d>\d+(?:\.\d+)?)D)?(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?"
    r"(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?", re.IGNORECASE)
_SHORT_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|d|h|m|s)")
_UNIT_MS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000, "ms": 1}


def parse_duration_ms(text: str) -> int:
    """``--by-duration``: Kafka's ISO 8601 duration (``PnDTnHnMnS``: ``PT1H30M``, ``P2D``)
    or the short form ``1h30m``, ``2d``, ``90s``, ``500ms`` -> milliseconds."""
    t = text.strip()
    iso = _ISO_DURATION.fullmatch(t)
    if iso and any(iso.groupdict().values()) and not t.upper().endswith("T"):
        return round(sum(float(v) * _UNIT_MS[k.lower()]
                         for k, v in iso.groupdict().items() if v))
    low = t.lower()
    if low and _SHORT_PART.sub("", low) == "":
        return round(sum(float(n) * _UNIT_MS[u] for n, u in _SHORT_PART.findall(low)))
    raise UsageError(f"--by-duration {text!r} is not a duration; write e.g. PT1H30M, P1DT12H "
                     "(ISO 8601, as Kafka) or 1h30m, 2d, 45s")


async def _main(args) -> int:
    _check(args)
    timestamp_ms = None
    if args.by_duration is not None:
        timestamp_ms = max(int(time.time() * 1000) - parse_duration_ms(args.by_duration), 0)
    elif args.to_datetime is not None:
        timestamp_ms = parse_datetime_ms(args.to_datetime)
    elif args.to_earliest:
        timestamp_ms = EARLIEST
    elif args.to_latest:
        timestamp_ms = LATEST
    where = ({"zookeeper": args.zookeeper} if args.zookeeper is not None else
             {"bootstrap_servers": args.bootstrap_server or DEFAULT_BOOTSTRAP})
    async with open_group_admin(**where, request_timeout_ms=args.timeout_ms,
                                connect_timeout_ms=args.timeout_ms,
                                isolation_level=args.isolation_level,
                                **connection_kwargs(args)) as admin:
        if args.list:
            for name in await admin.list_groups():
                print(name)
        elif args.describe:
            groups = await admin.list_groups() if args.all_groups else args.group
            for i, group in enumerate(groups):
                if i:
                    print()
                _print_description(await admin.describe_group(group))
        elif args.delete:
            return _print_deleted(await admin.delete_groups(args.group))
        else:
            plan = await admin.reset_offsets(args.group[0], args.topic, args.partition,
                                             offset=args.to_offset, timestamp_ms=timestamp_ms,
                                             shift_by=args.shift_by, execute=args.execute)
            _print_plan(plan)
    return 0


def _print_deleted(results: dict[str, str | None]) -> int:
    """Kafka's answer to --delete; status 1 if any group could not be deleted."""
    done = [g for g, error in results.items() if error is None]
    failed = {g: error for g, error in results.items() if error is not None}
    names = ", ".join(f"'{g}'" for g in done)
    if not failed:
        print(f"Deletion of requested consumer groups ({names}) was successful.")
        return 0
    print("Deletion of some consumer groups failed:")
    for g, error in failed.items():
        print(f"* Group '{g}' could not be deleted due to: {error}")
    if done:
        print(f"These consumer groups were deleted successfully: {names}")
    return 1


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
        _print_table(("CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                      "ASSIGNMENT"), [
            (m.member_id, m.group_instance_id, m.host, m.client_id, len(m.assignment),
             _assignment(m.assignment))
            for m in d.members])


def _assignment(tps) -> str:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, []).append(partition)
    return " ".join(f"{t}:{','.join(map(str, ps))}" for t, ps in sorted(by_topic.items()))


def _print_plan(plan: ResetPlan) -> None:
    _print_table(("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"), [
        (plan.group_id, r.topic, r.partition, r.current_offset, r.new_offset)
        for r in plan.resets])
    if not plan.resets:
        print(f"trilog groups: group {plan.group_id!r} has no committed offsets to reset",
              file=sys.stderr)
    for r in plan.resets:
        if r.clamped and r.requested_offset is not None:
            side = "below the log start" if r.requested_offset < r.log_start_offset else \
                "past the log end"
            print(f"trilog groups: {r.topic}-{r.partition}: offset {r.requested_offset} is "
                  f"{side}; using {r.new_offset}", file=sys.stderr)
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
