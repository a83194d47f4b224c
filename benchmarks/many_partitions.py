"""Many partitions on one standalone broker (issue 27, item 2): ``--topics`` x ``--partitions``
(default 50 x 1,000 = 50,000) single-replica partitions, one record each, under a hard
descriptor limit of ``--nofile`` (default 1024: the broker cannot raise its soft limit past
it, so the segment files must be opened lazily).

Each figure is printed beside its target, with the broker's CPU seconds during it (the
figure that means something on a loaded machine; for a restart, its CPU until listening):

- **create**: CreateTopics of every topic, one request each, one after the other;
- **metadata**: an all-topics Metadata v4 answer, to its last byte: the first one (built)
  and the median of ``--metadata-rounds`` more (from the broker's cache);
- **produce**: one record to every partition (one Produce v3 request per topic, acks=1);
- **fetch**: every partition fetched from offset 0 (one Fetch v4 request per topic), each
  must return its record;
- **RSS**: the broker's resident memory after produce and fetch;
- **SIGTERM**: from the signal to the process's exit (a clean shutdown);
- **restart (clean)**: from the start of a new process to its "listening" line, then an
  all-topics Metadata and the fetch again;
- **restart (SIGKILL)**: the same after a SIGKILL (every log recovered from its recovery
  point).

The broker processes run without ``PYTHONDONTWRITEBYTECODE`` (which a development shell may
set), so the first one writes trilog's ``.pyc`` files and the restarts load them, as a
deployed broker does: a restart that compiled every module from source first would count
0.3-0.4 s that no operator sees.

    .venv/bin/python benchmarks/many_partitions.py [--topics 50] [--partitions 1000]
        [--nofile 1024] [--log-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import BrokerProcess, FrameReader, connect  # noqa: E402

from trilog import protocol as p  # noqa: E402
from trilog.records import build_batch  # noqa: E402

TARGETS = {"create": 60.0, "metadata": 0.300, "sigterm": 5.0, "restart_clean": 10.0,
           "restart_kill": 30.0, "rss": 1 << 30}


class Client:
    """One blocking Kafka-protocol connection."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = connect(address)
        self.reader = FrameReader(self.sock, 1 << 20)
        self.correlation = 0

    def call(self, request: p.Message, version: int) -> p.Message:
        self.correlation += 1
        self.sock.sendall(p.encode_request(request, version, self.correlation, "many-bench"))
        return p.decode_response(self.reader.read(), type(request).API_KEY, version)[1]

    def close(self) -> None:
        self.sock.close()


def create(client: Client, topics: list[str], partitions: int) -> float:
    R = p.CreateTopicsRequest
    started = time.perf_counter()
    for topic in topics:
        response = client.call(R(topics=[R.CreatableTopic(
            name=topic, num_partitions=partitions, replication_factor=1, assignments=[],
            configs=[])], timeout_ms=600_000, validate_only=False), 2)
        if response.topics[0].error_code:
            raise RuntimeError(f"CreateTopics {topic}: error {response.topics[0].error_code} "
                               f"{getattr(response.topics[0], 'error_message', '')}")
    return time.perf_counter() - started


def metadata(client: Client, rounds: int, expect: int) -> float:
    """The median time from an all-topics Metadata request to the last byte of its answer
    (decoding 50,000 partitions in this process is not the broker's time: after the clock).
    The first answer after a start or a change is built; later ones come from the cache."""
    R = p.MetadataRequest
    times = []
    for _ in range(rounds):
        client.correlation += 1
        started = time.perf_counter()
        client.sock.sendall(p.encode_request(R(topics=None, allow_auto_topic_creation=False),
                                             4, client.correlation, "many-bench"))
        payload = client.reader.read()
        times.append(time.perf_counter() - started)
        response = p.decode_response(payload, R.API_KEY, 4)[1]
        count = sum(len(t.partitions) for t in response.topics)
        if count < expect:
            raise RuntimeError(f"the all-topics Metadata answer names {count} partitions, "
                               f"not {expect}")
    return statistics.median(times)


def produce(client: Client, topics: list[str], partitions: int) -> float:
    R = p.ProduceRequest
    started = time.perf_counter()
    batch = build_batch([(int(time.time() * 1000), None, b"one record")])
    for topic in topics:
        response = client.call(R(transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[
            R.TopicProduceData(name=topic, partition_data=[
                R.TopicProduceData.PartitionProduceData(index=i, records=batch)
                for i in range(partitions)])]), 3)
        errors = [r.error_code for t in response.responses for r in t.partition_responses
                  if r.error_code]
        if errors:
            raise RuntimeError(f"Produce {topic}: {len(errors)} errors, e.g. {errors[0]}")
    return time.perf_counter() - started


def fetch(client: Client, topics: list[str], partitions: int) -> float:
    R = p.FetchRequest
    started = time.perf_counter()
    for topic in topics:
        response = client.call(R(max_wait_ms=0, min_bytes=1, max_bytes=0x7FFFFFFF,
                                 isolation_level=0, topics=[R.FetchTopic(topic=topic, partitions=[
                                     R.FetchTopic.FetchPartition(partition=i, fetch_offset=0,
                                                                 partition_max_bytes=1 << 16)
                                     for i in range(partitions)])]), 4)
        parts = [q for t in response.responses for q in t.partitions]
        empty = [q.partition_index for q in parts if q.error_code or not q.records]
        if len(parts) != partitions or empty:
            raise RuntimeError(f"Fetch {topic}: {len(parts)} partitions answered, "
                               f"{len(empty)} without their record (e.g. {empty[:3]})")
    return time.perf_counter() - started


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def line(name: str, value: float, target: float | None, unit: str = "s",
         cpu: float | None = None) -> None:
    """One figure beside its target; ``cpu``: the broker's CPU seconds meanwhile (the
    figure that means something on a loaded machine)."""
    if unit == "MB":
        shown, goal = f"{value / 1e6:8.0f} MB", f"{target / 1e6:.0f} MB" if target else ""
    else:
        shown, goal = f"{value:8.3f} s ", f"{target:g} s" if target else ""
    verdict = "" if target is None else ("  ok" if value <= target else "  MISSED")
    spent = "" if cpu is None else f"   (broker CPU {cpu:.2f} s)"
    print(f"{name:<28}{shown}   target {goal or '-':<10}{verdict:<8}{spent}", flush=True)


def timed(broker: BrokerProcess, name: str, target: float | None, fn, *args) -> None:
    cpu = broker.cpu()
    value = fn(*args)
    line(name, value, target, cpu=broker.cpu() - cpu)


class Run:
    def __init__(self, args: argparse.Namespace, log_dir: str) -> None:
        self.args = args
        self.log_dir = log_dir
        self.topics = [f"many-{i:03d}" for i in range(args.topics)]
        self.total = args.topics * args.partitions
        nofile = args.nofile

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self.preexec = limit if nofile else None
        # A deployed broker has its bytecode cache: the first start writes it (see above).
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def broker(self) -> BrokerProcess:
        return BrokerProcess(self.log_dir, {"max.broker.partitions": self.total + 100,
                                            "num.partitions": 1},
                             log_path=os.path.join(os.path.dirname(self.log_dir), "broker.log"),
                             preexec_fn=self.preexec, env=self.env)

    def restart(self, name: str, target: float) -> BrokerProcess:
        started = time.perf_counter()
        broker = self.broker().start(timeout=600)
        line(name, time.perf_counter() - started, target, cpu=broker.cpu())
        client = Client(broker.address)
        try:
            timed(broker, "  then metadata", None, metadata, client, 1, self.total)
            timed(broker, "  then fetch", None, fetch, client, self.topics, self.args.partitions)
        finally:
            client.close()
        return broker

    def first(self) -> BrokerProcess:
        args = self.args
        broker = self.broker().start()
        client = Client(broker.address)
        try:
            timed(broker, "create", TARGETS["create"], create, client, self.topics,
                  args.partitions)
            timed(broker, "metadata (first, built)", TARGETS["metadata"], metadata, client,
                  1, self.total)
            timed(broker, "metadata (all topics)", TARGETS["metadata"], metadata, client,
                  args.metadata_rounds, self.total)
            timed(broker, "produce one each", None, produce, client, self.topics,
                  args.partitions)
            timed(broker, "fetch each", None, fetch, client, self.topics, args.partitions)
            line("RSS", rss(broker.pid), TARGETS["rss"], "MB")
            print(f"{'open descriptors':<28}{open_fds(broker.pid):8d}     (hard limit "
                  f"{args.nofile or 'unchanged'})", flush=True)
        finally:
            client.close()
        return broker


def stop_timed(name: str, broker: BrokerProcess, sig: int, target: float | None) -> None:
    """Signal the broker, wait for its exit; its CPU seconds from the signal on come from
    the children's resource usage once it is reaped."""
    before = broker.cpu()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    broker.signal(sig)
    if not broker.reap(120):
        broker.stop()
        raise RuntimeError("the broker did not exit within 120 s")
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    line(name, elapsed, target, cpu=max(0.0, spent - before))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=50)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--nofile", type=int, default=1024,
                        help="the broker's soft and hard RLIMIT_NOFILE (0: unchanged)")
    parser.add_argument("--metadata-rounds", type=int, default=5)
    parser.add_argument("--log-dir", help="where the broker's log dir goes (default: a "
                        "temporary directory, removed afterwards)")
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="many-partitions-", dir=args.log_dir)
    log_dir = os.path.join(base, "logs")
    print(f"{args.topics} topics x {args.partitions} partitions = "
          f"{args.topics * args.partitions} partitions, RLIMIT_NOFILE {args.nofile or '-'}; "
          f"broker log: {os.path.join(base, 'broker.log')}", flush=True)
    run = Run(args, log_dir)
    broker = run.first()
    try:
        stop_timed("SIGTERM to exit", broker, signal.SIGTERM, TARGETS["sigterm"])
        broker = run.restart("restart (clean) to serving", TARGETS["restart_clean"])
        stop_timed("SIGKILL to exit", broker, signal.SIGKILL, None)
        broker = run.restart("restart (SIGKILL) to serving", TARGETS["restart_kill"])
        stop_timed("SIGTERM to exit", broker, signal.SIGTERM, TARGETS["sigterm"])
    finally:
        broker.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
