"""trilog's client and kafka-python read each other's records: keys, values, headers,
timestamps (kafka-python 3 with its defaults: acks='all' and idempotence)."""

from __future__ import annotations

import trio
from client_helpers import create_topic, kafka_consume, kafka_produce, read_topic

import trilog

N = 200


def _record(i: int) -> dict:
    return {
        "key": None if i % 10 == 0 else f"key-{i}".encode(),
        "value": None if i % 17 == 0 and i % 10 else (f"value-{i}-" * (i % 7)).encode(),
        "headers": [] if i % 3 == 0 else [("trace", b"%d" % i), ("empty", b""),
                                          ("\u00fcnicode", "h\u00e9".encode())],
        "timestamp_ms": 1_600_000_000_000 + i * 1000,
    }


async def test_trilog_reads_what_kafka_python_wrote(broker):
    await create_topic(broker.bootstrap, "from-kafka-python", 2)
    records = [_record(i) for i in range(N)]
    for i, r in enumerate(records):
        r["partition"] = i % 2
    metas = await trio.to_thread.run_sync(kafka_produce, broker.bootstrap,
                                          "from-kafka-python", records)
    stored = await read_topic(broker.bootstrap, "from-kafka-python", [0, 1])
    for p in (0, 1):
        expected = [r for r in records if r["partition"] == p]
        assert [(r.key, r.value, list(r.headers), r.timestamp) for r in stored[p]] == \
            [(r["key"], r["value"], r["headers"], r["timestamp_ms"]) for r in expected]
        assert [r.offset for r in stored[p]] == [m.offset for m in metas if m.partition == p]


async def test_kafka_python_reads_what_trilog_wrote(broker):
    await create_topic(broker.bootstrap, "from-trilog", 2)
    records = [_record(i) for i in range(N)]
    async with trilog.open_producer(bootstrap_servers=broker.bootstrap,
                                    batch_size=4096) as producer:
        deliveries = [await producer.send("from-trilog", value=r["value"], key=r["key"],
                                          partition=i % 2, headers=r["headers"],
                                          timestamp_ms=r["timestamp_ms"])
                      for i, r in enumerate(records)]
    got = await trio.to_thread.run_sync(kafka_consume, broker.bootstrap, "from-trilog",
                                        [0, 1], N)
    for p in (0, 1):
        expected = [(d.result().offset, r) for d, r in zip(deliveries, records)
                    if d.result().partition == p]
        assert [(m.offset, m.key, m.value, m.headers, m.timestamp) for m in got[p]] == \
            [(o, r["key"], r["value"], r["headers"], r["timestamp_ms"]) for o, r in expected]
