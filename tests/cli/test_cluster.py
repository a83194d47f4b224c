"""``trilog cluster --brokers 3``: ZooKeeper and three brokers as one supervised foreground
process that independent Kafka clients use with replication factor 3; a broker killed with
SIGKILL is started again and rejoins; SIGTERM stops everything and leaves no process
behind; the data is there at the next start."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import trio

import trilog

pytestmark = pytest.mark.slow

_CLI = "import sys; from trilog.cli import main; sys.exit(main())"
_READY = re.compile(r"ready: bootstrap servers (\S+) \(ZooKeeper (\S+)\)")


class Cluster:
    """A ``trilog cluster`` process; ``lines`` is what it printed so far."""

    def __init__(self, data_dir: Path, brokers: int = 3) -> None:
        self.data_dir = data_dir
        self.process = subprocess.Popen(
            [sys.executable, "-c", _CLI, "cluster", "--brokers", str(brokers), "--data-dir",
             str(data_dir), "--port", "0", "--zookeeper-port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, bufsize=0)
        self.lines: list[str] = []
        try:
            match = _READY.search(self.wait_for("ready: bootstrap servers", 180))
        except BaseException:
            self.stop()
            raise
        assert match is not None
        self.bootstrap, self.zookeeper = match.group(1), match.group(2)

    def wait_for(self, text: str, timeout: float) -> str:
        """The first line (printed so far or from now on) that holds ``text``."""
        for line in self.lines:
            if text in line:
                return line
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            assert self.process.stdout is not None
            selector.register(self.process.stdout, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if not selector.select(max(deadline - time.monotonic(), 0)):
                    break
                raw = self.process.stdout.readline()
                if not raw:
                    break
                line = raw.decode()
                self.lines.append(line)
                if text in line:
                    return line
        raise AssertionError(f"no {text!r} from trilog cluster within {timeout} s:\n"
                             + "".join(self.lines))

    def stderr(self) -> str:
        return self._stderr

    _stderr = ""

    def children(self) -> dict[int, str]:
        """The processes this one started (pid -> command line)."""
        return processes_using(self.data_dir, besides=self.process.pid)

    def broker_pid(self, broker_id: int) -> int:
        [pid] = [pid for pid, cmd in self.children().items()
                 if f"--broker-id {broker_id} " in cmd]
        return pid

    def stop(self) -> int:
        """SIGTERM, and the exit status; what it printed is in ``lines`` and ``stderr()``."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(90)
            except subprocess.TimeoutExpired:
                self.process.kill()
        code = self.process.wait(10)
        assert self.process.stdout is not None and self.process.stderr is not None
        with self.process.stdout, self.process.stderr:
            self.lines += self.process.stdout.read().decode().splitlines(keepends=True)
            self._stderr = self.process.stderr.read().decode(errors="replace")
        return code


def processes_using(data_dir: Path, besides: int = -1) -> dict[int, str]:
    """The processes whose command line names ``data_dir`` (pid -> command line), from
    /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == besides:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(data_dir) in cmdline:
            found[int(entry.name)] = cmdline
    return found


@pytest.fixture
def cluster_dir(tmp_path):
    data = tmp_path / "cluster"
    yield data
    for pid in processes_using(data):  # whatever a failed test left behind
        os.kill(pid, signal.SIGKILL)


def _confluent_round(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])[topic] \
        .result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, value=b"c%d" % i)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.close()
    assert sorted(got) == sorted(b"c%d" % i for i in range(count))


def _kafka_python_round(bootstrap: str, topic: str, count: int, expect: int) -> int:
    """kafka-python writes ``count`` records, then a new group reads the topic: how many
    it got, once ``expect`` came (and half a second more, for any surplus) or 60 s passed."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(count):
        producer.send(topic, b"k%d" % i)
    producer.flush(60)
    producer.close()
    return _kafka_python_count(bootstrap, topic, expect)


def _kafka_python_count(bootstrap: str, topic: str, expect: int) -> int:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"g-{uuid.uuid4()}",
                             auto_offset_reset="earliest")
    got = 0
    deadline = time.monotonic() + 60
    while got < expect and time.monotonic() < deadline:
        got += sum(len(batch) for batch in consumer.poll(timeout_ms=500).values())
    got += sum(len(batch) for batch in consumer.poll(timeout_ms=500).values())
    consumer.close()
    return got


async def _replicas(bootstrap: str, topic: str) -> list[tuple[int, ...]]:
    async with trilog.open_admin(bootstrap) as admin:
        [info] = await admin.describe_topics([topic])
    return [tuple(sorted(p.isr)) for p in info.partitions]


async def _wait_in_sync(bootstrap: str, topic: str, timeout: float = 90) -> None:
    with trio.fail_after(timeout):
        while await _replicas(bootstrap, topic) != [(1, 2, 3)] * 3:
            await trio.sleep(0.5)


def test_a_three_broker_cluster_for_kafka_clients_that_heals_and_stops_cleanly(cluster_dir):
    cluster = Cluster(cluster_dir)
    try:
        assert len(cluster.bootstrap.split(",")) == 3
        _confluent_round(cluster.bootstrap, "rf3", 50)
        assert _kafka_python_round(cluster.bootstrap, "rf3", 50, 100) == 100
        trio.run(_wait_in_sync, cluster.bootstrap, "rf3")

        victim = cluster.broker_pid(2)
        os.kill(victim, signal.SIGKILL)
        cluster.wait_for("broker 2 exited with signal SIGKILL", 30)
        cluster.wait_for("broker 2 back on", 120)
        assert cluster.broker_pid(2) != victim
        trio.run(_wait_in_sync, cluster.bootstrap, "rf3")  # it rejoined every ISR
        assert _kafka_python_round(cluster.bootstrap, "rf3", 10, 110) == 110

        started = cluster.children()
        assert len(started) == 4  # ZooKeeper and three brokers
    finally:
        code = cluster.stop()
    assert code == 0, cluster.stderr()
    assert cluster.lines[-1] == "trilog cluster: stopped\n"
    assert cluster.children() == {}
    assert not any(Path(f"/proc/{pid}").exists() for pid in started)

    # The data is kept for the next start: the same topic, every record.
    again = Cluster(cluster_dir)
    try:
        trio.run(_wait_in_sync, again.bootstrap, "rf3")
        assert _kafka_python_count(again.bootstrap, "rf3", 110) == 110
    finally:
        assert again.stop() == 0
    assert again.children() == {}


def test_bad_options_and_a_busy_zookeeper_port(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", _CLI, "cluster", "--data-dir",
                               str(tmp_path / "c"), *args], capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)

    none = run("--brokers", "0")
    assert none.returncode == 2 and "0 brokers: choose 1 to 100" in none.stderr
    override = run("--override", "num.partitions")
    assert override.returncode == 2 and "--override 'num.partitions' is not KEY=VALUE" \
        in override.stderr
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        taken = run("--zookeeper-port", str(port))
    assert taken.returncode == 1
    assert taken.stderr.strip() == (
        f"trilog cluster: cannot serve on 127.0.0.1:{port}: Address already in use (another "
        "ZooKeeper, or another program, listens there); choose another port")
    assert processes_using(tmp_path / "c") == {}
    ports = run("--port", "65535", "--brokers", "2")
    assert ports.returncode == 2 and "no room for 2 brokers below 65536" in ports.stderr


def test_a_broker_option_it_refuses_stops_the_cluster_at_once(tmp_path):
    data = tmp_path / "c"
    done = subprocess.run([sys.executable, "-c", _CLI, "cluster", "--brokers", "2",
                           "--data-dir", str(data), "--port", "0", "--zookeeper-port", "0",
                           "--override", "num.partitions=abc"], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 1
    assert re.search(r"trilog cluster: broker \d refused its options: trilog broker: override: "
                     r"num.partitions='abc' is not valid: expected a whole number",
                     done.stderr), done.stderr
    assert processes_using(data) == {}  # ZooKeeper and the other broker stopped too
