"""``trilog``: one command, a subcommand per job (``trilog SUBCOMMAND --help`` for each).

Each subcommand's module is imported only when it runs: ``trilog --version`` and
``trilog --help`` load none, a client tool never loads the broker (nor pyspark, nor
prometheus_client), and ``trilog broker`` loads no client.  ``COMMANDS`` gives each
subcommand's module and the one-line help the top-level ``--help`` lists.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, NamedTuple

from trilog import __version__


class Command(NamedTuple):
    module: str
    help: str


COMMANDS: dict[str, Command] = {
    "broker": Command("_broker", "run a broker"),
    "cluster": Command("_cluster", "run ZooKeeper and N brokers on this machine, supervised, "
                                   "as one foreground process"),
    "topics": Command("_topics", "create, list, describe, alter or delete topics"),
    "configs": Command("_configs", "describe or change topic and broker configs"),
    "groups": Command("_groups", "list, describe and delete consumer groups, reset their "
                                 "offsets"),
    "transactions": Command("_transactions", "list and describe transactions"),
    "produce": Command("_produce", "send lines from stdin as records"),
    "consume": Command("_consume", "print the records of a topic"),
    "get-offsets": Command("_get_offsets", "print a topic's offsets by time (earliest, "
                                           "latest, or at a timestamp)"),
    "delete-records": Command("_delete_records", "delete the records of partitions below "
                                                 "given offsets"),
    "dump-log": Command("_dump_log", "print the batches and records of segment files "
                                     "(.log, .index, .timeindex)"),
    "perf": Command("_perf", "measure produce or consume throughput and latency"),
    "zookeeper": Command("_zookeeper", "run a standalone ZooKeeper for development"),
    "users": Command("_users", "add, delete or list SASL users (SCRAM credentials)"),
    "acls": Command("_acls", "add, remove or list ACLs"),
    "console": Command("_console", "serve a web console: brokers, topics, records, "
                                   "consumer groups, lag and rate charts"),
}


class _Subcommands:
    """What a subcommand's ``add_parser(sub)`` is given: argparse's subparsers, with the
    one-line help taken from ``COMMANDS``."""

    def __init__(self, sub: Any) -> None:
        self._sub = sub

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = self._sub.add_parser(
            name, help=COMMANDS[name].help, **kwargs)
        return parser


def _codec() -> str:
    from trilog.records._native import IMPLEMENTATION

    return IMPLEMENTATION


class _Version(argparse.Action):
    """``--version``, with the record codec in use (only loaded when asked for)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(f"trilog {__version__} (record codec: {_codec()})")
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser, with ``command``'s full options (every command's when None); the other
    subcommands are listed by name and help only."""
    parser = argparse.ArgumentParser(
        prog="trilog",
        description="trilog: a Kafka-style commit log on Trio. "
        "Run `trilog SUBCOMMAND --help` for the options of each subcommand.",
    )
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="print trilog's version and record codec, and exit")
    sub = parser.add_subparsers(dest="command", metavar="SUBCOMMAND")
    for name, entry in COMMANDS.items():
        if command is None or name == command:
            module = importlib.import_module(f"trilog.cli.{entry.module}")
            module.add_parser(_Subcommands(sub))
        else:
            sub.add_parser(name, help=entry.help, add_help=False)
    return parser


def _command_in(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names (the top level has only ``-h`` and ``--version``)."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = _command_in(argv)
    parser = build_parser(command) if command is not None else build_parser("")
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    result: int = args.run(args)
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
