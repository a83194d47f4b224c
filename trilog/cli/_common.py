"""Helpers the client tools share (``trilog produce``, ``consume``, ``perf``, ``groups``,
``topics``, ``configs``, ...): the ``--bootstrap-server``/``--zookeeper`` options, producer
options and codec checking, ``k=v`` config lists, and ``run_tool``, which runs a tool's trio
main and turns trilog's errors into one line on stderr and an exit code.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from trilog._concurrency import unwrap_exception_group
from trilog.errors import ApiError, NetworkError, NoBrokersAvailableError, TrilogError
from trilog.records import CODEC_NAMES, codec_for_name, is_available

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
COMPRESSION_CHOICES = sorted(CODEC_NAMES.values())
_ACKS = {"0": 0, "1": 1, "-1": -1, "all": -1}
_CODEC_LIBRARIES = {"snappy": "pip install --force-reinstall cramjam (a dependency of trilog)",
                    "zstd": "pip install --force-reinstall cramjam (a dependency of trilog)"}


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group()
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", type=bootstrap_list,
                       help=f"broker(s) to start from (default {DEFAULT_BOOTSTRAP})")
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                       help="find the brokers in ZooKeeper instead")
    add_connection_args(p)


#: how long a tool tries to reach the cluster: shorter than the library's 30 s, since a
#: person waits for the answer, long enough for a broker that is still starting
CLI_BOOTSTRAP_TIMEOUT_MS = 5000


def add_connection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-timeout-ms", type=_positive_ms, default=CLI_BOOTSTRAP_TIMEOUT_MS,
                   metavar="MS",
                   help="how long to try to reach a broker before giving up (default "
                        f"{CLI_BOOTSTRAP_TIMEOUT_MS}; the library's bootstrap_timeout_ms)")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties for TLS and SASL, with Kafka's (or librdkafka's) "
                        "names: security.protocol, sasl.mechanism, sasl.jaas.config or "
                        "sasl.username/sasl.password, ssl.ca.location, "
                        "ssl.certificate.location, ssl.key.location (PEM files)")


def bootstrap_list(text: str) -> str:
    """argparse's type of ``--bootstrap-server``: ``host:port[,host:port...]``, else exit 2
    naming what is wrong."""
    from trilog.client import parse_bootstrap

    try:
        parse_bootstrap(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (e.g. 127.0.0.1:9092)") from None
    return text


def port_number(text: str) -> int:
    """argparse's type of a ``--port``: 0-65535 (0: a free port), else exit 2 naming it."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port number (0-65535; 0 picks a "
                                         "free port)")
    return port


def _positive_ms(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of milliseconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of milliseconds")
    return value


def connection_kwargs(args) -> dict[str, Any]:
    """The openers' ``bootstrap_timeout_ms`` (``--bootstrap-timeout-ms``) and
    ``security`` (a ``ClientSecurity`` from ``--command-config``, when given)."""
    timeout = {"bootstrap_timeout_ms": getattr(args, "bootstrap_timeout_ms",
                                               CLI_BOOTSTRAP_TIMEOUT_MS)}
    path = getattr(args, "command_config", None)
    if path is None:
        return timeout
    from trilog._properties import PropertiesError, parse_properties
    from trilog.client import ClientSecurity, SecurityConfigError

    try:
        with open(path, encoding="utf-8") as f:
            props = parse_properties(f.read(), path)
        return {**timeout, "security": ClientSecurity.from_properties(props)}
    except OSError as exc:
        raise UsageError(f"cannot read --command-config {path}: {exc.strerror}") from None
    except (PropertiesError, SecurityConfigError) as exc:
        raise UsageError(f"--command-config {path}: {exc}") from None


def cluster_kwargs(args) -> dict[str, Any]:
    if args.zookeeper is not None:
        return {"zookeeper": args.zookeeper, **connection_kwargs(args)}
    return {"bootstrap_servers": args.bootstrap_server or DEFAULT_BOOTSTRAP,
            **connection_kwargs(args)}


def where(args) -> str:
    return f"ZooKeeper {args.zookeeper}" if args.zookeeper else \
        (args.bootstrap_server or DEFAULT_BOOTSTRAP)


def add_producer_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--acks", default="all", choices=list(_ACKS),
                   help="acknowledgements to wait for: 0 none, 1 the leader, -1/all every "
                        "in-sync replica (default all, as the library's and Kafka 3's)")
    p.add_argument("--compression", default="none", metavar="CODEC",
                   help=f"batch compression: {', '.join(COMPRESSION_CHOICES)} (default none)")
    p.add_argument("--linger-ms", type=float, default=5, metavar="MS",
                   help="how long a batch waits for more records (default 5)")
    p.add_argument("--batch-size", type=int, default=65536, metavar="BYTES",
                   help="the largest batch per partition (default 65536)")
    p.add_argument("--delivery-timeout-ms", type=int, default=120_000, metavar="MS",
                   help="give up on a record not acknowledged within this (default 120000)")
    p.add_argument("--idempotence", action="store_true",
                   help="an idempotent producer: retries never write a record twice "
                        "(needs --acks all; with it, the default, as in the library)")


def producer_kwargs(args) -> dict[str, Any]:
    if args.idempotence and _ACKS[args.acks] != -1:
        raise UsageError("--idempotence needs --acks all (as in Kafka)")
    return {
        **cluster_kwargs(args),
        "acks": _ACKS[args.acks],
        "compression_type": check_codec(args.compression),
        "linger_ms": args.linger_ms,
        "batch_size": args.batch_size,
        "delivery_timeout_ms": args.delivery_timeout_ms,
        # None: the library's default (idempotent with acks=all, as Kafka 3's producer)
        "enable_idempotence": True if args.idempotence else None,
    }


def check_codec(name: str) -> str | None:
    """``--compression`` -> ``compression_type``; ``UsageError`` for unknown or missing codecs."""
    try:
        codec = codec_for_name(name)
    except ValueError:
        raise UsageError(f"unknown compression {name!r}; choose one of "
                         f"{', '.join(COMPRESSION_CHOICES)}") from None
    if not is_available(codec):
        raise UsageError(f"compression {name!r} needs a library that is not installed: "
                         f"{_CODEC_LIBRARIES.get(name.lower(), '')}")
    return None if name.lower() == "none" else name.lower()


def parse_config_pairs(items: list[str], option: str) -> dict[str, str]:
    """``--config k=v`` (repeatable) or ``--add-config k=v,k2=v2`` -> ``{k: v}``.

    As Kafka's tools: pairs are separated by commas, and a value that holds commas is put in
    square brackets (``cleanup.policy=[compact,delete]``).  ``UsageError`` for a pair
    without ``=`` or with an empty name, or a name given twice."""
    out: dict[str, str] = {}
    for item in items:
        for pair in split_config_list(item, option):
            name, eq, value = pair.partition("=")
            name = name.strip()
            if not eq or not name:
                raise UsageError(f"{option} {pair!r} is not NAME=VALUE (e.g. retention.ms=3600000)")
            value = value.strip()
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            if name in out:
                raise UsageError(f"{option} names {name} twice")
            out[name] = value
    return out


def split_config_list(text: str, option: str) -> list[str]:
    """Split at commas outside square brackets; empty items are dropped."""
    items: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise UsageError(f"{option} {text!r} has a ] without its [")
        if ch == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth:
        raise UsageError(f"{option} {text!r} has a [ without its ]")
    items.append("".join(current))
    return [i.strip() for i in items if i.strip()]


class UsageError(Exception):
    """A bad combination of options found after argparse: message to stderr, exit 2."""


def run_tool(prog: str, main: Callable[..., Awaitable[int]], *args,
             interrupted: int = 130) -> int:
    """``trio.run(main, *args)`` with a tool's error handling: one line on stderr and exit
    code 1 for a failure, 2 for a usage error, ``interrupted`` for a Ctrl-C that ``main``
    did not handle itself."""
    try:
        with unwrap_exception_group():
            return trio.run(main, *args)
    except UsageError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return interrupted
    except BrokenPipeError:
        # The reader went away (`| head`): not an error; keep Python quiet at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except (TrilogError, OSError, ValueError, TypeError) as exc:
        print(f"{prog}: {describe(exc)}", file=sys.stderr)
        return 1


#: What the connection says when a broker closed it before any answer (a plaintext client
#: at a TLS listener), and at the first request after ApiVersions (a client without SASL
#: at a SASL listener): ``trilog.net``'s ``BrokerConnection``.
_CLOSED_AT_FIRST_REQUEST = "closed the connection during the first request"
_CLOSED_BEFORE_LOGIN = "closed the connection at its first request after ApiVersions"
#: The library's hint for a plaintext client whose connections were closed
#: (``trilog.client``'s bootstrap), which the tools say in their own words.
_LIBRARY_HINT = "; a broker that closes the connection before answering"
_TLS_HINT = (": is it a TLS (SSL) listener? set security.protocol in --command-config FILE "
             "(security.protocol=SSL or SASL_SSL, ssl.ca.location=..., ...; see "
             "docs/security.md)")
_SASL_HINT = (": is it a SASL listener? set security.protocol (SASL_PLAINTEXT or SASL_SSL), "
              "sasl.mechanism and the login in --command-config FILE (see docs/security.md)")


def describe(exc: BaseException) -> str:
    """One line for an error: its message, and Kafka's name for a broker's error code; a
    connection that a broker closed at once says what is likely wrong with the tool's
    security settings."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, NoBrokersAvailableError):
        head, hint, _rest = text.partition(_LIBRARY_HINT)
        if hint and _CLOSED_AT_FIRST_REQUEST in head and "security_protocol (" in text:
            text = head + _TLS_HINT  # every server cut the plaintext tool off at once
        elif "security_protocol" in text:  # the library's hint, in the tools' words
            text += ("; trilog's tools take them from --command-config FILE "
                     "(security.protocol=SASL_SSL, ssl.ca.location=..., ...)")
        return text.replace("(bootstrap_timeout_ms)", "(--bootstrap-timeout-ms)")
    if isinstance(exc, NetworkError) and _CLOSED_BEFORE_LOGIN in text:
        return text + _SASL_HINT
    if isinstance(exc, ApiError) and exc.code > 0 and exc.name not in text:
        text += f" [{exc.name}]"
    return text


async def cancel_on_sigint(scope: trio.CancelScope, *, task_status=trio.TASK_STATUS_IGNORED
                           ) -> None:
    """Cancel ``scope`` at the first SIGINT/SIGTERM; a second one interrupts at once."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for _ in signals:
            if scope.cancel_called:
                raise KeyboardInterrupt
            scope.cancel()
