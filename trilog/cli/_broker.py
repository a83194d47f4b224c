"""``trilog broker``: run a broker, like Kafka's ``kafka-server-start.sh``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

import trio

from trilog._concurrency import unwrap_exception_group
from trilog.broker import BrokerConfig, ConfigError, serve_broker
from trilog.broker._config import properties_help
from trilog.errors import TrilogError

_SHORT_FLAGS = {
    "port": "port",
    "host": "host.name",
    "log_dir": "log.dirs",
    "broker_id": "broker.id",
    "zookeeper": "zookeeper.connect",
}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "broker",
        help="run a broker",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Run a trilog broker. With no arguments: one standalone broker on 127.0.0.1:9092,\n"
            "data in ./trilog-data, topics auto-created. Settings come from an optional\n"
            "Kafka-style server.properties file, then --override key=value pairs, then the\n"
            "short flags. SIGINT/SIGTERM shut it down cleanly."
        ),
        epilog="properties (Kafka's names):\n" + properties_help(),
    )
    p.add_argument("properties", nargs="?", help="a server.properties file")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="set a property (repeatable)")
    p.add_argument("--port", type=int, help="listener port (port)")
    p.add_argument("--host", help="listener address (host.name)")
    p.add_argument("--log-dir", help="data directory (log.dirs)")
    p.add_argument("--broker-id", type=int, help="this broker's id (broker.id)")
    p.add_argument("--zookeeper", help="ZooKeeper connect string (zookeeper.connect); "
                                       "omit for a standalone broker")
    p.add_argument("--log-level", default="INFO",
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="default INFO")
    p.set_defaults(run=run)


def config_from_args(args) -> BrokerConfig:
    overrides = list(args.override)
    for attr, key in _SHORT_FLAGS.items():
        value = getattr(args, attr)
        if value is not None:
            overrides.append(f"{key}={value}")
    return BrokerConfig.from_sources(args.properties, overrides)


def run(args) -> int:
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        print(f"trilog broker: {exc}", file=sys.stderr)
        return 2
    try:
        with unwrap_exception_group():
            trio.run(_main, config)
    except KeyboardInterrupt:  # a second Ctrl-C during shutdown
        return 130
    except TrilogError as exc:
        print(f"trilog broker: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"trilog broker: {exc}", file=sys.stderr)
        return 1
    return 0


async def _main(config: BrokerConfig) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            broker = await nursery.start(serve_broker, config)
            mode = (f"ZooKeeper {config.zookeeper_connect}" if config.zookeeper_connect
                    else "standalone")
            print(f"trilog broker {broker.broker_id} listening on {broker.host}:{broker.port} "
                  f"({mode}), data in {', '.join(config.log_dirs)}", flush=True)
            async for signum in signals:
                print(f"trilog broker: {signal.Signals(signum).name}, shutting down", flush=True)
                broker.shutdown()
                break
