"""The sink: rows written by Spark come back through a trilog consumer."""

from __future__ import annotations

import pytest
from spark_helpers import produce, read_back


def test_batch_write_with_topic_option_and_key(spark, broker):
    df = spark.createDataFrame([(f"m{i % 7}", f"view-{i}") for i in range(500)], "key string, value string")
    (df.repartition(3).write.format("trilog").option("bootstrap.servers", broker.bootstrap)
     .option("topic", "written").mode("append").save())
    records = read_back(broker.bootstrap, "written")
    assert sorted(r.value for r in records) == sorted(f"view-{i}".encode() for i in range(500))
    # keyed records land on one partition per key (the default partitioner)
    by_key: dict[bytes, set[int]] = {}
    for r in records:
        by_key.setdefault(r.key, set()).add(r.partition)
    assert set(by_key) == {f"m{i}".encode() for i in range(7)}
    assert all(len(parts) == 1 for parts in by_key.values())


def test_batch_write_with_topic_partition_and_headers_columns(spark, broker):
    rows = [(("left" if i % 2 else "right"), i % 4, bytearray(b"%d" % i), [("n", bytearray(b"%d" % i))])
            for i in range(40)]
    df = spark.createDataFrame(
        rows, "topic string, partition int, value binary, headers array<struct<key:string,value:binary>>")
    df.write.format("trilog").option("bootstrap.servers", broker.bootstrap).mode("append").save()
    for topic, parity in (("left", 1), ("right", 0)):
        records = read_back(broker.bootstrap, topic)
        assert sorted(int(r.value) for r in records) == [i for i in range(40) if i % 2 == parity]
        assert all(r.partition == int(r.value) % 4 for r in records)
        assert all(list(r.headers) == [("n", r.value)] for r in records)


def test_kafka_client_settings_reach_the_producer(spark, broker):
    """Every kafka.* setting a write passes is one trilog's producer takes: a wrong keyword
    would fail every task."""
    df = spark.createDataFrame([(f"k{i % 3}", f"v{i}") for i in range(200)],
                               "key string, value string")
    writer = df.write.format("trilog").option("bootstrap.servers", broker.bootstrap) \
        .option("topic", "tuned-out").mode("append")
    for key, value in {"kafka.client.id": "loader", "kafka.acks": "all", "kafka.linger.ms": "1",
                       "kafka.batch.size": "4096", "kafka.buffer.memory": "8388608",
                       "kafka.retries": "3", "kafka.retry.backoff.ms": "20",
                       "kafka.delivery.timeout.ms": "60000", "kafka.request.timeout.ms": "20000",
                       "kafka.max.request.size": "1048576",
                       "kafka.max.in.flight.requests.per.connection": "1",
                       "kafka.metadata.max.age.ms": "60000", "kafka.enable.idempotence": "true",
                       "kafka.compression.type": "gzip",
                       "kafka.security.protocol": "PLAINTEXT"}.items():
        writer = writer.option(key, value)
    writer.save()
    records = read_back(broker.bootstrap, "tuned-out")
    assert sorted(r.value for r in records) == sorted(f"v{i}".encode() for i in range(200))


def test_batch_write_needs_a_topic_and_a_value(spark, broker):
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception, match="needs the option topic or a 'topic' column"):
        df.write.format("trilog").option("bootstrap.servers", broker.bootstrap) \
            .mode("append").save()
    with pytest.raises(Exception, match="needs a 'value' column"):
        spark.createDataFrame([("a",)], "body string").write.format("trilog") \
            .option("bootstrap.servers", broker.bootstrap).option("topic", "t") \
            .mode("append").save()


def test_streaming_copy_from_one_topic_to_another(spark, broker, tmp_path):
    produce(broker.bootstrap, "source", [(i % 4, b"k%d" % (i % 5), b"v%d" % i) for i in range(300)])
    query = (spark.readStream.format("trilog").option("bootstrap.servers", broker.bootstrap)
             .option("subscribe", "source").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "120").load()
             .selectExpr("key", "value")
             .writeStream.format("trilog").option("bootstrap.servers", broker.bootstrap)
             .option("topic", "copy").option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    copied = read_back(broker.bootstrap, "copy")
    assert sorted((r.key, r.value) for r in copied) == sorted(
        (b"k%d" % (i % 5), b"v%d" % i) for i in range(300))
