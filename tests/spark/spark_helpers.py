"""Helpers shared by the data source's tests: produce, read back, load."""

from __future__ import annotations

import trilog.sync as ts


def produce(bootstrap: str, topic: str, records, *, timestamp_ms=None, headers=None,
            **kwargs) -> list:
    """Send ``(partition, key, value)`` triples (partition may be None); every one acked.
    Returns their ``RecordMetadata``."""
    with ts.Producer(bootstrap, linger_ms=2, **kwargs) as producer:
        producer.partitions_for(topic)  # an explicit partition needs the topic's metadata first
        deliveries = [producer.send(topic, value, key, partition=partition,
                                    timestamp_ms=timestamp_ms, headers=headers)
                      for partition, key, value in records]
        producer.flush()
        return [d.get(timeout=30) for d in deliveries]


def read_back(bootstrap: str, topic: str, isolation_level: str = "read_uncommitted") -> list:
    """Every record of every partition of ``topic``, through the sync consumer (with
    read_committed: to the last stable offset, without aborted records)."""
    out = []
    with ts.SimpleConsumer(bootstrap, isolation_level=isolation_level) as consumer:
        for partition in consumer.partitions_for(topic):
            end = consumer.offsets_before(topic, partition)[0]
            start = consumer.offsets_before(topic, partition, time=-2)[0]
            out.extend(consumer.iterate(topic, partition, start, end_offset=end))
    return out


def load(spark, bootstrap: str, **options):
    """``spark.read.format("trilog")`` with ``bootstrap.servers`` and ``options``."""
    reader = spark.read.format("trilog").option("bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def keyed(df) -> list[tuple]:
    """``(topic, partition, offset, value)`` of every row."""
    return [(r.topic, r.partition, r.offset, bytes(r.value)) for r in df.collect()]
