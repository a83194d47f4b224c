"""The ``trilog`` data source: batch reader, streaming reader, and the hooks to the sink.

Planning (which partitions, which offsets) happens where Spark calls ``partitions()`` /
``latestOffset()`` (a Python worker beside the driver); reading happens in ``read()`` on
executors.  Both open a ``trilog.sync`` facade for the call and close it before returning,
so readers, input partitions and offsets pickle as plain data.

Streaming offsets are ``{topic: {"partition": offset}}``: the next offset to read of every
partition the query has seen.  A batch reads ``[start, end)`` of each partition; a partition
in ``end`` but not in ``start`` is new (a new partition, or a new topic matching
``subscribePattern``) and is read from its earliest offset.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from trilog.spark import _cluster
from trilog.spark._cluster import DataLossError, open_consumer
from trilog.spark._options import (
    OptionError,
    ReadOptions,
    parse_read_options,
    parse_write_options,
)
from trilog.spark._planning import (
    OffsetRange,
    Positions,
    from_offset_json,
    hold_batch,
    plan_ranges,
    rate_limit,
    to_offset_json,
)
from trilog.spark._read import read_range, row_schema
from trilog.spark._write import TrilogStreamWriter, TrilogWriter, check_write_schema


def _check_schema(schema: StructType, options: ReadOptions) -> None:
    expected = row_schema(options.include_headers)
    if schema is not None and schema.simpleString() != expected.simpleString():
        raise OptionError(f"the trilog source's schema is fixed: {expected.simpleString()}; "
                          f"got {schema.simpleString()}")


def _input_partitions(ranges: list[OffsetRange], options: ReadOptions) -> list[InputPartition]:
    return [InputPartition(r) for r in plan_ranges(ranges, options.min_partitions,
                                                   options.max_records_per_partition)]


class TrilogDataSource(DataSource):
    """``spark.read.format("trilog")``, ``readStream``, ``write`` and ``writeStream``."""

    @classmethod
    def name(cls) -> str:
        return "trilog"

    def schema(self) -> StructType:
        # Spark asks for the schema at load(), for reads only: checking the options here
        # makes a bad one fail there.  Batch- or streaming-only rules wait for reader().
        return row_schema(parse_read_options(self.options, streaming=None).include_headers)

    def reader(self, schema: StructType) -> TrilogBatchReader:
        options = parse_read_options(self.options, streaming=False)
        _check_schema(schema, options)
        return TrilogBatchReader(options)

    def streamReader(self, schema: StructType) -> TrilogStreamReader:
        options = parse_read_options(self.options, streaming=True)
        _check_schema(schema, options)
        return TrilogStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> TrilogWriter:
        if overwrite:
            raise OptionError("the trilog sink only appends to a log; use mode('append')")
        options = parse_write_options(self.options)
        check_write_schema(schema, options)
        # Exactly once, the write's transactional ids need a name that every attempt of a
        # task shares and no other write has.
        return TrilogWriter(options, uuid.uuid4().hex if options.exactly_once else None)

    def streamWriter(self, schema: StructType, overwrite: bool) -> TrilogStreamWriter:
        # Complete mode (overwrite) appends each batch's full result, as Spark's Kafka sink.
        options = parse_write_options(self.options)
        check_write_schema(schema, options)
        return TrilogStreamWriter(options)


class TrilogBatchReader(DataSourceReader):
    """One input partition per offset range, fixed at planning: a retried task rereads
    exactly its range."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def plan(self) -> list[OffsetRange]:
        o = self.options
        with open_consumer(o) as consumer:
            tps = _cluster.topic_partitions(consumer, o, missing_ok=False)
            starts = _cluster.resolve(consumer, tps, o.starting, no_match=o.timestamp_strategy)
            # An ending timestamp no record is that recent ends at the partition's end (Spark).
            ends = _cluster.resolve(consumer, tps, o.ending, no_match="latest")
        ranges = []
        for tp in tps:
            if starts[tp] > ends[tp]:
                raise OptionError(f"{tp[0]}-{tp[1]}: the starting offset {starts[tp]} is after "
                                  f"the ending offset {ends[tp]}")
            ranges.append(OffsetRange(tp[0], tp[1], starts[tp], ends[tp]))
        return ranges

    def partitions(self) -> list[InputPartition]:
        return _input_partitions(self.plan(), self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


class TrilogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over the subscription's partitions, new ones included.

    Spark keeps one reader for the life of a query (in one Python worker), so the time of
    the last batch, which ``minOffsetsPerTrigger`` needs, lives here as in Spark's Kafka
    source: a restarted query starts with its first batch let through."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        #: With Trigger.AvailableNow: the offsets that were latest when the query started.
        self._target: Positions | None = None
        #: ``time.monotonic()`` when the last micro-batch was let through (None: none yet).
        self._last_batch: float | None = None

    def initialOffset(self) -> dict:
        o = self.options
        with open_consumer(o) as consumer:
            tps = _cluster.topic_partitions(consumer, o, missing_ok=True)
            positions = _cluster.resolve(consumer, tps, o.starting,
                                         no_match=o.timestamp_strategy)
        return to_offset_json(positions)

    def getDefaultReadLimit(self) -> ReadLimit:
        # Not ReadAllAvailable when minOffsetsPerTrigger is set: that is what Spark passes for
        # Trigger.Once, which must read everything at once, so it must stay recognisable.
        # (With both options the minimum comes from self.options.)
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with open_consumer(self.options) as consumer:
            tps = _cluster.topic_partitions(consumer, self.options, missing_ok=True)
            self._target = _cluster.latest(consumer, tps)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        o = self.options
        begin = from_offset_json(start)
        with open_consumer(o) as consumer:
            if self._target is not None:
                ends = dict(self._target)
            else:
                ends = _cluster.latest(consumer,
                                       _cluster.topic_partitions(consumer, o, missing_ok=True))
            starts = dict(begin)
            starts.update(_cluster.earliest(consumer, [tp for tp in ends if tp not in begin]))
        gone = sorted(tp for tp in begin if tp not in ends)
        if gone and o.fail_on_data_loss:
            raise DataLossError(
                f"partition(s) {', '.join(f'{t}-{p}' for t, p in gone)} no longer exist; records "
                "not yet read from them are lost. Set failOnDataLoss=false to go on without them.")
        forward = {tp: e for tp, e in ends.items() if e >= starts[tp]}
        behind = {tp: e for tp, e in ends.items() if e < starts[tp]}
        if behind and o.fail_on_data_loss:
            raise DataLossError(_moved_back(behind, starts))
        min_offsets = self.options.min_offsets_per_trigger
        if min_offsets is not None and self._may_hold(limit):
            now = time.monotonic()
            waited_ms = None if self._last_batch is None else (now - self._last_batch) * 1000
            available = sum(e - starts[tp] for tp, e in forward.items())
            if hold_batch(available, min_offsets, waited_ms, o.max_trigger_delay_ms):
                return start  # no new offsets: Spark runs no batch and asks again later
            self._last_batch = now
        if isinstance(limit, ReadMaxRows):
            forward = rate_limit(starts, forward, limit.max_rows)
        forward.update(behind)  # failOnDataLoss=false: jump to the new end (see partitions)
        end = to_offset_json(forward)
        return start if end == start else end

    def _may_hold(self, limit: ReadLimit) -> bool:
        """Whether minOffsetsPerTrigger applies to this call.  Not with Trigger.Once
        (ReadAllAvailable), nor with Trigger.AvailableNow, which reads what there was when
        it started and stops: it must not wait for records that may never come."""
        return (self.options.min_offsets_per_trigger is not None and self._target is None
                and not isinstance(limit, ReadAllAvailable))

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        o = self.options
        begin, finish = from_offset_json(start), from_offset_json(end)
        new = [tp for tp in finish if tp not in begin]
        if new:
            with open_consumer(o) as consumer:
                begin.update(_cluster.earliest(consumer, new))
        ranges = []
        behind = {}
        for tp, e in finish.items():
            s = begin[tp]
            if s > e:
                behind[tp] = e  # the log was truncated or recreated under us
                continue
            ranges.append(OffsetRange(tp[0], tp[1], s, e))
        if behind and o.fail_on_data_loss:
            raise DataLossError(_moved_back(behind, begin))
        return _input_partitions(ranges, o)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)

    def commit(self, end: dict) -> None:
        pass  # the checkpoint is the only state: nothing is committed to the cluster

    def stop(self) -> None:
        pass  # no connection outlives a call


def _read(options: ReadOptions, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
    r = getattr(partition, "value", None)
    if r is None:
        # With no input partitions planned, Spark still runs one task with an empty one.
        return iter(())
    return read_range(options, r)


def _moved_back(behind: Positions, starts: Positions) -> str:
    what = ", ".join(f"{t}-{p} from {starts[(t, p)]} to {e}" for (t, p), e in sorted(behind.items()))
    return (f"the end offset of {what} went backwards (the log was truncated or the topic "
            "recreated); records may have been missed. Set failOnDataLoss=false to skip ahead.")
