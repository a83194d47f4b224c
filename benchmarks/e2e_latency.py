"""End-to-end latency: a paced producer and a consumer in separate processes, through one
``trilog broker``, with trilog's client, confluent-kafka (librdkafka) and kafka-python.

Each value carries the producer's clock (``time.time_ns()``, one machine) and a sequence
number; the consumer notes, for each record it is handed, how long ago it was sent.  The
first second of records is a warm-up and is not counted.  One partition, acks=1,
``fetch.wait.max.ms`` 500 on both consumers (trilog's ``max_wait_ms``), the producers'
``linger.ms`` from ``--linger-ms`` (1, issue 27's setting), the confluent consumer polling
with ``poll(0.1)`` or ``consume(1000, 0.005)`` (``--confluent-poll``).  Pairs
(producer -> consumer):

  trilog -> trilog         trilog's client on both ends
  confluent -> confluent   librdkafka on both ends
  trilog -> confluent      librdkafka's consumer behind trilog's producer (issue 14: its p99
                           stalled at 780-890 ms where trilog's consumer saw 3 ms)
  confluent -> trilog      trilog's consumer behind librdkafka's producer
  kafka -> kafka           kafka-python on both ends (the reference pure-Python client)

at each of ``--rates`` (1,000 and 10,000 records/s), ``--runs`` times.  Target (issue 27): p99
under 10 ms at 10,000 records/s of 100-byte records in every trilog/librdkafka pairing, five
runs in a row.  Latency here includes both clients and the machine's scheduling: a loaded
machine (load average above its cores) shows stalls of tens of ms in every pairing.

    .venv/bin/python benchmarks/e2e_latency.py                    # 10 s per run
    .venv/bin/python benchmarks/e2e_latency.py --rates 10000 --runs 5 --seconds 8
    .venv/bin/python benchmarks/e2e_latency.py --seconds 30 --pairs confluent:confluent
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import BrokerProcess, create_topic  # noqa: E402

_STAMP = struct.Struct(">qq")  # time.time_ns() at send, sequence number
PAIRS = ("trilog:trilog", "confluent:confluent", "trilog:confluent", "confluent:trilog",
         "kafka:kafka")
CLIENTS = ("trilog", "confluent", "kafka")


def _value(size: int, seq: int) -> bytes:
    return _STAMP.pack(time.time_ns(), seq) + b"x" * max(0, size - _STAMP.size)


# -- workers (child processes; one JSON line on stdout) -------------------------------------


def produce_trilog(args) -> dict:
    import trio

    import trilog

    async def main() -> dict:
        async with trilog.open_producer(bootstrap_servers=args.bootstrap, acks=1,
                                        linger_ms=args.linger_ms) as producer:
            await producer.partitions_for(args.topic)
            n, total = 0, int(args.rate * args.seconds)
            t0 = time.perf_counter()
            while n < total:
                due = min(total, int((time.perf_counter() - t0) * args.rate) + 1)
                while n < due:
                    try:
                        producer.send_nowait(args.topic, _value(args.record_size, n),
                                             partition=0)
                    except trilog.BufferFullError:
                        await producer.send(args.topic, _value(args.record_size, n),
                                            partition=0)
                    n += 1
                await trio.sleep(0.0005)
            await producer.flush()
            return {"records": n, "errors": producer.statistics()["record_errors"]}

    return trio.run(main)


def produce_confluent(args) -> dict:
    from confluent_kafka import Producer

    errors = [0]

    def delivered(err, _msg) -> None:
        if err is not None:
            errors[0] += 1

    producer = Producer({"bootstrap.servers": args.bootstrap, "acks": 1,
                         "linger.ms": args.linger_ms, "enable.idempotence": False})
    n, total = 0, int(args.rate * args.seconds)
    t0 = time.perf_counter()
    while n < total:
        due = min(total, int((time.perf_counter() - t0) * args.rate) + 1)
        while n < due:
            producer.produce(args.topic, _value(args.record_size, n), partition=0,
                             on_delivery=delivered)
            n += 1
        producer.poll(0)
        time.sleep(0.0005)
    producer.flush(60)
    return {"records": n, "errors": errors[0]}


def produce_kafka(args) -> dict:
    from kafka import KafkaProducer

    errors = [0]

    def failed(_exc) -> None:
        errors[0] += 1

    producer = KafkaProducer(bootstrap_servers=args.bootstrap, acks=1,
                             linger_ms=args.linger_ms)
    n, total = 0, int(args.rate * args.seconds)
    t0 = time.perf_counter()
    while n < total:
        due = min(total, int((time.perf_counter() - t0) * args.rate) + 1)
        while n < due:
            producer.send(args.topic, _value(args.record_size, n), partition=0
                          ).add_errback(failed)
            n += 1
        time.sleep(0.0005)
    producer.flush(60)
    producer.close()
    return {"records": n, "errors": errors[0]}


class _Latencies:
    def __init__(self, expected: int, warmup: int) -> None:
        self.expected = expected
        self.warmup = warmup
        self.seen = 0
        self.values: list[int] = []

    def note(self, value: bytes, now_ns: int) -> None:
        sent, seq = _STAMP.unpack_from(value)
        self.seen += 1
        if seq >= self.warmup:
            self.values.append(now_ns - sent)

    def result(self) -> dict:
        v = sorted(self.values)
        if not v:
            return {"records": self.seen, "measured": 0}

        def pct(q: float) -> float:
            return v[min(len(v) - 1, int(q * len(v)))] / 1e6

        return {"records": self.seen, "measured": len(v), "p50_ms": pct(0.5),
                "p99_ms": pct(0.99), "p999_ms": pct(0.999), "max_ms": v[-1] / 1e6}


def consume_trilog(args, lat: _Latencies, deadline: float) -> None:
    import trio

    import trilog

    async def main() -> None:
        async with trilog.open_simple_consumer(bootstrap_servers=args.bootstrap) as consumer:
            await consumer.partitions_for(args.topic)
            print("ready", flush=True)
            offset = 0
            while lat.seen < lat.expected and time.monotonic() < deadline:
                records = await consumer.fetch(args.topic, 0, offset, max_wait_ms=500,
                                               min_bytes=1)
                now = time.time_ns()
                for record in records:
                    lat.note(record.value, now)
                    offset = record.offset + 1

    trio.run(main)


def consume_confluent(args, lat: _Latencies, deadline: float) -> None:
    from confluent_kafka import Consumer, TopicPartition

    config = {"bootstrap.servers": args.bootstrap, "group.id": f"latency-{os.getpid()}",
              "enable.auto.commit": False, "fetch.wait.max.ms": 500}
    if args.debug:
        config["debug"] = args.debug
    consumer = Consumer(config)
    consumer.assign([TopicPartition(args.topic, 0, 0)])
    print("ready", flush=True)
    try:
        while lat.seen < lat.expected and time.monotonic() < deadline:
            if args.confluent_poll == "consume":
                msgs = consumer.consume(1000, 0.005)
            else:
                msg = consumer.poll(0.1)
                msgs = [] if msg is None else [msg]
            now = time.time_ns()
            for msg in msgs:
                if not msg.error():
                    lat.note(msg.value(), now)
    finally:
        consumer.close()


def consume_kafka(args, lat: _Latencies, deadline: float) -> None:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=args.bootstrap, enable_auto_commit=False,
                             fetch_max_wait_ms=500, group_id=None)
    consumer.assign([TopicPartition(args.topic, 0)])
    consumer.seek(TopicPartition(args.topic, 0), 0)
    print("ready", flush=True)
    try:
        while lat.seen < lat.expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=100).values():
                now = time.time_ns()
                for record in records:
                    lat.note(record.value, now)
    finally:
        consumer.close()


def worker(args) -> None:
    if args.worker == "produce":
        produce = {"trilog": produce_trilog, "confluent": produce_confluent,
                   "kafka": produce_kafka}[args.client]
        result = produce(args)
    else:
        expected = int(args.rate * args.seconds)
        lat = _Latencies(expected, warmup=int(args.rate))
        deadline = time.monotonic() + args.seconds + 60
        consume = {"trilog": consume_trilog, "confluent": consume_confluent,
                   "kafka": consume_kafka}[args.client]
        consume(args, lat, deadline)
        result = lat.result()
    print(json.dumps(result), flush=True)


# -- the driver ---------------------------------------------------------------------------


def _spawn(args, role: str, client: str, topic: str, bootstrap: str, rate: int
           ) -> subprocess.Popen:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", role, "--client", client,
           "--topic", topic, "--bootstrap", bootstrap, "--rate", str(rate),
           "--seconds", str(args.seconds), "--record-size", str(args.record_size),
           "--linger-ms", str(args.linger_ms), "--confluent-poll", args.confluent_poll]
    if args.debug and role == "consume":
        cmd += ["--debug", args.debug]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def _last_json(proc: subprocess.Popen, timeout: float) -> dict:
    out, _ = proc.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode or not lines:
        raise RuntimeError(f"worker failed (status {proc.returncode}): {out[-2000:]}")
    return json.loads(lines[-1])


def run_pair(args, broker: BrokerProcess, producer: str, consumer: str, rate: int,
             run: int = 0) -> dict:
    topic = f"latency-{producer}-{consumer}-{rate}-{run}"
    bootstrap = f"{broker.host}:{broker.port}"
    create_topic(broker.address, topic)
    cons = _spawn(args, "consume", consumer, topic, bootstrap, rate)
    assert cons.stdout is not None
    while (line := cons.stdout.readline()) and line.strip() != "ready":
        pass
    time.sleep(0.5)  # the consumer's first fetch is parked
    prod = _spawn(args, "produce", producer, topic, bootstrap, rate)
    produced = _last_json(prod, timeout=args.seconds + 120)
    consumed = _last_json(cons, timeout=120)
    return {"producer": producer, "consumer": consumer, "rate": rate, **consumed,
            "produced": produced["records"], "produce_errors": produced["errors"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each run")
    parser.add_argument("--rates", default="1000,10000", help="records/s, comma-separated")
    parser.add_argument("--pairs", default=",".join(PAIRS),
                        help="producer:consumer client pairs (trilog, confluent, kafka)")
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--linger-ms", type=int, default=1,
                        help="the producers' linger.ms (issue 27's setting: 1)")
    parser.add_argument("--confluent-poll", choices=("poll", "consume"), default="poll",
                        help="the confluent consumer's loop: poll(0.1), or consume(1000, 0.005)")
    parser.add_argument("--runs", type=int, default=1,
                        help="runs of each pair and rate (issue 27: five in a row)")
    parser.add_argument("--debug", default="",
                        help="librdkafka debug contexts for the confluent consumer "
                             "(e.g. fetch,msg,protocol; logged on its stderr)")
    # worker mode (internal)
    parser.add_argument("--worker", choices=("produce", "consume"), help=argparse.SUPPRESS)
    parser.add_argument("--client", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        warnings.filterwarnings("ignore", module="kafka")  # kafka-python warns at import
        worker(args)
        return 0

    rates = [int(r) for r in args.rates.split(",")]
    pairs = [tuple(p.split(":")) for p in args.pairs.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="trilog-latency-") as data, \
            BrokerProcess(data) as broker:
        for run in range(args.runs):
            for rate in rates:
                for producer, consumer in pairs:
                    rows.append(run_pair(args, broker, producer, consumer, rate, run))
    print(f"end-to-end latency, one partition, {args.record_size}-byte records, acks=1, "
          f"linger.ms={args.linger_ms}, confluent consumer {args.confluent_poll}(), "
          f"{args.seconds:.0f} s per run (first second not counted)")
    print(f"{'producer -> consumer':24s} {'rate/s':>7s} {'records':>8s} {'p50 ms':>7s} "
          f"{'p99 ms':>7s} {'p99.9 ms':>9s} {'max ms':>7s}")
    for r in rows:
        if not r.get("measured"):
            print(f"{r['producer'] + ' -> ' + r['consumer']:24s} {r['rate']:7,d} "
                  f"{r['records']:8,d}  (nothing measured)")
            continue
        print(f"{r['producer'] + ' -> ' + r['consumer']:24s} {r['rate']:7,d} "
              f"{r['records']:8,d} {r['p50_ms']:7.1f} {r['p99_ms']:7.1f} "
              f"{r['p999_ms']:9.1f} {r['max_ms']:7.1f}")
    worst = max((r["p99_ms"] for r in rows if r.get("measured") and r["rate"] == 10_000
                 and r["producer"] in ("trilog", "confluent")
                 and r["consumer"] in ("trilog", "confluent")), default=None)
    if worst is not None:
        print(f"worst p99 of the trilog/librdkafka pairings at 10,000 records/s: {worst:.1f} ms")
    print("target (issue 27): p99 < 10 ms in every trilog/librdkafka pairing at 10,000 "
          "records/s, five runs in a row")
    return 0


if __name__ == "__main__":
    sys.exit(main())
