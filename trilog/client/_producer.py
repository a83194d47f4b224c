"""The producer: a per-partition accumulator drained by a sender task (seeds 001, 002).

``send`` places a record in the open batch of its partition (a ``RecordBatchBuilder``: the
record is encoded once, into the batch's bytes) and returns a ``Delivery``.  The sender task
in the producer's nursery closes batches when they reach ``batch_size`` or when ``linger_ms``
passes, groups ready batches by leader, and sends one Produce request per broker carrying
many partitions, with up to ``max_in_flight_requests_per_connection`` requests in flight per
broker.  Each batch is compressed as a whole and gets one CRC.

- Backpressure: batches hold at most ``buffer_memory`` bytes.  ``send`` waits for room;
  ``send_nowait`` raises ``BufferFullError``.
- Delivery: every record's ``Delivery`` resolves to ``RecordMetadata`` or fails with the
  broker's error, ``DeliveryTimeoutError`` after ``delivery_timeout_ms``, or
  ``ProducerClosedError`` when the producer is cancelled first.  Nothing fails silently.
- Too large: a batch the broker rejects with ``MESSAGE_TOO_LARGE`` goes again as two
  halves (and so on); only a record too large on its own fails.
- Retries: retriable errors (``NOT_LEADER_OR_FOLLOWER``, ``UNKNOWN_TOPIC_OR_PARTITION``,
  lost connections, timeouts) refresh metadata and retry after ``retry_backoff_ms``, until
  ``delivery_timeout_ms`` (or ``retries`` times, unbounded by default, as Kafka 3's).
  With ``max_in_flight_requests_per_connection=1`` a partition has one batch in flight at
  a time, so retries keep the order within it.
- Idempotence (on by default with ``acks="all"``, Kafka 3's defaults; see
  ``producer_guarantees``): a producer id from ``InitProducerId`` and per-partition
  sequence numbers stamped at sealing, one batch per partition in flight; a batch that
  fails for good leaves a gap, closed by a new producer id (``_renew_producer_id``).  A
  broker without InitProducerId gets records without idempotence (and a warning), unless
  ``enable_idempotence=True`` was asked for.
- Close: leaving the ``async with`` normally flushes first; cancellation stops at once.
- ``statistics()``: plain counters since the producer opened (records and bytes sent, batch
  size, request latency, buffer available, errors, retries), for an application's metrics.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, NamedTuple, Unpack

import trio

from trilog._concurrency import YieldPacer, unwrap_exception_group
from trilog.net import SecurityOptions, client_security
from trilog.client._client import Client, open_client
from trilog.net import BrokerConnection, PendingResponse
from trilog.client._metadata import ClusterMetadata, Node
from trilog.client._partitioner import DefaultPartitioner
from trilog.client._retry import Backoff, is_retriable
from trilog.errors import (
    DuplicateSequenceNumberError,
    MessageTooLargeError,
    NetworkError,
    RecordListTooLargeError,
    RequestTimedOutError,
    TrilogError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    error_for_code,
)
from trilog.protocol import InitProducerIdRequest, Message, ProduceRequest
from trilog.records import RecordBatch, RecordBatchBuilder, codec_for_name
from trilog.records._v2 import HEADER_SIZE, restamp_producer

log = logging.getLogger("trilog.producer")

# Per-record overhead of the v2 format beyond key and value (length, attributes, deltas,
# key/value lengths, header count): used to account memory before encoding.
_RECORD_OVERHEAD = 16
_SEQUENCE_MOD = 1 << 31  # sequence numbers wrap at int32's end, as the broker's do

#: turns what the application sends as a key or value into bytes
Serializer = Callable[[Any], bytes]
#: ``partitioner(key, partitions) -> partition`` (the key after serialization), or
#: kafka-python's ``partitioner(key, all_partitions, available_partitions)``
Partitioner = (Callable[[bytes | None, tuple[int, ...]], int]
               | Callable[[bytes | None, tuple[int, ...], tuple[int, ...]], int])
#: a record's headers: ``(name, value)`` pairs
Headers = Sequence[tuple[str, bytes | None]]


def _positional_arity(fn: Callable[..., Any]) -> int:
    """How many positional arguments ``fn`` takes (``*args``: many)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: the two-argument form
        return 2
    kinds = [p.kind for p in parameters]
    if inspect.Parameter.VAR_POSITIONAL in kinds:
        return 3
    return sum(k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
               for k in kinds)


class BufferFullError(TrilogError):
    """``send_nowait`` found ``buffer_memory`` full."""


class DeliveryTimeoutError(TrilogError):
    """A record was not acknowledged within ``delivery_timeout_ms``."""


class ProducerClosedError(TrilogError):
    """The producer was closed or cancelled before the record was acknowledged."""


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int


class _Batch:
    """One open or sealed batch of a partition, and the deliveries waiting on it."""

    __slots__ = (
        "attempts",
        "base_offset",
        "builder",
        "created",
        "data",
        "deadline",
        "done",
        "error",
        "halves",
        "log_append_time",
        "parent",
        "partition",
        "retry_at",
        "size",
        "topic",
    )

    def __init__(self, topic: str, partition: int, builder: RecordBatchBuilder, now: float,
                 delivery_timeout_s: float) -> None:
        self.topic = topic
        self.partition = partition
        self.builder = builder  # after sealing, it still knows its records' timestamps
        self.created = now
        self.deadline = now + delivery_timeout_s
        self.done = trio.Event()
        self.base_offset = -1
        self.error: BaseException | None = None
        self.attempts = 0
        self.size = 0  # bytes accounted against buffer_memory
        self.data: bytes | None = None  # the built batch, once sealed
        self.retry_at = 0.0
        self.log_append_time = -1
        # Set when the broker found the batch too large and it went again as two halves:
        # its records' outcomes are theirs (see Producer._split).
        self.halves: tuple[_Batch, _Batch] | None = None
        self.parent: _Batch | None = None

    def topic_partition(self) -> tuple[str, int]:
        return self.topic, self.partition

    def sealed_data(self) -> bytes:
        """The bytes of a sealed batch (an open one has none yet)."""
        if self.data is None:
            raise RuntimeError(f"a batch of {self.topic}-{self.partition} is not sealed")
        return self.data

    def leaf(self, index: int) -> tuple[_Batch, int]:
        """The batch that carried record ``index`` to the broker, and its index there."""
        batch = self
        while batch.halves is not None:
            first, second = batch.halves
            if index < len(first.builder):
                batch = first
            else:
                batch, index = second, index - len(first.builder)
        return batch, index


#: one Produce request's worth of batches for a broker's writer, and the in-flight slot it holds
_Request = tuple[trio.Semaphore, list[_Batch]]
#: ``on_delivery(outcome)``: each record's metadata, or its error
OnDelivery = Callable[[RecordMetadata | BaseException], None]


class Delivery:
    """The future result of one ``send``: ``await delivery.wait()``."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: _Batch, index: int) -> None:
        self._batch = batch
        self._index = index

    def done(self) -> bool:
        return self._batch.done.is_set()

    def result(self) -> RecordMetadata:
        """The metadata of a finished delivery (raises its error, or if not finished)."""
        if not self._batch.done.is_set():
            raise RuntimeError("the delivery has not finished; await wait()")
        outcome = _outcome(self._batch, self._index)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def exception(self) -> BaseException | None:
        """The error of a finished delivery, or ``None`` if it was acknowledged (cheaper
        than ``result()`` for code that only counts failures)."""
        if not self._batch.done.is_set():
            raise RuntimeError("the delivery has not finished; await wait()")
        batch, _index = self._batch.leaf(self._index)
        return batch.error

    async def wait(self) -> RecordMetadata:
        await self._batch.done.wait()
        return self.result()


def _outcome(batch: _Batch, index: int) -> RecordMetadata | BaseException:
    """What became of record ``index`` of a finished batch: its metadata or its error."""
    batch, index = batch.leaf(index)
    return batch.error if batch.error is not None else _metadata(batch, index)


def _metadata(batch: _Batch, index: int) -> RecordMetadata:
    offset = batch.base_offset + index if batch.base_offset >= 0 else -1
    timestamp = (batch.log_append_time if batch.log_append_time >= 0
                 else batch.builder.timestamp_at(index))
    return RecordMetadata(batch.topic, batch.partition, offset, timestamp)


class _Statistics:
    """The producer's counters (plain numbers, kept where the work happens)."""

    __slots__ = ("batches_sent", "bytes_sent", "latency_max", "latency_sum", "record_errors",
                 "records_sent", "requests", "retries")

    def __init__(self) -> None:
        self.records_sent = 0
        self.bytes_sent = 0
        self.batches_sent = 0
        self.retries = 0
        self.record_errors = 0
        self.requests = 0  # answered Produce requests (their latency is known)
        self.latency_sum = 0.0
        self.latency_max = 0.0


class Producer:
    """See the module docstring.  Create with ``open_producer``; use from its trio run."""

    def __init__(self, client: Client, *, acks: int | str, linger_ms: float, batch_size: int,
                 buffer_memory: int, compression_type: str | None,
                 key_serializer: Serializer | None, value_serializer: Serializer | None,
                 partitioner: Partitioner | None, retries: int, retry_backoff_ms: int,
                 delivery_timeout_ms: int, request_timeout_ms: int,
                 max_in_flight_requests_per_connection: int, max_request_size: int,
                 on_delivery: OnDelivery | None, enable_idempotence: bool = False) -> None:
        if acks not in (-1, 0, 1) and acks != "all":
            raise ValueError(f"acks must be 0, 1, -1 or 'all', not {acks!r}")
        if enable_idempotence and acks not in (-1, "all"):
            raise ValueError("enable_idempotence needs acks='all' (as in Kafka)")
        if enable_idempotence and retries < 1:
            raise ValueError("enable_idempotence needs retries >= 1 (as in Kafka)")
        if max_in_flight_requests_per_connection < 1:
            raise ValueError("max_in_flight_requests_per_connection must be at least 1")
        self._client = client
        self._acks = -1 if acks == "all" else int(acks)
        self._linger_s = linger_ms / 1000
        self._batch_size = batch_size
        self._buffer_memory = buffer_memory
        self._codec = codec_for_name(compression_type)
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._custom_partitioner = partitioner
        self._partitioner_wants_available = partitioner is not None and \
            _positional_arity(partitioner) >= 3
        self._partitioner = DefaultPartitioner()
        self._retries = retries
        self._retry_backoff_s = retry_backoff_ms / 1000
        self._delivery_timeout_s = delivery_timeout_ms / 1000
        self._request_timeout_s = request_timeout_ms / 1000
        self._max_in_flight = max_in_flight_requests_per_connection
        self._max_request_size = max_request_size
        self._on_delivery = on_delivery
        # (topic, partition) -> the open batch; sealed batches wait in _ready per partition.
        self._open: dict[tuple[str, int], _Batch] = {}
        # topic -> the open batch of its sticky partition, where unkeyed records go (the
        # default partitioner only; an entry goes when its batch is sealed).
        self._sticky_batches: dict[str, _Batch] = {}
        self._ready: dict[tuple[str, int], deque[_Batch]] = {}
        self._in_flight: set[_Batch] = set()
        self._busy_partitions: set[tuple[str, int]] = set()
        self._unfinished: set[_Batch] = set()
        self._buffer_used = 0
        self._room = trio.Event()  # set whenever memory is released
        self._wakeup = trio.Event()
        self._flushing = 0
        self._closed = False
        self._node_slots: dict[int, trio.Semaphore] = {}
        self._writers: dict[int, trio.MemorySendChannel[_Request]] = {}
        # topic -> (metadata, partitions, available)
        self._topic_cache: dict[
            str, tuple[ClusterMetadata, tuple[int, ...], tuple[int, ...]]] = {}
        self._pacer = YieldPacer()
        self._has_serializers = key_serializer is not None or value_serializer is not None
        self._refreshing = False
        # Idempotence (see _seal and _renew_producer_id): the producer id and epoch from
        # InitProducerId, the next sequence number of each partition, and whether a failed
        # batch left a gap that a new producer id must close before anything else is sent.
        self.idempotent = enable_idempotence
        self._producer_id, self._producer_epoch = -1, -1
        self._next_sequence: dict[tuple[str, int], int] = {}
        self._sequence_gap = False
        self._stats = _Statistics()

    def statistics(self) -> dict[str, Any]:
        """Counters since the producer opened, in the vocabulary of Kafka's producer metrics
        and of the broker's (see docs/client.md, "Statistics"): ``records_sent`` (records
        in batches sent for the first time), ``bytes_sent`` and ``batches_sent`` (every
        attempt), ``batch_size_avg`` (bytes), ``requests`` (Produce requests answered),
        ``request_latency_avg_ms``/``request_latency_max_ms`` (send to answer),
        ``buffer_total_bytes``/``buffer_available_bytes`` (``buffer_memory``),
        ``record_errors`` (records whose delivery failed), ``retries`` (batches sent again).
        """
        s = self._stats
        return {
            "records_sent": s.records_sent,
            "bytes_sent": s.bytes_sent,
            "batches_sent": s.batches_sent,
            "batch_size_avg": s.bytes_sent / s.batches_sent if s.batches_sent else 0.0,
            "requests": s.requests,
            "request_latency_avg_ms": 1000 * s.latency_sum / s.requests if s.requests else 0.0,
            "request_latency_max_ms": 1000 * s.latency_max,
            "buffer_total_bytes": self._buffer_memory,
            "buffer_available_bytes": self._buffer_memory - self._buffer_used,
            "record_errors": s.record_errors,
            "retries": s.retries,
        }

    # -- sending -----------------------------------------------------------------------------

    async def send(self, topic: str, value: Any = None, key: Any = None, *,
                   partition: int | None = None, timestamp_ms: int | None = None,
                   headers: Headers | None = None) -> Delivery:
        """Queue a record (async mode); waits while ``buffer_memory`` is full.

        Every call is a cancellation point; while there is room it yields to other tasks
        at most once a millisecond (see ``trilog._concurrency.YieldPacer``).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if topic not in self._topic_cache and not self._client.metadata.value.partitions_for(topic):
            await self._client.partitions_for(topic)
        while True:
            try:
                delivery = self.send_nowait(topic, value, key, partition=partition,
                                            timestamp_ms=timestamp_ms, headers=headers)
                break
            except BufferFullError:
                k, v = self._serialize(key, value)
                await self._wait_for_room(self._reservation(k, v, headers))
        if self._pacer.due():
            await trio.lowlevel.cancel_shielded_checkpoint()
        return delivery

    async def _wait_for_room(self, needed: int) -> None:
        deadline = trio.current_time() + self._delivery_timeout_s
        while self._buffer_used + needed > self._buffer_memory:
            if self._closed:
                raise ProducerClosedError("the producer is closed")
            with trio.move_on_at(deadline):
                await self._room.wait()
            if trio.current_time() >= deadline:
                raise DeliveryTimeoutError(
                    f"no room in buffer_memory for {self._delivery_timeout_s:.1f} s"
                )

    def send_nowait(self, topic: str, value: Any = None, key: Any = None, *,
                    partition: int | None = None, timestamp_ms: int | None = None,
                    headers: Headers | None = None) -> Delivery:
        """Queue a record without waiting: ``BufferFullError`` when ``buffer_memory`` is full,
        ``UnknownTopicOrPartitionError`` if the topic's partitions are not known yet (``await
        producer.partitions_for(topic)`` first, or use ``send``).

        This is the per-record hot path: for plain bytes it is a dictionary lookup and one
        ``RecordBatchBuilder.append``; memory is reserved per batch, not per record."""
        if (key is not None and type(key) is not bytes) or \
                (value is not None and type(value) is not bytes) or self._has_serializers:
            key, value = self._serialize(key, value)
        if key is None and partition is None:
            # Unkeyed records stick to one partition per batch: the common case goes
            # straight to the open batch of the topic's sticky partition (a None timestamp
            # is "now", read by the builder itself).
            batch = self._sticky_batches.get(topic)
            if batch is not None:
                index = batch.builder.append(timestamp_ms, None, value, headers)
                if index is not None:
                    return Delivery(batch, index)
        if self._closed:
            raise ProducerClosedError("the producer is closed")
        sticky = partition is None and key is None and self._custom_partitioner is None
        if partition is None:
            partition = self._choose_partition(topic, key)
        elif (topic, partition) not in self._open:
            self._check_partition(topic, partition)
        batch = self._open.get((topic, partition))
        index = None
        if batch is not None:
            index = batch.builder.append(timestamp_ms, key, value, headers)
            if index is None:  # full: seal it
                self._seal(batch)
                batch = None
                if sticky:  # sealing dropped the sticky choice: choose again
                    partition = self._choose_partition(topic, key)
                    batch = self._open.get((topic, partition))
                    if batch is not None:
                        index = batch.builder.append(timestamp_ms, key, value, headers)
                        if index is None:  # that one is full too
                            self._seal(batch)
                            batch = None
        if batch is None:  # a new batch: the record always fits in an empty one
            batch = self._new_batch(topic, partition, key, value, headers)
            index = batch.builder.append(timestamp_ms, key, value, headers)
        assert index is not None, "a batch took a record it has no room for"
        if sticky:
            self._sticky_batches[topic] = batch
        return Delivery(batch, index)

    def _reservation(self, key: bytes | None, value: bytes | None,
                     headers: Headers | None) -> int:
        """Bytes a new batch for this record reserves from ``buffer_memory``."""
        needed = _record_size(key, value, headers) + HEADER_SIZE
        if needed > self._max_request_size:
            raise MessageTooLargeError(
                f"a record of {needed} bytes is larger than max_request_size "
                f"({self._max_request_size})")
        if needed > self._buffer_memory:
            raise MessageTooLargeError(
                f"a record of {needed} bytes is larger than buffer_memory ({self._buffer_memory})")
        return max(min(self._batch_size, self._buffer_memory), needed)

    def _new_batch(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
                   headers: Headers | None) -> _Batch:
        """Open a batch for a record, reserving its memory (``BufferFullError`` if none)."""
        reserve = self._reservation(key, value, headers)
        if self._buffer_used + reserve > self._buffer_memory:
            raise BufferFullError(
                f"buffer_memory ({self._buffer_memory} bytes) is full; wait with send()")
        batch = _Batch(topic, partition,
                       RecordBatchBuilder(compression_type=self._codec, max_bytes=self._batch_size),
                       trio.current_time(), self._delivery_timeout_s)
        batch.size = reserve
        self._buffer_used += reserve
        self._open[(topic, partition)] = batch
        self._unfinished.add(batch)
        if not self._wakeup.is_set():
            self._wakeup.set()  # the sender computes the new linger deadline
        return batch

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, *,
                            partition: int | None = None, timestamp_ms: int | None = None,
                            headers: Headers | None = None) -> RecordMetadata:
        """The sync path: send one record and wait for its acknowledgement."""
        delivery = await self.send(topic, value, key, partition=partition,
                                   timestamp_ms=timestamp_ms, headers=headers)
        self._wakeup.set()  # nobody will fill this batch; do not wait for linger_ms
        if self._linger_s:
            self._seal(self._open.get((delivery._batch.topic, delivery._batch.partition)))
        return await delivery.wait()

    async def partitions_for(self, topic: str) -> tuple[int, ...]:
        return await self._client.partitions_for(topic)

    def check_types(self, key: Any, value: Any) -> None:
        """``TypeError`` now for a key or value ``send`` would refuse for its type (the
        blocking facade calls this in the caller's thread).  With serializers, nothing is
        checked here: they run with the send."""
        if not self._has_serializers and (
                (value is not None and type(value) is not bytes) or
                (key is not None and type(key) is not bytes)):
            self._serialize(key, value)

    def _serialize(self, key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
        if self._key_serializer is not None and key is not None:
            key = self._key_serializer(key)
        if self._value_serializer is not None and value is not None:
            value = self._value_serializer(value)
        for name, v in (("key", key), ("value", value)):
            if v is not None and not isinstance(v, (bytes, bytearray, memoryview)):
                raise TypeError(
                    f"{name} must be bytes (or set {name}_serializer), not {type(v).__name__}"
                )
        return key, value

    def _check_partition(self, topic: str, partition: int) -> None:
        """An explicit partition must exist (else the record could only time out)."""
        partitions = self._client.metadata.value.partitions_for(topic)
        if not partitions:
            raise UnknownTopicOrPartitionError(
                f"partitions of {topic!r} are not known yet; use send() or partitions_for()")
        if partition not in partitions:
            raise UnknownTopicOrPartitionError(
                f"{topic!r} has no partition {partition} (it has {len(partitions)})")

    def _choose_partition(self, topic: str, key: bytes | None) -> int:
        meta = self._client.metadata.value
        cached = self._topic_cache.get(topic)
        if cached is None or cached[0] is not meta:
            # Per metadata snapshot, not per record: the lists are computed once.
            partitions = meta.partitions_for(topic)
            if not partitions:
                raise UnknownTopicOrPartitionError(
                    f"partitions of {topic!r} are not known yet; use send() or partitions_for()"
                )
            cached = (meta, partitions, meta.available_partitions(topic))
            self._topic_cache[topic] = cached
        _meta, partitions, available = cached
        if self._custom_partitioner is not None:
            if self._partitioner_wants_available:
                chosen = self._custom_partitioner(key, partitions, available)  # type: ignore[call-arg]
            else:
                chosen = self._custom_partitioner(key, partitions)  # type: ignore[call-arg]
            if chosen not in partitions:
                raise ValueError(f"partitioner returned {chosen}, not one of {partitions}")
            return chosen
        return self._partitioner.partition(topic, key, partitions, available)

    def _seal(self, batch: _Batch | None) -> None:
        """Close an open batch: build its bytes once and queue it for the sender."""
        if batch is None:
            return
        tp = (batch.topic, batch.partition)
        if self._open.get(tp) is batch:
            del self._open[tp]
        if self._sticky_batches.get(batch.topic) is batch:
            del self._sticky_batches[batch.topic]
        if self.idempotent:
            builder = batch.builder
            builder.producer_id, builder.producer_epoch = self._producer_id, self._producer_epoch
            builder.base_sequence = self._next_sequence.get(tp, 0)
            self._next_sequence[tp] = (builder.base_sequence + len(builder)) % _SEQUENCE_MOD
        batch.data = batch.builder.build()
        batch.builder.release()  # the records are in batch.data now
        self._ready.setdefault(tp, deque()).append(batch)
        if self._custom_partitioner is None:
            self._partitioner.batch_done(batch.topic, batch.partition)
        self._wakeup.set()

    # -- flushing and completion ---------------------------------------------------------------

    async def flush(self) -> None:
        """Wait until everything sent so far is acknowledged or failed."""
        pending = list(self._unfinished)
        self._flushing += 1
        try:
            for batch in list(self._open.values()):
                self._seal(batch)
            for batch in pending:
                await batch.done.wait()
        finally:
            self._flushing -= 1
        await trio.lowlevel.checkpoint()

    def _complete(self, batch: _Batch, base_offset: int = -1, error: BaseException | None = None,
                  log_append_time: int = -1) -> None:
        if batch.done.is_set():
            return
        batch.base_offset = base_offset
        batch.error = error
        batch.log_append_time = log_append_time
        if error is not None and batch.halves is None:
            self._stats.record_errors += len(batch.builder)
        self._finish(batch)

    def _finish(self, batch: _Batch) -> None:
        """A batch's outcome is known: wake its deliveries, free its memory, call back."""
        batch.done.set()
        self._unfinished.discard(batch)
        if self.idempotent and batch.error is not None and batch.halves is None and \
                batch.builder.producer_id == self._producer_id and not self._closed:
            self._sequence_gap = True  # its sequence numbers were never written
            self._wakeup.set()
        parent = batch.parent
        if parent is not None:  # a half: its parent finishes with its last half
            halves = parent.halves or ()
            if not parent.done.is_set() and all(h.done.is_set() for h in halves):
                self._finish(parent)
            return
        self._buffer_used -= batch.size
        self._room.set()
        self._room = trio.Event()
        if self._on_delivery is not None:
            for index in range(len(batch.builder)):
                try:
                    self._on_delivery(_outcome(batch, index))
                except Exception:
                    log.exception("on_delivery callback failed")

    def fail_all(self, error: BaseException) -> None:
        """Fail every unfinished delivery (used when the producer is cancelled)."""
        self._closed = True
        self._sticky_batches.clear()  # every send now takes the path that checks _closed
        for batch in list(self._unfinished):
            self._complete(batch, error=error)
        self._open.clear()
        self._ready.clear()

    # -- the sender task -------------------------------------------------------------------------

    async def _sender(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                self._wakeup = trio.Event()
                now = trio.current_time()
                self._expire(now)
                next_deadline = self._seal_lingering(now)
                if self._sequence_gap:  # before anything else is sent
                    # ... but not past the next delivery deadline: with the cluster out of
                    # reach, deliveries must still fail on time (DeliveryTimeoutError).
                    first = min((b.deadline for b in self._unfinished), default=math.inf)
                    with trio.move_on_after(max(first - now, self._retry_backoff_s)):
                        await self._renew_producer_id()
                    continue
                drained = await self._drain(nursery, now)
                if drained:
                    continue
                timeout = math.inf if next_deadline is None else max(next_deadline - now, 0)
                retry = min((b.retry_at for q in self._ready.values() for b in q
                             if b.retry_at > now), default=None)
                if retry is not None:
                    timeout = min(timeout, retry - now)
                with trio.move_on_after(timeout):
                    await self._wakeup.wait()

    def _seal_lingering(self, now: float) -> float | None:
        """Seal open batches whose linger time passed; return the next deadline.

        A batch whose partition cannot take it yet (a batch of the partition is in flight,
        or sealed and waiting) stays open and keeps taking records, as in Kafka's record
        accumulator: sealing it would queue a row of tiny batches behind a slow
        acknowledgement (``acks=all`` waits for the followers), each sent alone.  The
        request that frees the partition wakes the sender, which seals it then.
        """
        next_deadline = None
        for batch in list(self._open.values()):
            tp = (batch.topic, batch.partition)
            if tp in self._busy_partitions or self._ready.get(tp):
                continue
            due = batch.created + self._linger_s
            if due <= now or self._flushing:
                self._seal(batch)
            elif next_deadline is None or due < next_deadline:
                next_deadline = due
        return next_deadline

    def _timeout_error(self, batch: _Batch, last: BaseException | None) -> DeliveryTimeoutError:
        return DeliveryTimeoutError(
            f"{len(batch.builder)} records to {batch.topic}-{batch.partition} were not "
            f"acknowledged within {self._delivery_timeout_s:.1f} s"
            + (f" (last error: {last})" if last else ""))

    def _expire(self, now: float) -> None:
        for tp, queue in list(self._ready.items()):
            while queue and queue[0].deadline <= now:
                batch = queue.popleft()
                self._complete(batch, error=self._timeout_error(batch, batch.error))
            if not queue:
                del self._ready[tp]
        for batch in list(self._open.values()):
            if batch.deadline <= now:
                self._seal(batch)

    async def _drain(self, nursery: trio.Nursery, now: float) -> bool:
        """Start Produce requests for ready batches; True if any was started."""
        due = [queue[0] for tp, queue in self._ready.items()
               if queue and tp not in self._busy_partitions and queue[0].retry_at <= now]
        by_node, leaderless = self._client.metadata.value.group_by_leader(
            due, _Batch.topic_partition)
        if leaderless and not self._refreshing:
            self._refreshing = True
            nursery.start_soon(self._refresh_metadata, sorted({b.topic for b in leaderless}))
        started = False
        for node, batches in by_node.items():
            slots = self._node_slots.setdefault(node.node_id,
                                                trio.Semaphore(self._max_in_flight))
            if slots.value == 0:
                continue
            request_batches: list[_Batch] = []
            size = 0
            for batch in batches:
                batch_size = len(batch.sealed_data())
                if request_batches and size + batch_size > self._max_request_size:
                    break
                request_batches.append(batch)
                size += batch_size
            for batch in request_batches:
                tp = (batch.topic, batch.partition)
                self._ready[tp].popleft()
                if not self._ready[tp]:
                    del self._ready[tp]
                if self._max_in_flight == 1 or self.idempotent:
                    self._busy_partitions.add(tp)  # one batch of the partition in flight
                self._in_flight.add(batch)
            slots.acquire_nowait()
            self._writer_for(nursery, node).send_nowait((slots, request_batches))
            started = True
        return started

    def _writer_for(self, nursery: trio.Nursery, node: Node
                    ) -> trio.MemorySendChannel[_Request]:
        """The queue of the task that writes ``node``'s requests, in order (see _node_writer)."""
        channel = self._writers.get(node.node_id)
        if channel is None:
            channel, receive = trio.open_memory_channel(math.inf)
            self._writers[node.node_id] = channel
            nursery.start_soon(self._node_writer, node, receive, nursery)
        return channel

    async def _refresh_metadata(self, topics: list[str]) -> None:
        """Learn the leaders of ``topics`` (named, so the broker may auto-create them)."""
        try:
            await self._client.refresh_metadata(topics)
        except TrilogError as exc:
            log.debug("metadata refresh failed: %s", exc)
        await trio.sleep(self._retry_backoff_s)  # at most one refresh per backoff
        self._refreshing = False
        self._wakeup.set()

    async def _node_writer(self, node: Node, queue: trio.MemoryReceiveChannel[_Request],
                           nursery: trio.Nursery) -> None:
        """Writes one broker's Produce requests in the order they were formed.

        Only this task writes to the broker, so two requests holding batches of one
        partition reach it in order; their responses are awaited by separate tasks, so
        several requests are in flight at once.  The broker's address is looked up for each
        request: a broker restarted on another port keeps its id and its writer.
        """
        async for slots, batches in queue:
            request = self._produce_request(batches)
            try:
                # Reaching the broker may take backoffs and connect timeouts: the batches'
                # delivery deadline bounds that wait (not the send itself: a frame cut in
                # half would poison the connection).
                conn = None
                node = self._client.metadata.value.brokers.get(node.node_id, node)
                with trio.move_on_at(min(b.deadline for b in batches)):
                    conn = await self._client.connection(node)
                if conn is None:
                    for batch in batches:
                        self._complete(batch, error=self._timeout_error(batch, batch.error))
                    self._finish_request(slots, batches)
                    continue
                sent_at = trio.current_time()
                pending = await conn.send_request(request, expect_response=self._acks != 0)
            except (NetworkError, RequestTimedOutError) as exc:
                self._finish_request(slots, batches, error=exc)
                continue
            if pending is None:  # acks=0: nothing comes back
                for batch in batches:
                    self._complete(batch)
                self._finish_request(slots, batches)
                continue
            nursery.start_soon(self._await_response, conn, pending, slots, batches, sent_at)

    def _produce_request(self, batches: list[_Batch]) -> Message:
        by_topic: dict[str, list[Any]] = {}
        stats = self._stats
        for batch in batches:
            by_topic.setdefault(batch.topic, []).append(
                ProduceRequest.TopicProduceData.PartitionProduceData(
                    index=batch.partition, records=batch.data))
            batch.attempts += 1
            stats.batches_sent += 1
            stats.bytes_sent += len(batch.sealed_data())
            if batch.attempts > 1:
                stats.retries += 1
            elif batch.parent is None:  # a split batch's halves carry records counted once
                stats.records_sent += len(batch.builder)
        return ProduceRequest(
            acks=self._acks, timeout_ms=int(self._request_timeout_s * 1000),
            topic_data=[ProduceRequest.TopicProduceData(name=t, partition_data=p)
                        for t, p in by_topic.items()])

    async def _await_response(self, conn: BrokerConnection, pending: PendingResponse,
                              slots: trio.Semaphore, batches: list[_Batch],
                              sent_at: float) -> None:
        try:
            response = await conn.wait_response(pending, self._request_timeout_s + 5)
        except (NetworkError, RequestTimedOutError) as exc:
            self._finish_request(slots, batches, error=exc)
            return
        latency = trio.current_time() - sent_at
        stats = self._stats
        stats.requests += 1
        stats.latency_sum += latency
        stats.latency_max = max(stats.latency_max, latency)
        results = {(t.name, p.index): p for t in response.responses
                   for p in t.partition_responses}
        stale = False
        for batch in batches:
            result = results.get((batch.topic, batch.partition))
            if result is None:
                self._retry_or_fail(batch, UnknownServerError(
                    f"no answer for {batch.topic}-{batch.partition} in the produce response"))
            elif result.error_code in (0, DuplicateSequenceNumberError.code):
                # DUPLICATE_SEQUENCE_NUMBER: an idempotent retry of a batch already written.
                self._complete(batch, result.base_offset,
                               log_append_time=getattr(result, "log_append_time_ms", -1))
            else:
                error = error_for_code(result.error_code)
                error = type(error)(f"{batch.topic}-{batch.partition}: {error}")
                stale = stale or error.retriable
                self._retry_or_fail(batch, error)
        if stale:
            self._client.request_metadata_refresh()
        self._finish_request(slots, batches)

    def _finish_request(self, slots: trio.Semaphore, batches: list[_Batch],
                        error: BaseException | None = None) -> None:
        """A request is over: retry or fail its batches on ``error``, free its slot."""
        if error is not None:
            for batch in batches:
                self._retry_or_fail(batch, error)
            self._client.request_metadata_refresh()
        for batch in batches:
            self._in_flight.discard(batch)
            self._busy_partitions.discard((batch.topic, batch.partition))
        slots.release()
        self._wakeup.set()

    def _retry_or_fail(self, batch: _Batch, error: BaseException) -> None:
        retriable = is_retriable(error)
        now = trio.current_time()
        if retriable and now >= batch.deadline:
            self._complete(batch, error=self._timeout_error(batch, error))
            return
        if isinstance(error, (MessageTooLargeError, RecordListTooLargeError)) and \
                len(batch.builder) > 1 and now < batch.deadline:
            self._split(batch)
            return
        if retriable and batch.attempts <= self._retries:
            batch.error = error  # remembered for the timeout message
            batch.retry_at = now + self._retry_backoff_s
            tp = (batch.topic, batch.partition)
            # Back at the front: a retried batch goes before later batches of its partition.
            self._ready.setdefault(tp, deque()).appendleft(batch)
            return
        self._complete(batch, error=error)

    async def init_producer_id(self) -> None:
        """Idempotence: get a producer id and epoch from the cluster (``InitProducerId``)."""
        deadline = trio.current_time() + self._request_timeout_s
        async for _ in Backoff(self._retry_backoff_s, self._retry_backoff_s).attempts():
            try:
                conn = await self._client.any_connection()
                response = await conn.request(InitProducerIdRequest(
                    transactional_id=None, transaction_timeout_ms=60_000))
                if not response.error_code:
                    self._producer_id = response.producer_id
                    self._producer_epoch = response.producer_epoch
                    return
                error = error_for_code(response.error_code)
                if not error.retriable:
                    raise type(error)(f"InitProducerId: {error}")
            except (NetworkError, RequestTimedOutError) as exc:
                error = exc
            if trio.current_time() >= deadline:
                raise error

    async def _renew_producer_id(self) -> None:
        """A failed batch left a gap in a partition's sequence numbers, which the broker
        would refuse every later batch for: start afresh under a new producer id, as
        Kafka's producer does (by bumping its epoch).  Batches not sent yet are stamped
        again; the one in flight per partition keeps its old id and sequence.  The gap
        stays (and this is tried again) until it works."""
        try:
            await self.init_producer_id()
        except TrilogError as exc:
            if is_retriable(exc):
                log.warning("producer: could not renew the producer id (%s); retrying", exc)
                await trio.sleep(self._retry_backoff_s)
                return
            # Fatal, as in Kafka: nothing more can be sent in order.
            log.error("producer: cannot renew the producer id: %s; closing", exc)
            self._sequence_gap = False
            self.fail_all(exc)
            return
        self._sequence_gap = False
        log.info("producer: a failed batch left a sequence gap; new producer id %d",
                 self._producer_id)
        self._next_sequence = {}
        for tp, queue in self._ready.items():
            for batch in queue:
                if batch.attempts:
                    # Sent before (the broker may have it): a retry must be recognized as
                    # one, so it keeps its id and sequences.
                    continue
                sequence = self._next_sequence.get(tp, 0)
                batch.data = restamp_producer(batch.sealed_data(), self._producer_id,
                                              self._producer_epoch, sequence)
                batch.builder.producer_id = self._producer_id
                self._next_sequence[tp] = (sequence + len(batch.builder)) % _SEQUENCE_MOD

    def _split(self, batch: _Batch) -> None:
        """The broker found ``batch`` too large (its ``message.max.bytes`` is below our
        ``batch_size``): send its records again as two halves, in order, as Kafka's producer
        does.  A half may split again; a single record too large fails with the error."""
        parent = RecordBatch(batch.sealed_data())
        try:
            records = parent.decode()
        except TrilogError as exc:  # cannot happen with our own bytes; never kill the sender
            self._complete(batch, error=exc)
            return
        cut = len(records) // 2
        halves = []
        first_sequence = parent.base_sequence
        for start, part in ((0, records[:cut]), (cut, records[cut:])):
            # The halves carry the parent's sequence numbers, which were never written.
            builder = RecordBatchBuilder(
                compression_type=self._codec, producer_id=parent.producer_id,
                producer_epoch=parent.producer_epoch,
                base_sequence=-1 if first_sequence < 0 else
                (first_sequence + start) % _SEQUENCE_MOD)
            for record in part:
                builder.append(record.timestamp, record.key, record.value, record.headers)
            half = _Batch(batch.topic, batch.partition, builder, batch.created,
                          self._delivery_timeout_s)
            half.deadline, half.parent = batch.deadline, batch
            half.data = builder.build()
            builder.release()
            halves.append(half)
            self._unfinished.add(half)
        log.info("%s-%d: a batch of %d records was too large for the broker; sending it again "
                 "in two halves", batch.topic, batch.partition, len(records))
        batch.halves = (halves[0], halves[1])
        batch.data = None
        self._unfinished.discard(batch)  # it finishes with its halves
        queue = self._ready.setdefault((batch.topic, batch.partition), deque())
        queue.appendleft(halves[1])
        queue.appendleft(halves[0])


def _record_size(key: bytes | None, value: bytes | None, headers: Headers | None) -> int:
    size = _RECORD_OVERHEAD + (len(key) if key is not None else 0) + \
        (len(value) if value is not None else 0)
    return size + _headers_size(headers) if headers else size


def _headers_size(headers: Headers) -> int:
    return sum(len(k) + (len(v) if v is not None else 0) + 4 for k, v in headers)


class ProducerOptions(SecurityOptions, total=False):
    """``open_producer``'s keyword arguments, for the facades that pass them on
    (``trilog.sync.Producer(..., **options)``); a test keeps the two the same."""

    zookeeper: str | None
    acks: int | str | None
    linger_ms: float
    batch_size: int
    buffer_memory: int
    compression_type: str | None
    key_serializer: Callable[[Any], bytes] | None
    value_serializer: Callable[[Any], bytes] | None
    partitioner: Partitioner | None
    retries: int
    retry_backoff_ms: int
    delivery_timeout_ms: int
    request_timeout_ms: int
    max_in_flight_requests_per_connection: int
    max_request_size: int
    on_delivery: Callable[[Any], None] | None
    enable_idempotence: bool | None
    client_id: str
    metadata_max_age_ms: int


#: ``retries``' default: as many as ``delivery_timeout_ms`` allows (Kafka's ``MAX_VALUE``)
MAX_RETRIES = 2_147_483_647


def producer_guarantees(acks: int | str | None, enable_idempotence: bool | None,
                        retries: int = MAX_RETRIES
                        ) -> tuple[int | str, bool, bool]:
    """``(acks, enable_idempotence, idempotence_explicit)`` as Kafka 3's producer settles
    them: both unset means ``acks="all"`` with idempotence; ``enable_idempotence=True``
    alone sets ``acks="all"``; an explicit ``acks`` of 0 or 1, or ``retries=0``, turns the
    default idempotence off, and conflicts with an explicit ``enable_idempotence=True``
    (``ValueError``)."""
    strong = acks is None or acks in (-1, "all")
    if enable_idempotence is None:
        return ("all" if acks is None else acks), strong and retries >= 1, False
    if enable_idempotence and not strong:
        raise ValueError(f"enable_idempotence=True needs acks='all', not acks={acks!r} "
                         "(as in Kafka)")
    return ("all" if acks is None else acks), enable_idempotence, True


@asynccontextmanager
async def open_producer(
    bootstrap_servers: str | list[str] | None = None,
    *,
    zookeeper: str | None = None,
    acks: int | str | None = None,
    linger_ms: float = 5,
    batch_size: int = 65536,
    buffer_memory: int = 32 << 20,
    compression_type: str | None = None,
    key_serializer: Serializer | None = None,
    value_serializer: Serializer | None = None,
    partitioner: Partitioner | None = None,
    retries: int = MAX_RETRIES,
    retry_backoff_ms: int = 100,
    delivery_timeout_ms: int = 120_000,
    request_timeout_ms: int = 30_000,
    max_in_flight_requests_per_connection: int = 5,
    max_request_size: int = 1048576,
    on_delivery: OnDelivery | None = None,
    enable_idempotence: bool | None = None,
    client_id: str = "trilog-producer",
    metadata_max_age_ms: int = 300_000,
    **security: Unpack[SecurityOptions],
) -> AsyncIterator[Producer]:
    """A producer for the body of the ``async with`` (see the module docstring).

    ``bootstrap_servers`` (``"host:port[,host:port]"``) or ``zookeeper``
    (``"host:port[/chroot]"``) says where the cluster is; ``security_protocol``,
    ``ssl_*`` and ``sasl_*`` (kafka-python's names, ``ClientSecurity.from_options``) how
    to connect to it.

    Kafka 3's defaults: ``acks="all"`` and idempotence (see ``producer_guarantees``);
    ``retries`` is bounded by ``delivery_timeout_ms`` only.
    """
    acks, enable_idempotence, explicit = producer_guarantees(acks, enable_idempotence,
                                                             retries)
    with unwrap_exception_group():
        async with open_client(bootstrap_servers, zookeeper=zookeeper, client_id=client_id,
                               request_timeout_ms=request_timeout_ms,
                               metadata_max_age_ms=metadata_max_age_ms,
                               security=client_security(security)) as client:
            producer = Producer(
                client, acks=acks, linger_ms=linger_ms, batch_size=batch_size,
                buffer_memory=buffer_memory, compression_type=compression_type,
                key_serializer=key_serializer, value_serializer=value_serializer,
                partitioner=partitioner, retries=retries, retry_backoff_ms=retry_backoff_ms,
                delivery_timeout_ms=delivery_timeout_ms, request_timeout_ms=request_timeout_ms,
                max_in_flight_requests_per_connection=max_in_flight_requests_per_connection,
                max_request_size=max_request_size, on_delivery=on_delivery,
                enable_idempotence=enable_idempotence,
            )
            if enable_idempotence:
                try:
                    await producer.init_producer_id()
                except UnsupportedVersionError as exc:
                    if explicit:
                        raise
                    log.warning("producer: the broker cannot make producers idempotent "
                                "(%s); producing without idempotence", exc)
                    producer.idempotent = False
            async with trio.open_nursery() as nursery:
                nursery.start_soon(producer._sender)
                try:
                    yield producer
                    await producer.flush()
                finally:
                    producer.fail_all(ProducerClosedError(
                        "the producer was closed (or cancelled) before this record was "
                        "acknowledged; it may or may not have been written"))
                    nursery.cancel_scope.cancel()
