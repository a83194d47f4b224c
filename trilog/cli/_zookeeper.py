"""``trilog zookeeper``: a standalone ZooKeeper for development."""

from __future__ import annotations

import signal
import sys
import threading

from trilog.cli._common import port_number
from trilog.zk import ZooKeeperServer, find_zookeeper_classpath
from trilog.zk._server import free_port
from trilog.errors import TrilogError


def add_parser(sub) -> None:
    p = sub.add_parser(
        "zookeeper",
        description="Start a standalone ZooKeeper from an installed ZooKeeper "
        "($ZOOKEEPER_HOME, Debian's zookeeper package, or the jars in the pyspark wheel), "
        "wait until it serves, and stop it when this command is interrupted "
        "(Ctrl-C or SIGTERM).",
    )
    p.add_argument("--port", type=port_number, default=2181,
                   help="client port (default 2181; 0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--data-dir",
        default="./trilog-zookeeper",
        help="where ZooKeeper keeps its data (default ./trilog-zookeeper)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="only say which ZooKeeper installation would be used; exit 1 if none",
    )
    p.set_defaults(run=run)


def run(args) -> int:
    try:
        if args.check:
            _, source = find_zookeeper_classpath()
            print(f"ZooKeeper found: {source}")
            return 0
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        port = args.port or free_port(args.host)
        with ZooKeeperServer(port=port, data_dir=args.data_dir, host=args.host) as zk:
            print(
                f"ZooKeeper serving on {zk.connect_string} (data in {zk.data_dir}, "
                f"from {zk.source}); Ctrl-C stops it",
                flush=True,
            )
            while not stop.wait(0.5):
                if zk.process is not None and zk.process.poll() is not None:
                    print(f"trilog zookeeper: ZooKeeper exited with status "
                          f"{zk.process.returncode}", file=sys.stderr)
                    return 1
        return 0
    except TrilogError as exc:
        print(f"trilog zookeeper: {exc}", file=sys.stderr)
        return 1
