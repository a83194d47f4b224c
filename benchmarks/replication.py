"""Replication: what three replicas cost and how long a partition is unavailable when its
leader goes, on a real three-broker cluster with a real ZooKeeper, in one run.

A ZooKeeper server and three ``trilog broker`` processes start on free loopback ports (temporary
data dirs, the brokers' logs in files beside them).  Every phase drives them with trilog's own
async producer (``trilog.open_producer``, batching), in child processes started afresh for
each phase, so that client and load are the same for both configurations:

  throughput   100-byte records as fast as one producer sends them, for ``--seconds`` each,
               to a topic with replication factor 1 and ``acks=1``, then to one with
               replication factor 3 and ``acks=all`` (``min.insync.replicas=2``), alternating
               for ``--rounds`` rounds.  The figure is the ratio of the two rates.  Target
               >= 0.35; Kafka's 2014 figure: 0.51 (421,823 against 821,557 records/s, one
               producer, 3x synchronous replication).  Each broker's CPU seconds are read from
               /proc before and after, so the table also shows the brokers' CPU per record.
  latency      the same two configurations at a paced ``--rate`` (10,000 records/s; producer
               ``linger_ms=1``) while a consumer process long-polls the same topic (one fetch
               loop per leader broker).  Latency is the time a record is consumed minus the
               time it was sent, which the producer writes into the record's value in
               nanoseconds (the record timestamp has only millisecond resolution); both
               processes read the same clock.  Target: p99 < 10 ms with replication factor 3.
  failover     a topic with replication factor 3 while a producer process (``acks=all``,
               retrying) sends a record to each partition every 5 ms: first the leader of a
               partition (not the controller) gets SIGKILL, and a prober measures from the
               kill until a surviving broker's Metadata names a new leader, and until a
               produce to that leader succeeds.  Detection waits for ZooKeeper to expire the
               dead broker's session: ``zookeeper.session.timeout.ms`` (``--session-timeout-ms``)
               bounds it from below.  The broker is restarted and rejoins the ISR; then another
               partition's leader gets SIGTERM (a controlled shutdown), measured the same way.
               Target: leadership moved within 1 s.  The producer's own view (the longest
               any record waited for its acknowledgement, and failures) is printed beside it,
               and every acknowledged record is read back at the end.

Nothing else should run meanwhile: three brokers, ZooKeeper, the producer and the consumer
share this machine's two cores, and absolute rates swing by 30-50 % between runs here, so
compare the ratios.  ``--py-spy`` samples one broker (leader of some partitions, follower of
others) during the first replicated throughput round and prints where its time went.

    .venv/bin/python benchmarks/replication.py                      # ~3 minutes
    .venv/bin/python benchmarks/replication.py --quick              # ~2 minutes
    .venv/bin/python benchmarks/replication.py --seconds 20 --rounds 3 --latency-seconds 30
    .venv/bin/python benchmarks/replication.py --py-spy .venv/bin/py-spy
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import BrokerProcess, machine_cpu_seconds

TARGET_RATIO = 0.35
KAFKA_2014_RATIO = 421_823 / 821_557  # 0.51
TARGET_P99_MS = 10.0
TARGET_CONTROLLED_S = 1.0
MIN_INSYNC = 2
STEADY_INTERVAL_S = 0.005
_TIME = struct.Struct(">qq")  # send time (time.time_ns()), sequence number


# -- workers: each runs in a process of its own and prints one JSON line at the end -----------


def _value(size: int, seq: int) -> bytes:
    return _TIME.pack(time.time_ns(), seq) + b"x" * max(0, size - _TIME.size)


def worker_throughput(args) -> None:
    """Send as fast as one producer can for ``args.seconds``, then flush."""
    import trio

    import trilog

    value = b"x" * args.record_size
    acks = "all" if args.acks == "all" else int(args.acks)

    async def main() -> None:
        async with trilog.open_producer(bootstrap_servers=args.bootstrap, acks=acks,
                                        linger_ms=5, batch_size=65536) as producer:
            await producer.partitions_for(args.topic)  # connected, partitions known
            send, send_wait = producer.send_nowait, producer.send
            checkpoint = trio.lowlevel.checkpoint
            n = 0
            c0, t0 = time.process_time(), time.perf_counter()
            stop = t0 + args.seconds
            while True:
                for _ in range(1024):
                    try:
                        send(args.topic, value)
                    except trilog.BufferFullError:
                        await send_wait(args.topic, value)  # waits for buffer room
                n += 1024
                await checkpoint()  # let the sender task seal and send batches
                if time.perf_counter() >= stop:
                    break
            await producer.flush()
            seconds = time.perf_counter() - t0
            stats = producer.statistics()
            print(json.dumps({"records": n, "seconds": seconds, "cpu": time.process_time() - c0,
                              "errors": stats["record_errors"], "retries": stats["retries"],
                              "request_latency_avg_ms": stats["request_latency_avg_ms"]}),
                  flush=True)

    trio.run(main)


def worker_paced(args) -> None:
    """Send ``args.rate`` records/s for ``args.seconds``, the send time in each value."""
    import trio

    import trilog

    acks = "all" if args.acks == "all" else int(args.acks)

    async def main() -> None:
        async with trilog.open_producer(bootstrap_servers=args.bootstrap, acks=acks,
                                        linger_ms=args.linger_ms) as producer:
            await producer.partitions_for(args.topic)
            n = 0
            total = int(args.rate * args.seconds)
            t0 = time.perf_counter()
            while n < total:
                due = min(total, int((time.perf_counter() - t0) * args.rate) + 1)
                while n < due:
                    try:
                        producer.send_nowait(args.topic, _value(args.record_size, n))
                    except trilog.BufferFullError:
                        await producer.send(args.topic, _value(args.record_size, n))
                    n += 1
                await trio.sleep(0.001)
            await producer.flush()
            stats = producer.statistics()
            print(json.dumps({"records": n, "seconds": time.perf_counter() - t0,
                              "errors": stats["record_errors"]}), flush=True)

    trio.run(main)


def worker_consume(args) -> None:
    """Long-poll every partition (one loop per leader broker, ``args.groups``) from offset 0;
    prints ``ready``, then stops once it has read the count written to its stdin."""
    import trio

    import trilog

    groups = [[int(p) for p in g.split(",")] for g in args.groups.split(";")]
    latencies: list[int] = []
    seen: set[int] = set()
    state = {"expected": None, "deadline": None, "duplicates": 0, "count": 0}

    async def read_expected() -> None:
        line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        state["expected"] = int(line or 0)
        state["deadline"] = time.monotonic() + 10.0

    def done() -> bool:
        return state["expected"] is not None and (
            state["count"] >= state["expected"] or time.monotonic() > state["deadline"])

    async def loop(consumer, partitions: list[int]) -> None:
        positions = {p: 0 for p in partitions}
        while not done():
            results = await consumer.multifetch(
                [(args.topic, p, positions[p], 1 << 20) for p in partitions],
                max_wait_ms=200, min_bytes=1)
            now = time.time_ns()
            for fetched in results:
                for record in fetched:
                    if len(record.value) < _TIME.size:
                        continue  # the benchmark's check that the topic replicates
                    sent, seq = _TIME.unpack_from(record.value)
                    if seq in seen:
                        state["duplicates"] += 1
                        continue
                    seen.add(seq)
                    state["count"] += 1
                    if seq >= args.warmup:
                        latencies.append(now - sent)
                positions[fetched.partition] = fetched.next_offset

    async def main() -> None:
        async with trilog.open_simple_consumer(bootstrap_servers=args.bootstrap) as consumer:
            await consumer.partitions_for(args.topic)
            print("ready", flush=True)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_expected)
                async with trio.open_nursery() as loops:
                    for partitions in groups:
                        loops.start_soon(loop, consumer, partitions)
                nursery.cancel_scope.cancel()
        latencies.sort()

        def pct(q: float) -> float:
            return latencies[min(len(latencies) - 1, int(q * len(latencies)))] / 1e6

        print(json.dumps({"records": state["count"], "duplicates": state["duplicates"],
                          "measured": len(latencies),
                          "p50_ms": pct(0.50), "p99_ms": pct(0.99), "p999_ms": pct(0.999),
                          "max_ms": latencies[-1] / 1e6, "mean_ms":
                          sum(latencies) / len(latencies) / 1e6}), flush=True)

    trio.run(main)


def worker_steady(args) -> None:
    """A record to every partition each 5 ms (``acks=all``, retrying for up to a minute) until
    ``args.stop_file`` exists; then reads every partition back.  Prints each record's
    partition, send and acknowledgement times, and what was missing when read back."""
    import trio

    import trilog

    outcomes: list[list] = []  # [partition, sent (wall s), acked (wall s) or None, error]

    async def track(delivery, row: list) -> None:
        try:
            await delivery.wait()
            row[2] = time.time()
        except trilog.TrilogError as exc:
            row[2], row[3] = time.time(), type(exc).__name__

    async def main() -> None:
        async with trilog.open_producer(bootstrap_servers=args.bootstrap, acks="all",
                                        linger_ms=0, retries=1_000, retry_backoff_ms=20,
                                        delivery_timeout_ms=60_000,
                                        request_timeout_ms=10_000) as producer:
            partitions = await producer.partitions_for(args.topic)
            print("ready", flush=True)
            async with trio.open_nursery() as nursery:
                seq = 0
                deadline = time.monotonic() + args.seconds
                while not os.path.exists(args.stop_file) and time.monotonic() < deadline:
                    for p in partitions:
                        row = [p, time.time(), None, None]
                        delivery = await producer.send(args.topic, b"%d" % seq, partition=p)
                        row.append(seq)
                        outcomes.append(row)
                        nursery.start_soon(track, delivery, row)
                        seq += 1
                    await trio.sleep(STEADY_INTERVAL_S)
                await producer.flush()
        acked = {row[4] for row in outcomes if row[2] is not None and row[3] is None}
        found: collections.Counter = collections.Counter()
        async with trilog.open_simple_consumer(bootstrap_servers=args.bootstrap) as consumer:
            for p in partitions:
                offset = 0
                for _ in range(100_000):
                    fetched = await consumer.fetch(args.topic, p, offset, max_wait_ms=0)
                    for record in fetched:
                        if record.value.isdigit():  # not one of the benchmark's probes
                            found[int(record.value)] += 1
                    if fetched.next_offset == offset:
                        break
                    offset = fetched.next_offset
        print(json.dumps({"outcomes": [row[:4] for row in outcomes],
                          "missing": len(acked - set(found)),
                          "duplicates": sum(1 for v in found.values() if v > 1)}), flush=True)

    trio.run(main)


WORKERS = {"throughput": worker_throughput, "paced": worker_paced, "consume": worker_consume,
           "steady": worker_steady}


# -- the cluster --------------------------------------------------------------------------------


class Broker(BrokerProcess):
    """A member of the benchmark's cluster: ``broker-<id>/`` for data, ``broker-<id>.log``."""

    def __init__(self, broker_id: int, data_dir: str, zookeeper: str,
                 overrides: dict[str, object], log_level: str = "WARNING") -> None:
        super().__init__(os.path.join(data_dir, f"broker-{broker_id}"), overrides, log_level,
                         broker_id=broker_id, zookeeper=zookeeper,
                         log_path=os.path.join(data_dir, f"broker-{broker_id}.log"))
        self.broker_id: int = broker_id


class Cluster:
    """ZooKeeper and three brokers; ``close()`` stops them all (SIGKILL for the stubborn)."""

    def __init__(self, data_dir: str, overrides: dict[str, object], size: int = 3,
                 log_level: str = "WARNING") -> None:
        from trilog.zk import ZooKeeperServer
        from trilog.zk._server import free_port

        self.zookeeper = ZooKeeperServer(port=free_port(),
                                         data_dir=os.path.join(data_dir, "zookeeper"))
        self.data_dir = data_dir
        self.overrides = overrides
        self.log_level = log_level
        self.brokers = {i: None for i in range(1, size + 1)}

    def start(self) -> None:
        self.zookeeper.start()
        chroot = "/replication-bench"
        from kazoo.client import KazooClient  # the benchmark's own setup, not trilog code

        zk = KazooClient(self.zookeeper.connect_string)
        zk.start(timeout=10)
        try:
            zk.ensure_path(chroot)
        finally:
            zk.stop()
            zk.close()
        self.connect = self.zookeeper.connect_string + chroot
        for i in self.brokers:
            self.brokers[i] = Broker(i, self.data_dir, self.connect, self.overrides,
                                     self.log_level)
            self.brokers[i].spawn()
        for broker in self.brokers.values():
            broker.wait_ready()
        self.wait_registered()

    def wait_registered(self, timeout: float = 30.0) -> None:
        """Until every broker's Metadata names all of them: a broker listens before the
        others' registrations reach it, and a topic created meanwhile with replication factor
        3 fails with INVALID_REPLICATION_FACTOR."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(len(registered_brokers(b)) == len(self.brokers) for b in self.live()):
                return
            time.sleep(0.05)
        raise RuntimeError(f"the brokers did not all register within {timeout:.0f} s")

    def restart(self, broker_id: int) -> Broker:
        broker = self.brokers[broker_id]
        broker.spawn()
        broker.wait_ready()
        return broker

    def live(self) -> list[Broker]:
        return [b for b in self.brokers.values() if b is not None and b.alive()]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.live())

    def close(self) -> None:
        try:
            live = self.live()
            for broker in live:
                broker.signal(signal.SIGTERM)
            deadline = time.monotonic() + 8.0
            for broker in live:
                if not broker.reap(max(0.1, deadline - time.monotonic())):
                    broker.signal(signal.SIGKILL)
                    broker.reap(10.0)
        finally:
            self.zookeeper.stop()


# -- a blocking protocol client for setup and probes ------------------------------------------


class Probe:
    """One request at a time to a broker over a plain socket (trilog's ``protocol`` package)."""

    def __init__(self, address: tuple[str, int], timeout: float = 5.0) -> None:
        from trilog import protocol

        self.p = protocol
        self.sock = socket.create_connection(address, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation = 0

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc) -> None:
        self.sock.close()

    def _recv(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def call(self, request, version: int):
        self.correlation += 1
        self.sock.sendall(self.p.encode_request(request, version, self.correlation,
                                                client_id="replication-bench"))
        (size,) = struct.unpack(">i", self._recv(4))
        _, body = self.p.decode_response(self._recv(size), type(request).API_KEY, version)
        return body

    def metadata(self, *topics: str):
        R = self.p.MetadataRequest
        return self.call(R(topics=[R.MetadataRequestTopic(name=t) for t in topics],
                           allow_auto_topic_creation=False), 4)

    def create_topic(self, topic: str, partitions: int, factor: int, configs: dict) -> None:
        R = self.p.CreateTopicsRequest
        response = self.call(R(topics=[R.CreatableTopic(
            name=topic, num_partitions=partitions, replication_factor=factor, assignments=[],
            configs=[R.CreatableTopic.CreatableTopicConfig(name=k, value=str(v))
                     for k, v in configs.items()])], timeout_ms=30_000), 2)
        if response.topics[0].error_code:
            raise RuntimeError(f"CreateTopics {topic}: error {response.topics[0].error_code}")

    def produce_one(self, topic: str, partition: int, value: bytes,
                    timeout_ms: int = 5_000) -> int:
        from trilog.records import build_batch

        R = self.p.ProduceRequest
        response = self.call(R(transactional_id=None, acks=-1, timeout_ms=timeout_ms, topic_data=[
            R.TopicProduceData(name=topic, partition_data=[
                R.TopicProduceData.PartitionProduceData(
                    index=partition,
                    records=build_batch([(int(time.time() * 1000), None, value)]))])]), 3)
        return response.responses[0].partition_responses[0].error_code

    def log_end_offset(self, topic: str, partition: int) -> int:
        R = self.p.ListOffsetsRequest
        response = self.call(R(replica_id=-1, isolation_level=0, topics=[R.ListOffsetsTopic(
            name=topic, partitions=[R.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=partition, timestamp=-1, max_num_offsets=1)])]), 1)
        part = response.topics[0].partitions[0]
        if part.error_code:
            raise RuntimeError(f"ListOffsets {topic}-{partition}: error {part.error_code}")
        return part.offset


def registered_brokers(broker: Broker) -> set[int]:
    """The broker ids ``broker``'s Metadata names (none if it does not answer)."""
    try:
        with Probe(broker.address, timeout=2.0) as probe:
            return {b.node_id for b in probe.metadata().brokers}
    except OSError:
        return set()


def partition_states(broker: Broker, topic: str) -> dict | None:
    """``{partition: (leader, isr)}`` and the controller, as ``broker`` sees them."""
    try:
        with Probe(broker.address, timeout=2.0) as probe:
            response = probe.metadata(topic)
    except OSError:
        return None
    (t,) = response.topics
    if t.error_code:
        return None
    return {"controller": response.controller_id,
            "brokers": {b.node_id: (b.host, b.port) for b in response.brokers},
            "partitions": {x.partition_index: (x.leader_id, sorted(x.isr_nodes))
                           for x in t.partitions}}


def wait_fully_replicated(cluster: Cluster, topic: str, partitions: int, factor: int,
                          timeout: float = 60.0) -> dict:
    """Every live broker shows every partition led, with ``factor`` in-sync replicas."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        views = [partition_states(b, topic) for b in cluster.live()]
        if all(v and len(v["partitions"]) == partitions and
               all(leader >= 0 and len(isr) == factor for leader, isr in v["partitions"].values())
               for v in views):
            return views[0]
        time.sleep(0.05)
    raise RuntimeError(f"{topic}: not fully replicated after {timeout:.0f} s")


#: Topics created and found with a partition that does not replicate (see create_topic).
STUCK_TOPICS: list[str] = []


def create_topic(cluster: Cluster, topic: str, partitions: int, factor: int,
                 attempts: int = 8) -> dict:
    """Create ``topic`` (a fresh name per attempt) and check that every partition replicates:
    one ``acks=all`` record to each must be acknowledged within 3 s.  A topic where one is
    not is a broker bug found by this benchmark (a follower that asks its leader before the
    leader took its LeaderAndIsr drops the partition from its fetcher for good: see
    docs/performance.md, "Replication"); it is set aside and created again under another
    name, up to ``attempts`` times, so that the phases measure working replication.
    Returns the partition states, with ``topic`` (the name used) and ``probes`` (records
    the check wrote)."""
    configs = {"min.insync.replicas": MIN_INSYNC} if factor >= MIN_INSYNC else {}
    for attempt in range(attempts):
        name = topic if attempt == 0 else f"{topic}-retry{attempt}"
        with Probe(cluster.live()[0].address) as probe:
            probe.create_topic(name, partitions, factor, configs)
        state = wait_fully_replicated(cluster, name, partitions, factor)
        stuck = []
        for partition, (leader, _) in sorted(state["partitions"].items()):
            with Probe(cluster.brokers[leader].address, timeout=10.0) as probe:
                error = probe.produce_one(name, partition, b"check", timeout_ms=3_000)
            if error:
                stuck.append((partition, leader, error))
        state["topic"], state["probes"] = name, partitions
        if not stuck or factor == 1:
            return state
        STUCK_TOPICS.append(name)
        print(f"  !! {name}: acks=all not acknowledged within 3 s on "
              + ", ".join(f"partition {p} (leader {lead}, error {e})" for p, lead, e in stuck)
              + "; creating the topic again", flush=True)
    return state


def high_watermarks(cluster: Cluster, topic: str, state: dict) -> int:
    """The sum of the partitions' log ends (asked of each leader, which answers up to the
    high watermark)."""
    total = 0
    for partition, (leader, _) in state["partitions"].items():
        with Probe(cluster.brokers[leader].address) as probe:
            total += probe.log_end_offset(topic, partition)
    return total


# -- running workers ----------------------------------------------------------------------------


class Workers:
    """Worker processes of this script; ``close()`` kills any still running."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str, **options) -> subprocess.Popen:
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", name]
        for key, value in options.items():
            cmd += [f"--{key.replace('_', '-')}", str(value)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.procs.append(proc)
        return proc

    @staticmethod
    def wait_line(proc: subprocess.Popen, want: str, timeout: float = 60.0) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                raise RuntimeError(f"worker not {want} after {timeout:.0f} s")
            line = proc.stdout.readline().strip()
        if line != want:
            raise RuntimeError(f"worker said {line!r}:\n{proc.stderr.read()[-3000:]}")

    @staticmethod
    def result(proc: subprocess.Popen, timeout: float) -> dict:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise RuntimeError(f"worker timed out after {timeout:.0f} s:\n{err[-3000:]}")
        if proc.returncode != 0:
            raise RuntimeError(f"worker failed (exit {proc.returncode}):\n{err[-3000:]}")
        return json.loads(out.strip().splitlines()[-1])

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()  # our own child, by its pid
                proc.wait(10)


# -- phases ---------------------------------------------------------------------------------------


CONFIGS = (("RF1 acks=1", 1, "1"), ("RF3 acks=all", 3, "all"))


def leader_groups(state: dict) -> str:
    by_leader: dict[int, list[int]] = collections.defaultdict(list)
    for partition, (leader, _) in sorted(state["partitions"].items()):
        by_leader[leader].append(partition)
    return ";".join(",".join(map(str, ps)) for ps in by_leader.values())


def run_throughput(cluster: Cluster, workers: Workers, args, profile_dir: str | None) -> dict:
    results: dict[str, list[dict]] = {label: [] for label, _, _ in CONFIGS}
    for rnd in range(args.rounds):
        for label, factor, acks in CONFIGS:
            state = create_topic(cluster, f"tput-rf{factor}-{rnd}", args.partitions, factor)
            topic = state["topic"]
            brokers = cluster.live()
            cpu0 = {b.broker_id: b.cpu() for b in brokers}
            machine0 = machine_cpu_seconds()
            profiler = None
            if profile_dir and factor == 3 and rnd == 0:
                profiler = start_profiler(args.py_spy, brokers[0], profile_dir, args.seconds)
            proc = workers.start("throughput", bootstrap=cluster.bootstrap, topic=topic,
                                 seconds=args.seconds, record_size=args.record_size, acks=acks)
            result = Workers.result(proc, timeout=args.seconds + 120)
            machine = machine_cpu_seconds()
            result["broker_cpu"] = {b.broker_id: b.cpu() - cpu0[b.broker_id] for b in brokers}
            result["machine_busy"] = machine["busy"] - machine0["busy"]
            result["machine_total"] = machine["total"] - machine0["total"]
            result["stored"] = high_watermarks(cluster, topic, state) - state["probes"]
            if profiler is not None:
                result["profile"] = finish_profiler(profiler)
            results[label].append(result)
            rate = result["records"] / result["seconds"]
            print(f"  round {rnd + 1} {label:<13} {result['records']:>10,} records in "
                  f"{result['seconds']:5.2f} s: {rate:>10,.0f} records/s "
                  f"{rate * args.record_size / 1e6:6.1f} MB/s; brokers' CPU "
                  f"{sum(result['broker_cpu'].values()):5.2f} s; errors {result['errors']}, "
                  f"high watermarks {result['stored']:,}", flush=True)
            with Probe(cluster.live()[0].address) as probe:
                probe.call(probe.p.DeleteTopicsRequest(topic_names=[topic], timeout_ms=30_000), 1)
    return results


def run_latency(cluster: Cluster, workers: Workers, args) -> dict:
    results = {}
    warmup = int(args.rate)  # the first second's records are not measured
    for label, factor, acks in CONFIGS:
        state = create_topic(cluster, f"latency-rf{factor}", args.partitions, factor)
        topic = state["topic"]
        consumer = workers.start("consume", bootstrap=cluster.bootstrap, topic=topic,
                                 groups=leader_groups(state), warmup=warmup)
        Workers.wait_line(consumer, "ready")
        cpu0 = {b.broker_id: b.cpu() for b in cluster.live()}
        producer = workers.start("paced", bootstrap=cluster.bootstrap, topic=topic,
                                 seconds=args.latency_seconds + 1, rate=args.rate,
                                 record_size=args.record_size, acks=acks,
                                 linger_ms=args.linger_ms)
        produced = Workers.result(producer, timeout=args.latency_seconds + 120)
        consumer.stdin.write(f"{produced['records']}\n")
        consumer.stdin.flush()
        consumed = Workers.result(consumer, timeout=60)
        consumed["sent"] = produced["records"]
        consumed["send_seconds"] = produced["seconds"]
        consumed["producer_errors"] = produced["errors"]
        consumed["broker_cpu"] = sum(b.cpu() for b in cluster.live()) - sum(cpu0.values())
        results[label] = consumed
        print(f"  {label:<13} {produced['records']:,} sent in {produced['seconds']:.1f} s, "
              f"{consumed['records']:,} consumed: p50 {consumed['p50_ms']:.2f} ms, "
              f"p99 {consumed['p99_ms']:.2f} ms, p99.9 {consumed['p999_ms']:.2f} ms, "
              f"max {consumed['max_ms']:.1f} ms", flush=True)
    return results


def pick_victim(cluster: Cluster, state: dict) -> tuple[int, int]:
    """A partition whose leader is not the controller (the common case), and that leader."""
    for partition, (leader, _) in sorted(state["partitions"].items()):
        if leader != state["controller"] and cluster.brokers[leader].alive():
            return partition, leader
    partition, (leader, _) = sorted(state["partitions"].items())[0]
    return partition, leader


def measure_move(cluster: Cluster, topic: str, partition: int, victim: int, sig: int,
                 timeout: float = 60.0) -> dict:
    """Signal the leader ``victim`` and poll a survivor every 10 ms until its Metadata names
    another leader, then until an ``acks=all`` produce to that leader succeeds."""
    survivors = [b for b in cluster.live() if b.broker_id != victim]
    wall0 = time.time()
    t0 = time.monotonic()
    cluster.brokers[victim].signal(sig)
    out: dict = {"signal": signal.Signals(sig).name, "victim": victim, "partition": partition,
                 "wall": wall0, "leader_s": None, "produce_s": None, "new_leader": None,
                 "produce_errors": collections.Counter()}
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        for survivor in survivors:
            view = partition_states(survivor, topic)
            if view is None:
                continue
            leader = view["partitions"][partition][0]
            if leader in (-1, victim):
                continue
            if out["leader_s"] is None:
                out["leader_s"] = time.monotonic() - t0
                out["new_leader"] = leader
            try:
                with Probe(view["brokers"][leader], timeout=5.0) as probe:
                    error = probe.produce_one(topic, partition, b"probe")
            except OSError as exc:
                out["produce_errors"][type(exc).__name__] += 1
                continue
            if error == 0:
                out["produce_s"] = time.monotonic() - t0
                break
            out["produce_errors"][f"error {error}"] += 1
        if out["produce_s"] is not None:
            break
        time.sleep(0.01)
    exited = cluster.brokers[victim].reap(30.0)
    out["exit_s"] = time.monotonic() - t0 if exited else None
    out["produce_errors"] = dict(out["produce_errors"])
    return out


def client_view(outcomes: list, event: dict, window: float = 30.0) -> dict:
    """What the steady producer saw of one event: the records of that partition sent from 1 s
    before it to ``window`` after it (or the next event)."""
    rows = [r for r in outcomes if r[0] == event["partition"]
            and event["wall"] - 1.0 <= r[1] <= event["wall"] + window]
    waits = [r[2] - r[1] for r in rows if r[2] is not None and r[3] is None]
    failed = collections.Counter(r[3] for r in rows if r[3] is not None)
    unanswered = sum(1 for r in rows if r[2] is None)
    return {"records": len(rows), "max_wait_s": max(waits, default=None),
            "failed": dict(failed), "unanswered": unanswered}


def run_failover(cluster: Cluster, workers: Workers, args) -> dict:
    factor = 3
    state = create_topic(cluster, "failover", args.partitions, factor)
    topic = state["topic"]
    stop_file = os.path.join(cluster.data_dir, "stop-steady")
    steady = workers.start("steady", bootstrap=cluster.bootstrap, topic=topic,
                           stop_file=stop_file, seconds=300)
    Workers.wait_line(steady, "ready")
    time.sleep(1.0)
    events = []
    try:
        partition, victim = pick_victim(cluster, state)
        print(f"  SIGKILL broker {victim}, leader of {topic}-{partition} (controller: "
              f"broker {state['controller']}) ...", flush=True)
        killed = measure_move(cluster, topic, partition, victim, signal.SIGKILL)
        events.append(killed)
        _print_move(killed)
        cluster.restart(victim)
        t0 = time.monotonic()
        state = wait_fully_replicated(cluster, topic, args.partitions, factor)
        print(f"  broker {victim} restarted, back in every ISR after "
              f"{time.monotonic() - t0:.1f} s", flush=True)
        time.sleep(1.0)
        state = partition_states(cluster.brokers[victim], topic)
        partition, victim = pick_victim(cluster, state)
        print(f"  SIGTERM broker {victim}, leader of {topic}-{partition} (controller: "
              f"broker {state['controller']}) ...", flush=True)
        stopped = measure_move(cluster, topic, partition, victim, signal.SIGTERM)
        events.append(stopped)
        _print_move(stopped)
        time.sleep(2.0)
    finally:
        open(stop_file, "w").close()
    seen = Workers.result(steady, timeout=120)
    for i, event in enumerate(events):
        window = (events[i + 1]["wall"] - event["wall"]) if i + 1 < len(events) else 30.0
        event["client"] = client_view(seen["outcomes"], event, window)
    return {"events": events, "missing": seen["missing"], "duplicates": seen["duplicates"],
            "records": len(seen["outcomes"])}


def _print_move(event: dict) -> None:
    def s(x):
        return "never" if x is None else f"{x:.3f} s"

    print(f"    new leader (broker {event['new_leader']}) in Metadata after {s(event['leader_s'])}, "
          f"acks=all produce succeeds after {s(event['produce_s'])}; the broker exited after "
          f"{s(event['exit_s'])}; probe errors {event['produce_errors'] or 'none'}", flush=True)


# -- profiling --------------------------------------------------------------------------------


def start_profiler(py_spy: str, broker: Broker, out_dir: str, seconds: float):
    path = os.path.join(out_dir, f"broker-{broker.broker_id}.collapsed")
    proc = subprocess.Popen([py_spy, "record", "--pid", str(broker.pid), "--rate", "200",
                             "--duration", str(max(1, int(seconds))), "--format", "raw",
                             "--threads", "--output", path, "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return proc, path, broker.broker_id


def finish_profiler(profiler) -> dict:
    proc, path, broker_id = profiler
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    self_time: collections.Counter = collections.Counter()
    inclusive: collections.Counter = collections.Counter()
    total = 0
    try:
        with open(path) as f:
            for line in f:
                stack, _, count = line.rstrip("\n").rpartition(" ")
                n = int(count)
                frames = stack.split(";")
                total += n
                self_time[_frame(frames[-1])] += n
                for frame in {_frame(f) for f in frames[1:]}:
                    inclusive[frame] += n
    except (OSError, ValueError) as exc:
        return {"broker": broker_id, "error": f"{exc}; {proc.stderr.read()[-500:]!r}"}
    return {"broker": broker_id, "samples": total, "path": path,
            "self": self_time.most_common(25), "inclusive": inclusive.most_common(40)}


def _frame(frame: str) -> str:
    # py-spy raw frames: "function (path/to/file.py:line)"; drop the line, shorten the path.
    frame = re.sub(r":\d+\)$", ")", frame)
    return re.sub(r"\(.*?/(site-packages|lib/python3\.\d+|trilog)/", r"(\1/", frame)


# -- the driver ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--seconds", type=float, default=None,
                        help="seconds of each throughput run (default 8; --quick: 5)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="alternating rounds of RF1 and RF3 throughput (default 2; --quick: 1)")
    parser.add_argument("--latency-seconds", type=float, default=None,
                        help="seconds of each latency run, after 1 s of warm-up (default 10; "
                             "--quick: 5)")
    parser.add_argument("--rate", type=float, default=10_000,
                        help="records/s of the latency runs (default 10,000)")
    parser.add_argument("--linger-ms", type=float, default=1,
                        help="the producer's linger_ms in the latency runs (default 1)")
    parser.add_argument("--record-size", type=int, default=100, help="value bytes (default 100)")
    parser.add_argument("--partitions", type=int, default=6,
                        help="partitions of each topic (default 6, two led by each broker)")
    parser.add_argument("--session-timeout-ms", type=int, default=6000,
                        help="the brokers' zookeeper.session.timeout.ms (default 6000, "
                             "trilog's and Kafka 0.8's default)")
    parser.add_argument("--quick", action="store_true", help="shorter phases, one round")
    parser.add_argument("--skip", action="append", default=[],
                        choices=["throughput", "latency", "failover"], help="skip a phase")
    parser.add_argument("--py-spy", metavar="PATH", default=None,
                        help="sample a broker with this py-spy during the first RF3 round")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    parser.add_argument("--dir", default=None, help="where the data dirs go (default: temp)")
    parser.add_argument("--broker-log-level", default="WARNING",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="the brokers' --log-level (their logs go to files in the data dir)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the data dirs and logs (printed) instead of removing them")
    for hidden in ("--worker", "--bootstrap", "--topic", "--acks", "--groups", "--stop-file"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--warmup", type=int, default=0, help=argparse.SUPPRESS)
    return parser


def scan_logs(cluster: Cluster) -> list[str]:
    """Broker log lines at ERROR or above, and tracebacks (none expected)."""
    found = []
    for broker in cluster.brokers.values():
        try:
            with open(broker.log_path, errors="replace") as f:
                for line in f:
                    if " ERROR " in line or " CRITICAL " in line or line.startswith("Traceback"):
                        found.append(f"broker {broker.broker_id}: {line.rstrip()[:300]}")
        except OSError:
            pass
    return found


def report(args, settings: dict, tput: dict | None, latency: dict | None,
           failover: dict | None, errors: list[str]) -> int:
    status = 0
    print()
    print(f"Machine: {os.cpu_count()} cores shared by ZooKeeper, 3 brokers, the producer and the "
          f"consumer; load average before: {settings['load_before']}.")
    print("Settings: " + ", ".join(f"{k}={v}" for k, v in settings["broker"].items())
          + f"; {args.partitions} partitions, {args.record_size}-byte records, "
          f"min.insync.replicas={MIN_INSYNC} on RF3 topics")
    if tput:
        print()
        print(f"{'throughput':<14} {'records/s':>11} {'MB/s':>7} {'brokers CPU µs/rec':>19} "
              f"{'machine busy':>13}   runs (records/s)")
        rates = {}
        for label, runs in tput.items():
            rs = [r["records"] / r["seconds"] for r in runs]
            rates[label] = rs
            recs = sum(r["records"] for r in runs)
            bcpu = sum(sum(r["broker_cpu"].values()) for r in runs)
            busy = sum(r["machine_busy"] for r in runs) / max(1e-9, sum(r["machine_total"]
                                                                        for r in runs))
            mean = sum(rs) / len(rs)
            print(f"{label:<14} {mean:>11,.0f} {mean * args.record_size / 1e6:>7.1f} "
                  f"{1e6 * bcpu / recs:>19.2f} {busy:>12.0%}   "
                  + ", ".join(f"{r:,.0f}" for r in rs))
        base, repl = rates["RF1 acks=1"], rates["RF3 acks=all"]
        ratios = [b / a for a, b in zip(base, repl)]
        ratio = sum(repl) / sum(base)
        ok = ratio >= TARGET_RATIO
        status |= not ok
        print(f"ratio RF3 acks=all / RF1 acks=1: {ratio:.2f} (per round "
              + ", ".join(f"{r:.2f}" for r in ratios)
              + f")   target >= {TARGET_RATIO:.2f} {'ok' if ok else 'MISSED'}; "
              f"Kafka 2014: {KAFKA_2014_RATIO:.2f}")
        for label, runs in tput.items():
            for r in runs:
                if r["errors"] or r["stored"] != r["records"]:
                    status = 1
                    print(f"  !! {label}: {r['records']:,} sent, {r['errors']} failed, "
                          f"{r['stored']:,} in the log")
                if "profile" in r:
                    print_profile(r["profile"])
    if latency:
        print()
        print(f"{'latency @ %s rec/s' % f'{args.rate:,.0f}':<24} {'p50 ms':>7} {'p99 ms':>7} "
              f"{'p99.9 ms':>9} {'max ms':>7} {'consumed':>10}   target")
        for label, r in latency.items():
            target = ""
            if label.startswith("RF3"):
                ok = r["p99_ms"] < TARGET_P99_MS
                status |= not ok
                target = f"p99 < {TARGET_P99_MS:.0f} ms {'ok' if ok else 'MISSED'}"
            print(f"{label:<24} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} {r['p999_ms']:>9.2f} "
                  f"{r['max_ms']:>7.1f} {r['records']:>10,}   {target}")
            if r["records"] != r["sent"] or r["duplicates"] or r["producer_errors"]:
                status = 1
                print(f"  !! {label}: {r['sent']:,} sent, {r['records']:,} consumed, "
                      f"{r['duplicates']} duplicates, {r['producer_errors']} producer errors")
    if failover:
        print()
        print(f"unavailability (zookeeper.session.timeout.ms={args.session_timeout_ms})"
              f"{'':<6}{'new leader':>11} {'produce ok':>11} {'client max wait':>16}   target")
        for e in failover["events"]:
            what = ("SIGKILL leader (session expiry + election)" if e["signal"] == "SIGKILL"
                    else "SIGTERM leader (controlled shutdown)")

            def s(x):
                return "never" if x is None else f"{x:.3f} s"

            target = ""
            if e["signal"] == "SIGTERM":
                ok = e["produce_s"] is not None and e["produce_s"] <= TARGET_CONTROLLED_S
                status |= not ok
                target = f"<= {TARGET_CONTROLLED_S:.0f} s {'ok' if ok else 'MISSED'}"
            else:
                target = f"(>= {args.session_timeout_ms / 1000:.1f} s by design)"
            c = e["client"]
            print(f"{what:<48} {s(e['leader_s']):>11} {s(e['produce_s']):>11} "
                  f"{s(c['max_wait_s']):>16}   {target}")
            if c["failed"] or c["unanswered"]:
                print(f"  producer: {c['failed']} failed, {c['unanswered']} unanswered "
                      f"of {c['records']} records of that partition")
        print(f"steady acks=all producer: {failover['records']:,} records, "
              f"{failover['missing']} acknowledged but missing, {failover['duplicates']} "
              "duplicated (without idempotence a retried batch may be written twice)")
        if failover["missing"]:
            status = 1
    if STUCK_TOPICS:
        status = 1
        print()
        print(f"BUG: {len(STUCK_TOPICS)} topic(s) created with a partition that did not replicate "
              f"(acks=all unanswered; set aside and created again): {', '.join(STUCK_TOPICS)}")
    if errors:
        print()
        print(f"broker log lines at ERROR ({len(errors)}), the first 10:")
        for line in errors[:10]:
            print("  " + line)
    return status


def print_profile(profile: dict) -> None:
    print()
    if "error" in profile:
        print(f"py-spy on broker {profile['broker']}: {profile['error']}")
        return
    total = profile["samples"] or 1
    print(f"py-spy on broker {profile['broker']} during the first RF3 round "
          f"({profile['samples']} samples, all threads, idle included; {profile['path']}):")
    print("  self time (leaf frames):")
    for frame, n in profile["self"][:15]:
        print(f"    {n / total:6.1%}  {frame}")
    print("  inclusive (frames on the stack):")
    for frame, n in profile["inclusive"][:25]:
        print(f"    {n / total:6.1%}  {frame}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.worker:
        WORKERS[args.worker](args)
        return 0
    args.seconds = args.seconds or (5.0 if args.quick else 8.0)
    args.rounds = args.rounds or (1 if args.quick else 2)
    args.latency_seconds = args.latency_seconds or (5.0 if args.quick else 10.0)
    base = args.dir or tempfile.gettempdir()
    data_dir = tempfile.mkdtemp(prefix="trilog-replication-bench-", dir=base)
    overrides = {"zookeeper.session.timeout.ms": args.session_timeout_ms,
                 "num.partitions": args.partitions, "auto.create.topics.enable": "false",
                 "offsets.topic.replication.factor": 3}
    settings = {"broker": {"zookeeper.session.timeout.ms": args.session_timeout_ms,
                           "(others)": "defaults"},
                "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg())}
    cluster = Cluster(data_dir, overrides, log_level=args.broker_log_level)
    workers = Workers()
    tput = latency = failover = None
    t_start = time.monotonic()
    try:
        cluster.start()
        print(f"ZooKeeper on {cluster.zookeeper.connect_string}, brokers "
              + ", ".join(f"{b.broker_id} (pid {b.pid}) on :{b.port}"
                          for b in cluster.brokers.values())
              + f"; data in {data_dir}; {os.cpu_count()} CPUs", flush=True)
        if "throughput" not in args.skip:
            print(f"throughput: {args.rounds} round(s) of {args.seconds:.0f} s each", flush=True)
            profile_dir = data_dir if args.py_spy else None
            tput = run_throughput(cluster, workers, args, profile_dir)
        if "latency" not in args.skip:
            print(f"latency: {args.rate:,.0f} records/s for {args.latency_seconds:.0f} s "
                  f"(+1 s warm-up), linger_ms={args.linger_ms:g}", flush=True)
            latency = run_latency(cluster, workers, args)
        if "failover" not in args.skip:
            print(f"failover: zookeeper.session.timeout.ms={args.session_timeout_ms}", flush=True)
            failover = run_failover(cluster, workers, args)
    finally:
        workers.close()
        errors = scan_logs(cluster)
        cluster.close()
        if args.keep:
            print(f"data and broker logs kept in {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)
    status = report(args, settings, tput, latency, failover, errors)
    print(f"\n(whole run: {time.monotonic() - t_start:.0f} s)")
    if args.json:
        print(json.dumps({"throughput": tput, "latency": latency, "failover": failover},
                         default=str))
    return status


if __name__ == "__main__":
    sys.exit(main())
