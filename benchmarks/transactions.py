"""Transactions: what they cost a producer and a read_committed consumer, in one run.

One ``trilog broker`` on a free loopback port; 100-byte records, one partition; rounds
alternate the phases so the machine's drift hits each alike:

  idempotent produce     confluent-kafka (librdkafka), ``enable.idempotence``, acks=all,
                         ``linger.ms`` 5, until every record is acknowledged
  transactional produce  the same producer with a ``transactional.id``, a commit every
                         ``--commit-ms`` (100 ms): begin, produce for that long, commit
  read_uncommitted       confluent-kafka's consumer reading a topic of committed
                         transactions (one aborted in ten) from offset 0 to its end
  read_committed         the same with ``isolation.level=read_committed`` (it skips the
                         aborted transactions and the markers)
  trilog ...             the same four with trilog's producer (``send_nowait``, acks=all,
                         ``linger_ms`` 5) and trilog's consumer (``getmany``, assigned)

The consumers' figures are records *of the log* per second (both read all of it; the
read_committed one is handed nine in ten).

Targets (issue 24): transactional produce at least 0.7x idempotent produce; read_committed
at least 0.9x read_uncommitted, each ratio of medians in the same run.

    .venv/bin/python benchmarks/transactions.py                # 300,000 records, 3 rounds
    .venv/bin/python benchmarks/transactions.py --records 1000000 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import BrokerProcess, create_topic  # noqa: E402

VALUE = b"x" * 100


def _producer(bootstrap: str, **extra):
    import confluent_kafka

    return confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                     "acks": "all", "enable.idempotence": True,
                                     "queue.buffering.max.messages": 1_000_000, **extra})


def _produce_all(producer, topic: str, n: int) -> None:
    for _ in range(n):
        while True:
            try:
                producer.produce(topic, VALUE, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)


def produce_idempotent(bootstrap: str, topic: str, n: int) -> float:
    producer = _producer(bootstrap)
    started = time.perf_counter()
    _produce_all(producer, topic, n)
    producer.flush(120)
    return n / (time.perf_counter() - started)


def produce_transactional(bootstrap: str, topic: str, n: int, commit_ms: int,
                          abort_every: int = 0, per_txn: int | None = None
                          ) -> tuple[float, int, int]:
    """Committed records/s with a commit every ``commit_ms`` (or every ``per_txn``
    records); with ``abort_every`` k, every k-th transaction is aborted.  Also: the records
    committed, and those aborted."""
    producer = _producer(bootstrap, **{"transactional.id": f"bench-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    started = time.perf_counter()
    sent = txn = aborted = 0
    while sent < n:
        producer.begin_transaction()
        txn += 1
        aborting = abort_every and txn % abort_every == 0
        end = time.perf_counter() + commit_ms / 1000
        batch = 0
        while (batch < per_txn if per_txn else time.perf_counter() < end) and (
                aborting or sent + batch < n):
            _produce_all(producer, topic, 1000)
            batch += 1000
        if aborting:
            producer.flush(30)
            producer.abort_transaction(30)
            aborted += batch
        else:
            producer.commit_transaction(30)
            sent += batch
    return sent / (time.perf_counter() - started), sent, aborted


def trilog_produce(bootstrap: str, topic: str, n: int, commit_ms: int | None) -> float:
    """trilog's producer (idempotent by default; with ``commit_ms`` transactional, a commit
    every ``commit_ms``): records/s."""
    import trio

    import trilog

    async def send_all(producer, count: int) -> None:
        for i in range(count):
            try:
                producer.send_nowait(topic, VALUE, partition=0)
            except trilog.BufferFullError:
                await producer.send(topic, VALUE, partition=0)
            if i % 1024 == 0:
                await trio.lowlevel.checkpoint()

    async def main() -> float:
        extra = {} if commit_ms is None else {"transactional_id": f"bench-{uuid.uuid4().hex}"}
        async with trilog.open_producer(bootstrap, acks="all", linger_ms=5, **extra) as producer:
            await producer.partitions_for(topic)
            if commit_ms is not None:
                await producer.init_transactions()
            started = time.perf_counter()
            if commit_ms is None:
                await send_all(producer, n)
                await producer.flush()
            else:
                sent = 0
                while sent < n:
                    producer.begin_transaction()
                    end = time.perf_counter() + commit_ms / 1000
                    while time.perf_counter() < end and sent < n:
                        await send_all(producer, min(1000, n - sent))
                        sent += min(1000, n - sent)
                    await producer.commit_transaction()
            return n / (time.perf_counter() - started)

    return trio.run(main)


def trilog_consume(bootstrap: str, topic: str, isolation: str, expect: int) -> float:
    """Seconds for trilog's consumer (``getmany``) to be handed ``expect`` records."""
    import trio

    import trilog

    async def main() -> float:
        async with trilog.open_consumer(bootstrap_servers=bootstrap,
                                        group_id=f"bench-{uuid.uuid4().hex[:6]}",
                                        isolation_level=isolation, enable_auto_commit=False,
                                        max_partition_fetch_bytes=4 << 20) as consumer:
            consumer.assign([trilog.TopicPartition(topic, 0)])
            consumer.seek(trilog.TopicPartition(topic, 0), 0)
            got = 0
            started = time.perf_counter()
            while got < expect and time.perf_counter() - started < 120:
                for records in (await consumer.getmany(timeout_ms=1000,
                                                       max_records=500)).values():
                    got += len(records)
            if got < expect:
                raise RuntimeError(f"trilog {isolation}: {got} of {expect} records")
            return time.perf_counter() - started

    return trio.run(main)


def consume(bootstrap: str, topic: str, isolation: str, expect: int) -> float:
    """Seconds to be handed ``expect`` records from offset 0."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
        "isolation.level": isolation, "enable.auto.commit": False,
        "fetch.max.bytes": 8 << 20, "max.partition.fetch.bytes": 4 << 20})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got = 0
    started = time.perf_counter()
    deadline = started + 120
    while got < expect and time.perf_counter() < deadline:
        for msg in consumer.consume(10_000, 0.2):
            if msg.error() is None:
                got += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    if got < expect:
        raise RuntimeError(f"{isolation}: {got} of {expect} records in 120 s")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--records", type=int, default=300_000, help="records per phase")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commit-ms", type=int, default=100,
                        help="how long each transaction produces before it commits")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="trilog-txn-bench-") as tmp, \
            BrokerProcess(tmp, {"transaction.state.log.num.partitions": 1,
                                "offsets.topic.num.partitions": 1}) as broker:
        bootstrap = f"{broker.host}:{broker.port}"
        # The topic the consumers read: transactions of 5,000 records, one in ten aborted.
        source = f"source-{uuid.uuid4().hex[:6]}"
        create_topic(broker.address, source)
        _rate, committed, aborted = produce_transactional(
            bootstrap, source, args.records, args.commit_ms, abort_every=10, per_txn=5000)
        print(f"source: {committed:,} committed records, {aborted:,} aborted", flush=True)
        results: dict[str, list[float]] = {k: [] for k in (
            "idempotent produce", "transactional produce", "read_uncommitted",
            "read_committed", "trilog idempotent produce", "trilog transactional produce",
            "trilog read_uncommitted", "trilog read_committed")}
        for r in range(args.rounds):
            for phase in ("produce", "consume"):
                if phase == "produce":
                    topic = f"p-{r}-{uuid.uuid4().hex[:6]}"
                    create_topic(broker.address, topic)
                    results["idempotent produce"].append(
                        produce_idempotent(bootstrap, topic, args.records))
                    topic2 = f"t-{r}-{uuid.uuid4().hex[:6]}"
                    create_topic(broker.address, topic2)
                    results["transactional produce"].append(
                        produce_transactional(bootstrap, topic2, args.records,
                                              args.commit_ms)[0])
                    for name, commit_ms in (("trilog idempotent produce", None),
                                            ("trilog transactional produce", args.commit_ms)):
                        topic3 = f"tr-{r}-{uuid.uuid4().hex[:6]}"
                        create_topic(broker.address, topic3)
                        results[name].append(
                            trilog_produce(bootstrap, topic3, args.records, commit_ms))
                else:
                    # Both read the whole log: records of the log per second.
                    in_log = committed + aborted
                    results["read_uncommitted"].append(
                        in_log / consume(bootstrap, source, "read_uncommitted", in_log))
                    results["read_committed"].append(
                        in_log / consume(bootstrap, source, "read_committed", committed))
                    results["trilog read_uncommitted"].append(in_log / trilog_consume(
                        bootstrap, source, "read_uncommitted", in_log))
                    results["trilog read_committed"].append(in_log / trilog_consume(
                        bootstrap, source, "read_committed", committed))
    print(f"{args.records:,} records of 100 bytes per phase, one partition, "
          f"{args.rounds} rounds, commit every {args.commit_ms} ms (2 CPUs)")
    print(f"{'phase':30} {'median records/s':>17}   rounds")
    med = {}
    for name, values in results.items():
        med[name] = statistics.median(values)
        print(f"{name:30} {med[name]:>17,.0f}   " + ", ".join(f"{v:,.0f}" for v in values))
    for who, prefix in (("librdkafka", ""), ("trilog", "trilog ")):
        produce_ratio = med[prefix + "transactional produce"] / med[prefix + "idempotent produce"]
        consume_ratio = med[prefix + "read_committed"] / med[prefix + "read_uncommitted"]
        print(f"{who}: transactional / idempotent produce {produce_ratio:.2f}x (target >= 0.7x: "
              f"{'met' if produce_ratio >= 0.7 else 'MISSED'}); read_committed / "
              f"read_uncommitted {consume_ratio:.2f}x (target >= 0.9x: "
              f"{'met' if consume_ratio >= 0.9 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
