"""The public producer: ``open_producer`` and the ``Producer`` it yields (seeds 001, 002).

``send`` serializes a record and places it in the open batch of its partition (the
``RecordAccumulator``) and returns a ``Delivery``; the ``Sender`` task in the producer's
nursery sends the batches; ``Idempotence`` numbers them.  This module holds what the
application calls and wires the parts together:

- ``send_nowait`` keeps the per-record fast path here: an unkeyed bytes record goes
  straight into the open batch of its topic's sticky partition (the accumulator's
  ``sticky_batches``), without a call into the accumulator; anything else is its
  ``append``.
- Backpressure: ``send`` waits for room in ``buffer_memory``; ``send_nowait`` raises
  ``BufferFullError``.
- Delivery: every record's ``Delivery`` resolves to ``RecordMetadata`` or fails with the
  broker's error, ``DeliveryTimeoutError`` after ``delivery_timeout_ms``, or
  ``ProducerClosedError`` when the producer is cancelled first.  Nothing fails silently.
- Idempotence is on by default with ``acks="all"`` (Kafka 3's defaults; see
  ``ProducerConfig.guarantees``).  A broker without InitProducerId gets records without
  idempotence (and a warning), unless ``enable_idempotence=True`` was asked for.
- Close: leaving the ``async with`` normally flushes first; cancellation stops at once and
  fails what was not acknowledged with ``ProducerClosedError``.
- Transactions (``transactional_id``, KIP-98): ``init_transactions`` once, then
  ``begin_transaction``, sends, ``send_offsets_to_transaction``, and
  ``commit_transaction`` or ``abort_transaction``; the ``TransactionManager``
  (``_transactions``) holds the state and speaks to the coordinators.  Leaving the ``async
  with`` (normally, or by an exception) aborts a transaction left open; cancellation leaves
  it to the coordinator's ``transaction_timeout_ms``.  Two phases: ``prepare_transaction``
  instead of the commit leaves the transaction open, even at close, for another process
  to end by its ids (``end_transaction``).
- ``statistics()``: plain counters since the producer opened (records and bytes sent, batch
  size, request latency, buffer available, errors, retries), for an application's metrics.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Unpack

import trio

from trilog._concurrency import YieldPacer, unwrap_exception_group
from trilog.client._client import Client, open_client
from trilog.client._settings import config_from_options
from trilog.client.producer._accumulator import RecordAccumulator, Wakeup
from trilog.client.producer._batch import Headers
from trilog.client.producer._config import ProducerConfig, ProducerOptions
from trilog.client.producer._delivery import Delivery, RecordMetadata
from trilog.client.consumer._structs import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    TopicPartition,
)
from trilog.client.producer._errors import (
    BufferFullError,
    ProducerClosedError,
    TransactionAbortedError,
    TransactionStateError,
)
from trilog.client.producer._idempotence import Idempotence
from trilog.client.producer._sender import Sender
from trilog.client.producer._statistics import ProducerStatistics
from trilog.client.producer._transactions import PreparedTransaction, TransactionManager
from trilog.errors import TrilogError, UnsupportedVersionError

log = logging.getLogger("trilog.producer")


class Producer:
    """See the module docstring.  Create with ``open_producer``; use from its trio run.

    ``config`` is its settings; ``client`` the connections and metadata it sends with;
    ``accumulator``, ``sender``, ``idempotence`` and ``transactions`` (None without a
    ``transactional_id``) its parts (see ``trilog.client.producer``).
    """

    def __init__(self, client: Client, config: ProducerConfig) -> None:
        self.config = config
        self.client = client
        self._wakeup = Wakeup()
        self._stats = ProducerStatistics()
        self.idempotence = Idempotence(client, config)
        self.transactions = (
            TransactionManager(client, config, self.idempotence, self._wakeup.set)
            if config.transactional_id is not None else None)
        self.accumulator = RecordAccumulator(config, client.metadata, self.idempotence,
                                             self._stats, self._wakeup, self.transactions)
        self.sender = Sender(client, config, self.accumulator, self.idempotence, self._stats,
                             self._wakeup, self.transactions)
        # The per-record paths read these without a call or an attribute chain (see
        # send_nowait and send).
        self._sticky_batches = self.accumulator.sticky_batches
        self._known_topics = self.accumulator.partitions_by_topic
        self._append = self.accumulator.append
        self._key_serializer = config.key_serializer
        self._value_serializer = config.value_serializer
        self._has_serializers = config.key_serializer is not None or \
            config.value_serializer is not None
        self._linger_s = config.linger_ms / 1000
        self._pacer = YieldPacer()

    @property
    def idempotent(self) -> bool:
        """Whether batches carry a producer id and sequence numbers."""
        return self.idempotence.enabled

    def statistics(self) -> dict[str, Any]:
        """Counters since the producer opened, in the vocabulary of Kafka's producer metrics
        and of the broker's (see docs/client.md, "Statistics"): ``records_sent`` (records
        in batches sent for the first time), ``bytes_sent`` and ``batches_sent`` (every
        attempt), ``batch_size_avg`` (bytes), ``requests`` (Produce requests answered),
        ``request_latency_avg_ms``/``request_latency_max_ms`` (send to answer),
        ``buffer_total_bytes``/``buffer_available_bytes`` (``buffer_memory``),
        ``record_errors`` (records whose delivery failed), ``retries`` (batches sent again).
        """
        return self._stats.snapshot(self.config.buffer_memory, self.accumulator.buffer_used)

    # -- sending -----------------------------------------------------------------------------

    async def send(self, topic: str, value: Any = None, key: Any = None, *,
                   partition: int | None = None, timestamp_ms: int | None = None,
                   headers: Headers | None = None) -> Delivery:
        """Queue a record (async mode); waits while ``buffer_memory`` is full.

        Every call is a cancellation point; while there is room it yields to other tasks
        at most once a millisecond (see ``trilog._concurrency.YieldPacer``).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if topic not in self._known_topics and \
                not self.client.metadata.value.partitions_for(topic):
            await self.client.partitions_for(topic)
        while True:
            try:
                delivery = self.send_nowait(topic, value, key, partition=partition,
                                            timestamp_ms=timestamp_ms, headers=headers)
                break
            except BufferFullError:
                k, v = self._serialize(key, value)
                await self.accumulator.wait_for_room(k, v, headers)
        if self._pacer.due():
            await trio.lowlevel.cancel_shielded_checkpoint()
        return delivery

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
        return self._append(topic, key, value, partition, timestamp_ms, headers)

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, *,
                            partition: int | None = None, timestamp_ms: int | None = None,
                            headers: Headers | None = None) -> RecordMetadata:
        """The sync path: send one record and wait for its acknowledgement."""
        delivery = await self.send(topic, value, key, partition=partition,
                                   timestamp_ms=timestamp_ms, headers=headers)
        self._wakeup.set()  # nobody will fill this batch; do not wait for linger_ms
        if self._linger_s:
            self.accumulator.seal_open(delivery.batch.topic_partition())
        return await delivery.wait()

    async def flush(self) -> None:
        """Wait until everything sent so far is acknowledged or failed."""
        await self.accumulator.flush()

    async def partitions_for(self, topic: str) -> tuple[int, ...]:
        return await self.client.partitions_for(topic)

    # -- transactions ----------------------------------------------------------------------------

    @property
    def transactional(self) -> bool:
        """Whether the producer has a ``transactional_id``."""
        return self.transactions is not None

    def _txn(self, call: str) -> TransactionManager:
        if self.transactions is None:
            raise TransactionStateError(
                f"{call} needs a transactional producer: open it with transactional_id=...")
        return self.transactions

    async def init_transactions(self) -> None:
        """Once, before the first transaction: get the producer id and epoch of
        ``transactional_id`` from its coordinator.  Fences every earlier producer with the
        same id, and aborts a transaction one of them left open."""
        await self._txn("init_transactions()").init_transactions()

    def begin_transaction(self) -> None:
        """Start a transaction (no request: the first send to each partition adds it)."""
        self._txn("begin_transaction()").begin()

    async def send_offsets_to_transaction(
            self, offsets: Mapping[TopicPartition | tuple[str, int], OffsetAndMetadata | int],
            group_metadata: ConsumerGroupMetadata | str) -> None:
        """Commit a consumer group's ``offsets`` (each the next offset to read) as part of
        the transaction: they count only if it commits.  ``group_metadata`` is the
        consumer's ``group_metadata()`` (the coordinator refuses the offsets of a member
        the group has moved on from, KIP-447), or a group id alone."""
        await self._txn("send_offsets_to_transaction()").send_offsets(offsets, group_metadata)

    async def commit_transaction(self) -> None:
        """Send what the transaction holds, wait for every record, then commit it.  Raises
        ``AbortableTransactionError`` when something in it failed (``abort_transaction``
        then), or a fatal error (``ProducerFencedError``, ...)."""
        txn = self._txn("commit_transaction()")
        txn.begin_commit()
        await self.accumulator.flush()  # seals the open batches at once: no send joins now
        await txn.end_transaction(commit=True)

    async def prepare_transaction(self) -> PreparedTransaction:
        """The first phase of a two-phase commit: send what the transaction holds and wait
        for every record, as ``commit_transaction`` does, but do not end it.  Returns its
        ids; with them ``end_transaction(client, prepared, commit=...)`` commits or aborts
        it from anywhere.  The transaction stays open: closing this producer does not abort
        it (nor can it begin another until ``commit_transaction`` or ``abort_transaction``
        ends this one).  Left unended, the coordinator aborts it after
        ``transaction_timeout_ms``, and a producer of the same id aborts it at its
        ``init_transactions``.  Raises as ``commit_transaction`` does when something in it
        failed."""
        txn = self._txn("prepare_transaction()")
        txn.begin_prepare()
        await self.accumulator.flush()  # seals the open batches at once: no send joins now
        return txn.prepared()

    async def abort_transaction(self) -> None:
        """Abort the transaction: the records not sent yet fail with
        ``TransactionAbortedError``, those sent are never read by read_committed consumers,
        nor are its offsets committed."""
        txn = self._txn("abort_transaction()")
        txn.begin_abort()
        self.accumulator.abort_undrained(TransactionAbortedError(
            f"transactional id {txn.transactional_id!r}: the transaction was aborted before "
            "this record was sent"))
        await self.accumulator.flush()  # what is in flight finishes first
        await txn.end_transaction(commit=False)

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


def open_producer(bootstrap_servers: str | list[str] | None = None,
                  **options: Unpack[ProducerOptions]) -> AbstractAsyncContextManager[Producer]:
    """A producer for the body of the ``async with`` (see the module docstring).

    ``bootstrap_servers`` (``"host:port[,host:port]"``) or ``zookeeper``
    (``"host:port[/chroot]"``) says where the cluster is; ``security_protocol``,
    ``ssl_*`` and ``sasl_*`` (kafka-python's names, ``ClientSecurity.from_options``) how
    to connect to it; the other settings are ``ProducerConfig``'s.  An unknown keyword is
    a ``TypeError`` and a bad value a ``ValueError``, here, before anything connects.

    Kafka 3's defaults: ``acks="all"`` and idempotence (see ``producer_guarantees``);
    ``retries`` is bounded by ``delivery_timeout_ms`` only.
    """
    return _running_producer(bootstrap_servers,
                             config_from_options(ProducerConfig, options, "open_producer"))


@asynccontextmanager
async def _running_producer(bootstrap_servers: str | list[str] | None,
                            config: ProducerConfig) -> AsyncIterator[Producer]:
    with unwrap_exception_group():
        async with open_client(bootstrap_servers, zookeeper=config.zookeeper,
                               client_id=config.client_id,
                               request_timeout_ms=config.request_timeout_ms,
                               bootstrap_timeout_ms=config.bootstrap_timeout_ms,
                               metadata_max_age_ms=config.metadata_max_age_ms,
                               security=config.security) as client:
            producer = Producer(client, config)
            if producer.idempotent and producer.transactions is None:
                try:
                    await producer.idempotence.init_producer_id()
                except UnsupportedVersionError as exc:
                    if config.guarantees.explicit:
                        raise
                    log.warning("producer: the broker cannot make producers idempotent "
                                "(%s); producing without idempotence", exc)
                    producer.idempotence.enabled = False
            async with trio.open_nursery() as nursery:
                nursery.start_soon(producer.sender.run)
                if producer.transactions is not None:
                    nursery.start_soon(producer.transactions.run)
                try:
                    try:
                        yield producer
                    except Exception:
                        # Not cancelled: do not leave a transaction open (read_committed
                        # consumers would wait for its timeout); a bounded attempt.
                        with trio.move_on_after(config.request_timeout_ms / 1000):
                            await _abort_left_open(producer)
                        raise
                    await _abort_left_open(producer)
                    await producer.flush()
                finally:
                    producer.accumulator.fail_all(ProducerClosedError(
                        "the producer was closed (or cancelled) before this record was "
                        "acknowledged; it may or may not have been written"))
                    nursery.cancel_scope.cancel()


async def _abort_left_open(producer: Producer) -> None:
    """Closing: abort the transaction the application left open, as Kafka's producer does
    (a failure is logged: the coordinator aborts it after ``transaction_timeout_ms``)."""
    txn = producer.transactions
    if txn is None or not txn.ongoing:
        return
    log.info("producer: transactional id %s: aborting the transaction left open at close",
             txn.transactional_id)
    try:
        await producer.abort_transaction()
    except TrilogError as exc:
        log.warning("producer: transactional id %s: could not abort the transaction left "
                    "open at close: %s", txn.transactional_id, exc)
