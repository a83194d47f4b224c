"""``trilog cluster``: ZooKeeper and N brokers on this machine, as one supervised foreground
process (for development, tests and demos of replication, failover and security).

The command starts ZooKeeper, then the brokers (``trilog broker`` processes with ids 1..N,
each with its log dir under ``--data-dir``), prints each one's address and one bootstrap
string, and then watches them: a broker (or ZooKeeper) that exits by itself is started
again, after a backoff (1 s, doubling to 10 s; a broker killed at once is refused by
ZooKeeper until its old session expires, ``zookeeper.session.timeout.ms``).  SIGINT (Ctrl-C)
or SIGTERM stops the brokers (each shuts down cleanly, as on its own SIGTERM), then
ZooKeeper, and the command exits 0 with no process left; a second one kills what is still
running.  The data stays in ``--data-dir`` for the next start.

The children run in sessions of their own, so that a Ctrl-C in the terminal reaches this
command only, which stops them in order (brokers before ZooKeeper: a broker's controlled
shutdown needs it).  Each broker's log goes to ``DATA_DIR/broker-<id>.log``, ZooKeeper's to
``DATA_DIR/zookeeper/zookeeper.log``.
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import trio

from trilog._concurrency import unwrap_exception_group
from trilog.cli._common import port_number
from trilog.errors import TrilogError
from trilog.zk import ZooKeeperServer
from trilog.zk._server import free_port

PROG = "trilog cluster"
_READY = re.compile(rb"trilog broker (\d+) listening on (\S+):(\d+) ")
#: how long a broker (or ZooKeeper) may take to be ready
_START_TIMEOUT_S = 60.0
#: how long the brokers get to shut down cleanly on Ctrl-C/SIGTERM, before they are killed
_STOP_TIMEOUT_S = 30.0
#: a process that ran this long before it exited starts its backoff from the beginning
_STABLE_S = 60.0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "cluster",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Run ZooKeeper and N brokers on this machine as one foreground process: ports\n"
            "and one bootstrap string are printed when all are ready; a broker that crashes\n"
            "is started again; Ctrl-C or SIGTERM stops everything cleanly. The data stays\n"
            "in --data-dir for the next start (each broker's log is DATA_DIR/broker-ID.log).\n"
            "For running brokers for real, see docs/operations.md (a systemd unit, a compose\n"
            "file)."
        ),
        epilog=(
            "examples:\n"
            "  trilog cluster --brokers 3\n"
            "  trilog cluster --brokers 3 --data-dir /tmp/c3 --port 0 --zookeeper-port 0\n"
            "  trilog cluster --brokers 3 --override min.insync.replicas=2"
        ),
    )
    p.add_argument("--brokers", type=_broker_count, default=3, metavar="N",
                   help="how many brokers, with ids 1..N (default 3)")
    p.add_argument("--data-dir", default="./trilog-cluster", metavar="DIR",
                   help="where ZooKeeper and the brokers keep their data and logs (default "
                        "./trilog-cluster); kept for the next start")
    p.add_argument("--port", type=port_number, default=9092, metavar="PORT",
                   help="the first broker's port, the others follow (default 9092; 0: free "
                        "ports, kept across restarts of a broker)")
    p.add_argument("--zookeeper-port", type=port_number, default=2181, metavar="PORT",
                   help="ZooKeeper's client port (default 2181; 0: a free one)")
    p.add_argument("--host", default="127.0.0.1",
                   help="the address everything listens on (default 127.0.0.1)")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker property for every broker (repeatable), as trilog broker's")
    p.set_defaults(run=run)


def _broker_count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of brokers") from None
    if not 1 <= n <= 100:
        raise argparse.ArgumentTypeError(f"{n} brokers: choose 1 to 100")
    return n


@dataclass
class _Broker:
    broker_id: int
    port: int  # 0 until its first start picked one
    log_path: Path
    process: trio.Process | None = None
    ready: trio.Event = field(default_factory=trio.Event)


class ClusterError(TrilogError):
    """The cluster could not start; the message says which part and why."""


def run(args) -> int:
    data = Path(args.data_dir)
    for item in args.override:
        if "=" not in item:
            print(f"{PROG}: --override {item!r} is not KEY=VALUE", file=sys.stderr)
            return 2
    if args.port and args.port + args.brokers - 1 > 65535:
        print(f"{PROG}: --port {args.port} leaves no room for {args.brokers} brokers below "
              "65536", file=sys.stderr)
        return 2
    try:
        data.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"{PROG}: cannot use --data-dir {data}: {exc.strerror}", file=sys.stderr)
        return 2
    try:
        with unwrap_exception_group():
            trio.run(_main, args, data)
    except KeyboardInterrupt:  # a second signal while stopping: what was left is killed
        return 130
    except (TrilogError, OSError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    return 0


async def _main(args, data: Path) -> None:
    zk_port = args.zookeeper_port or free_port(args.host)
    zookeeper = ZooKeeperServer(port=zk_port, data_dir=data / "zookeeper", host=args.host)
    brokers = [_Broker(i, args.port + i - 1 if args.port else 0, data / f"broker-{i}.log")
               for i in range(1, args.brokers + 1)]
    stopping = trio.Event()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, signals, stopping, brokers, zookeeper)
            try:
                await _start_zookeeper(zookeeper)
                print(f"{PROG}: ZooKeeper on {zookeeper.connect_string} (data in "
                      f"{zookeeper.data_dir})", flush=True)
                for broker in brokers:
                    nursery.start_soon(_supervise, broker, args, zookeeper.connect_string,
                                       stopping)
                nursery.start_soon(_watch_zookeeper, zookeeper, stopping)
                with trio.move_on_after(_START_TIMEOUT_S * 2) as waited:
                    for broker in brokers:
                        await broker.ready.wait()
                if waited.cancelled_caught:
                    late = [str(b.broker_id) for b in brokers if not b.ready.is_set()]
                    raise ClusterError(f"broker(s) {', '.join(late)} not ready within "
                                       f"{_START_TIMEOUT_S * 2:.0f} s; see their logs in {data}")
                await _wait_until_they_see_each_other(args.host, brokers)
                bootstrap = ",".join(f"{args.host}:{b.port}" for b in brokers)
                print(f"{PROG}: ready: bootstrap servers {bootstrap} (ZooKeeper "
                      f"{zookeeper.connect_string}); Ctrl-C stops it", flush=True)
                await stopping.wait()
            except BaseException:
                stopping.set()
                with trio.CancelScope(shield=True):
                    await _stop_all(brokers, zookeeper)
                raise
            await _stop_all(brokers, zookeeper)
            nursery.cancel_scope.cancel()
    print(f"{PROG}: stopped", flush=True)


async def _wait_until_they_see_each_other(host: str, brokers: list[_Broker]) -> None:
    """Wait (at most ``_START_TIMEOUT_S``) until each broker's Metadata lists every broker:
    "ready" then means a topic of replication factor N can be created through any of them
    (a broker learns of the others from the controller a moment after they register).  A
    broker this command cannot ask (a listener that wants TLS or a login) is not waited for."""
    from trilog.net import open_connection
    from trilog.protocol import MetadataRequest

    async def sees_all(port: int) -> bool:
        try:
            async with open_connection(host, port, client_id=PROG, connect_timeout_s=2,
                                       request_timeout_s=5) as conn:
                response = await conn.request(MetadataRequest(topics=[]), version=1)
        except (TrilogError, OSError):
            return True  # not ours to judge (a secured listener): do not hold "ready"
        return len(response.brokers) >= len(brokers)

    with trio.move_on_after(_START_TIMEOUT_S):
        for broker in brokers:
            while not await sees_all(broker.port):
                await trio.sleep(0.1)


async def _start_zookeeper(zookeeper: ZooKeeperServer) -> None:
    await trio.to_thread.run_sync(zookeeper.start, _START_TIMEOUT_S, abandon_on_cancel=True)


async def _stop_on_signal(signals, stopping: trio.Event, brokers: list[_Broker],
                          zookeeper: ZooKeeperServer) -> None:
    async for signum in signals:
        if stopping.is_set():  # the second one: kill what is left, now
            for broker in brokers:
                if broker.process is not None and broker.process.returncode is None:
                    broker.process.kill()
            if zookeeper.process is not None and zookeeper.process.poll() is None:
                zookeeper.process.kill()
            raise KeyboardInterrupt
        print(f"{PROG}: {signal.Signals(signum).name}, stopping the brokers, then ZooKeeper",
              flush=True)
        stopping.set()


async def _supervise(broker: _Broker, args, zookeeper: str, stopping: trio.Event) -> None:
    """Run one broker until the cluster stops, starting it again whenever it exits."""
    failures = 0
    while not stopping.is_set():
        started = trio.current_time()
        code = await _run_broker(broker, args, zookeeper, stopping)
        if stopping.is_set():
            return
        if code == 2 and not broker.ready.is_set():  # its options: no start will do better
            raise ClusterError(f"broker {broker.broker_id} refused its options: "
                               f"{_last_line(broker.log_path)}")
        failures = 1 if trio.current_time() - started > _STABLE_S else failures + 1
        delay = min(2.0 ** (failures - 1), 10.0)
        why = f" ({_last_line(broker.log_path)})" if code > 0 else ""
        print(f"{PROG}: broker {broker.broker_id} exited with {_status(code)}{why}; starting "
              f"it again in {delay:g} s (its log: {broker.log_path})", flush=True)
        with trio.move_on_after(delay):
            await stopping.wait()


async def _run_broker(broker: _Broker, args, zookeeper: str, stopping: trio.Event) -> int:
    command = [sys.executable, "-m", "trilog", "broker", "--broker-id", str(broker.broker_id),
               "--host", args.host, "--port", str(broker.port), "--zookeeper", zookeeper,
               "--log-dir", str(Path(args.data_dir) / f"broker-{broker.broker_id}")]
    for item in args.override:
        command += ["--override", item]
    with open(broker.log_path, "ab") as log:
        process = await trio.lowlevel.open_process(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
            start_new_session=True)
    broker.process = process
    assert process.stdout is not None
    async with process.stdout:
        line = b""
        with trio.move_on_after(_START_TIMEOUT_S):
            line = await _read_line(process.stdout)
        match = _READY.match(line)
        if match is not None:
            broker.port = int(match.group(3))  # a free port stays this broker's
            first = not broker.ready.is_set()
            broker.ready.set()
            print(f"{PROG}: broker {broker.broker_id} {'listening' if first else 'back'} on "
                  f"{args.host}:{broker.port} (log: {broker.log_path})", flush=True)
        elif process.returncode is None and not stopping.is_set():
            process.kill()  # never ready: start it again
        async with trio.open_nursery() as drain:  # what it prints later (its shutdown)
            drain.start_soon(_discard, process.stdout)
            code = await process.wait()
            drain.cancel_scope.cancel()
    return code


async def _read_line(stream: trio.abc.ReceiveStream) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = await stream.receive_some(1)  # byte by byte: the rest is the drain's
        if not chunk:
            break
        data += chunk
    return data


async def _discard(stream: trio.abc.ReceiveStream) -> None:
    while await stream.receive_some(65536):
        pass


async def _watch_zookeeper(zookeeper: ZooKeeperServer, stopping: trio.Event) -> None:
    """ZooKeeper exited by itself: start it again (the brokers ride it out, as they ride
    out a ZooKeeper outage)."""
    failures = 0
    while not stopping.is_set():
        with trio.move_on_after(0.5):
            await stopping.wait()
        process = zookeeper.process
        if stopping.is_set() or process is None or process.poll() is None:
            continue
        failures += 1
        delay = min(2.0 ** (failures - 1), 10.0)
        print(f"{PROG}: ZooKeeper exited with {_status(process.returncode)}; starting it "
              f"again in {delay:g} s (its log: {zookeeper.data_dir}/zookeeper.log)", flush=True)
        with trio.move_on_after(delay):
            await stopping.wait()
        if not stopping.is_set():
            await _start_zookeeper(zookeeper)


async def _stop_all(brokers: list[_Broker], zookeeper: ZooKeeperServer) -> None:
    """SIGTERM to every broker (each shuts down cleanly), SIGKILL to one that outlives
    ``_STOP_TIMEOUT_S``; then ZooKeeper."""
    async with trio.open_nursery() as nursery:
        for broker in brokers:
            if broker.process is not None and broker.process.returncode is None:
                nursery.start_soon(_stop_process, broker.process)
    await trio.to_thread.run_sync(zookeeper.stop)


async def _stop_process(process: trio.Process) -> None:
    process.send_signal(signal.SIGTERM)
    with trio.move_on_after(_STOP_TIMEOUT_S):
        await process.wait()
        return
    process.kill()
    await process.wait()


def _last_line(path: Path) -> str:
    """The last line a process wrote to its log: why it stopped, most of the time."""
    try:
        with open(path, "rb") as f:
            f.seek(max(f.seek(0, 2) - 4096, 0))
            lines = [line for line in f.read().decode("utf-8", "replace").splitlines()
                     if line.strip()]
    except OSError:
        return "no log"
    return lines[-1][:300] if lines else "nothing in its log"


def _status(code: int | None) -> str:
    if code is None:
        return "no status"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"status {code}"

