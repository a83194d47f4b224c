"""The record accumulator: records into per-partition batches, batches to the sender
(Kafka's ``RecordAccumulator``).

It owns every batch from its first record to its outcome:

- **open** batches, at most one per partition: ``append`` encodes a record once, into the
  open batch of its partition (a ``RecordBatchBuilder``).  Unkeyed records stick to one
  partition per batch (the default partitioner's choice, made again when the batch is
  sealed), and ``sticky_batches`` maps a topic to that batch, so the producer's per-record
  fast path is one lookup there and one ``append`` to the builder, without a call here.
- **sealed** batches, queued per partition in order: ``seal`` builds a batch's bytes once
  (stamped with the producer id and sequence numbers when idempotent) when it is full,
  when ``linger_ms`` passed (``seal_lingering``), on ``flush``, or when its delivery
  deadline came (``expire``).  The sender takes the first batch of each partition
  (``sendable``, ``take``); a retried batch, or the two halves of a batch the broker found
  too large (``split``), go back to the front of their partition's queue.
- **memory**: each open or unfinished batch reserves ``max(batch_size, its first record)``
  bytes of ``buffer_memory``, given back when it is done.  Without room ``append`` raises
  ``BufferFullError``; ``wait_for_room`` waits up to ``delivery_timeout_ms`` for some.
- **outcomes**: ``complete`` sets a batch's outcome once: it wakes the batch's deliveries,
  gives its memory back and calls ``on_delivery`` for each record; ``fail_all`` fails every
  unfinished batch and closes the accumulator; ``abort_undrained`` fails those the sender
  has not taken (a transaction aborted or failed).
- **transactions**: a transactional producer's new batch adds its partition to the
  transaction (``TransactionManager.maybe_add_partition``, which refuses a send outside
  one) and is marked transactional; a failed batch is the transaction's to judge.

Invariants: a batch is in one state at a time (open, queued, in a request, done); a
partition has at most one open batch; memory is given back once per batch, when it (or its
last half) is done.  A *muted* partition (one batch in flight: idempotence, or
``max_in_flight_requests_per_connection=1``) gives the sender nothing and keeps its open
batch open past ``linger_ms``.  Use from the producer's trio run; not thread-safe.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Iterator
from typing import Protocol

import trio

from trilog._topic import PartitionKey
from trilog.client._metadata import ClusterMetadata
from trilog.client.producer._batch import Headers, ProducerBatch
from trilog.client.producer._config import ProducerConfig
from trilog.client.producer._delivery import Delivery, record_outcome
from trilog.client.producer._errors import (
    BufferFullError,
    DeliveryTimeoutError,
    ProducerClosedError,
)
from trilog.client.producer._idempotence import Idempotence
from trilog.client.producer._partitioner import (
    DefaultPartitioner,
    partition_for_key,
    positional_arity,
)
from trilog.client.producer._statistics import ProducerStatistics
from trilog.client.producer._transactions import TransactionManager
from trilog.errors import MessageTooLargeError, TrilogError, UnknownTopicOrPartitionError
from trilog.records import RecordBatch, RecordBatchBuilder
from trilog.records._v2 import HEADER_SIZE

log = logging.getLogger("trilog.producer")

# Per-record overhead of the v2 format beyond key and value (length, attributes, deltas,
# key/value lengths, header count): used to account memory before encoding.
_RECORD_OVERHEAD = 16
_SEQUENCE_MOD = 1 << 31  # a split batch's halves continue its sequence numbers


class MetadataView(Protocol):
    """Where the accumulator reads the cluster's current metadata (``Client.metadata``)."""

    @property
    def value(self) -> ClusterMetadata: ...


class Wakeup:
    """The sender's alarm: a part ``set``s it when there may be work (a new batch, a sealed
    one, a request answered); the sender clears it each round and waits on it."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = trio.Event()

    def set(self) -> None:
        self._event.set()

    def clear(self) -> None:
        if self._event.is_set():
            self._event = trio.Event()

    async def wait(self) -> None:
        await self._event.wait()


class RecordAccumulator:
    """See the module docstring."""

    def __init__(self, config: ProducerConfig, metadata: MetadataView,
                 idempotence: Idempotence, statistics: ProducerStatistics,
                 wakeup: Wakeup, transactions: TransactionManager | None = None) -> None:
        self._metadata = metadata
        self._idempotence = idempotence
        self._transactions = transactions
        self._stats = statistics
        self._wakeup = wakeup
        self._linger_s = config.linger_ms / 1000
        self._batch_size = config.batch_size
        self._buffer_memory = config.buffer_memory
        self._max_request_size = config.max_request_size
        self._codec = config.codec
        self._delivery_timeout_s = config.delivery_timeout_ms / 1000
        self._on_delivery = config.on_delivery
        self._custom_partitioner = config.partitioner
        self._partitioner_wants_available = config.partitioner is not None and \
            positional_arity(config.partitioner) >= 3
        self._partitioner = DefaultPartitioner()
        #: topic -> the open batch of its sticky partition, where unkeyed records go (the
        #: default partitioner only; an entry goes when its batch is sealed).  The producer
        #: appends to it directly: the per-record fast path.
        self.sticky_batches: dict[str, ProducerBatch] = {}
        #: topic -> (metadata, partitions, available partitions), per metadata snapshot; a
        #: topic here has known partitions (the producer's ``send`` looks without a call)
        self.partitions_by_topic: dict[
            str, tuple[ClusterMetadata, tuple[int, ...], tuple[int, ...]]] = {}
        self._open: dict[PartitionKey, ProducerBatch] = {}
        self._queued: dict[PartitionKey, deque[ProducerBatch]] = {}
        self._muted: set[PartitionKey] = set()
        self._unfinished: set[ProducerBatch] = set()
        self._buffer_used = 0
        self._room = trio.Event()  # set whenever memory is given back
        self._flushing = 0
        self.closed = False

    @property
    def buffer_used(self) -> int:
        """Bytes of ``buffer_memory`` the open and unfinished batches reserve."""
        return self._buffer_used

    # -- records into batches ------------------------------------------------------------------

    def append(self, topic: str, key: bytes | None, value: bytes | None,
               partition: int | None, timestamp_ms: int | None,
               headers: Headers | None) -> Delivery:
        """Put a record (key and value serialized) in the open batch of its partition,
        opening one if needed: ``BufferFullError`` without room for a new batch,
        ``UnknownTopicOrPartitionError`` for a topic whose partitions are not known yet or
        a partition it does not have, ``ProducerClosedError`` once closed."""
        if self.closed:
            raise ProducerClosedError("the producer is closed")
        sticky = False
        if partition is None:
            sticky = key is None and self._custom_partitioner is None
            partition = self._choose_partition(topic, key)
            batch = self._open.get((topic, partition))
        else:
            batch = self._open.get((topic, partition))
            if batch is None:
                self._check_partition(topic, partition)
        index = None
        if batch is not None:
            index = batch.builder.append(timestamp_ms, key, value, headers)
            if index is None:  # full: seal it
                self.seal(batch)
                batch = None
                if sticky:  # sealing dropped the sticky choice: choose again
                    partition = self._choose_partition(topic, key)
                    batch = self._open.get((topic, partition))
                    if batch is not None:
                        index = batch.builder.append(timestamp_ms, key, value, headers)
                        if index is None:  # that one is full too
                            self.seal(batch)
                            batch = None
        if batch is None:  # a new batch: the record always fits in an empty one
            batch = self._new_batch(topic, partition, key, value, headers)
            index = batch.builder.append(timestamp_ms, key, value, headers)
        assert index is not None, "a batch took a record it has no room for"
        if sticky:
            self.sticky_batches[topic] = batch
        return Delivery(batch, index)

    def _choose_partition(self, topic: str, key: bytes | None) -> int:
        meta = self._metadata.value
        cached = self.partitions_by_topic.get(topic)
        if cached is None or cached[0] is not meta:
            # Per metadata snapshot, not per record: the lists are computed once.
            partitions = meta.partitions_for(topic)
            if not partitions:
                raise UnknownTopicOrPartitionError(
                    f"partitions of {topic!r} are not known yet; use send() or partitions_for()"
                )
            cached = (meta, partitions, meta.available_partitions(topic))
            self.partitions_by_topic[topic] = cached
        _meta, partitions, available = cached
        if self._custom_partitioner is not None:
            if self._partitioner_wants_available:
                chosen = self._custom_partitioner(  # type: ignore[call-arg]
                    key, partitions, available)
            else:
                chosen = self._custom_partitioner(key, partitions)  # type: ignore[call-arg]
            if chosen not in partitions:
                raise ValueError(f"partitioner returned {chosen}, not one of {partitions}")
            return chosen
        if key is not None:  # the default partitioner's keyed choice, without its call
            return partitions[partition_for_key(key, len(partitions))]
        return self._partitioner.partition(topic, key, partitions, available)

    def _check_partition(self, topic: str, partition: int) -> None:
        """An explicit partition must exist (else the record could only time out)."""
        partitions = self._metadata.value.partitions_for(topic)
        if not partitions:
            raise UnknownTopicOrPartitionError(
                f"partitions of {topic!r} are not known yet; use send() or partitions_for()")
        if partition not in partitions:
            raise UnknownTopicOrPartitionError(
                f"{topic!r} has no partition {partition} (it has {len(partitions)})")

    # -- memory ----------------------------------------------------------------------------------

    def reservation(self, key: bytes | None, value: bytes | None,
                    headers: Headers | None) -> int:
        """Bytes a new batch for this record reserves from ``buffer_memory``
        (``MessageTooLargeError`` for a record that could never be sent)."""
        size = _RECORD_OVERHEAD + (len(key) if key is not None else 0) + \
            (len(value) if value is not None else 0)
        if headers:
            size += sum(len(k) + (len(v) if v is not None else 0) + 4 for k, v in headers)
        needed = size + HEADER_SIZE
        if needed > self._max_request_size:
            raise MessageTooLargeError(
                f"a record of {needed} bytes is larger than max_request_size "
                f"({self._max_request_size})")
        if needed > self._buffer_memory:
            raise MessageTooLargeError(
                f"a record of {needed} bytes is larger than buffer_memory ({self._buffer_memory})")
        return max(min(self._batch_size, self._buffer_memory), needed)

    async def wait_for_room(self, key: bytes | None, value: bytes | None,
                            headers: Headers | None) -> None:
        """Wait until a new batch for this record fits in ``buffer_memory``:
        ``DeliveryTimeoutError`` after ``delivery_timeout_ms``, ``ProducerClosedError`` if
        the producer closes first."""
        needed = self.reservation(key, value, headers)
        deadline = trio.current_time() + self._delivery_timeout_s
        while self._buffer_used + needed > self._buffer_memory:
            if self.closed:
                raise ProducerClosedError("the producer is closed")
            with trio.move_on_at(deadline):
                await self._room.wait()
            if trio.current_time() >= deadline:
                raise DeliveryTimeoutError(
                    f"no room in buffer_memory for {self._delivery_timeout_s:.1f} s"
                )

    def _new_batch(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
                   headers: Headers | None) -> ProducerBatch:
        """Open a batch for a record, reserving its memory (``BufferFullError`` if none);
        in a transaction, its partition joins it (outside one: ``TransactionStateError``)."""
        reserve = self.reservation(key, value, headers)
        if self._buffer_used + reserve > self._buffer_memory:
            raise BufferFullError(
                f"buffer_memory ({self._buffer_memory} bytes) is full; wait with send()")
        transactions = self._transactions
        if transactions is not None:
            transactions.maybe_add_partition((topic, partition))
        batch = ProducerBatch(
            topic, partition,
            RecordBatchBuilder(compression_type=self._codec, max_bytes=self._batch_size,
                               is_transactional=transactions is not None),
            trio.current_time(), self._delivery_timeout_s)
        batch.size = reserve
        self._buffer_used += reserve
        self._open[(topic, partition)] = batch
        self._unfinished.add(batch)
        self._wakeup.set()  # the sender computes the new linger deadline
        return batch

    # -- sealing ---------------------------------------------------------------------------------

    def open_batch(self, tp: PartitionKey) -> ProducerBatch | None:
        """The batch of ``tp`` that takes records now, if any."""
        return self._open.get(tp)

    def queued(self, tp: PartitionKey) -> tuple[ProducerBatch, ...]:
        """The sealed batches of ``tp`` waiting for the sender, in the order they go."""
        return tuple(self._queued.get(tp, ()))

    def seal(self, batch: ProducerBatch) -> None:
        """Close an open batch: build its bytes once and queue it for the sender."""
        tp = (batch.topic, batch.partition)
        if self._open.get(tp) is batch:
            del self._open[tp]
        if self.sticky_batches.get(batch.topic) is batch:
            del self.sticky_batches[batch.topic]
        if self._idempotence.enabled:
            self._idempotence.stamp(batch)
        batch.data = batch.builder.build()
        batch.builder.release()  # the records are in batch.data now
        self._queued.setdefault(tp, deque()).append(batch)
        if self._custom_partitioner is None:
            self._partitioner.batch_done(batch.topic, batch.partition)
        self._wakeup.set()

    def seal_open(self, tp: PartitionKey) -> None:
        """Seal the open batch of ``tp``, if there is one (nothing more will fill it)."""
        batch = self._open.get(tp)
        if batch is not None:
            self.seal(batch)

    def seal_lingering(self, now: float) -> float | None:
        """Seal open batches whose linger time passed (all of them while a flush waits);
        return the next linger deadline.

        A batch whose partition cannot take it yet (muted, or with a sealed batch
        waiting) stays open and keeps taking records, as in Kafka's record accumulator:
        sealing it would queue a row of tiny batches behind a slow acknowledgement
        (``acks=all`` waits for the followers), each sent alone.  The request that frees
        the partition wakes the sender, which seals it then.
        """
        next_deadline = None
        for batch in list(self._open.values()):
            tp = (batch.topic, batch.partition)
            if tp in self._muted or self._queued.get(tp):
                continue
            due = batch.created + self._linger_s
            if due <= now or self._flushing:
                self.seal(batch)
            elif next_deadline is None or due < next_deadline:
                next_deadline = due
        return next_deadline

    def expire(self, now: float) -> None:
        """Fail the queued batches whose delivery deadline passed; seal the open ones (the
        sender fails them, or they go if they can)."""
        for tp, queue in list(self._queued.items()):
            while queue and queue[0].deadline <= now:
                batch = queue.popleft()
                self.complete(batch, error=batch.timeout_error(self._delivery_timeout_s,
                                                               batch.error))
            if not queue:
                del self._queued[tp]
        for batch in list(self._open.values()):
            if batch.deadline <= now:
                self.seal(batch)

    async def flush(self) -> None:
        """Seal every open batch and wait until everything appended so far is done."""
        pending = list(self._unfinished)
        self._flushing += 1
        try:
            for batch in list(self._open.values()):
                self.seal(batch)
            for batch in pending:
                await batch.done.wait()
        finally:
            self._flushing -= 1
        await trio.lowlevel.checkpoint()

    # -- the sender's side -------------------------------------------------------------------------

    def sendable(self, now: float) -> list[ProducerBatch]:
        """The first queued batch of each partition that is not muted and whose retry
        backoff (if any) is over."""
        muted = self._muted
        return [queue[0] for tp, queue in self._queued.items()
                if queue and tp not in muted and queue[0].retry_at <= now]

    def take(self, batch: ProducerBatch, mute: bool) -> None:
        """The sender takes ``batch``, the first of its partition's queue, into a request;
        ``mute``: its partition gives nothing more until ``unmute``."""
        tp = (batch.topic, batch.partition)
        queue = self._queued[tp]
        queue.popleft()
        if not queue:
            del self._queued[tp]
        if mute:
            self._muted.add(tp)

    def unmute(self, tp: PartitionKey) -> None:
        self._muted.discard(tp)

    def mute(self, tp: PartitionKey) -> None:
        """Hold ``tp``'s batches back, as a batch of it in flight does."""
        self._muted.add(tp)

    def requeue(self, batch: ProducerBatch) -> None:
        """A batch to retry: back at the front, before the later batches of its partition."""
        self._queued.setdefault((batch.topic, batch.partition), deque()).appendleft(batch)

    def next_retry(self, now: float) -> float | None:
        """When the first queued batch waiting for its retry backoff may go."""
        return min((b.retry_at for q in self._queued.values() for b in q if b.retry_at > now),
                   default=None)

    def first_deadline(self) -> float:
        """The earliest delivery deadline of the unfinished batches (inf: none)."""
        return min((b.deadline for b in self._unfinished), default=math.inf)

    def unsent(self) -> Iterator[ProducerBatch]:
        """The queued batches, partition by partition in order."""
        for queue in self._queued.values():
            yield from queue

    def split(self, batch: ProducerBatch) -> None:
        """The broker found ``batch`` too large (its ``message.max.bytes`` is below our
        ``batch_size``): queue its records again as two halves, in order, as Kafka's
        producer does.  A half may split again; a single record too large fails."""
        parent = RecordBatch(batch.sealed_data())
        try:
            records = parent.decode()
        except TrilogError as exc:  # cannot happen with our own bytes; never kill the sender
            self.complete(batch, error=exc)
            return
        cut = len(records) // 2
        halves = []
        first_sequence = parent.base_sequence
        for start, part in ((0, records[:cut]), (cut, records[cut:])):
            # The halves carry the parent's sequence numbers, which were never written.
            builder = RecordBatchBuilder(
                compression_type=self._codec, producer_id=parent.producer_id,
                producer_epoch=parent.producer_epoch,
                is_transactional=parent.is_transactional,
                base_sequence=-1 if first_sequence < 0 else
                (first_sequence + start) % _SEQUENCE_MOD)
            for record in part:
                builder.append(record.timestamp, record.key, record.value, record.headers)
            half = ProducerBatch(batch.topic, batch.partition, builder, batch.created,
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
        queue = self._queued.setdefault((batch.topic, batch.partition), deque())
        queue.appendleft(halves[1])
        queue.appendleft(halves[0])

    # -- outcomes --------------------------------------------------------------------------------

    def complete(self, batch: ProducerBatch, base_offset: int = -1,
                 error: BaseException | None = None, log_append_time: int = -1) -> None:
        """Set a batch's outcome (once: a later call does nothing)."""
        if batch.done.is_set():
            return
        batch.base_offset = base_offset
        batch.error = error
        batch.log_append_time = log_append_time
        if error is not None and batch.halves is None:
            self._stats.record_errors += len(batch.builder)
        self._finish(batch)

    def _finish(self, batch: ProducerBatch) -> None:
        """A batch's outcome is known: wake its deliveries, give its memory back, call back."""
        batch.done.set()
        self._unfinished.discard(batch)
        if batch.error is not None and batch.halves is None and not self.closed:
            if self._transactions is not None:
                self._transactions.batch_failed(batch)
            elif self._idempotence.batch_failed(batch):
                self._wakeup.set()  # the sender closes the sequence gap before anything else
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
                    self._on_delivery(record_outcome(batch, index))
                except Exception:
                    log.exception("on_delivery callback failed")

    def abort_undrained(self, error: BaseException) -> None:
        """Fail with ``error`` every batch the sender has not taken: the open ones, and the
        queued ones (their sequence numbers given back, ``unsent_dropped``).  Those in
        flight finish as their answers say.  For a transaction that ends without them."""
        if not (self._open or self._queued):
            return
        for tp, batch in list(self._open.items()):
            del self._open[tp]
            if self.sticky_batches.get(batch.topic) is batch:
                del self.sticky_batches[batch.topic]
            if self._custom_partitioner is None:
                self._partitioner.batch_done(batch.topic, batch.partition)
            self.complete(batch, error=error)
        queued, self._queued = self._queued, {}
        for queue in queued.values():
            if self._transactions is not None:
                self._transactions.unsent_dropped(list(queue))
            for batch in queue:
                self.complete(batch, error=error)

    def fail_all(self, error: BaseException) -> None:
        """Fail every unfinished batch and close: every later ``append`` raises
        ``ProducerClosedError`` (used when the producer closes or cannot go on)."""
        self.closed = True
        self.sticky_batches.clear()  # every send now takes the path that checks closed
        for batch in list(self._unfinished):
            self.complete(batch, error=error)
        self._open.clear()
        self._queued.clear()
