"""``trilog users``: the SASL users and their SCRAM credentials (what ``kafka-configs
--entity-type users --add-config 'SCRAM-SHA-256=[password=...]'`` manages in Kafka)."""

from __future__ import annotations

import argparse
import getpass
import os
import sys

from trilog.broker.security._users import (
    SCRAM_MECHANISMS,
    UserStore,
    ZooKeeperUserStore,
    standalone_user_store,
)
from trilog.cli._common import UsageError, run_tool
from trilog.protocol import ScramCredential


def add_parser(sub) -> None:
    p = sub.add_parser(
        "users",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Manage the users that may log in on a broker's SASL listeners (SASL_PLAINTEXT,\n"
            "SASL_SSL) with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512. Only salted SCRAM\n"
            "credentials are stored, never a password: in ZooKeeper under\n"
            "/config/users/<user> (a cluster, as Kafka), or in users.json in a standalone\n"
            "broker's log directory. A change applies at the next login, with no restart.\n"
            "PLAIN logins are checked against the same credentials."
        ),
        epilog=(
            "examples:\n"
            "  trilog users --zookeeper 127.0.0.1:2181 --add alice --password alice-secret\n"
            "  trilog users --log-dir ./trilog-data --add bob   (asks for the password)\n"
            "  trilog users --zookeeper 127.0.0.1:2181 --list\n"
            "  trilog users --zookeeper 127.0.0.1:2181 --delete alice"
        ),
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                       help="the cluster's ZooKeeper (credentials in /config/users)")
    where.add_argument("--log-dir", metavar="DIR",
                       help="a standalone broker's (first) log directory (its users.json)")
    where.add_argument("--credentials-file", metavar="FILE",
                       help="a standalone broker's sasl.credentials.file")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", metavar="USER", help="add the user, or change its password")
    action.add_argument("--delete", metavar="USER", help="delete the user")
    action.add_argument("--list", action="store_true", help="list the users and mechanisms")
    p.add_argument("--password", metavar="PASSWORD",
                   help="with --add: the password (default: read from $TRILOG_PASSWORD, or "
                        "asked for on the terminal)")
    p.add_argument("--mechanism", action="append", choices=SCRAM_MECHANISMS, default=[],
                   help="with --add: the credential to store (repeatable; default both)")
    p.add_argument("--iterations", type=int, default=4096, metavar="N",
                   help="with --add: PBKDF2 iterations (at least 4096, the default)")
    p.set_defaults(run=run)


def run(args) -> int:
    return run_tool("trilog users", _main, args)


def _password(args) -> str:
    if args.password is not None:
        return args.password
    if os.environ.get("TRILOG_PASSWORD"):
        return os.environ["TRILOG_PASSWORD"]
    if not sys.stdin.isatty():
        raise UsageError("--add needs --password (or $TRILOG_PASSWORD) when not on a terminal")
    first = getpass.getpass(f"password for {args.add}: ")
    if getpass.getpass("again: ") != first:
        raise UsageError("the passwords differ")
    return first


async def _main(args) -> int:
    if not args.add and (args.password is not None or args.mechanism):
        raise UsageError("--password and --mechanism go with --add")
    if args.iterations < 4096:
        raise UsageError("--iterations must be at least 4096 (Kafka's minimum)")
    user = args.add or args.delete
    if user is not None and (not user or "/" in user):
        raise UsageError(f"{user!r} is not a user name")
    if args.zookeeper:
        from trilog.zk import open_zookeeper

        async with open_zookeeper(args.zookeeper) as zk:
            return await _act(args, ZooKeeperUserStore(zk))
    store = standalone_user_store([args.log_dir or "."], args.credentials_file)
    return await _act(args, store)


async def _act(args, store: UserStore) -> int:
    if args.list:
        users = await store.users()
        for name, credentials in sorted(users.items()):
            print(f"{name}\t{','.join(sorted(credentials))}")
        return 0
    if args.delete:
        if not await store.credentials(args.delete):
            print(f"trilog users: no user {args.delete!r}", file=sys.stderr)
            return 1
        await store.set(args.delete, {})
        print(f"deleted user {args.delete}")
        return 0
    password = _password(args)
    if not password:
        raise UsageError("the password must not be empty")
    mechanisms = args.mechanism or list(SCRAM_MECHANISMS)
    credentials = await store.credentials(args.add)
    for mechanism in mechanisms:
        credentials[mechanism] = ScramCredential.create(
            mechanism, password, iterations=args.iterations).to_text()
    await store.set(args.add, credentials)
    print(f"user {args.add}: {', '.join(sorted(credentials))}")
    return 0
