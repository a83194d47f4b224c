"""Streaming reads: micro-batches over a checkpoint, exactly once across restarts."""

from __future__ import annotations

import json
import threading
import time

from spark_helpers import produce


class Batches:
    """A ``foreachBatch`` sink that keeps every micro-batch's ``(topic, partition, offset,
    value)`` rows, so tests can see batch sizes and duplicates."""

    def __init__(self) -> None:
        self.batches: list[list[tuple]] = []
        #: How many input partitions (tasks) each micro-batch had.
        self.tasks: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, df, batch_id: int) -> None:
        rows = [(r.topic, r.partition, r.offset, bytes(r.value)) for r in df.collect()]
        tasks = df.rdd.getNumPartitions()
        with self._lock:
            self.batches.append(rows)
            self.tasks.append(tasks)

    @property
    def rows(self) -> list[tuple]:
        return [row for batch in self.batches for row in batch]


def _stream(spark, bootstrap, **options):
    reader = spark.readStream.format("trilog").option("bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def _run_available_now(spark, bootstrap, checkpoint, sink, **options):
    query = (_stream(spark, bootstrap, **options).writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert not query.isActive
    assert query.exception() is None


def _values(topic, n, start=0, partitions=4):
    return [(i % partitions, None, f"{topic}:{i}".encode()) for i in range(start, start + n)]


def test_available_now_twice_on_one_checkpoint_reads_each_record_once(spark, broker, tmp_path):
    produce(broker.bootstrap, "ev-a", _values("ev-a", 100))
    sink = Batches()
    options = {"subscribePattern": "ev-.*", "startingOffsets": "earliest"}
    _run_available_now(spark, broker.bootstrap, tmp_path / "ckpt", sink, **options)
    assert sorted(v for *_, v in sink.rows) == sorted(v for *_, v in _values("ev-a", 100))

    # More records, and a new topic matching the pattern, between the runs.
    produce(broker.bootstrap, "ev-a", _values("ev-a", 50, start=100))
    produce(broker.bootstrap, "ev-b", _values("ev-b", 30))
    produce(broker.bootstrap, "other", _values("other", 10))
    first = len(sink.rows)
    _run_available_now(spark, broker.bootstrap, tmp_path / "ckpt", sink, **options)
    second = sink.rows[first:]
    assert sorted(v for *_, v in second) == sorted(
        v for *_, v in _values("ev-a", 50, start=100) + _values("ev-b", 30))
    keys = [(t, p, o) for t, p, o, _ in sink.rows]
    assert len(keys) == len(set(keys)) == 180


def test_a_stream_starts_at_offsets_by_timestamp(spark, broker, tmp_path):
    base = 1_700_000_000_000
    produce(broker.bootstrap, "since", _values("since", 40), timestamp_ms=base)
    produce(broker.bootstrap, "since", _values("since", 40, start=40), timestamp_ms=base + 10_000)
    sink = Batches()
    start = {"0": base + 5000, "1": base + 5000, "2": 0, "3": base + 5000}
    _run_available_now(spark, broker.bootstrap, tmp_path / "ckpt", sink, subscribe="since",
                       startingOffsets="earliest",  # the last preference: not used
                       startingOffsetsByTimestamp=json.dumps({"since": start}))
    # partition 2 from its first record, the others from the first stamped base + 5 s
    assert sorted(v for *_, v in sink.rows) == sorted(
        [v for p, _, v in _values("since", 40) if p == 2] + [v for *_, v in
                                                             _values("since", 40, start=40)])


def test_max_offsets_per_trigger_bounds_every_batch(spark, broker, tmp_path):
    produce(broker.bootstrap, "bounded", _values("bounded", 200))
    sink = Batches()
    _run_available_now(spark, broker.bootstrap, tmp_path / "ckpt", sink, subscribe="bounded",
                       startingOffsets="earliest", maxOffsetsPerTrigger=30)
    sizes = [len(b) for b in sink.batches if b]
    assert max(sizes) <= 30
    assert len(sizes) >= 7
    assert sorted(v for *_, v in sink.rows) == sorted(v for *_, v in _values("bounded", 200))


def test_max_records_per_partition_splits_a_micro_batch(spark, broker, tmp_path):
    produce(broker.bootstrap, "wide", _values("wide", 200))  # 50 per partition
    sink = Batches()
    _run_available_now(spark, broker.bootstrap, tmp_path / "ckpt", sink, subscribe="wide",
                       startingOffsets="earliest", maxRecordsPerPartition=20)
    assert [len(b) for b in sink.batches] == [200]
    assert sink.tasks == [12]  # each partition's 50 records in 3 tasks
    assert sorted(v for *_, v in sink.rows) == sorted(v for *_, v in _values("wide", 200))


def _start(spark, bootstrap, checkpoint, sink, **options):
    return (_stream(spark, bootstrap, **options).writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds").start())


def _sizes(sink) -> list[int]:
    return [len(b) for b in sink.batches if b]


def test_min_offsets_per_trigger_waits_for_enough_new_records(spark, broker, tmp_path):
    produce(broker.bootstrap, "gathered", _values("gathered", 40))
    sink = Batches()
    query = _start(spark, broker.bootstrap, tmp_path / "c", sink, subscribe="gathered",
                   startingOffsets="earliest", minOffsetsPerTrigger=50, maxTriggerDelay="1h")
    try:
        query.processAllAvailable()
        assert _sizes(sink) == [40]  # the first batch never waits (as in Spark)
        produce(broker.bootstrap, "gathered", _values("gathered", 30, start=40))
        query.processAllAvailable()  # the source says "nothing new" while it waits
        assert _sizes(sink) == [40]  # 30 new records: fewer than 50, so no batch
        produce(broker.bootstrap, "gathered", _values("gathered", 30, start=70))
        query.processAllAvailable()
    finally:
        query.stop()
    assert _sizes(sink) == [40, 60]
    assert sorted(v for *_, v in sink.rows) == sorted(v for *_, v in _values("gathered", 100))


def test_max_trigger_delay_lets_a_small_batch_through(spark, broker, tmp_path):
    produce(broker.bootstrap, "trickle", _values("trickle", 20))
    sink = Batches()
    query = _start(spark, broker.bootstrap, tmp_path / "c", sink, subscribe="trickle",
                   startingOffsets="earliest", minOffsetsPerTrigger=1000, maxTriggerDelay="1s")
    try:
        query.processAllAvailable()
        produce(broker.bootstrap, "trickle", _values("trickle", 10, start=20))
        # Never 1000 new records: only maxTriggerDelay lets these 10 through.  The deadline
        # only keeps a broken build from hanging; nothing here measures time.
        deadline = time.monotonic() + 120
        while len(sink.rows) < 30 and time.monotonic() < deadline:
            assert query.exception() is None
            time.sleep(0.1)
    finally:
        query.stop()
    assert _sizes(sink) == [20, 10]
    assert sorted(v for *_, v in sink.rows) == sorted(v for *_, v in _values("trickle", 30))


def test_available_now_reads_everything_despite_min_offsets_per_trigger(spark, broker,
                                                                       tmp_path):
    # Trigger.AvailableNow reads what is there and stops: its last, small batch must not wait.
    produce(broker.bootstrap, "drained", _values("drained", 45))
    sink = Batches()
    _run_available_now(spark, broker.bootstrap, tmp_path / "ckpt", sink, subscribe="drained",
                       startingOffsets="earliest", maxOffsetsPerTrigger=10,
                       minOffsetsPerTrigger=10)
    assert _sizes(sink) == [10, 10, 10, 10, 5]
    assert sorted(v for *_, v in sink.rows) == sorted(v for *_, v in _values("drained", 45))


def test_processing_time_trigger_follows_new_records(spark, broker, tmp_path):
    produce(broker.bootstrap, "live", _values("live", 40))
    sink = Batches()
    query = (_stream(spark, broker.bootstrap, subscribe="live")  # default: from latest
             .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "c"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        query.processAllAvailable()
        assert sink.rows == []  # startingOffsets=latest: what came before is not read
        produce(broker.bootstrap, "live", _values("live", 60, start=40))
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(v for *_, v in sink.rows) == sorted(v for *_, v in _values("live", 60, 40))
