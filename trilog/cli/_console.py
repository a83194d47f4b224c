"""``trilog console``: serve the web console (``trilog.console``) until Ctrl-C."""

from __future__ import annotations

import argparse
import sys

import trio

from trilog.cli._common import (
    DEFAULT_BOOTSTRAP,
    UsageError,
    add_connection_args,
    bootstrap_list,
    cancel_on_sigint,
    connection_kwargs,
    port_number,
    run_tool,
)


def add_parser(sub) -> None:
    p = sub.add_parser(
        "console",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "A web console for a Kafka-protocol cluster (trilog's or any other): brokers\n"
            "and partition health, topics with their partitions, offsets, sizes, configs\n"
            "and records, consumer groups with their members and lag, and charts of\n"
            "produce/consume rates and lag that the console samples itself. It reads\n"
            "through the same clients as trilog's tools, with the same --command-config.\n"
            "Every page has a JSON twin under /api/ (e.g. /api/topics). It listens on\n"
            "127.0.0.1 only unless --host says otherwise."
        ),
        epilog=(
            "examples:\n"
            "  trilog console                       (http://127.0.0.1:8080/)\n"
            "  trilog console --bootstrap-server kafka1:9092 --port 9000 --no-records\n"
            "  trilog console --host 0.0.0.0 --basic-auth-file users.txt \\\n"
            "      --tls-cert console.pem --tls-key console-key.pem\n\n"
            "--basic-auth-file has one user:password per line, or user:sha256:HEX with the\n"
            "password's SHA-256 (printf %s 'secret' | sha256sum). A login needs TLS\n"
            "(--tls-cert/--tls-key) unless the console listens on loopback only.\n"
            "Needs h11: pip install 'trilog[console]'."
        ),
    )
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", type=bootstrap_list,
                   help=f"broker(s) of the cluster (default {DEFAULT_BOOTSTRAP})")
    add_connection_args(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="the address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=port_number, default=8080,
                   help="the port to listen on (default 8080; 0 picks a free one)")
    p.add_argument("--no-records", action="store_true",
                   help="read-only mode without record browsing: partitions, offsets and "
                        "lag, but no keys, values or headers")
    p.add_argument("--basic-auth-file", metavar="FILE",
                   help="require a login (HTTP basic auth) from the users in FILE")
    p.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate "
                                                     "(chain) ...")
    p.add_argument("--tls-key", metavar="PEM", help="... and this private key")
    p.add_argument("--sample-interval", type=float, default=5.0, metavar="SECONDS",
                   help="how often to sample offsets and lag for the charts (default 5)")
    p.add_argument("--history-minutes", type=float, default=15.0, metavar="MINUTES",
                   help="how far back the charts look (default 15)")
    p.set_defaults(run=run)


def run(args) -> int:
    try:
        import h11  # noqa: F401
    except ImportError:
        print("trilog console: needs h11 (pip install 'trilog[console]')", file=sys.stderr)
        return 1
    return run_tool("trilog console", _main, args, interrupted=0)


def _config(args):
    from trilog.console import AuthFileError, ConsoleConfig, parse_users

    users = None
    if args.basic_auth_file is not None:
        try:
            with open(args.basic_auth_file, encoding="utf-8") as f:
                users = parse_users(f.read(), args.basic_auth_file)
        except OSError as exc:
            raise UsageError(f"cannot read --basic-auth-file {args.basic_auth_file}: "
                             f"{exc.strerror}") from None
        except AuthFileError as exc:
            raise UsageError(str(exc)) from None
    if (args.tls_cert is None) != (args.tls_key is None):
        raise UsageError("--tls-cert and --tls-key go together")
    context = None
    if args.tls_cert is not None:
        import ssl

        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"cannot load --tls-cert/--tls-key: {exc}") from None
    try:
        return ConsoleConfig(host=args.host, port=args.port, records=not args.no_records,
                             users=users, ssl_context=context,
                             sample_interval_s=args.sample_interval,
                             history_s=args.history_minutes * 60)
    except ValueError as exc:
        raise UsageError(str(exc).replace("give a TLS certificate and key",
                                          "give --tls-cert and --tls-key")
                         .replace("listen on loopback only", "keep --host 127.0.0.1")
                         ) from None


async def _main(args) -> int:
    from trilog.console import open_console

    config = _config(args)
    bootstrap = args.bootstrap_server or DEFAULT_BOOTSTRAP
    async with trio.open_nursery() as nursery:
        await nursery.start(cancel_on_sigint, nursery.cancel_scope)
        async with open_console(bootstrap, config, **connection_kwargs(args)) as console:
            mode = " (read-only: no records)" if not config.records else ""
            login = ", login required" if config.users is not None else ""
            print(f"trilog console on {console.url} for {bootstrap}{mode}{login}",
                  flush=True)
            await trio.sleep_forever()
    return 0
