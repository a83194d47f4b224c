"""The sink: batch ``DataSourceArrowWriter`` and streaming ``DataSourceStreamArrowWriter``.

Each task opens its own ``trilog.sync.Producer``, sends its rows, flushes, and checks every
delivery before returning its commit message: a task that reports success has had all its
records acknowledged.  A failed task is retried by Spark and sends its rows again, so the
guarantee is at least once (as Spark's Kafka sink); records sent cannot be taken back, which
is why ``abort`` has nothing to undo.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

import trilog.sync as ts
from trilog.errors import TrilogError
from trilog.spark._options import OptionError, WriteOptions

_TEXT_OR_BYTES = (StringType, BinaryType)


def check_write_schema(schema: StructType, options: WriteOptions) -> None:
    """The columns the sink uses, checked before any task runs: ``value`` (string or binary,
    required), ``key`` (string or binary), ``topic`` (string; required unless the ``topic``
    option is given, which overrides it), ``partition`` (int), ``headers``
    (array<struct<key: string, value: binary>>).  Other columns are ignored."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError(f"the trilog sink needs a 'value' column (string or binary); the "
                          f"DataFrame has {sorted(fields)}")
    for name in ("value", "key"):
        if name in fields and not isinstance(fields[name], _TEXT_OR_BYTES):
            raise OptionError(f"column {name!r} must be string or binary, not "
                              f"{fields[name].simpleString()}")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise OptionError(f"column 'topic' must be a string, not {fields['topic'].simpleString()}")
    if "topic" not in fields and options.topic is None:
        raise OptionError("the trilog sink needs the option topic or a 'topic' column")
    if "partition" in fields and not isinstance(fields["partition"],
                                                (IntegerType, LongType, ShortType)):
        raise OptionError(f"column 'partition' must be an integer, not "
                          f"{fields['partition'].simpleString()}")
    if "headers" in fields:
        h = fields["headers"]
        ok = isinstance(h, ArrayType) and isinstance(h.elementType, StructType) and \
            [f.name for f in h.elementType.fields] == ["key", "value"] and \
            isinstance(h.elementType["key"].dataType, StringType) and \
            isinstance(h.elementType["value"].dataType, _TEXT_OR_BYTES)
        if not ok:
            raise OptionError("column 'headers' must be array<struct<key: string, value: "
                              f"binary>>, not {h.simpleString()}")


@dataclass
class TrilogCommitMessage(WriterCommitMessage):
    """What a task wrote: ``records`` acknowledged."""

    records: int


def _bytes(value):
    return value.encode("utf-8") if isinstance(value, str) else value


#: Deliveries a task keeps before checking the finished ones (bounds its memory).
_CHECK_EVERY = 10_000


def write_rows(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> TrilogCommitMessage:
    producer_kwargs = {"client_id": "trilog-spark-sink", **options.producer}
    timeout_s = producer_kwargs.get("delivery_timeout_ms", 120_000) / 1000 + 30
    written = 0
    pending: deque[ts.SyncDelivery] = deque()
    with ts.Producer(**options.connection.kwargs(), **producer_kwargs) as producer:
        for batch in batches:
            names = batch.schema.names
            n = batch.num_rows
            values = batch.column("value").to_pylist()
            keys = batch.column("key").to_pylist() if "key" in names else [None] * n
            if options.topic is not None:
                topics = [options.topic] * n
            else:
                topics = batch.column("topic").to_pylist()
            parts = batch.column("partition").to_pylist() if "partition" in names else [None] * n
            headers = batch.column("headers").to_pylist() if "headers" in names else [None] * n
            rows = []
            for i in range(n):
                topic = topics[i]
                if topic is None:
                    raise TrilogError("a row has a null 'topic' and no topic option is set")
                hdrs = headers[i]
                rows.append((topic, _bytes(values[i]), _bytes(keys[i]), parts[i],
                             [(h["key"], _bytes(h["value"])) for h in hdrs] if hdrs else None))
            pending.extend(producer.send_many(rows))  # one hop into the loop per Arrow batch
            written += n
            if len(pending) >= _CHECK_EVERY:
                while pending and pending[0].done():
                    pending.popleft().get()  # raises the delivery's error, failing the task
        producer.flush()
        for delivery in pending:
            delivery.get(timeout=timeout_s)
    return TrilogCommitMessage(written)


class TrilogWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TrilogCommitMessage:
        return write_rows(self.options, iterator)

    def commit(self, messages) -> None:
        pass  # every record was acknowledged before its task succeeded

    def abort(self, messages) -> None:
        pass  # acknowledged records stay in the log: at least once, nothing to undo


class TrilogStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TrilogCommitMessage:
        return write_rows(self.options, iterator)

    def commit(self, messages, batchId: int) -> None:
        pass

    def abort(self, messages, batchId: int) -> None:
        pass
