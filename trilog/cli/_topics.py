"""``trilog topics``: create, list, describe, alter and delete topics (like
``kafka-topics.sh``); elect leaders (``kafka-leader-election.sh``) and reassign partitions
(``kafka-reassign-partitions.sh``), in ``_reassign.py``."""

from __future__ import annotations

import argparse

from trilog.cli._common import (
    UsageError,
    add_connection_args,
    bootstrap_list,
    connection_kwargs,
    parse_config_pairs,
    run_tool,
)
from trilog.cli._reassign import elect_leaders, reassign
from trilog.client import Admin, TopicInfo, open_admin
from trilog.errors import TopicAlreadyExistsError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "topics",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Manage topics through a broker (--bootstrap-server) or directly in ZooKeeper\n"
            "(--zookeeper), like kafka-topics.sh. Exactly one action: --create, --list,\n"
            "--describe, --alter, --delete, --elect-leaders (brokers only), --reassign\n"
            "(ZooKeeper only). --describe shows each topic's settings that are not defaults\n"
            "on its first line (Configs:); `trilog configs` changes them."
        ),
        epilog=(
            "examples:\n"
            "  trilog topics --create --topic orders --partitions 3 \\\n"
            "      --config retention.ms=86400000 --config cleanup.policy=compact\n"
            "  trilog topics --describe --topic orders\n"
            "  trilog topics --alter --topic orders --partitions 6\n"
            "  trilog topics --list --exclude-internal\n"
            "  trilog topics --elect-leaders --topic orders --election-type preferred\n"
            "  trilog topics --zookeeper 127.0.0.1:2181 --reassign \\\n"
            "      --reassignment-json-file plan.json --execute   (then --verify)"
        ),
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", type=bootstrap_list,
                       help="a broker to talk to (default 127.0.0.1:9092)")
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                       help="work on ZooKeeper's /brokers/topics directly (no --config there)")
    add_connection_args(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true", help="create --topic")
    action.add_argument("--list", action="store_true", help="list topic names")
    action.add_argument("--describe", action="store_true",
                        help="partitions, leaders and non-default configs of --topic (or of "
                             "every topic)")
    action.add_argument("--alter", action="store_true",
                        help="add partitions to --topic: --partitions N (the new total)")
    action.add_argument("--delete", action="store_true", help="delete --topic")
    action.add_argument("--elect-leaders", action="store_true",
                        help="leader elections by the controller (ElectLeaders) for "
                             "--topic's partitions (or --partition), or every partition")
    action.add_argument("--reassign", action="store_true",
                        help="move partitions to new replicas: --reassignment-json-file "
                             "with --execute or --verify (needs --zookeeper)")
    _add_options(p)
    p.set_defaults(run=run)


def _add_options(p: argparse.ArgumentParser) -> None:
    """The options the actions take (each says which)."""
    p.add_argument("--topic", help="the topic (for --create, --alter, --delete; optional for "
                                   "--describe)")
    p.add_argument("--partitions", type=int, default=-1, metavar="N",
                   help="with --create: partitions of the new topic (default: the broker's "
                        "num.partitions); with --alter: the topic's new number of partitions "
                        "(only ever more)")
    p.add_argument("--replication-factor", type=int, default=-1, metavar="N",
                   help="replicas of each partition of a new topic (default: the "
                        "broker's default.replication.factor; at most the live brokers)")
    p.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                   help="with --create: a topic config override with Kafka's name, e.g. "
                        "retention.ms=86400000 (repeatable; a value with commas goes in "
                        "brackets: cleanup.policy=[compact,delete])")
    p.add_argument("--if-not-exists", action="store_true",
                   help="with --create: no error if the topic exists")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="with --describe: only partitions with fewer in-sync replicas than "
                        "replicas")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="with --describe: only partitions without a leader")
    p.add_argument("--partition", type=int, metavar="N",
                   help="with --elect-leaders and --topic: only this partition")
    p.add_argument("--election-type", choices=["preferred", "unclean"], default="preferred",
                   help="with --elect-leaders: preferred (the first replica leads, if in "
                        "sync; default) or unclean (a partition without a live leader goes "
                        "to any live replica: records it lacks are lost)")
    p.add_argument("--reassignment-json-file", metavar="FILE",
                   help='with --reassign: {"version":1,"partitions":[{"topic":"t",'
                        '"partition":0,"replicas":[2,3]},...]} (the first replica is the '
                        "preferred leader)")
    p.add_argument("--execute", action="store_true",
                   help="with --reassign: start the reassignment (refused while one is in "
                        "progress); prints the current assignment, to roll back with")
    p.add_argument("--verify", action="store_true",
                   help="with --reassign: whether each partition's reassignment is complete")
    p.add_argument("--exclude-internal", action="store_true",
                   help="with --list and --describe: leave out internal topics "
                        "(__consumer_offsets)")


def run(args) -> int:
    return run_tool("trilog topics", _main, args)


def _check(args) -> dict[str, str]:
    if (args.create or args.delete or args.alter) and not args.topic:
        raise UsageError("--topic is required with --create, --alter and --delete")
    if args.config and not args.create:
        raise UsageError("--config goes with --create; change the configs of an existing "
                         "topic with `trilog configs --alter --entity-type topics`")
    if args.alter and args.partitions < 1:
        raise UsageError("--alter needs --partitions N: the topic's new number of partitions")
    if args.exclude_internal and not (args.list or args.describe):
        raise UsageError("--exclude-internal goes with --list and --describe")
    if args.partition is not None and not (args.elect_leaders and args.topic):
        raise UsageError("--partition goes with --elect-leaders --topic T")
    if args.elect_leaders and args.zookeeper is not None:
        raise UsageError("--elect-leaders asks the controller: use --bootstrap-server")
    if args.reassign:
        if args.zookeeper is None:
            raise UsageError("--reassign writes ZooKeeper's /admin/reassign_partitions: use "
                             "--zookeeper")
        if not args.reassignment_json_file:
            raise UsageError("--reassign needs --reassignment-json-file")
        if args.execute == args.verify:
            raise UsageError("--reassign needs one of --execute and --verify")
    elif args.reassignment_json_file or args.execute or args.verify:
        raise UsageError("--reassignment-json-file, --execute and --verify go with --reassign")
    configs = parse_config_pairs(args.config, "--config")
    if configs and args.zookeeper is not None:
        raise UsageError("--config needs the brokers (they validate configs): use "
                         "--bootstrap-server")
    return configs


async def _main(args) -> int:
    configs = _check(args)
    async with open_admin(args.bootstrap_server or (None if args.zookeeper else
                                                    "127.0.0.1:9092"),
                          zookeeper=args.zookeeper, **connection_kwargs(args)) as admin:
        if args.list:
            for t in await admin.describe_topics():
                if t.error is None and not (args.exclude_internal and t.internal):
                    print(t.name)
        elif args.create:
            try:
                await admin.create_topic(args.topic, args.partitions, args.replication_factor,
                                         configs=configs or None)
            except TopicAlreadyExistsError:
                if not args.if_not_exists:
                    raise
                print(f"Topic {args.topic} already exists; not created (--if-not-exists).")
            else:
                print(f"Created topic {args.topic}.")
        elif args.alter:
            await admin.create_partitions(args.topic, args.partitions)
            print(f"Topic {args.topic} now has {args.partitions} partitions.")
        elif args.delete:
            await admin.delete_topic(args.topic)
            print(f"Deleted topic {args.topic}.")
        elif args.elect_leaders:
            return await elect_leaders(admin, args)
        elif args.reassign:
            return await reassign(admin, args)
        else:
            return await _describe(admin, args)
    return 0


async def _describe(admin: Admin, args) -> int:
    topics = [t for t in await admin.describe_topics([args.topic] if args.topic else None)
              if not (args.exclude_internal and t.internal)]
    configs: dict[str, dict[str, str | None]] = {}
    known = [t.name for t in topics if t.error is None]
    if known and args.zookeeper is None:  # the ZooKeeper admin cannot describe configs
        configs = {r.name: r.overrides for r in await admin.describe_configs(topics=known)
                   if r.error is None}
    status = 0
    for t in topics:
        if t.error:
            print(f"Topic: {t.name}\tError: {t.error}")
            status = 1
            continue
        partitions = [p for p in t.partitions if _wanted(p, args)]
        if (args.under_replicated_partitions or args.unavailable_partitions) and not partitions:
            continue
        print(_topic_line(t, configs.get(t.name)))
        for p in partitions:
            replicas = ",".join(str(r) for r in p.replicas)
            isr = ",".join(str(r) for r in p.isr)
            print(f"\tTopic: {t.name}\tPartition: {p.partition}\tLeader: {p.leader}"
                  f"\tReplicas: {replicas}\tIsr: {isr}")
    return status


def _wanted(p, args) -> bool:
    """``--under-replicated-partitions``: fewer in sync than assigned;
    ``--unavailable-partitions``: no leader.  Without either, every partition."""
    if args.under_replicated_partitions and len(p.isr) < len(p.replicas):
        return True
    if args.unavailable_partitions and p.leader < 0:
        return True
    return not (args.under_replicated_partitions or args.unavailable_partitions)


def _topic_line(t: TopicInfo, overrides: dict[str, str | None] | None) -> str:
    line = f"Topic: {t.name}\tPartitionCount: {len(t.partitions)}"
    if t.internal:
        line += "\tInternal: true"
    if overrides is not None:
        line += "\tConfigs: " + ",".join(f"{k}={'' if v is None else v}"
                                         for k, v in sorted(overrides.items()))
    return line.rstrip()
