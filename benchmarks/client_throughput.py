"""Client throughput: trilog's producer and simple consumer against kafka-python, through a
real ``trilog broker`` process, in the same run.

A broker starts as a child process on a free loopback port with a temporary log dir.  Then,
each in its own fresh process (started and connected before the clock starts), with
``--record-size``-byte values (100 by default), no keys, acks=1:

  trilog produce    ``open_producer`` (linger_ms=5, batch_size=64 KiB); the idiomatic fast
                    path: ``send_nowait`` in a loop, ``await producer.send(...)`` only when it
                    raises ``BufferFullError`` (it waits for room), a checkpoint every 1024
                    records so the sender task runs, ``flush()`` at the end.  The clock stops
                    when every record is acknowledged.
  trilog consume    ``open_simple_consumer``: ``multifetch`` of every partition in a loop
                    (1 MiB per partition, long poll), iterating every record (decoded into a
                    ``ConsumerRecord``); until all records are read.
  kafka produce     kafka-python's ``KafkaProducer(acks=1, enable_idempotence=False,
                    linger_ms=5, batch_size=65536)``, ``send`` in a loop, ``flush()``.
  kafka consume     kafka-python's ``KafkaConsumer`` (no group, partitions assigned, from the
                    beginning), iterating every record.

With ``--more`` (no targets; kafka-python beside each, in the same run):

  trilog consumer   ``open_consumer(topic, group_id=...)`` (Kafka's consumer, a new group),
                    ``async for record in consumer``;
  trilog getmany    the same, ``await consumer.getmany(max_records=500)`` in a loop;
  trilog connector  ``open_consumer_connector(group, topics={topic: 1})`` (the seeds'
                    connector),
                    ``async for`` over its stream;
  kafka group       kafka-python's ``KafkaConsumer(topic, group_id=...)``, iterating;
  aiokafka group    aiokafka's ``AIOKafkaConsumer(topic, group_id=...)``, ``getmany`` in a
                    loop (its fast path), on asyncio.
                    Each clock starts at the first record (once the group has formed).
  trilog sync       ``trilog.sync.Producer.send`` in a loop, ``flush()``: the blocking
                    facade, against kafka-python's producer (``kafka produce`` above).

The table gives records/s of each phase beside its target (trilog: >= 500,000 records/s,
goal 1,000,000; and >= 10x kafka-python), with the CPU seconds the client process and the
broker used, and records per client CPU second.  The broker and the client share this
machine's cores: on a busy machine wall-clock rates swing by tens of percent between runs,
records per CPU second much less (the client is CPU-bound in every phase).

    .venv/bin/python benchmarks/client_throughput.py --quick        # 200,000 records
    .venv/bin/python benchmarks/client_throughput.py                # 1,000,000 records
    .venv/bin/python benchmarks/client_throughput.py --records 3000000 --partitions 4
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import BrokerProcess, process_cpu_seconds

TARGET = 500_000
GOAL = 1_000_000
TARGET_RATIO = 10.0
CHECKPOINT_EVERY = 1024
FETCH_BYTES = 1 << 20


# -- workers: each runs in a process of its own and prints one JSON line ----------------------


class _Clock:
    """Wall time, this process's CPU and the broker's CPU from its making on; ``report``
    prints the worker's JSON line with them."""

    def __init__(self, broker_pid: int) -> None:
        self.broker_pid = broker_pid
        self.broker_cpu = process_cpu_seconds(broker_pid)
        self.cpu = time.process_time()
        self.started = time.perf_counter()

    def report(self, records: int, **extra) -> None:
        seconds = time.perf_counter() - self.started
        print(json.dumps({"records": records, "seconds": seconds,
                          "cpu": time.process_time() - self.cpu,
                          "broker_cpu": process_cpu_seconds(self.broker_pid) - self.broker_cpu,
                          **extra}), flush=True)


def trilog_produce(bootstrap: str, topic: str, n: int, size: int, broker_pid: int) -> None:
    import trio

    import trilog

    value = b"x" * size

    async def main() -> None:
        async with trilog.open_producer(bootstrap_servers=bootstrap, acks=1, linger_ms=5,
                                        batch_size=65536) as producer:
            await producer.partitions_for(topic)  # connected, partitions known: off the clock
            send, send_wait = producer.send_nowait, producer.send
            checkpoint = trio.lowlevel.checkpoint
            clock = _Clock(broker_pid)
            for i in range(n):
                try:
                    send(topic, value)
                except trilog.BufferFullError:
                    await send_wait(topic, value)  # waits until buffer_memory has room
                if not i % CHECKPOINT_EVERY:
                    await checkpoint()  # let the sender task seal and send batches
            await producer.flush()
            clock.report(n)

    trio.run(main)


def trilog_consume(bootstrap: str, topic: str, n: int, size: int, broker_pid: int) -> None:
    import trio

    import trilog

    async def main() -> None:
        async with trilog.open_simple_consumer(bootstrap_servers=bootstrap) as consumer:
            partitions = await consumer.partitions_for(topic)
            positions = {p: 0 for p in partitions}
            count = nbytes = 0
            clock = _Clock(broker_pid)
            while count < n:
                results = await consumer.multifetch(
                    [(topic, p, positions[p], FETCH_BYTES) for p in partitions],
                    max_wait_ms=500, min_bytes=1)
                for fetched in results:
                    for record in fetched:
                        nbytes += len(record.value)
                        count += 1
                    positions[fetched.partition] = fetched.next_offset
            clock.report(count, bytes=nbytes)

    trio.run(main)


def _open_bench_consumer(bootstrap: str, topic: str):
    """Kafka's consumer as both of its phases open it: a new group, from the beginning."""
    import trilog

    return trilog.open_consumer(topic, group_id=f"bench-{os.getpid()}",
                                bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False, max_partition_fetch_bytes=FETCH_BYTES)


def trilog_consumer(bootstrap: str, topic: str, n: int, size: int, broker_pid: int) -> None:
    import trio

    async def main() -> None:
        async with _open_bench_consumer(bootstrap, topic) as consumer:
            await consumer.__anext__()  # the group has formed: off the clock, like a connect
            await _time_async_for(consumer, n, broker_pid)

    trio.run(main)


def trilog_getmany(bootstrap: str, topic: str, n: int, size: int, broker_pid: int) -> None:
    import trio

    async def main() -> None:
        async with _open_bench_consumer(bootstrap, topic) as consumer:
            await consumer.getone()  # the group has formed: off the clock, like a connect
            await _time_getmany(consumer.getmany, n, broker_pid)

    trio.run(main)


async def _time_async_for(records, n: int, broker_pid: int) -> None:
    """``async for`` over ``records`` until ``n`` records (one already read), on the clock."""
    count, nbytes = 1, 0
    clock = _Clock(broker_pid)
    async for record in records:
        nbytes += len(record.value)
        count += 1
        if count >= n:
            break
    clock.report(count, bytes=nbytes)


async def _time_getmany(getmany, n: int, broker_pid: int) -> None:
    """``getmany(max_records=500)`` until ``n`` records (one already read), on the clock;
    trilog's and aiokafka's share the call (trio or asyncio around it)."""
    count, nbytes = 1, 0
    clock = _Clock(broker_pid)
    while count < n:
        for records in (await getmany(timeout_ms=1000, max_records=500)).values():
            count += len(records)
            nbytes += sum(len(r.value) for r in records)
    clock.report(count, bytes=nbytes)


def aiokafka_group(bootstrap: str, topic: str, n: int, size: int, broker_pid: int) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer

    async def main() -> None:
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap,
                                    group_id=f"bench-{os.getpid()}", enable_auto_commit=False,
                                    auto_offset_reset="earliest",
                                    max_partition_fetch_bytes=FETCH_BYTES)
        await consumer.start()
        try:
            await consumer.getone()  # the group has formed: off the clock, like a connect
            await _time_getmany(consumer.getmany, n, broker_pid)
        finally:
            await consumer.stop()

    asyncio.run(main())


def trilog_group(bootstrap: str, topic: str, n: int, size: int, broker_pid: int) -> None:
    import trio

    import trilog

    async def main() -> None:
        async with trilog.open_consumer_connector(
                f"bench-{os.getpid()}", bootstrap_servers=bootstrap, topics={topic: 1},
                auto_offset_reset="smallest", enable_auto_commit=False) as consumer:
            stream = consumer.streams[topic][0]
            await stream.__anext__()  # the group has formed: off the clock, like a connect
            await _time_async_for(stream, n, broker_pid)

    trio.run(main)


def trilog_sync(bootstrap: str, topic: str, n: int, size: int, broker_pid: int) -> None:
    import trilog.sync

    value = b"x" * size
    with trilog.sync.Producer(bootstrap, acks=1, linger_ms=5, batch_size=65536) as producer:
        producer.partitions_for(topic)  # connected, partitions known: off the clock
        _time_blocking_sends(producer, topic, value, n, broker_pid)


def _time_blocking_sends(producer, topic: str, value: bytes, n: int, broker_pid: int) -> None:
    """``producer.send`` ``n`` times then ``flush()``, on the clock (a blocking API)."""
    send = producer.send
    clock = _Clock(broker_pid)
    for _ in range(n):
        send(topic, value)
    producer.flush()
    clock.report(n)


def kafka_group(bootstrap: str, topic: str, n: int, size: int, broker_pid: int) -> None:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"bench-{os.getpid()}",
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             max_partition_fetch_bytes=FETCH_BYTES)
    try:
        next(consumer)  # the group has formed: off the clock, like a connect
        _time_kafka_consumer(consumer, n, broker_pid, count=1)
    finally:
        consumer.close()


def kafka_produce(bootstrap: str, topic: str, n: int, size: int, broker_pid: int) -> None:
    from kafka import KafkaProducer

    value = b"x" * size
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, enable_idempotence=False,
                             linger_ms=5, batch_size=65536, retries=5)
    try:
        producer.partitions_for(topic)  # metadata and connection: off the clock
        _time_blocking_sends(producer, topic, value, n, broker_pid)
    finally:
        producer.close(timeout=10)


def kafka_consume(bootstrap: str, topic: str, n: int, size: int, broker_pid: int) -> None:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             max_partition_fetch_bytes=FETCH_BYTES)
    try:
        partitions = sorted(consumer.partitions_for_topic(topic) or ())
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        consumer.seek_to_beginning()
        _time_kafka_consumer(consumer, n, broker_pid)
    finally:
        consumer.close()


def _time_kafka_consumer(consumer, n: int, broker_pid: int, count: int = 0) -> None:
    """Iterate a kafka-python consumer on the clock until ``n`` records (``count`` read)."""
    nbytes = 0
    clock = _Clock(broker_pid)
    for record in consumer:
        nbytes += len(record.value)
        count += 1
        if count >= n:
            break
    clock.report(count, bytes=nbytes)


WORKERS = {
    "trilog-produce": trilog_produce,
    "trilog-consume": trilog_consume,
    "kafka-produce": kafka_produce,
    "kafka-consume": kafka_consume,
    "trilog-group": trilog_group,
    "trilog-consumer": trilog_consumer,
    "trilog-getmany": trilog_getmany,
    "kafka-group": kafka_group,
    "aiokafka-group": aiokafka_group,
    "trilog-sync": trilog_sync,
}


def run_worker(name: str, bootstrap: str, topic: str, n: int, size: int, broker_pid: int,
               timeout: float) -> dict:
    """Run one phase in a fresh interpreter (no state shared with earlier phases)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--bootstrap", bootstrap,
           "--topic", topic, "--records", str(n), "--record-size", str(size),
           "--broker-pid", str(broker_pid)]
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{name} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# -- the driver ----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--records", type=int, default=None,
                        help="records per phase (default 1,000,000; --quick: 200,000)")
    parser.add_argument("--kafka-records", type=int, default=None,
                        help="records per kafka-python phase (default: --records)")
    parser.add_argument("--record-size", type=int, default=100, help="value bytes (default 100)")
    parser.add_argument("--partitions", type=int, default=1,
                        help="partitions of each topic (default 1)")
    parser.add_argument("--quick", action="store_true", help="200,000 records per phase")
    parser.add_argument("--no-kafka", action="store_true", help="skip the kafka-python phases")
    parser.add_argument("--more", action="store_true",
                        help="also the group consumer and the blocking producer (no targets)")
    parser.add_argument("--json", action="store_true", help="also print the results as JSON")
    parser.add_argument("--dir", default=None, help="where the log dir goes (default: temp)")
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--broker-pid", type=int, help=argparse.SUPPRESS)
    return parser


def _row(label: str, result: dict | None, target: str, ratio: str) -> str:
    if result is None:
        return f"{label:<21} {'-':>12}"
    rate = result["records"] / result["seconds"]
    per_cpu = result["records"] / result["cpu"] if result["cpu"] > 0 else float("nan")
    return (f"{label:<21} {rate:>12,.0f} {per_cpu:>12,.0f} {result['seconds']:>8.2f} "
            f"{result['cpu']:>8.2f} {result['broker_cpu']:>8.2f}   {target:<26} {ratio}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.worker:
        WORKERS[args.worker](args.bootstrap, args.topic, args.records, args.record_size,
                             args.broker_pid)
        return 0
    n = args.records or (200_000 if args.quick else 1_000_000)
    kn = args.kafka_records or n
    size = args.record_size
    base = args.dir or tempfile.gettempdir()
    log_dir = tempfile.mkdtemp(prefix="trilog-client-bench-", dir=base)
    timeout = 600.0
    results: dict[str, dict] = {}
    try:
        with BrokerProcess(log_dir, {"num.partitions": args.partitions}) as broker:
            bootstrap = f"{broker.host}:{broker.port}"
            print(f"broker pid {broker.pid} on {bootstrap}, log dir {log_dir}; {n:,} records of "
                  f"{size} bytes, acks=1, {args.partitions} partition(s), "
                  f"{os.cpu_count()} CPUs", flush=True)
            phases = [("trilog-produce", "trilog-bench", n), ("trilog-consume", "trilog-bench", n)]
            if not args.no_kafka:
                phases += [("kafka-produce", "kafka-bench", kn),
                           ("kafka-consume", "kafka-bench", kn)]
            if args.more:
                phases += [("trilog-consumer", "trilog-bench", n),
                           ("trilog-getmany", "trilog-bench", n),
                           ("trilog-group", "trilog-bench", n), ("trilog-sync", "sync-bench", n)]
                if not args.no_kafka:
                    phases += [("kafka-group", "kafka-bench", kn),
                               ("aiokafka-group", "kafka-bench", kn)]
            for name, topic, count in phases:
                result = run_worker(name, bootstrap, topic, count, size, broker.pid, timeout)
                results[name] = result
                print(f"  {name:<15} {result['records']:,} records in {result['seconds']:.2f} s: "
                      f"{result['records'] / result['seconds']:,.0f} records/s", flush=True)
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)

    def rate(name: str) -> float | None:
        r = results.get(name)
        return r["records"] / r["seconds"] if r else None

    print()
    print(f"{'phase':<21} {'records/s':>12} {'per cpu s':>12} {'wall s':>8} {'cpu s':>8} "
          f"{'broker s':>8}   {'target':<26} vs kafka-python (target >= {TARGET_RATIO:.0f}x)")
    status = 0
    for what in ("produce", "consume"):
        mine, ref = rate(f"trilog-{what}"), rate(f"kafka-{what}")
        ok = mine >= TARGET
        status |= not ok
        target = f">= {TARGET:,} {'ok' if ok else 'MISSED'}" + (" goal met" if mine >= GOAL
                                                                 else "")
        if ref:
            ratio_ok = mine / ref >= TARGET_RATIO
            status |= not ratio_ok
            ratio = f"{mine / ref:.1f}x {'ok' if ratio_ok else 'MISSED'}"
        else:
            ratio = "-"
        print(_row(f"trilog {what}", results[f"trilog-{what}"], target, ratio))
        if ref:
            print(_row(f"kafka-python {what}", results[f"kafka-{what}"], "", ""))
    labels = {"trilog-consumer": "trilog consumer", "trilog-getmany": "trilog getmany",
              "trilog-group": "trilog connector", "trilog-sync": "trilog sync"}
    for mine, ref in (("trilog-consumer", "kafka-group"), ("trilog-getmany", "kafka-group"),
                      ("trilog-group", "kafka-group"), ("trilog-sync", "kafka-produce")):
        if mine in results:
            ratio = f"{rate(mine) / rate(ref):.1f}x kafka-python" if rate(ref) else "-"
            if mine == "trilog-getmany" and rate("aiokafka-group"):
                ratio += f", {rate(mine) / rate('aiokafka-group'):.1f}x aiokafka"
            print(_row(labels[mine], results[mine], "(no target)", ratio))
    for ref, label in (("kafka-group", "kafka-python group"), ("aiokafka-group", "aiokafka group")):
        if ref in results:
            print(_row(label, results[ref], "", ""))
    if args.json:
        print(json.dumps({"records": n, "record_size": size, "partitions": args.partitions,
                          "results": results}))
    return 1 if status else 0


if __name__ == "__main__":
    sys.exit(main())
