"""``trilog broker``: run a broker, like Kafka's ``kafka-server-start.sh``.

Without a properties file the broker runs the embedded development configuration: the
properties' defaults (Kafka's) but for ``DEVELOPMENT_DEFAULTS``, the settings Kafka's
quickstart ``config/server.properties`` changes for a broker on one's own machine.  With a
file, every property the file does not set has Kafka's default, as in production.

Logging: ``--log-level`` configures stderr logging; ``--log-config FILE`` hands the whole
setup to a standard ``logging.config.dictConfig`` file instead (JSON, or YAML when PyYAML
happens to be installed), as Kafka's ``log4j.properties`` does.
"""

from __future__ import annotations

import argparse
import errno
import gc
import importlib
import json
import logging
import logging.config
import os
import signal
import sys
from pathlib import Path
from typing import Any

import trio

from trilog._concurrency import unwrap_exception_group
from trilog.broker import BrokerConfig, ConfigError, serve_broker
from trilog.broker.configs._broker_config import properties_help
from trilog.cli._common import port_number
from trilog.errors import TrilogError

#: What ``trilog broker`` without a properties file (``make run``) sets, as Kafka's quickstart
#: server.properties does: a group's first rebalance waits for nobody (the default, 3000 ms,
#: is as long as many a script's consumer_timeout_ms: it read nothing).
DEVELOPMENT_DEFAULTS = {"group.initial.rebalance.delay.ms": "0"}

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
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Run a trilog broker. With no arguments: one standalone broker on 127.0.0.1:9092,\n"
            "data in ./trilog-data, topics auto-created. Settings come from an optional\n"
            "Kafka-style server.properties file, then --override key=value pairs, then the\n"
            "short flags. SIGINT/SIGTERM shut it down cleanly.\n\n"
            "Without a properties file the broker is a development broker, as Kafka's\n"
            "quickstart server.properties makes it: "
            + ", ".join(f"{k}={v}" for k, v in DEVELOPMENT_DEFAULTS.items()) + ".\n"
            "With a file, every property it does not set has the default listed below."
        ),
        epilog="properties (Kafka's names):\n" + properties_help(),
    )
    p.add_argument("properties", nargs="?", help="a server.properties file")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="set a property (repeatable)")
    p.add_argument("--port", type=port_number, help="listener port, 0-65535; 0 picks a free one (port)")
    p.add_argument("--host", help="listener address (host.name)")
    p.add_argument("--log-dir", help="data directory (log.dirs)")
    p.add_argument("--broker-id", type=int, help="this broker's id (broker.id)")
    p.add_argument("--zookeeper", help="ZooKeeper connect string (zookeeper.connect); "
                                       "omit for a standalone broker")
    p.add_argument("--log-level", default=None,
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="default INFO; with --log-config, the root logger's level after the "
                        "file is applied")
    p.add_argument("--log-config", metavar="FILE",
                   help="a logging dictConfig file (JSON; .yaml/.yml if PyYAML is installed); "
                        "e.g. DEBUG for trilog.broker.requests logs every request")
    p.set_defaults(run=run)


def config_from_args(args) -> BrokerConfig:
    overrides = [] if args.properties is not None else \
        [f"{key}={value}" for key, value in DEVELOPMENT_DEFAULTS.items()]
    overrides += args.override
    for attr, key in _SHORT_FLAGS.items():
        value = getattr(args, attr)
        if value is not None:
            overrides.append(f"{key}={value}")
    return BrokerConfig.from_sources(args.properties, overrides)


def build_config(argv: list[str]) -> BrokerConfig:
    """The configuration ``trilog broker ARGV...`` would run with (for tests and tools)."""
    parser = argparse.ArgumentParser(prog="trilog")
    add_parser(parser.add_subparsers())
    return config_from_args(parser.parse_args(["broker", *argv]))


class LogConfigError(TrilogError):
    """A ``--log-config`` file that cannot be read or applied; the message says why."""


def load_log_config(path: str) -> dict[str, Any]:
    """The dictConfig dictionary in ``path`` (JSON, or YAML for ``.yaml``/``.yml``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LogConfigError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}"
                             ) from None
    if Path(path).suffix.lower() in (".yaml", ".yml"):
        try:
            yaml = importlib.import_module("yaml")
        except ImportError:
            raise LogConfigError(f"{path}: reading YAML needs PyYAML, which is not installed; "
                                 "write the file as JSON") from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise LogConfigError(f"{path} is not valid YAML: {exc}") from None
    else:
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError as exc:
            raise LogConfigError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} "
                                 f"column {exc.colno}") from None
    if not isinstance(loaded, dict):
        raise LogConfigError(f"{path}: expected a dictConfig mapping (with \"version\": 1), "
                             f"found {type(loaded).__name__}")
    return loaded


class _Announced(logging.Filter):
    """Leaves out of the stderr log what the command prints on stdout when the broker is
    ready (``_main``), so that a terminal shows the ready line once.  A ``--log-config``
    setup keeps them: a log file should say when the broker was ready."""

    _READY = ("broker %d listening on ", "listener %s (%s) on ")

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "trilog.broker" and isinstance(record.msg, str)
                    and record.msg.startswith(self._READY))


def configure_logging(level: str | None, config_file: str | None) -> None:
    """``--log-level`` and ``--log-config`` (see the module docstring)."""
    if config_file is None:
        logging.basicConfig(level=level or "INFO", stream=sys.stderr,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        for handler in logging.getLogger().handlers:
            handler.addFilter(_Announced())
        return
    config = load_log_config(config_file)
    # trilog's loggers exist before the file is read (they are made at import): unless the
    # file says otherwise they keep working, sending to whatever handlers it sets up.
    config.setdefault("disable_existing_loggers", False)
    try:
        logging.config.dictConfig(config)
    except (ValueError, TypeError, AttributeError, ImportError) as exc:
        raise LogConfigError(f"{config_file} is not a usable logging configuration: {exc}"
                             ) from None
    if level is not None:
        logging.getLogger().setLevel(level)


def run(args) -> int:
    try:
        configure_logging(args.log_level, args.log_config)
    except LogConfigError as exc:
        print(f"trilog broker: --log-config: {exc}", file=sys.stderr)
        return 2
    try:
        config = config_from_args(args)
        check_log_dirs(config.log_dirs)
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
        print(f"trilog broker: {describe_os_error(exc, config.log_dirs)}", file=sys.stderr)
        return 1
    return 0


def check_log_dirs(log_dirs: list[str]) -> None:
    """``ConfigError`` for a log directory that cannot be one: a file, or under a file."""
    for d in log_dirs:
        path = Path(d).absolute()
        existing = next(p for p in (path, *path.parents) if p.exists())
        if not existing.is_dir():
            where = "is" if existing == path else f"cannot be created: {existing} is"
            raise ConfigError(f"log directory {d} (--log-dir, log.dirs) {where} a file, not a "
                              "directory; choose another path")


def describe_os_error(exc: OSError, log_dirs: list[str]) -> str:
    """An OS error in one line that says which of the broker's paths it is about."""
    path = exc.filename
    if path is None:
        return str(exc.strerror or exc)
    mine = [d for d in log_dirs if os.path.abspath(str(path)).startswith(os.path.abspath(d))]
    if mine:
        return (f"log directory {mine[0]} (--log-dir, log.dirs): {exc.strerror}: {path}"
                + ("; the broker's user must be able to write it"
                   if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else ""))
    return f"{path}: {exc.strerror}"


async def _main(config: BrokerConfig) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            broker = await nursery.start(serve_broker, config)
            # What the broker holds once it serves (its logs, their metadata: over a million
            # objects for 50,000 partitions) lives as long as this process: out of the
            # cyclic collector's sight, which walked it all in every full collection (0.7 s
            # of the event loop each; the first one came with the first request).
            gc.freeze()
            mode = (f"ZooKeeper {config.zookeeper_connect}" if config.zookeeper_connect
                    else "standalone")
            print(f"trilog broker {broker.broker_id} listening on {broker.host}:{broker.port} "
                  f"({mode}), data in {', '.join(config.log_dirs)}", flush=True)
            listeners = config.listeners
            if len(listeners) > 1 or listeners[0].protocol != "PLAINTEXT":
                addresses = broker.addresses()
                for spec in listeners:
                    print(f"trilog broker {broker.broker_id} listener {spec.name} "
                          f"({spec.protocol}) on {addresses[spec.name]}", flush=True)
            async for signum in signals:
                print(f"trilog broker: {signal.Signals(signum).name}, shutting down", flush=True)
                broker.shutdown()
                break
