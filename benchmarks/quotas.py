"""Client quotas: a producer held to its producer_byte_rate beside one that is not.

One ``trilog broker`` on a free loopback port with Kafka's quota windows (``quota.window.num``
11 of ``quota.window.size.seconds`` 1, unless ``--window-num`` says otherwise) and
``producer_byte_rate`` set for one client id (``limited``, ``--quota`` bytes a second,
1 MiB by default) through AlterClientQuotas.  Two confluent-kafka (librdkafka) producers run
at once for ``--seconds`` (10), each sending 10 KB records as fast as it can (acks=1) to its
own topic: ``limited`` and ``free``.  For each: the bytes acknowledged within the run per
second, the throttle time librdkafka reports (``throttle_cb``: the largest, and how many
answers carried one; the statistics' ``throttle`` window, every 500 ms) and the time from the
first to the last acknowledgement.

Target (issue 25): ``limited`` sends at most 1.4 MiB/s over 10 s and reports a throttle time
above 0; ``free`` is not slowed (no throttle time; its rate is the machine's).

    .venv/bin/python benchmarks/quotas.py
    .venv/bin/python benchmarks/quotas.py --seconds 20 --quota 524288
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MIB = 1024 * 1024
RECORD = 10_000


@dataclass
class ProducerRun:
    """What one producer did (see the module docstring)."""

    client_id: str
    acked_bytes: int = 0
    #: bytes acknowledged in each second of the run
    per_second: list[int] = field(default_factory=list)
    throttle_events: int = 0
    max_throttle_ms: int = 0
    stats_throttle_max_ms: int = 0
    errors: list[str] = field(default_factory=list)

    def rate(self, seconds: float) -> float:
        return self.acked_bytes / seconds

    def rate_between(self, start: int, end: int) -> float:
        """Bytes a second acknowledged from second ``start`` to ``end`` of the run."""
        return sum(self.per_second[start:end]) / max(end - start, 1)


def set_quota(bootstrap: str, client_id: str, byte_rate: int) -> None:
    """``producer_byte_rate`` for ``client_id``, through trilog's admin (AlterClientQuotas)."""
    import trio

    from trilog.client import open_admin, quota_entity

    async def alter() -> None:
        async with open_admin(bootstrap) as admin:
            await admin.alter_client_quotas(quota_entity(client_id=client_id),
                                            {"producer_byte_rate": byte_rate})

    trio.run(alter)


def _produce(bootstrap: str, run: ProducerRun, topic: str, seconds: float,
             started: threading.Barrier) -> None:
    from confluent_kafka import Producer

    def throttled(event) -> None:
        run.throttle_events += 1
        run.max_throttle_ms = max(run.max_throttle_ms, int(event.throttle_time * 1000))

    def stats(text: str) -> None:
        for broker in json.loads(text).get("brokers", {}).values():
            window = broker.get("throttle") or {}
            run.stats_throttle_max_ms = max(run.stats_throttle_max_ms, window.get("max", 0))

    def delivered(err, msg) -> None:
        now = time.monotonic()
        if err is None and now < stop_at:
            run.acked_bytes += len(msg.value())
            run.per_second[int(now - (stop_at - seconds))] += len(msg.value())
        elif err is not None and "Purged" not in str(err):
            run.errors.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": run.client_id,
                         "acks": 1, "throttle_cb": throttled, "stats_cb": stats,
                         "statistics.interval.ms": 500, "queue.buffering.max.kbytes": 4096})
    value = b"q" * RECORD
    producer.list_topics(topic, timeout=10)  # connected before the clock starts
    run.per_second = [0] * (int(seconds) + 1)
    started.wait()
    stop_at = time.monotonic() + seconds
    while time.monotonic() < stop_at:
        try:
            producer.produce(topic, value, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
            continue
        producer.poll(0)
    producer.poll(0.6)  # one more statistics interval
    producer.purge()
    producer.flush(5)


def measure(bootstrap: str, seconds: float, limited: str = "limited",
            free: str = "free") -> tuple[ProducerRun, ProducerRun]:
    """Run both producers at once for ``seconds`` (the quota is already set)."""
    runs = (ProducerRun(limited), ProducerRun(free))
    started = threading.Barrier(len(runs))
    threads = [threading.Thread(target=_produce, daemon=True, args=(
        bootstrap, run, f"quota-{run.client_id}", seconds, started)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 30)
    return runs


def report(runs: tuple[ProducerRun, ...], seconds: float, quota: int, window_num: int) -> None:
    print(f"quota: producer_byte_rate={quota} ({quota / MIB:.2f} MiB/s) for client id "
          f"{runs[0].client_id!r}; quota.window.num={window_num}; {seconds:.0f} s, "
          f"{RECORD} B records, acks=1")
    spans = [(0, int(seconds))]
    if seconds >= 20:
        spans += [(0, 10), (int(seconds) - 10, int(seconds))]
    heads = "".join(f"{f's {a}-{b} MiB/s':>16}" for a, b in spans)
    print(f"{'client id':<10}{heads} {'throttled':>10} {'max throttle ms':>16} "
          f"{'stats max ms':>13}")
    for run in runs:
        rates = "".join(f"{run.rate_between(a, b) / MIB:>16.2f}" for a, b in spans)
        print(f"{run.client_id:<10}{rates} {run.throttle_events:>10} "
              f"{run.max_throttle_ms:>16} {run.stats_throttle_max_ms:>13}")
    print("limited, MiB each second: " + " ".join(
        f"{b / MIB:.1f}" for b in runs[0].per_second[:int(seconds)]))
    for a, b in spans:
        if b - a == 10:
            limited = runs[0].rate_between(a, b) / MIB
            verdict = ("met" if limited <= 1.4 * quota / MIB and runs[0].max_throttle_ms > 0
                       else "MISSED")
            print(f"target (s {a}-{b}): limited <= {1.4 * quota / MIB:.2f} MiB/s with "
                  f"throttle time > 0: {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--quota", type=int, default=MIB, help="producer_byte_rate (B/s)")
    parser.add_argument("--window-num", type=int, default=11, help="quota.window.num")
    args = parser.parse_args()
    from _common import BrokerProcess, create_topic

    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(
            tmp, {"quota.window.num": args.window_num, "num.partitions": 1}) as broker:
        bootstrap = f"{broker.host}:{broker.port}"
        for topic in ("quota-limited", "quota-free"):
            create_topic(broker.address, topic)
        set_quota(bootstrap, "limited", args.quota)
        runs = measure(bootstrap, args.seconds)
    report(runs, args.seconds, args.quota, args.window_num)
    return 0


if __name__ == "__main__":
    sys.exit(main())
