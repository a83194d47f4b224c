"""The sink: batch ``DataSourceArrowWriter`` and streaming ``DataSourceStreamArrowWriter``.

At least once (the default, as Spark's Kafka sink): each task opens its own
``trilog.sync.Producer``, sends its rows, flushes, and checks every delivery before returning
its commit message, so a task that reports success has had all its records acknowledged.  A
failed task is retried by Spark and sends its rows again; records sent cannot be taken back,
which is why ``abort`` has nothing to undo.

Exactly once (``deliveryGuarantee=exactly_once``), in two phases as Flink's Kafka sink:

1. Each task writes its rows in one transaction of the transactional id
   ``{prefix}-{queryId}-{partitionId}`` and records its batch id in the same transaction, as
   the committed offset (batch id + 1) of the consumer group named after the transactional
   id.  ``init_transactions()`` fences (and aborts) whatever an earlier attempt of the task
   left open; the task then reads the group's offset, and a batch already recorded (Spark
   replays the last batch after a failure) is written no more.  The task *prepares* its
   transaction (every record acknowledged) and returns its ids in its commit message,
   leaving it open; one that fails aborts (or, killed, is aborted by the next attempt's
   ``init_transactions`` or the transaction timeout).
2. The driver's ``commit(messages, batchId)``, called once every task succeeded, commits
   each task's transaction by its ids (EndTxn, ``trilog.sync.end_transactions``);
   ``abort`` aborts them.

A task whose input ended early because something upstream of the sink failed in the same
task (a UDF, the source's read) prepares part of its rows, but the task fails, so its
message never reaches the driver: the retry's ``init_transactions()`` aborts it and the
retry writes the whole partition.  A driver killed in the middle of its commits leaves the
rest open; the replay of the batch skips the tasks whose commit went through (the batch is
recorded) and aborts and writes again the others.  Readers see each row once with
``isolation_level=read_committed``.  This holds as long as a replayed batch gives each task
the same rows, as Spark's replay of a deterministic query does, and as long as
``kafka.transaction.timeout.ms`` covers a batch from its first task's first row to the
driver's commit (the coordinator aborts a transaction older than that).
"""

from __future__ import annotations

import itertools
import json
import logging
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark import TaskContext
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
from trilog.client import PreparedTransaction
from trilog.client.consumer import OffsetAndMetadata
from trilog.errors import TrilogError
from trilog.spark._options import OptionError, WriteOptions

#: Spark's local properties that give a streaming task its micro-batch and its query
#: (``MicroBatchExecution.BATCH_ID_KEY``, ``StreamExecution.QUERY_ID_KEY``); the query id is
#: kept in the checkpoint, so a restarted query has the same one.
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"

_TEXT_OR_BYTES = (StringType, BinaryType)

#: How long the driver retries each EndTxn while the coordinator moves or loads: a commit,
#: which fails the batch when it gives up, and an abort, which only tidies (a replay's
#: ``init_transactions`` or the transaction timeout aborts what it leaves).
END_TIMEOUT_S = 60.0
ABORT_TIMEOUT_S = 10.0

log = logging.getLogger("trilog.spark")


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
    """What a task wrote: ``records`` acknowledged.  Exactly once: ``prepared``, the ids of
    its transaction, left open for the driver to end (None: it wrote nothing); ``replayed``:
    the task's batch was recorded by an earlier attempt, and it wrote nothing."""

    records: int
    replayed: bool = False
    prepared: PreparedTransaction | None = None


def _bytes(value):
    return value.encode("utf-8") if isinstance(value, str) else value


#: Deliveries a task keeps before checking the finished ones (bounds its memory).
_CHECK_EVERY = 10_000


def _rows(options: WriteOptions, batch: pa.RecordBatch) -> list[tuple]:
    """``send_many``'s ``(topic, value, key, partition, headers)`` for each row."""
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
    return rows


def _send_all(options: WriteOptions, producer: ts.Producer,
              batches: Iterable[pa.RecordBatch]) -> int:
    """Send every row and check every delivery: the count of rows, all acknowledged."""
    timeout_s = producer_timeout_s(options)
    written = 0
    pending: deque[ts.SyncDelivery] = deque()
    for batch in batches:
        pending.extend(producer.send_many(_rows(options, batch)))  # one hop per Arrow batch
        written += batch.num_rows
        if len(pending) >= _CHECK_EVERY:
            while pending and pending[0].done():
                pending.popleft().get()  # raises the delivery's error, failing the task
    producer.flush()
    for delivery in pending:
        delivery.get(timeout=timeout_s)
    return written


def producer_timeout_s(options: WriteOptions) -> float:
    return options.producer.get("delivery_timeout_ms", 120_000) / 1000 + 30


def _producer_kwargs(options: WriteOptions) -> dict:
    return {"client_id": "trilog-spark-sink", **options.connection.kwargs(),
            **options.producer}


def write_rows(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> TrilogCommitMessage:
    """At least once: send, and return once every record is acknowledged."""
    with ts.Producer(**_producer_kwargs(options)) as producer:
        return TrilogCommitMessage(_send_all(options, producer, batches))


# -- exactly once ----------------------------------------------------------------------------


def transactional_id(prefix: str, query_id: str, partition_id: int) -> str:
    """The transactional id of a query's task: the same for every attempt and every batch
    of the partition, so each attempt fences the ones before it.  The consumer group that
    records the task's batch ids has this name too."""
    return f"{prefix}-{query_id}-{partition_id}"


def recorded_batch(options: WriteOptions, txn_id: str, where: tuple[str, int]) -> int | None:
    """The last batch id a committed transaction of ``txn_id`` recorded (None: none yet)."""
    with ts.Consumer(group_id=txn_id, enable_auto_commit=False,
                     **{"client_id": "trilog-spark-sink", **options.connection.kwargs()}
                     ) as consumer:
        committed = consumer.committed(where)
    return None if committed is None else committed - 1


def _first_rows(batches: Iterator[pa.RecordBatch]
                ) -> tuple[pa.RecordBatch | None, Iterator[pa.RecordBatch]]:
    """The first batch with rows (None when there is none), and every batch from it on."""
    for batch in batches:
        if batch.num_rows:
            return batch, itertools.chain([batch], batches)
    return None, iter(())


def write_transactional(options: WriteOptions, batches: Iterator[pa.RecordBatch], *,
                        query_id: str, batch_id: int, partition_id: int
                        ) -> TrilogCommitMessage:
    """Exactly once: one transaction for the task's rows and its batch id (module docstring).

    A task with no rows writes and records nothing (a replay of it has none either).  The
    batch id is recorded against partition 0 of the first row's topic: the broker takes
    offsets only for partitions that exist, and a replay's first row is the same."""
    first, batches = _first_rows(batches)
    if first is None:
        return TrilogCommitMessage(0)
    where = (options.topic if options.topic is not None
             else first.column("topic")[0].as_py(), 0)
    txn_id = transactional_id(options.transactional_id_prefix, query_id, partition_id)
    with ts.Producer(**_producer_kwargs(options), transactional_id=txn_id) as producer:
        producer.init_transactions()  # fences an earlier attempt, aborting what it left open
        done = recorded_batch(options, txn_id, where)
        if done is not None and done >= batch_id:
            return TrilogCommitMessage(0, replayed=True)
        producer.begin_transaction()
        try:
            written = _send_all(options, producer, batches)
            note = json.dumps({"queryId": query_id, "batchId": batch_id,
                               "partitionId": partition_id, "records": written})
            producer.send_offsets_to_transaction(
                {where: OffsetAndMetadata(batch_id + 1, note)}, txn_id)
            # Not committed: the driver commits once every task has succeeded.  Closing the
            # producer leaves a prepared transaction open.
            prepared = producer.prepare_transaction()
        except BaseException:
            _abort_quietly(producer)
            raise
    return TrilogCommitMessage(written, prepared=prepared)


def _prepared(messages) -> list[PreparedTransaction]:
    return [m.prepared for m in messages
            if isinstance(m, TrilogCommitMessage) and m.prepared is not None]


def commit_prepared(options: WriteOptions, messages) -> None:
    """The driver: commit every task's prepared transaction.  A failure fails the batch
    (Spark aborts it); its replay skips the tasks whose commit went through."""
    ts.end_transactions(_prepared(messages), commit=True, timeout_s=END_TIMEOUT_S,
                        **_producer_kwargs(options))


def abort_prepared(options: WriteOptions, messages) -> None:
    """The driver: abort the prepared transactions of a batch that failed.  Each one that
    cannot be aborted (committed before the failure, fenced, the broker gone) is logged and
    left: a replay's ``init_transactions`` or the transaction timeout aborts it."""
    for prepared in _prepared(messages):
        try:
            ts.end_transactions([prepared], commit=False, timeout_s=ABORT_TIMEOUT_S,
                                **_producer_kwargs(options))
        except Exception as exc:  # noqa: BLE001 - best effort: the batch failed already
            log.warning("trilog sink: could not abort the transaction of %s: %s",
                        prepared.transactional_id, exc)


def _abort_quietly(producer: ts.Producer) -> None:
    """Abort after a failure; the failure is what the task reports.  An abort that fails
    (fenced, or the broker gone) leaves the transaction to the next attempt's
    ``init_transactions`` or to the transaction timeout."""
    try:
        producer.abort_transaction()
    except Exception:  # noqa: BLE001 - the original error is raised instead
        pass


def _task_partition() -> int:
    context = TaskContext.get()
    if context is None:
        raise TrilogError("the trilog sink's exactly-once write runs only in a Spark task")
    return context.partitionId()


def _stream_task() -> tuple[str, int, int]:
    """This streaming task's query id, batch id and partition id."""
    context = TaskContext.get()
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY) if context else None
    batch_id = context.getLocalProperty(BATCH_ID_PROPERTY) if context else None
    if context is None or query_id is None or batch_id is None:
        raise TrilogError(f"deliveryGuarantee=exactly_once: Spark gave this task no "
                          f"{QUERY_ID_PROPERTY!r} and {BATCH_ID_PROPERTY!r} (a micro-batch "
                          "query sets them; continuous processing does not)")
    return query_id, int(batch_id), context.partitionId()


class TrilogWriter(DataSourceArrowWriter):
    """A batch write.  Exactly once, ``job_id`` (made on the driver, one per write) stands
    for the query id and the batch id is 0: a retried task's rows are written once, and the
    driver commits every task's transaction once they all succeeded (a job that fails
    aborts them).  Running a write again writes its rows again."""

    def __init__(self, options: WriteOptions, job_id: str | None = None) -> None:
        self.options = options
        self.job_id = job_id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TrilogCommitMessage:
        if self.options.exactly_once:
            assert self.job_id is not None
            return write_transactional(self.options, iterator, query_id=self.job_id,
                                       batch_id=0, partition_id=_task_partition())
        return write_rows(self.options, iterator)

    def commit(self, messages) -> None:
        if self.options.exactly_once:
            commit_prepared(self.options, messages)
        # at least once: every record was acknowledged before its task succeeded

    def abort(self, messages) -> None:
        if self.options.exactly_once:
            abort_prepared(self.options, messages)
        # at least once: acknowledged records stay in the log, nothing to undo


class TrilogStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TrilogCommitMessage:
        if self.options.exactly_once:
            query_id, batch_id, partition_id = _stream_task()
            return write_transactional(self.options, iterator, query_id=query_id,
                                       batch_id=batch_id, partition_id=partition_id)
        return write_rows(self.options, iterator)

    def commit(self, messages, batchId: int) -> None:
        if self.options.exactly_once:
            commit_prepared(self.options, messages)
        # at least once: every record was acknowledged before its task succeeded

    def abort(self, messages, batchId: int) -> None:
        if self.options.exactly_once:
            abort_prepared(self.options, messages)
