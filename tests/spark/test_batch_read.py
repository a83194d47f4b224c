"""Batch reads: what was produced comes back once, however the ranges are split or retried."""

from __future__ import annotations

import datetime
import json
import os

import pytest
from spark_helpers import keyed, load, produce


def _expected(metas, records, topic):
    return {(topic, m.partition, m.offset, v) for m, (_, _, v) in zip(metas, records)}


def test_three_topics_of_four_partitions_read_back_exactly(spark, broker):
    expected = set()
    for t in ("alpha", "beta", "gamma"):
        records = [(i % 4, b"k%d" % i, f"{t}-{i}".encode()) for i in range(200)]
        expected |= _expected(produce(broker.bootstrap, t, records), records, t)
    df = load(spark, broker.bootstrap, subscribe="alpha, beta,gamma")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int>")
    got = keyed(df)
    assert len(got) == len(expected) == 600
    assert set(got) == expected
    assert df.rdd.getNumPartitions() == 12  # one input partition per topic-partition


def test_min_partitions_splits_ranges_and_reads_each_record_once(spark, broker):
    records = [(0, None, b"a%d" % i) for i in range(300)] + \
              [(1, None, b"b%d" % i) for i in range(100)]
    expected = _expected(produce(broker.bootstrap, "split", records), records, "split")
    df = load(spark, broker.bootstrap, subscribe="split", minPartitions=16)
    assert df.rdd.getNumPartitions() >= 16
    got = keyed(df)
    assert len(got) == 400
    assert set(got) == expected


def test_max_records_per_partition_splits_ranges_and_reads_each_record_once(spark, broker):
    records = [(i % 4, None, b"m%d" % i) for i in range(400)]  # 100 per partition
    expected = _expected(produce(broker.bootstrap, "capped", records), records, "capped")
    df = load(spark, broker.bootstrap, subscribe="capped", maxRecordsPerPartition=30)
    assert df.rdd.getNumPartitions() == 16  # each partition's 100 records in 4 tasks
    got = keyed(df)
    assert len(got) == 400
    assert set(got) == expected


def test_a_task_that_fails_once_is_retried_without_duplicates(spark, broker, tmp_path):
    from trilog.spark import TrilogBatchReader, TrilogDataSource

    marker = str(tmp_path / "failed-once")

    class FlakyReader(TrilogBatchReader):
        """Fails partition 1's task after it has yielded rows, the first time only."""

        def read(self, partition):
            for batch in super().read(partition):
                yield batch
                if partition.value.partition == 1 and not os.path.exists(marker):
                    open(marker, "w").close()
                    raise RuntimeError("injected failure after a first batch")

    class FlakySource(TrilogDataSource):
        @classmethod
        def name(cls):
            return "trilog_flaky"

        def reader(self, schema):
            return FlakyReader(super().reader(schema).options)

    spark.dataSource.register(FlakySource)
    records = [(i % 4, None, b"%d" % i) for i in range(2000)]
    expected = _expected(produce(broker.bootstrap, "flaky", records), records, "flaky")
    df = (spark.read.format("trilog_flaky").option("bootstrap.servers", broker.bootstrap)
          .option("subscribe", "flaky").option("kafka.max.partition.fetch.bytes", "4096")
          .load())
    got = keyed(df)
    assert os.path.exists(marker), "the injected failure did not happen"
    assert len(got) == len(expected)
    assert set(got) == expected


def test_kafka_client_settings_reach_the_consumer(spark, broker):
    """Every kafka.* setting a read passes is one trilog's consumer takes: a wrong keyword
    would fail the planning step and every task."""
    records = [(i % 4, None, b"c%d" % i + b"." * 100) for i in range(400)]
    expected = _expected(produce(broker.bootstrap, "tuned", records), records, "tuned")
    df = load(spark, broker.bootstrap, subscribe="tuned", **{
        "kafka.client.id": "tuned-reader", "kafka.group.id": "reports",
        "kafka.request.timeout.ms": 20_000, "kafka.metadata.max.age.ms": 60_000,
        "kafka.max.partition.fetch.bytes": 1 << 20, "kafka.fetch.max.bytes": 2048,
        "kafka.security.protocol": "PLAINTEXT"})
    assert set(keyed(df)) == expected


def test_assign_with_json_offsets_and_headers(spark, broker):
    records = [(1, b"k", b"v%d" % i) for i in range(20)]
    produce(broker.bootstrap, "assigned", records, headers=[("h", b"x"), ("n", None)])
    produce(broker.bootstrap, "assigned", [(2, None, b"other")])
    df = load(spark, broker.bootstrap, assign=json.dumps({"assigned": [1]}),
              startingOffsets=json.dumps({"assigned": {"1": 5}}),
              endingOffsets=json.dumps({"assigned": {"1": 10}}), includeHeaders="true")
    rows = sorted(df.collect(), key=lambda r: r.offset)
    assert [r.offset for r in rows] == [5, 6, 7, 8, 9]
    assert [bytes(r.value) for r in rows] == [b"v5", b"v6", b"v7", b"v8", b"v9"]
    assert {(r.partition, bytes(r.key)) for r in rows} == {(1, b"k")}
    assert [(h.key, h.value and bytes(h.value)) for h in rows[0].headers] == [("h", b"x"),
                                                                              ("n", None)]
    assert rows[0].timestampType == 0


def _stamped(bootstrap, topic, base):
    """Partition 0: ten records 1 s apart from ``base``; partition 1: ten records 10 ms apart."""
    for i in range(10):
        produce(bootstrap, topic, [(0, None, b"p0-%d" % i)], timestamp_ms=base + i * 1000)
        produce(bootstrap, topic, [(1, None, b"p1-%d" % i)], timestamp_ms=base + i * 10)


def _values(df) -> list[bytes]:
    return sorted(bytes(r.value) for r in df.collect())


def test_starting_and_ending_timestamp(spark, broker):
    base = 1_700_000_000_000
    _stamped(broker.bootstrap, "timed", base)  # partitions 2 and 3 stay empty
    # Partition 1 has nothing that recent: by default the query fails, as Spark's does.
    with pytest.raises(Exception, match="timed-1 has no record stamped at or after "
                                        f"{base + 5000}"):
        load(spark, broker.bootstrap, subscribe="timed", startingTimestamp=base + 5000).collect()
    df = load(spark, broker.bootstrap, subscribe="timed", startingTimestamp=base + 5000,
              startingOffsetsByTimestampStrategy="latest")
    rows = df.collect()
    # ... and with strategy latest it starts at its end
    assert sorted(bytes(r.value) for r in rows) == [b"p0-%d" % i for i in range(5, 10)]
    # collected timestamps are naive local times, as pyspark gives them
    assert min(r.timestamp for r in rows) == datetime.datetime.fromtimestamp((base + 5000) / 1000)
    # an ending timestamp no record is that recent ends at the partition's end
    window = load(spark, broker.bootstrap, subscribe="timed", startingTimestamp=base + 20,
                  endingTimestamp=base + 2000, startingOffsetsByTimestampStrategy="latest")
    assert _values(window) == sorted([b"p0-1"] + [b"p1-%d" % i for i in range(2, 10)])


def test_offsets_by_timestamp_per_partition(spark, broker):
    base = 1_700_000_000_000
    _stamped(broker.bootstrap, "stamped", base)
    assign = json.dumps({"stamped": [0, 1]})

    def read(start: dict, **options):
        return _values(load(spark, broker.bootstrap, assign=assign,
                            startingOffsetsByTimestamp=json.dumps({"stamped": start}),
                            **options))

    # startingOffsets is the last preference: the timestamps win over it, as in Spark.
    assert read({"0": base + 3000, "1": base + 50}, startingOffsets="earliest",
                endingOffsetsByTimestamp=json.dumps({"stamped": {"0": base + 6000,
                                                                 "1": base + 60_000}})
                ) == sorted([b"p0-3", b"p0-4", b"p0-5"] + [b"p1-%d" % i for i in range(5, 10)])
    with pytest.raises(Exception, match="stamped-1 has no record stamped at or after"):
        read({"0": base, "1": base + 60_000})
    assert read({"0": base + 9000, "1": base + 60_000},
                startingOffsetsByTimestampStrategy="latest") == [b"p0-9"]
    with pytest.raises(Exception, match="option startingOffsetsByTimestamp must give a "
                                        "timestamp for every partition read; missing stamped-1"):
        read({"0": base})
    with pytest.raises(Exception, match="names stamped-7, which the query does not read"):
        read({"0": base, "1": base, "7": base})


@pytest.fixture
def retention_broker(broker_process):
    """Small segments and a size limit, checked often: old records go away quickly."""
    return broker_process(overrides={"num.partitions": 1, "log.segment.bytes": 1024,
                                     "log.retention.bytes": 2048,
                                     "log.retention.check.interval.ms": 100})


def test_fail_on_data_loss_both_ways(spark, retention_broker):
    import time

    import trilog.sync as ts

    bootstrap = retention_broker.bootstrap
    with ts.Producer(bootstrap, linger_ms=0) as producer:
        for i in range(120):
            producer.send_and_wait("shrinking", b"%03d" % i + b"." * 60)
    with ts.SimpleConsumer(bootstrap) as consumer:
        deadline = time.monotonic() + 20
        while consumer.offsets_before("shrinking", 0, time=-2)[0] == 0:
            assert time.monotonic() < deadline, "retention never deleted a segment"
            time.sleep(0.1)
        log_start = consumer.offsets_before("shrinking", 0, time=-2)[0]
    from_zero = json.dumps({"shrinking": {"0": 0}})
    with pytest.raises(Exception, match="failOnDataLoss=false") as info:
        load(spark, bootstrap, subscribe="shrinking", startingOffsets=from_zero).collect()
    assert "deleted by retention" in str(info.value)
    rows = load(spark, bootstrap, subscribe="shrinking", startingOffsets=from_zero,
                failOnDataLoss="false").collect()
    offsets = sorted(r.offset for r in rows)
    assert offsets[0] >= log_start
    assert offsets == list(range(offsets[0], 120))


def test_an_empty_topic_reads_as_no_rows(spark, broker):
    import trilog.sync as ts

    with ts.Producer(broker.bootstrap) as producer:
        producer.partitions_for("empty")  # auto-creates it
    assert load(spark, broker.bootstrap, subscribe="empty").count() == 0
    assert load(spark, broker.bootstrap, subscribePattern="no-such-.*").count() == 0


def test_read_through_zookeeper(spark, broker_process, zookeeper):
    broker = broker_process(zookeeper=zookeeper, overrides={"num.partitions": 2})
    records = [(i % 2, None, b"zk%d" % i) for i in range(50)]
    expected = _expected(produce(broker.bootstrap, "via-zk", records), records, "via-zk")
    df = (spark.read.format("trilog").option("zookeeper.connect", zookeeper)
          .option("subscribePattern", "via-.*").load())
    assert set(keyed(df)) == expected
