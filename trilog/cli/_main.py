"""``trilog``: one command, a subcommand per job (``trilog SUBCOMMAND --help`` for each)."""

from __future__ import annotations

import argparse
import sys

from trilog import __version__
from trilog.cli import (
    _acls,
    _broker,
    _configs,
    _consume,
    _delete_records,
    _dump_log,
    _get_offsets,
    _groups,
    _perf,
    _produce,
    _topics,
    _transactions,
    _users,
    _zookeeper,
)
from trilog.records._native import IMPLEMENTATION


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trilog",
        description="trilog: a Kafka-style commit log on Trio. "
        "Run `trilog SUBCOMMAND --help` for the options of each subcommand.",
    )
    parser.add_argument("--version", action="version",
                        version=f"trilog {__version__} (record codec: {IMPLEMENTATION})")
    sub = parser.add_subparsers(dest="command", metavar="SUBCOMMAND")
    _broker.add_parser(sub)
    _topics.add_parser(sub)
    _configs.add_parser(sub)
    _groups.add_parser(sub)
    _transactions.add_parser(sub)
    _produce.add_parser(sub)
    _consume.add_parser(sub)
    _get_offsets.add_parser(sub)
    _delete_records.add_parser(sub)
    _dump_log.add_parser(sub)
    _perf.add_parser(sub)
    _zookeeper.add_parser(sub)
    _users.add_parser(sub)
    _acls.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return args.run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
