"""Replication under load, on real broker processes and a real ZooKeeper: a rolling restart
(SIGTERM, controlled shutdown) and a loop of leader SIGKILLs while an idempotent
``acks="all"`` producer sends (trilog's, and librdkafka's for the kill loop); every acknowledged record ends up
exactly once, in order, at its acknowledged offset, and the replicas' logs are identical."""

from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest
from replication_helpers import (
    SETTINGS,
    controller_id,
    create,
    fully_replicated,
    log_bytes,
    metadata,
    read_records,
    registered,
    wait_for,
)

import trilog.sync
from trilog.records import iter_batches

pytestmark = pytest.mark.slow

TOPIC = "load"
PARTITIONS = 6
def full_isrs(brokers):
    """``{partition: metadata}`` once every broker sees every partition with a leader and
    three in-sync replicas, else False."""
    return fully_replicated(brokers, TOPIC, PARTITIONS, 3)


def start_load_topic(brokers) -> str:
    """Create the topic (min.insync.replicas=2), wait for full ISRs; the bootstrap list."""
    create(brokers[1], TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    wait_for(lambda: full_isrs(list(brokers.values())), what="full ISRs")
    return ",".join(b.bootstrap for b in brokers.values())


def seeded_rng(variable: str) -> random.Random:
    """A random generator seeded from ``variable`` if set, else afresh; the seed is printed."""
    seed = int(os.environ.get(variable, time.time_ns() % 1_000_000))
    print(f"seed: {seed} ({variable}={seed} repeats it)")
    return random.Random(seed)


class Load:
    """A thread sending ``p<partition>-<n>`` to every partition in turn through one
    idempotent ``acks="all"`` producer, about ``rate`` records/s, keeping every delivery.
    ``Load`` uses trilog's producer; ``ConfluentLoad`` librdkafka's (confluent-kafka)."""

    def __init__(self, bootstrap: str, rate: int = 400) -> None:
        self.rate = rate
        self.sent: dict[int, list[tuple[bytes, object]]] = {i: [] for i in range(PARTITIONS)}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.producer = self._open(bootstrap)

    def _open(self, bootstrap: str):
        return trilog.sync.Producer(
            bootstrap, acks="all", enable_idempotence=True, retries=1_000_000,
            retry_backoff_ms=100, delivery_timeout_ms=60_000, request_timeout_ms=10_000,
            linger_ms=5, metadata_max_age_ms=2_000)

    def _send(self, partition: int, value: bytes) -> object:
        """Send; return what ``_outcome`` turns into an offset."""
        return self.producer.send(TOPIC, value, partition=partition)

    def _outcome(self, delivery) -> int:
        return delivery.get(timeout=60).offset

    def _flush(self) -> None:
        self.producer.flush()

    def _close(self) -> None:
        self.producer.close()

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            for partition in range(PARTITIONS):
                value = b"p%d-%06d" % (partition, n)
                self.sent[partition].append((value, self._send(partition, value)))
            n += 1
            time.sleep(PARTITIONS / self.rate)

    def acknowledged(self) -> dict[int, list[tuple[bytes, int]]]:
        """``{partition: [(value, offset)]}`` of the records acknowledged so far."""
        out: dict[int, list[tuple[bytes, int]]] = {}
        for partition, sent in self.sent.items():
            out[partition] = []
            for value, delivery in list(sent):
                if self._done(delivery):
                    try:
                        out[partition].append((value, self._outcome(delivery)))
                    except Exception:  # noqa: S112 - failed: not acknowledged
                        continue
        return out

    def _done(self, delivery) -> bool:
        return delivery.done()

    def finish(self) -> tuple[dict[int, list[tuple[bytes, int]]], list]:
        """Stop sending and wait for every outcome: ``({partition: [(value, offset)]},
        [errors])``."""
        self._stop.set()
        self._thread.join(10)
        self._flush()
        acked: dict[int, list[tuple[bytes, int]]] = {}
        errors = []
        for partition, sent in self.sent.items():
            acked[partition] = []
            for value, delivery in sent:
                try:
                    acked[partition].append((value, self._outcome(delivery)))
                except Exception as exc:  # every failed delivery is reported
                    errors.append((partition, value, repr(exc)))
        self._close()
        return acked, errors

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)
        self._close()


class ConfluentLoad(Load):
    """``Load`` through librdkafka's idempotent producer (``enable.idempotence``)."""

    def _open(self, bootstrap: str):
        from confluent_kafka import Producer

        self._closed = False
        return Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.timeout.ms": 60_000, "retry.backoff.ms": 100,
            "topic.metadata.refresh.interval.ms": 2_000, "reconnect.backoff.max.ms": 500})

    def _send(self, partition: int, value: bytes) -> object:
        outcome: list = []

        def delivered(error, message) -> None:
            outcome.append(error if error is not None else message.offset())

        self.producer.produce(TOPIC, value, partition=partition, on_delivery=delivered)
        self.producer.poll(0)  # serve delivery callbacks
        return outcome

    def _done(self, outcome: list) -> bool:
        return bool(outcome)

    def _outcome(self, outcome: list) -> int:
        if not outcome:
            raise TimeoutError("no delivery report")
        if not isinstance(outcome[0], int):
            raise RuntimeError(str(outcome[0]))
        return outcome[0]

    def _flush(self) -> None:
        self.producer.flush(90)

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            self.producer.flush(10)


def check_logs(brokers, acked) -> None:
    """Every replica's log of every partition is the same bytes, and holds each
    acknowledged record exactly once, at its acknowledged offset, in the order sent."""
    for partition, records in acked.items():
        wait_for(lambda p=partition: len({log_bytes(b.log_dir, TOPIC, p) for b in brokers}) == 1,
                 what=f"identical logs of partition {partition}")
        stored = [(r.value, r.offset) for b in iter_batches(log_bytes(brokers[0].log_dir, TOPIC,
                                                                      partition))
                  for r in b.records()]
        values = [v for v, _ in stored]
        assert len(values) == len(set(values)), f"duplicates in partition {partition}"
        at = dict((o, v) for v, o in stored)
        for value, offset in records:
            assert at.get(offset) == value, (partition, offset, value, at.get(offset))
        offsets = [o for _, o in records]
        assert offsets == sorted(offsets), f"acknowledged out of order in {partition}"
        # The producer had no failed delivery: nothing else is in the log either.
        assert values == [v for v, _ in records], f"partition {partition} differs"


@pytest.fixture
def cluster(broker_process, zookeeper):
    def start(i: int, log_dir=None, port: int = 0):
        return broker_process(log_dir, broker_id=i, zookeeper=zookeeper, overrides=SETTINGS,
                              port=port)
    brokers = {i: start(i) for i in (1, 2, 3)}
    return brokers, start


# -- 3. a rolling restart under load ---------------------------------------------------------


def test_a_rolling_restart_under_load_loses_nothing(cluster):
    brokers, start = cluster
    bootstrap = start_load_topic(brokers)
    with Load(bootstrap) as load:
        time.sleep(1.5)
        for i in (1, 2, 3):
            old = brokers[i]
            assert old.stop() == 0, old.stderr()
            # The same port again: the clients' bootstrap list stays valid.
            brokers[i] = start(i, old.log_dir, port=old.port)
            wait_for(lambda: full_isrs(list(brokers.values())),
                     what=f"full ISRs after restarting broker {i}")
            time.sleep(1.0)
        acked, errors = load.finish()
    assert errors == [], errors[:5]
    assert sum(len(r) for r in acked.values()) > 1000
    check_logs(list(brokers.values()), acked)


# -- 4. a loop of leader SIGKILLs ------------------------------------------------------------


@pytest.mark.parametrize("producer", [Load, ConfluentLoad], ids=["trilog", "confluent-kafka"])
def test_leaders_killed_in_a_loop_lose_no_acknowledged_record(cluster, zookeeper, producer):
    rng = seeded_rng("TRILOG_KILL_SEED")
    brokers, start = cluster
    bootstrap = start_load_topic(brokers)
    # Three kills: the leader of a random partition, the controller, another leader.
    with producer(bootstrap) as load:
        for round_ in range(3):
            time.sleep(rng.uniform(1.0, 2.5))
            live = list(brokers.values())
            if round_ == 1:
                victim = controller_id(live[0])
                what = "the controller"
            else:
                partition = rng.randrange(PARTITIONS)
                victim = metadata(live[0], TOPIC)[partition].leader_id
                what = f"the leader of partition {partition}"
            print(f"round {round_}: SIGKILL broker {victim}, {what}")
            old = brokers[victim]
            old.kill()
            wait_for(lambda v=victim: v not in registered(zookeeper), what="its session end")
            brokers[victim] = start(victim, old.log_dir, port=old.port)
            wait_for(lambda: full_isrs(list(brokers.values())),
                     what=f"full ISRs after restarting broker {victim}")
        time.sleep(1.0)
        acked, errors = load.finish()
    assert errors == [], errors[:5]
    check_logs(list(brokers.values()), acked)


# -- 5. random faults --------------------------------------------------------------------------


def check_acknowledged(brokers, acked, committed: dict[tuple[int, int], bytes]) -> None:
    """Every acknowledged record is readable at its offset, and nothing once readable (below
    a high watermark) ever changed: ``committed`` keeps what earlier checks read."""
    meta = wait_for(lambda: full_isrs(list(brokers.values())), what="full ISRs")
    for partition, records in acked.items():
        leader = brokers[meta[partition].leader_id]
        last = max((offset for _value, offset in records), default=-1)
        # A new leader learns the high watermark from its followers' next fetches: wait
        # until it covers every acknowledged offset.
        read = wait_for(lambda p=partition, b=leader: (r := read_records(b, TOPIC, p))
                        is not None and len(r) > last and r,
                        what=f"the acknowledged records of partition {partition}")
        at = dict(read)
        for value, offset in records:
            assert at.get(offset) == value, ("acknowledged", partition, offset, value)
        for offset, value in read:
            before = committed.setdefault((partition, offset), value)
            assert before == value, ("changed", partition, offset, before, value)


def test_random_faults_never_change_an_acknowledged_record(cluster, zookeeper):
    """SIGKILLs, SIGSTOP/SIGCONT pauses (some longer than the ZooKeeper session) and
    restarts, in an order drawn from a printed seed, under an acks=all load."""
    rng = seeded_rng("TRILOG_FAULT_SEED")
    brokers, start = cluster
    bootstrap = start_load_topic(brokers)
    committed: dict[tuple[int, int], bytes] = {}
    with Load(bootstrap, rate=300) as load:
        for step in range(4):
            time.sleep(rng.uniform(0.5, 1.5))
            victim = rng.choice(sorted(brokers))
            action = rng.choice(["kill", "pause", "restart"])
            old = brokers[victim]
            if action == "pause":
                seconds = rng.uniform(0.5, 5.0)
                print(f"step {step}: SIGSTOP broker {victim} for {seconds:.1f} s")
                os.kill(old.pid, signal.SIGSTOP)
                time.sleep(seconds)
                os.kill(old.pid, signal.SIGCONT)
            else:
                print(f"step {step}: {action} broker {victim}")
                if action == "kill":
                    old.kill()
                    wait_for(lambda v=victim: v not in registered(zookeeper),
                             what="its session end")
                else:
                    assert old.stop() == 0, old.stderr()
                time.sleep(rng.uniform(0.0, 1.0))
                brokers[victim] = start(victim, old.log_dir, port=old.port)
            check_acknowledged(brokers, load.acknowledged(), committed)
        time.sleep(1.0)
        acked, errors = load.finish()
    assert errors == [], errors[:5]
    check_acknowledged(brokers, acked, committed)
    check_logs(list(brokers.values()), acked)
