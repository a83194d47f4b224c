"""Executor side of a read: one offset range in, Arrow record batches out.

A task reads ``[start, end)`` of one partition and nothing else: records at or past ``end``
that a fetch brings back are dropped, so a retried task yields exactly the same rows.  The
consumer is opened inside the task (Spark's Python workers are forked; a facade made before
the fork would refuse to work) and closed when the range is done.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from trilog.errors import OffsetOutOfRangeError
from trilog.spark._cluster import DataLossError, open_consumer
from trilog.spark._options import ReadOptions
from trilog.spark._planning import OffsetRange

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()),
                                     StructField("value", BinaryType())]))


def row_schema(include_headers: bool) -> StructType:
    """``key, value, topic, partition, offset, timestamp, timestampType`` (+ ``headers``)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


#: Fetches in a row that bring nothing although the range is not done, before giving up.
_STALLED_FETCHES = 50


def _loss(options: ReadOptions, r: OffsetRange, position: int, detail: str) -> None:
    if options.fail_on_data_loss:
        raise DataLossError(
            f"records of {r.topic}-{r.partition} from offset {position} are no longer in the "
            f"log ({detail}); the query asked for offsets {r.start}..{r.end}. They were "
            "probably deleted by retention before they were read. Set the option "
            "failOnDataLoss=false to skip lost records instead of failing."
        )


def read_range(options: ReadOptions, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    schema = to_arrow_schema(row_schema(options.include_headers), timezone="UTC")
    if r.size <= 0:
        return
    stalled = 0
    position = r.start
    with open_consumer(options) as consumer:
        while position < r.end:
            try:
                fetched = consumer.fetch(r.topic, r.partition, position,
                                         options.max_partition_fetch_bytes)
            except OffsetOutOfRangeError as exc:
                log_start = exc.log_start_offset
                if log_start is not None and position < log_start:
                    _loss(options, r, position, f"the log now starts at {log_start}")
                    position = log_start  # failOnDataLoss=false: skip what is gone
                    continue
                # Past the log's end: the partition was truncated or recreated.
                _loss(options, r, position, f"the log now ends at {exc.log_end_offset}")
                return
            records = [rec for rec in fetched if rec.offset < r.end]
            if records:
                stalled = 0
                yield _batch(schema, r, records, options.include_headers)
            next_offset = fetched.next_offset
            if next_offset <= position:
                if fetched.high_watermark <= position:
                    # Nothing left to fetch though the range said there was.
                    _loss(options, r, position,
                          f"the log now ends at {fetched.high_watermark}")
                    return
                stalled += 1
                if stalled > _STALLED_FETCHES:
                    raise DataLossError(f"no progress reading {r.topic}-{r.partition} at "
                                        f"offset {position} after {stalled} fetches")
                time.sleep(0.01 * stalled)
                continue
            position = next_offset


def _batch(schema: pa.Schema, r: OffsetRange, records, include_headers: bool) -> pa.RecordBatch:
    n = len(records)
    columns = [
        pa.array([rec.key for rec in records], pa.binary()),
        pa.array([rec.value for rec in records], pa.binary()),
        pa.array([r.topic] * n, pa.string()),
        pa.array([r.partition] * n, pa.int32()),
        pa.array([rec.offset for rec in records], pa.int64()),
        pa.array([rec.timestamp * 1000 for rec in records], schema.field("timestamp").type),
        pa.array([rec.timestamp_type for rec in records], pa.int32()),
    ]
    if include_headers:
        columns.append(pa.array(
            [[{"key": k, "value": v} for k, v in rec.headers] for rec in records],
            schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
