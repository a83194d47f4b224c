"""``trilog configs``: describe and change topic and broker configs, and client quotas
(``_quota_configs``), like ``kafka-configs.sh``.  The work is ``Admin.describe_configs`` and ``Admin.alter_configs``
(DescribeConfigs and IncrementalAlterConfigs); this module parses options and prints."""

from __future__ import annotations

import argparse
import sys

from trilog.cli._common import (
    DEFAULT_BOOTSTRAP,
    UsageError,
    add_connection_args,
    bootstrap_list,
    connection_kwargs,
    parse_config_pairs,
    run_tool,
    split_config_list,
)
from trilog.cli._quota_configs import EntityPart, quota_entity
from trilog.cli._quota_configs import alter as alter_quotas
from trilog.cli._quota_configs import describe as describe_quotas
from trilog.client import ConfigEntry, ConfigResource, open_admin

_KINDS = {"topics": "topic", "brokers": "broker"}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "configs",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Show or change the settings of a topic or a broker, through the brokers, like\n"
            "kafka-configs.sh. Topic settings are Kafka's topic-level names (retention.ms,\n"
            "cleanup.policy, segment.bytes, ...); a change reaches every broker without a\n"
            "restart. Broker settings can be described but not altered here: they are\n"
            "static (server.properties or `trilog broker --override`).\n\n"
            "--describe prints the settings that are set on the entity itself (a topic's\n"
            "overrides); --all prints every setting with its value and where it comes from\n"
            "(DYNAMIC_TOPIC_CONFIG: the topic's override, STATIC_BROKER_CONFIG: the\n"
            "broker's properties, DEFAULT_CONFIG: nobody set it). Without --entity-name,\n"
            "every topic (or broker) is described.\n\n"
            "Client quotas (users, clients, or a user's client id; --entity-default for\n"
            "<default>): producer_byte_rate and consumer_byte_rate in bytes per second,\n"
            "request_percentage in percent of a request handler's time. A client over its\n"
            "quota is throttled (throttle_time_ms in its answers). See docs/operations.md."
        ),
        epilog=(
            "examples:\n"
            "  trilog configs --entity-type topics --entity-name orders --describe\n"
            "  trilog configs --entity-type topics --entity-name orders --alter \\\n"
            "      --add-config retention.ms=86400000,cleanup.policy=[compact,delete]\n"
            "  trilog configs --entity-type topics --entity-name orders --alter \\\n"
            "      --delete-config retention.ms\n"
            "  trilog configs --entity-type brokers --entity-name 0 --describe --all\n"
            "  trilog configs --entity-type clients --entity-name app --alter \\\n"
            "      --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152\n"
            "  trilog configs --entity-type users --entity-name alice --entity-type clients \\\n"
            "      --entity-default --alter --add-config request_percentage=50\n"
            "  trilog configs --entity-type clients --describe"
        ),
    )
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", type=bootstrap_list,
                   help=f"broker(s) of the cluster (default {DEFAULT_BOOTSTRAP})")
    add_connection_args(p)
    p.add_argument("--entity-type", choices=sorted(_KINDS) + ["clients", "users"],
                   action=EntityPart, const="type",
                   help="what to describe or alter: topics, brokers, or the client quotas of "
                        "users or clients (client ids); users then clients for a user's "
                        "quotas for one client id")
    p.add_argument("--entity-name", metavar="NAME", action=EntityPart, const="name",
                   help="the topic's name, the broker's id, the user or the client id "
                        "(optional with --describe)")
    p.add_argument("--entity-default", nargs=0, action=EntityPart, const="default",
                   help="the <default> user or client id (quotas of those with none of "
                        "their own)")
    p.add_argument("--user", metavar="NAME",
                   help="short for --entity-type users --entity-name NAME")
    p.add_argument("--client", metavar="ID",
                   help="short for --entity-type clients --entity-name ID")
    p.add_argument("--user-defaults", action="store_true",
                   help="short for --entity-type users --entity-default")
    p.add_argument("--client-defaults", action="store_true",
                   help="short for --entity-type clients --entity-default")
    p.add_argument("--topic", metavar="TOPIC",
                   help="short for --entity-type topics --entity-name TOPIC")
    p.add_argument("--broker", metavar="ID",
                   help="short for --entity-type brokers --entity-name ID")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="print the settings")
    action.add_argument("--alter", action="store_true",
                        help="change the settings given by --add-config and --delete-config")
    p.add_argument("--add-config", action="append", default=[], metavar="K=V[,K=V...]",
                   help="with --alter: set these (repeatable; a value with commas goes in "
                        "brackets: cleanup.policy=[compact,delete])")
    p.add_argument("--delete-config", action="append", default=[], metavar="K[,K...]",
                   help="with --alter: remove these overrides (back to the broker's default)")
    p.add_argument("--all", action="store_true",
                   help="with --describe: every setting, defaults included")
    p.set_defaults(run=run, entity_type=None, entity_name=None, entity_parts=[])


def run(args) -> int:
    return run_tool("trilog configs", _main, args)


def _entity(args) -> tuple[str, str | None]:
    """``(kind, name)`` from --entity-type/--entity-name or the --topic/--broker shortcuts."""
    given = [x for x in (args.topic, args.broker) if x is not None]
    if len(given) > 1 or (given and (args.entity_type or args.entity_name is not None)):
        raise UsageError("give either --entity-type and --entity-name, or --topic, or --broker")
    if args.topic is not None:
        return "topic", args.topic
    if args.broker is not None:
        return "broker", args.broker
    if args.entity_type is None:
        raise UsageError("--entity-type topics|brokers is required")
    return _KINDS[args.entity_type], args.entity_name


def _changes(args) -> dict[str, str | None]:
    changes: dict[str, str | None] = dict(parse_config_pairs(args.add_config, "--add-config"))
    for item in args.delete_config:
        for name in split_config_list(item, "--delete-config"):
            if name in changes:
                raise UsageError(f"{name} is both added and deleted")
            changes[name] = None
    return changes


async def _main(args) -> int:
    quota_parts = quota_entity(args)
    if quota_parts is not None:
        return await _quotas(args, quota_parts)
    kind, name = _entity(args)
    if name == "":
        raise UsageError("--entity-name must not be empty")
    if args.alter:
        if args.all:
            raise UsageError("--all goes with --describe")
        if name is None:
            raise UsageError("--alter needs --entity-name")
        changes = _changes(args)
        if not changes:
            raise UsageError("--alter needs --add-config or --delete-config")
    elif args.add_config or args.delete_config:
        raise UsageError("--add-config and --delete-config go with --alter")
    if kind == "broker" and name is not None and not name.lstrip("-").isdigit():
        raise UsageError(f"a broker is named by its id, a number, not {name!r}")
    async with open_admin(args.bootstrap_server or DEFAULT_BOOTSTRAP,
                          client_id="trilog-configs", **connection_kwargs(args)) as admin:
        if args.alter:
            assert name is not None
            if kind == "topic":
                await admin.alter_configs(changes, topic=name)
            else:
                await admin.alter_configs(changes, broker=name)
            print(f"Completed updating config for {kind} {name}.")
            return 0
        if name is not None:
            names = [name]
        elif kind == "topic":
            names = await admin.list_topics()
        else:
            names = [str(b.node_id) for b in sorted(await admin.brokers(),
                                                     key=lambda b: b.node_id)]
        resources = (await admin.describe_configs(topics=names) if kind == "topic"
                     else await admin.describe_configs(brokers=names))
    status = 0
    for r in resources:
        if r.error is not None:
            print(f"trilog configs: {_error_text(r)}", file=sys.stderr)
            status = 1
            continue
        _print_resource(r, every=args.all)
    return status


async def _quotas(args, parts: list) -> int:
    """The client quotas of a user, a client id, or both (``_quota_configs``)."""
    if args.all:
        raise UsageError("--all is for topics and brokers")
    changes = _changes(args) if args.alter else {}
    if args.alter and not changes:
        raise UsageError("--alter needs --add-config or --delete-config")
    if not args.alter and (args.add_config or args.delete_config):
        raise UsageError("--add-config and --delete-config go with --alter")
    async with open_admin(args.bootstrap_server or DEFAULT_BOOTSTRAP,
                          client_id="trilog-configs", **connection_kwargs(args)) as admin:
        if args.alter:
            return await alter_quotas(admin, parts, changes)
        return await describe_quotas(admin, parts)


def _error_text(r: ConfigResource) -> str:
    text = r.error_message or f"cannot describe {r.kind} {r.name!r}"
    return text if (r.error or "") in text else f"{text} [{r.error}]"


def _print_resource(r: ConfigResource, *, every: bool) -> None:
    if every:
        print(f"All configs for {r.kind} {r.name} are:")
        shown = list(r.entries)
    else:
        # Kafka's "dynamic" configs: those set on the entity itself, not in a file.
        print(f"Dynamic configs for {r.kind} {r.name} are:")
        shown = [e for e in r.entries if e.source.startswith("DYNAMIC_")]
        if r.kind == "broker" and not shown:
            print(f"trilog configs: broker {r.name} has only static settings "
                  "(server.properties); --all shows them", file=sys.stderr)
    for e in shown:
        print("  " + _entry_text(e))


def _entry_text(e: ConfigEntry) -> str:
    value = "null" if e.value is None else e.value
    if e.sensitive:
        value = "[hidden]"
    flags = " read-only=true" if e.read_only else ""
    return f"{e.name}={value} sensitive={str(e.sensitive).lower()} source={e.source}{flags}"

