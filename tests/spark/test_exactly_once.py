"""The exactly-once sink (``deliveryGuarantee=exactly_once``) against real failures: a task
whose send fails midway, a task failing upstream of the sink after handing it rows, and a
driver SIGKILLed mid-batch and restarted from its checkpoint.  The same scenarios with the
default (at least once) duplicate rows, which shows that each failure really struck in the
middle of a write.  Without Spark: the replay of a batch whose driver died between its
commits (the committed tasks skip, the others are written again)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark import TaskContext
from pyspark.sql.functions import udf
from spark_helpers import produce, read_back

import trilog.sync as ts
from trilog.errors import ProducerFencedError
from trilog.spark._options import parse_write_options
from trilog.spark._write import commit_prepared, transactional_id, write_transactional

EOS_QUERY = Path(__file__).with_name("eos_query.py")


#: Values this long fill the 64 KiB buffer a Python UDF worker flushes its results from
#: every few rows, so rows reach the sink while the UDF goes on (it would hold them all).
PADDING = b"." * 4000


def _inputs(n_per_partition: int, partitions: int = 4) -> list[tuple]:
    return [(p, None, b"in:%d:%d:" % (p, i) + PADDING) for p in range(partitions)
            for i in range(n_per_partition)]


def _values(records) -> Counter:
    return Counter(r.value for r in records)


def _failing_copy(bootstrap: str, fail_at: int):
    """A UDF passing ``value`` through that fails the first attempt of the task reading
    partition 0 at offset ``fail_at``, once the sink has written some of its earlier rows
    (it could otherwise fail before the sink's producer has even connected).  Self-contained:
    Spark's workers cannot import this test module."""

    def copy(value, partition, offset):
        if partition == 0 and offset >= fail_at and TaskContext.get().attemptNumber() == 0:
            import time

            import trilog.sync

            def sent() -> int:  # partition 0's rows in out, committed or not
                with trilog.sync.SimpleConsumer(bootstrap) as consumer:
                    return sum(
                        r.value.startswith(b"in:0:")
                        for p in consumer.partitions_for("out")
                        for r in consumer.iterate("out", p, 0, end_offset=consumer.offsets_before(
                            "out", p)[0]))

            deadline = time.monotonic() + 60
            while sent() < 20 and time.monotonic() < deadline:
                time.sleep(0.2)
            raise RuntimeError(f"injected task failure at offset {offset}")
        return value

    return udf(copy, "binary", useArrow=False)


@pytest.fixture
def small_batches(spark):
    """Arrow and UDF batches of 20 rows, so the sink has rows in flight before a failure."""
    names = ("spark.sql.execution.arrow.maxRecordsPerBatch",
             "spark.sql.execution.python.udf.maxRecordsPerBatch")
    before = {n: spark.conf.get(n, None) for n in names}
    for name in names:
        spark.conf.set(name, "20")
    yield
    for name, value in before.items():
        if value is None:
            spark.conf.unset(name)
        else:
            spark.conf.set(name, value)


def _partition_failing_once(fail_at: int):
    """A UDF giving the ``partition`` column: none (the producer picks), except for the row
    at offset ``fail_at`` of input partition 0 on the task's first attempt, which it sends
    to a partition ``out`` does not have: the sink's send fails in the middle of the task."""

    def partition_of(partition, offset):
        if partition == 0 and offset == fail_at and TaskContext.get().attemptNumber() == 0:
            return 99
        return None

    return udf(partition_of, "int", useArrow=False)


def _copy(spark, bootstrap, checkpoint, guarantee, *columns):
    query = (spark.readStream.format("trilog").option("bootstrap.servers", bootstrap)
             .option("subscribe", "in").option("startingOffsets", "earliest").load()
             .select(*columns)
             .writeStream.format("trilog").option("bootstrap.servers", bootstrap)
             .option("topic", "out").option("deliveryGuarantee", guarantee)
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(240)
    assert query.exception() is None


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_a_task_whose_write_fails_midway_is_retried(spark, broker, tmp_path, small_batches,
                                                    guarantee):
    inputs = _inputs(300)
    produce(broker.bootstrap, "in", inputs)
    _copy(spark, broker.bootstrap, tmp_path / "ckpt", guarantee, "value",
          _partition_failing_once(250)("partition", "offset").alias("partition"))
    expected = Counter(v for *_, v in inputs)
    committed = _values(read_back(broker.bootstrap, "out", "read_committed"))
    if guarantee == "exactly_once":
        assert committed == expected
        # A read_committed Spark read of the output sees the same.
        df = (spark.read.format("trilog").option("bootstrap.servers", broker.bootstrap)
              .option("subscribe", "out").option("kafka.isolation.level", "read_committed")
              .load())
        assert Counter(bytes(r.value) for r in df.select("value").collect()) == expected
    else:
        assert set(committed) == set(expected)
        assert max(committed.values()) == 2  # the rows sent before the failure, twice


def test_a_task_failing_upstream_of_the_sink_is_retried(spark, broker, tmp_path,
                                                        small_batches):
    # The sink's input ends early as if complete: the task prepares part of its rows, but
    # it fails, so the driver never commits them; the retry aborts them and writes all.
    inputs = _inputs(300)
    produce(broker.bootstrap, "in", inputs)
    _copy(spark, broker.bootstrap, tmp_path / "ckpt", "exactly_once",
          _failing_copy(broker.bootstrap, 150)("value", "partition", "offset").alias("value"))
    everything = _values(read_back(broker.bootstrap, "out"))
    assert max(everything.values()) == 2  # the first attempt's rows are in the log
    committed = _values(read_back(broker.bootstrap, "out", "read_committed"))
    assert committed == Counter(v for *_, v in inputs)


def _recorded(bootstrap: str, txn_id: str) -> int | None:
    with ts.Consumer(group_id=txn_id, bootstrap_servers=bootstrap,
                     enable_auto_commit=False) as consumer:
        committed = consumer.committed(("out", 0))
    return None if committed is None else committed - 1


def _run_query(bootstrap, checkpoint, guarantee, workdir: Path, stall_flag: Path | None):
    args = [sys.executable, str(EOS_QUERY), bootstrap, str(checkpoint), guarantee,
            str(workdir / "query-id")]
    if stall_flag is not None:
        args.append(str(stall_flag))
    with open(workdir / f"query-{'stalled' if stall_flag else 'rerun'}.log", "wb") as log:
        # Its own session: the kill takes the Spark JVM and the Python workers with the driver.
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env=dict(os.environ))


def _wait(predicate, what: str, process, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert process.poll() is None, f"the query exited ({process.returncode}) before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_a_driver_killed_mid_batch_restarts_from_its_checkpoint(broker, tmp_path):
    # (exactly once only: at least once, a batch replayed whole after a restart is Spark's
    # own checkpoint recovery, the same with any sink; this is the suite's longest test)
    guarantee = "exactly_once"
    inputs = _inputs(300)  # batches of 600: offsets 0-149, then 150-299 of each partition
    produce(broker.bootstrap, "in", inputs)
    checkpoint = tmp_path / "ckpt"
    flag = tmp_path / "stalled"
    first = _run_query(broker.bootstrap, checkpoint, guarantee, tmp_path, flag)
    try:
        _wait(flag.exists, "the stall in batch 1", first)
        # Batch 1's other three tasks finish (exactly once: prepare, left for the driver
        # to commit once task 0 is done) while partition 0's stalls mid-write.
        _wait(lambda: len(read_back(broker.bootstrap, "out")) >= 600 + 3 * 150 + 20,
              "batch 1 written by tasks 1-3", first)
        query_id = (tmp_path / "query-id").read_text().strip()
        ids = [transactional_id("trilog-spark", query_id, p) for p in range(4)]
        assert {_recorded(broker.bootstrap, i) for i in ids} == {0}  # not committed
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert not (checkpoint / "commits" / "1").exists()  # killed before batch 1 was done
    second = _run_query(broker.bootstrap, checkpoint, guarantee, tmp_path, None)
    assert second.wait(timeout=300) == 0, (tmp_path / "query-rerun.log").read_text()[-4000:]

    expected = Counter(v for *_, v in inputs)
    everything = read_back(broker.bootstrap, "out")
    assert sum(_values(everything).values()) > len(inputs)  # the killed attempt's rows
    committed = _values(read_back(broker.bootstrap, "out", "read_committed"))
    assert committed == expected


def _write(options, rows: list[bytes], batch_id: int, partition_id: int):
    """A task's write of ``rows`` as the sink's exactly-once writer does it."""
    batch = pa.RecordBatch.from_pydict({"value": rows})
    return write_transactional(options, iter([batch]), query_id="q", batch_id=batch_id,
                               partition_id=partition_id)


def test_the_replay_of_a_batch_skips_the_tasks_the_driver_committed(broker):
    # The driver died between its commits: task 0's transaction committed, task 1's left
    # prepared.  The replay finds task 0's batch recorded, and writes task 1's again.
    produce(broker.bootstrap, "out", [(0, None, b"created")])
    options = parse_write_options({"bootstrap.servers": broker.bootstrap, "topic": "out",
                                   "deliveryGuarantee": "exactly_once"})
    rows = {p: [b"b0:p%d:%d" % (p, i) for i in range(50)] for p in (0, 1)}
    first = [_write(options, rows[p], 0, p) for p in (0, 1)]
    assert [m.records for m in first] == [50, 50] and all(m.prepared for m in first)
    assert _values(read_back(broker.bootstrap, "out", "read_committed")) == {b"created": 1}
    commit_prepared(options, first[:1])  # the driver, killed before task 1's commit
    replay = [_write(options, rows[p], 0, p) for p in (0, 1)]
    assert replay[0].replayed and replay[0].prepared is None
    assert replay[1].records == 50 and not replay[1].replayed
    commit_prepared(options, replay)
    commit_prepared(options, replay)  # a repeat changes nothing
    committed = _values(read_back(broker.bootstrap, "out", "read_committed"))
    assert committed == Counter([b"created", *rows[0], *rows[1]])
    # Task 1's first transaction was aborted by the replay: not committable any more.
    with pytest.raises(ProducerFencedError):
        commit_prepared(options, first[1:])


def test_a_batch_write_with_exactly_once_commits_each_task(spark, broker):
    df = spark.createDataFrame([(f"k{i % 5}", f"row-{i}") for i in range(300)],
                               "key string, value string")
    (df.repartition(3).write.format("trilog").option("bootstrap.servers", broker.bootstrap)
     .option("topic", "batch-out").option("deliveryGuarantee", "exactly_once")
     .mode("append").save())
    committed = read_back(broker.bootstrap, "batch-out", "read_committed")
    assert sorted(r.value for r in committed) == sorted(f"row-{i}".encode() for i in range(300))
