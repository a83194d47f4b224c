"""``trilog acls``: add, remove and list ACLs through the brokers (like ``kafka-acls.sh``).
The work is ``Admin.create_acls``, ``describe_acls`` and ``delete_acls``.

As kafka-acls does, ``--add`` and ``--remove`` print the ACLs they changed under "Adding
(Removing) ACLs for resource", then each resource's whole list as it is now under "Current
ACLs for resource" (read back from the brokers), and ``--list`` prints the lists alone."""

from __future__ import annotations

import argparse
from itertools import product

from trilog.cli._common import (
    DEFAULT_BOOTSTRAP,
    UsageError,
    add_connection_args,
    bootstrap_list,
    connection_kwargs,
    run_tool,
)
from trilog.client import open_admin
from trilog.protocol import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

_OPERATIONS = [op.title for op in AclOperation if op.value > 1]


def add_parser(sub) -> None:
    p = sub.add_parser(
        "acls",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Manage the ACLs of a cluster whose brokers run an authorizer\n"
            "(authorizer.class.name=kafka.security.authorizer.AclAuthorizer), like\n"
            "kafka-acls.sh. An ACL allows or denies a principal (User:alice, User:* for\n"
            "everyone) an operation on a resource: a topic, a group, the cluster or a\n"
            "transactional id, named literally or by prefix (--resource-pattern-type\n"
            "prefixed: logs. covers logs.app). A Deny wins over any Allow; Read, Write,\n"
            "Delete and Alter imply Describe. Changing ACLs needs Alter on the cluster\n"
            "(or a super user), listing them Describe."
        ),
        epilog=(
            "examples:\n"
            "  trilog acls --add --allow-principal User:alice --operation Write --topic orders\n"
            "  trilog acls --add --allow-principal User:bob --operation Read --group billing\n"
            "  trilog acls --add --allow-principal User:ops --operation All \\\n"
            "      --topic logs. --resource-pattern-type prefixed\n"
            "  trilog acls --list --topic orders\n"
            "  trilog acls --remove --allow-principal User:alice --operation Write --topic orders"
        ),
    )
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", type=bootstrap_list,
                   help=f"broker(s) of the cluster (default {DEFAULT_BOOTSTRAP})")
    add_connection_args(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add the ACLs described")
    action.add_argument("--remove", action="store_true",
                        help="remove the ACLs that match (every option left out matches all)")
    action.add_argument("--list", action="store_true",
                        help="list the ACLs (of the resources given, else all)")
    p.add_argument("--topic", action="append", default=[], metavar="NAME",
                   help="a topic ('*': every topic)")
    p.add_argument("--group", action="append", default=[], metavar="NAME",
                   help="a consumer group ('*': every group)")
    p.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    p.add_argument("--cluster", action="store_true", help="the cluster itself")
    p.add_argument("--resource-pattern-type", default=None,
                   choices=["literal", "prefixed", "any", "match"],
                   help="how the names are matched (default literal; --list and --remove "
                        "also take any and match)")
    p.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME")
    p.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME")
    p.add_argument("--principal", metavar="TYPE:NAME",
                   help="with --list: only the ACLs of this principal")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                   help="hosts the allow entries hold for (default *)")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                   help="hosts the deny entries hold for (default *)")
    p.add_argument("--operation", action="append", default=[], metavar="OP",
                   help=f"one of {', '.join(_OPERATIONS)} (repeatable)")
    p.set_defaults(run=run)


def run(args) -> int:
    return run_tool("trilog acls", _main, args)


def _resources(args) -> list[tuple[ResourceType, str]]:
    out = [(ResourceType.TOPIC, n) for n in args.topic]
    out += [(ResourceType.GROUP, n) for n in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, n) for n in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    for kind, name in out:
        if not name:
            raise UsageError(f"an empty {kind.title} name")
    return out


def _parse(parser, text: str, what: str):
    try:
        return parser(text)
    except ValueError as exc:
        raise UsageError(f"{what}: {exc}") from None


def _entries(args) -> list[AccessControlEntry]:
    operations = [_parse(AclOperation.parse, op, "--operation") for op in args.operation]
    entries = []
    for principals, hosts, permission in (
            (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
            (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        for principal, host, op in product(principals, hosts or ["*"], operations):
            entries.append(AccessControlEntry(principal, host, op, permission))
    return entries


async def _main(args) -> int:
    resources = _resources(args)
    pattern_name = (args.resource_pattern_type or ("any" if args.list else "literal")).upper()
    pattern_type = PatternType.parse(pattern_name)
    async with open_admin(args.bootstrap_server or DEFAULT_BOOTSTRAP, client_id="trilog-acls",
                          **connection_kwargs(args)) as admin:
        if args.add:
            if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
                raise UsageError("--add takes --resource-pattern-type literal or prefixed")
            if not resources:
                raise UsageError("--add needs a resource: --topic, --group, "
                                 "--transactional-id or --cluster")
            entries = _entries(args)
            if not entries:
                raise UsageError("--add needs --allow-principal or --deny-principal, and "
                                 "--operation")
            bindings = [AclBinding(ResourcePattern(kind, name, pattern_type), entry)
                        for (kind, name), entry in product(resources, entries)]
            for binding in bindings:
                problem = binding.problem()
                if problem:
                    raise UsageError(problem)
            await admin.create_acls(bindings)
            _print(bindings, "Adding ACLs for resource")
            await _print_current(admin, bindings)
            print(f"Added {len(bindings)} ACL(s).")
            return 0
        if args.remove:
            filters = _remove_filters(args, resources, pattern_type)
            removed = await admin.delete_acls(filters)
            _print(removed, "Removing ACLs for resource")
            await _print_current(admin, removed)
            print(f"Removed {len(removed)} ACL(s).")
            return 0
        filters = [AclBindingFilter(kind, name, pattern_type, args.principal)
                   for kind, name in resources] or [
                       AclBindingFilter(principal=args.principal)]
        found: list[AclBinding] = []
        for selected in filters:
            found.extend(b for b in await admin.describe_acls(selected) if b not in found)
        _print(sorted(found))
        return 0


def _remove_filters(args, resources, pattern_type) -> list[AclBindingFilter]:
    if not resources:
        raise UsageError("--remove needs a resource: --topic, --group, --transactional-id "
                         "or --cluster")
    operations = [_parse(AclOperation.parse, op, "--operation") for op in args.operation] \
        or [AclOperation.ANY]
    principals = ([(p, AclPermissionType.ALLOW) for p in args.allow_principal]
                  + [(p, AclPermissionType.DENY) for p in args.deny_principal]) or \
        [(None, AclPermissionType.ANY)]
    return [AclBindingFilter(kind, name, pattern_type, principal, None, op, permission)
            for (kind, name), (principal, permission), op
            in product(resources, principals, operations)]


async def _print_current(admin, changed: list[AclBinding]) -> None:
    """Each changed resource's whole ACL list as the brokers hold it now."""
    patterns = sorted({b.pattern for b in changed})
    for pattern in patterns:
        now = await admin.describe_acls(AclBindingFilter(
            pattern.resource_type, pattern.name, pattern.pattern_type))
        now = sorted(b for b in now if b.pattern == pattern)
        if now:
            _print(now)
        else:
            print(f"Current ACLs for resource `{_pattern_text(pattern)}`: none\n")


def _pattern_text(pattern: ResourcePattern) -> str:
    return (f"ResourcePattern(resourceType={pattern.resource_type.name}, "
            f"name={pattern.name}, patternType={pattern.pattern_type.name})")


def _print(bindings: list[AclBinding], title: str = "Current ACLs for resource") -> None:
    """``bindings`` grouped by resource (kafka-acls' layout), a blank line after each."""
    current = None
    for b in sorted(bindings, key=lambda b: b.pattern):
        if b.pattern != current:
            if current is not None:
                print()
            current = b.pattern
            print(f"{title} `{_pattern_text(b.pattern)}`:")
        e = b.entry
        print(f" \t(principal={e.principal}, host={e.host}, operation={e.operation.name}, "
              f"permissionType={e.permission_type.name})")
    if current is not None:
        print()
