"""A real local Spark for the data source's tests: one session for the whole run.

``local[2, 2]``: two cores, and a task may fail once and be retried (the retry test needs it;
Spark's local mode otherwise never retries).  Python workers run this interpreter.
"""

from __future__ import annotations

import os
import sys

import pytest

pyspark = pytest.importorskip("pyspark")

import trilog.sync as ts  # noqa: E402


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import trilog.spark

    session = (
        SparkSession.builder.master("local[2, 2]")
        .appName("trilog-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("spark-warehouse")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    trilog.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def broker(broker_process):
    """A broker whose auto-created topics have 4 partitions."""
    return broker_process(overrides={"num.partitions": 4})


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


def read_back(bootstrap: str, topic: str) -> list:
    """Every record of every partition of ``topic``, through the sync consumer."""
    out = []
    with ts.SimpleConsumer(bootstrap) as consumer:
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
