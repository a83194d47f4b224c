"""``trilog topics``: create, list, describe and delete topics (like ``kafka-topics.sh``)."""

from __future__ import annotations

import sys

import trio

from trilog._concurrency import unwrap_exception_group
from trilog.client import open_admin
from trilog.errors import TopicAlreadyExistsError, TrilogError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "topics",
        help="create, list, describe or delete topics",
        description="Manage topics through a broker (--bootstrap-server) or directly in "
        "ZooKeeper (--zookeeper). Exactly one action: --create, --list, --describe, --delete.",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                       help="a broker to talk to (default 127.0.0.1:9092)")
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                       help="work on ZooKeeper's /brokers/topics directly")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true", help="create --topic")
    action.add_argument("--list", action="store_true", help="list topic names")
    action.add_argument("--describe", action="store_true",
                        help="partitions and leaders of --topic (or of every topic)")
    action.add_argument("--delete", action="store_true", help="delete --topic")
    p.add_argument("--topic", help="the topic (for --create, --delete; optional for --describe)")
    p.add_argument("--partitions", type=int, default=-1,
                   help="partitions of a new topic (default: the broker's num.partitions)")
    p.add_argument("--replication-factor", type=int, default=-1,
                   help="replicas of a new topic (only 1 is supported)")
    p.add_argument("--if-not-exists", action="store_true",
                   help="with --create: no error if the topic exists")
    p.set_defaults(run=run)


def run(args) -> int:
    if (args.create or args.delete) and not args.topic:
        print("trilog topics: --topic is required with --create and --delete", file=sys.stderr)
        return 2
    if args.zookeeper is None and args.bootstrap_server is None:
        args.bootstrap_server = "127.0.0.1:9092"
    try:
        with unwrap_exception_group():
            return trio.run(_main, args)
    except (TrilogError, ValueError) as exc:
        print(f"trilog topics: {exc}", file=sys.stderr)
        return 1


async def _main(args) -> int:
    async with open_admin(args.bootstrap_server, zookeeper=args.zookeeper) as admin:
        if args.list:
            for name in await admin.list_topics():
                print(name)
        elif args.create:
            try:
                await admin.create_topic(args.topic, args.partitions, args.replication_factor)
            except TopicAlreadyExistsError:
                if not args.if_not_exists:
                    raise
            print(f"Created topic {args.topic}.")
        elif args.delete:
            await admin.delete_topic(args.topic)
            print(f"Deleted topic {args.topic}.")
        else:
            topics = await admin.describe_topics([args.topic] if args.topic else None)
            status = 0
            for t in topics:
                if t.error:
                    print(f"Topic: {t.name}\tError: {t.error}")
                    status = 1
                    continue
                internal = "\tInternal: true" if t.internal else ""
                print(f"Topic: {t.name}\tPartitionCount: {len(t.partitions)}{internal}")
                for p in t.partitions:
                    replicas = ",".join(str(r) for r in p.replicas)
                    print(f"\tTopic: {t.name}\tPartition: {p.partition}\tLeader: {p.leader}"
                          f"\tReplicas: {replicas}")
            return status
    return 0
