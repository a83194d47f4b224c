"""Failover: how long a SIGKILLed broker's partitions stop acknowledging acks=all writes, for
a partition leader and for the controller, on a real three-broker cluster with a real
ZooKeeper.

A ZooKeeper server and three ``trilog broker`` processes start on free loopback ports
(temporary data dirs, the brokers' logs in files beside them; ``replication.py``'s cluster).
A topic with three partitions and replication factor 3 (``min.insync.replicas=2``) is
written by an idempotent ``acks=all`` librdkafka producer (confluent-kafka) in a thread of
this process: one record to each partition every 5 ms.  Then, ``--kills`` times each:

  leader       the leader of a partition that is not the controller gets SIGKILL; it is
               started again 3 s later (at once: its dead process's ZooKeeper session still
               holds its registration) and the next kill waits until every partition has
               three in-sync replicas again;
  controller   the controller gets SIGKILL, restarted the same way.

The figure, per kill: the longest time any partition the killed broker led went without an
acknowledgement (the gap between two acknowledgements around the kill).  Target: under 1 s.
Reference: ``zookeeper.session.timeout.ms`` (``--session-timeout-ms``), which bounded it
before fast failover (ZooKeeper had to expire the dead broker's session).  At the end every
acknowledged record is read back (nothing acknowledged may be lost) and every broker must be
running.

    .venv/bin/python benchmarks/failover.py                  # ~2 minutes
    .venv/bin/python benchmarks/failover.py --kills 2
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from replication import Cluster, create_topic, partition_states, wait_fully_replicated

TARGET_S = 1.0
PARTITIONS = 3
INTERVAL_S = 0.005
RESTART_AFTER_S = 3.0


class Writer:
    """An idempotent acks=all librdkafka producer writing to every partition every
    ``INTERVAL_S`` in a thread; ``acks[p]`` holds each partition's acknowledgement times and
    ``acked`` the values acknowledged."""

    def __init__(self, bootstrap: str, topic: str, debug: str = "") -> None:
        from confluent_kafka import Producer

        self.topic = topic
        config = {
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 1, "message.timeout.ms": 120_000, "retry.backoff.ms": 50,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200,
            "topic.metadata.refresh.fast.interval.ms": 50,
            "log_level": 2}  # (its lines about refused connections are the point here)
        if debug:  # librdkafka's own lines, timestamped, on this process's stderr
            config.update({"debug": debug, "log_level": 7})
        self.producer = Producer(config)
        self.acks: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
        self.acked: dict[int, set[bytes]] = {p: set() for p in range(PARTITIONS)}
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.failed += 1
            return
        self.acks[msg.partition()].append(time.monotonic())
        self.acked[msg.partition()].add(msg.value())

    def _run(self) -> None:
        seq = 0
        while not self._stop.is_set():
            for p in range(PARTITIONS):
                self.producer.produce(self.topic, b"%d" % seq, partition=p,
                                      on_delivery=self._delivered)
                seq += 1
            self.producer.poll(INTERVAL_S)
        self.producer.flush(120)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def longest_gap(self, partitions: list[int], killed_at: float) -> float:
        """The longest time one of ``partitions`` went without an acknowledgement across
        ``killed_at`` (from the last one before it to the first one after)."""
        worst = 0.0
        for p in partitions:
            times = sorted(self.acks[p])
            before = [t for t in times if t <= killed_at]
            after = [t for t in times if t > killed_at]
            if not after:
                return float("inf")
            start = before[-1] if before else killed_at
            seq = [start] + [t for t in after if t <= after[0] + 10.0]
            worst = max(worst, max(b - a for a, b in zip(seq, seq[1:])))
        return worst


def read_back(bootstrap: str, topic: str) -> dict[int, set[bytes]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "failover-check",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_uncommitted"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        seen: dict[int, set[bytes]] = {p: set() for p in range(PARTITIONS)}
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)}
        positions = dict.fromkeys(range(PARTITIONS), 0)
        deadline = time.monotonic() + 60
        while any(positions[p] < ends[p] for p in positions) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=1.0):
                if msg.error() is None:
                    seen[msg.partition()].add(msg.value())
                    positions[msg.partition()] = msg.offset() + 1
        return seen
    finally:
        consumer.close()


def kill_and_restart(cluster: Cluster, writer: Writer, topic: str, victim: int) -> dict:
    state = partition_states(cluster.live()[0], topic)
    assert state is not None
    led = [p for p, (leader, _isr) in state["partitions"].items() if leader == victim]
    broker = cluster.brokers[victim]
    killed_at = time.monotonic()
    print(f"  SIGKILL broker {victim} at {time.time():.3f}", file=sys.stderr, flush=True)
    broker.signal(signal.SIGKILL)
    broker.reap(10)
    time.sleep(RESTART_AFTER_S)
    started = time.monotonic()
    cluster.restart(victim)
    restart_s = time.monotonic() - started
    wait_fully_replicated(cluster, topic, PARTITIONS, 3)
    time.sleep(1.0)  # acknowledgements after the kill, for the gap's far side
    return {"victim": victim, "partitions": led, "restart_s": restart_s,
            "gap_s": writer.longest_gap(led, killed_at) if led else None}


def run(args) -> int:
    data_dir = tempfile.mkdtemp(prefix="trilog-failover-")
    overrides = {"zookeeper.session.timeout.ms": args.session_timeout_ms,
                 "replica.fetch.wait.max.ms": 100}
    cluster = Cluster(data_dir, overrides, log_level=args.log_level)
    results: dict[str, list[dict]] = {"leader": [], "controller": []}
    try:
        cluster.start()
        state = create_topic(cluster, "failover", PARTITIONS, 3)
        topic = state["topic"]
        writer = Writer(cluster.bootstrap, topic, args.client_debug)
        writer.start()
        time.sleep(2.0)
        for kind in ("leader", "controller"):
            for i in range(args.kills):
                state = wait_fully_replicated(cluster, topic, PARTITIONS, 3)
                controller = state["controller"]
                if kind == "controller":
                    victim = controller
                else:
                    leaders = sorted({lead for lead, _ in state["partitions"].values()
                                      if lead != controller})
                    victim = leaders[i % len(leaders)] if leaders else controller
                event = kill_and_restart(cluster, writer, topic, victim)
                results[kind].append(event)
                gap = event["gap_s"]
                print(f"  {kind} kill {i + 1}: broker {victim} (partitions "
                      f"{event['partitions']}): longest gap "
                      f"{'-' if gap is None else f'{gap:.3f} s'}; restarted and registered "
                      f"in {event['restart_s']:.2f} s", flush=True)
        writer.stop()
        running = len(cluster.live()) == 3
        seen = read_back(cluster.bootstrap, topic)
        lost = sum(len(writer.acked[p] - seen[p]) for p in range(PARTITIONS))
        acked = sum(len(v) for v in writer.acked.values())
        return report(args, results, running=running, acked=acked, lost=lost,
                      failed=writer.failed)
    finally:
        cluster.close()
        if args.keep:
            print(f"data and broker logs kept in {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)


def report(args, results: dict, *, running: bool, acked: int, lost: int, failed: int) -> int:
    session_s = args.session_timeout_ms / 1000
    print()
    print(f"failover ({args.kills} SIGKILLs each, restarted {RESTART_AFTER_S:.0f} s later; "
          f"reference: zookeeper.session.timeout.ms = {session_s:.1f} s, the old floor)")
    ok = True
    for kind, events in results.items():
        gaps = [e["gap_s"] for e in events if e["gap_s"] is not None]
        if not gaps:
            print(f"  {kind:<10}  no partition led by the killed broker")
            continue
        worst = max(gaps)
        ok &= worst < TARGET_S
        print(f"  {kind:<10}  longest gap without an acknowledgement {worst:.3f} s "
              f"(median {sorted(gaps)[len(gaps) // 2]:.3f} s; target < {TARGET_S:.0f} s; "
              f"session timeout {session_s:.1f} s)")
    print(f"  records acknowledged {acked}, lost {lost}, failed deliveries {failed}; "
          f"every broker running at the end: {'yes' if running else 'NO'}")
    ok &= lost == 0 and running
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=5, help="SIGKILLs of each kind (5)")
    parser.add_argument("--session-timeout-ms", type=int, default=6000,
                        help="zookeeper.session.timeout.ms (6000, the broker's default)")
    parser.add_argument("--keep", action="store_true", help="keep the data and broker logs")
    parser.add_argument("--log-level", default="WARNING", help="the brokers' (WARNING)")
    parser.add_argument("--client-debug", default="", metavar="CONTEXTS",
                        help="librdkafka's debug contexts for the producer (e.g. "
                             "metadata,topic,broker), its lines and each kill's wall-clock "
                             "time on stderr")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
