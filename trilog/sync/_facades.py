"""Blocking twins of the trio client: ``Producer``, ``Consumer``, ``SimpleConsumer`` and
``ConsumerConnector``; ``end_transactions``, a transaction's second phase.

Same arguments as ``trilog.open_producer`` / ``open_consumer`` / ``open_simple_consumer`` /
``open_consumer_connector``; every method
blocks the calling thread until the loop thread has the answer, except ``Producer.send``,
which queues the record for the loop thread and returns (see ``_Outbox``).  Thread-safe
(all calls run on the one trio loop), fork-safe (see ``_portal``), context managers with
``close()``.  Exceptions cross from the loop thread unchanged.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Iterator, Self, Sequence, Unpack

import trio

from trilog.client import (
    LATEST,
    BufferFullError,
    ConsumerGroupMetadata,
    ConsumerOptions,
    ConsumerRecord,
    KafkaConsumerOptions,
    OffsetAndTimestamp,
    TopicPartition,
    Delivery,
    FetchedRecords,
    MessageStream,
    OffsetAndMetadata,
    PreparedTransaction,
    ProducerClosedError,
    ProducerConfig,
    ProducerOptions,
    RecordMetadata,
    SimpleConsumerOptions,
    TopicFilter,
    end_transaction,
    open_client,
    open_consumer,
    open_consumer_connector,
    open_producer,
    open_simple_consumer,
)
from trilog.client import Consumer as AsyncConsumer
from trilog.client._settings import called_as, config_from_options
from trilog.client.producer import Headers
from trilog.errors import UnknownTopicOrPartitionError
from trilog.sync._portal import Portal

log = logging.getLogger("trilog.sync")


def _open(facade: str, opener: Callable[..., Any], *args: Any, **options: Any) -> Any:
    """``opener(*args, **options)``, its messages about keywords naming the function the
    caller used (``trilog.sync.Producer()``, not ``open_producer()``)."""
    token = called_as.set(f"trilog.sync.{facade}")
    try:
        return opener(*args, **options)
    finally:
        called_as.reset(token)


class _Facade:
    _portal: Portal

    def close(self, timeout: float | None = None) -> None:
        """Close (a producer flushes first) and release the loop thread.  Idempotent.
        ``timeout``: at most this many seconds (kafka-python's ``close(timeout=)``); then
        the closing is cut short."""
        self._portal.close(timeout)

    @property
    def closed(self) -> bool:
        return self._portal.closed

    def _statistics(self, read: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``read()`` in the loop thread; once closed nothing changes them: read here."""
        if self.closed:
            return read()
        return self._portal.run_sync(read)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


#: guards every ``SyncDelivery``'s callbacks (rarely contended: taken to add one, and once
#: when a watched delivery finishes)
_CALLBACKS = threading.Lock()


class SyncDelivery:
    """The blocking view of a ``Delivery``: ``get(timeout=None) -> RecordMetadata``, and
    kafka-python's ``FutureRecordMetadata`` methods (``add_callback``, ``add_errback``,
    ``is_done``, ``succeeded()``, ``failed()``, ``value``, ``exception``).

    A record from ``Producer.send`` reaches the producer a moment after ``send`` returns
    (see ``_Outbox``); until then its delivery is pending, and an error of the send itself
    (an unknown topic, a record too large, a closed producer) is raised by ``get``.
    """

    __slots__ = ("_delivery", "_error", "_outbox", "_portal", "_callbacks", "_handed",
                 "_outcome")

    def __init__(self, delivery: Delivery | None, portal: Portal,
                 outbox: _Outbox | None = None) -> None:
        self._delivery = delivery
        self._error: BaseException | None = None
        self._portal = portal
        self._outbox = outbox
        #: (is an errback, function) waiting for the outcome; None: nobody asked
        self._callbacks: list[tuple[bool, Callable[[Any], Any]]] | None = None
        #: set by the outbox when it hands the record over (only when callbacks wait)
        self._handed: trio.Event | None = None
        #: once the callbacks have run: (failed, the exception or the metadata)
        self._outcome: tuple[bool, Any] | None = None

    def done(self) -> bool:
        if self._delivery is None:
            return self._error is not None
        return self._delivery.done()

    # -- kafka-python's FutureRecordMetadata ---------------------------------------------------

    @property
    def is_done(self) -> bool:
        """kafka-python's attribute: ``done()``."""
        return self.done()

    def succeeded(self) -> bool:
        """Done and acknowledged."""
        return self.done() and self._failure() is None

    def failed(self) -> bool:
        """Done and failed."""
        return self.done() and self._failure() is not None

    @property
    def exception(self) -> BaseException | None:
        """The error of a failed delivery; None while pending or once acknowledged."""
        return self._failure() if self.done() else None

    @property
    def value(self) -> RecordMetadata | None:
        """The ``RecordMetadata`` of an acknowledged record; None otherwise."""
        if not self.succeeded():
            return None
        assert self._delivery is not None
        return self._delivery.result()

    def _failure(self) -> BaseException | None:
        if self._error is not None:
            return self._error
        assert self._delivery is not None
        return self._delivery.exception()

    def add_callback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Self:
        """Call ``fn(*args, metadata, **kwargs)`` once the record is acknowledged (at once
        if it is already).  Callbacks run in the facades' loop thread, as kafka-python's
        run in its I/O thread: keep them short, and make no blocking trilog.sync call in
        them; an exception they raise is logged."""
        self._add(False, functools.partial(fn, *args, **kwargs) if args or kwargs else fn)
        return self

    def add_errback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Self:
        """Call ``fn(*args, exception, **kwargs)`` if the delivery fails (as
        ``add_callback``)."""
        self._add(True, functools.partial(fn, *args, **kwargs) if args or kwargs else fn)
        return self

    def _add(self, errback: bool, fn: Callable[[Any], Any]) -> None:
        with _CALLBACKS:
            outcome = self._outcome
            if outcome is None:
                start = self._callbacks is None
                if start:
                    self._callbacks = []
                self._callbacks.append((errback, fn))  # type: ignore[union-attr]
        if outcome is not None:
            failed, result = outcome
            if failed == errback:
                _call(fn, result)
        elif start:
            self._portal.call_soon(lambda: self._portal.spawn(self._watch))

    async def _watch(self) -> None:  # in the loop thread
        if self._delivery is None and self._error is None:  # still in the outbox
            self._handed = trio.Event()
            await self._handed.wait()
        failure = self._error
        metadata = None
        if failure is None:
            assert self._delivery is not None
            try:
                metadata = await self._delivery.wait()
            except Exception as exc:  # noqa: BLE001 - the errbacks get it
                failure = exc
        outcome = (True, failure) if failure is not None else (False, metadata)
        with _CALLBACKS:
            self._outcome = outcome
            callbacks, self._callbacks = self._callbacks or [], []
        for errback, fn in callbacks:
            if errback == outcome[0]:
                _call(fn, outcome[1])

    def _handed_over(self) -> None:  # in the loop thread, by the outbox
        if self._handed is not None:
            self._handed.set()

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait for the acknowledgement; ``TimeoutError`` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._delivery is None and self._error is None:
            assert self._outbox is not None
            self._outbox.wait_handed(self, timeout)
        if self._error is not None:
            raise self._error
        delivery = self._delivery
        assert delivery is not None  # handed over (wait_handed), or the error raised above
        if delivery.done():
            return delivery.result()
        left = float("inf") if deadline is None else max(deadline - time.monotonic(), 0)

        async def wait():
            with trio.fail_after(left):
                return await delivery.wait()

        try:
            return self._portal.run(wait)
        except trio.TooSlowError:
            raise TimeoutError(f"no acknowledgement within {timeout} s") from None


def _call(fn: Callable[[Any], Any], argument: Any) -> None:
    try:
        fn(argument)
    except Exception:  # noqa: BLE001 - one callback's failure must not stop the others
        log.exception("a SyncDelivery callback failed")


class _Outbox:
    """Records on their way from the callers' threads to the producer in the loop thread.

    A hop into the loop costs tens of microseconds, far more than sending a record, so
    ``Producer.send`` only appends to this queue and returns; a drain task in the loop
    thread takes the queue in bursts, hands each record to the producer (``send_nowait``,
    or ``send`` when it must wait for room or for the topic) and attaches the ``Delivery``
    (or the error) to the record's ``SyncDelivery``.  At most ``LIMIT`` records wait here:
    beyond that ``send`` blocks, so a full producer holds its callers back.

    ``put`` counts the records queued and the drain task those handed over, so ``flush``
    waits for exactly what was queued before it, however busy other threads keep the queue.
    """

    LIMIT = 4096

    def __init__(self, portal: Portal, producer) -> None:
        self._portal = portal
        self._producer = producer
        self._changed = threading.Condition()  # records taken or handed over
        self._items: deque = deque()
        self._draining = False  # a drain task is scheduled or running
        self._queued = 0  # records ever put
        self._handed = 0  # records ever handed to the producer (or failed)

    def put(self, item: tuple) -> None:
        self._portal.check()
        with self._changed:
            if len(self._items) >= self.LIMIT:
                self._refuse_loop_thread()
                while len(self._items) >= self.LIMIT:
                    self._changed.wait()
            self._items.append(item)
            self._queued += 1
            if self._draining:
                return
            self._draining = True
        try:
            self._portal.call_soon(self._start_drain)
        except BaseException:
            with self._changed:  # the item stays queued: the next put schedules a drain
                self._draining = False
            raise

    def _start_drain(self) -> None:  # in the loop thread
        self._portal.spawn(self._drain)

    async def _drain(self) -> None:
        producer = self._producer
        batch: list = []
        try:
            while True:
                with self._changed:
                    if not self._items:
                        self._draining = False
                        self._changed.notify_all()
                        return
                    batch = list(self._items)
                    self._items.clear()
                    base = self._handed  # every earlier burst is handed over
                    self._changed.notify_all()  # room for blocked senders
                for i, (topic, value, key, kwargs, sync) in enumerate(batch):
                    try:
                        try:
                            sync._delivery = producer.send_nowait(topic, value, key, **kwargs)
                        except (BufferFullError, UnknownTopicOrPartitionError):
                            # Wait for room, or for the topic's partitions (send does both);
                            # first wake whoever waits on the records handed over so far.
                            self._handed_over(base + i)
                            sync._delivery = await producer.send(topic, value, key, **kwargs)
                    except Exception as exc:  # noqa: BLE001 - the caller's get() raises it
                        sync._error = exc
                    if sync._handed is not None:  # callbacks wait for it
                        sync._handed.set()
                    batch[i] = None
                self._handed_over(base + len(batch))
                batch = []
                await trio.lowlevel.checkpoint()
        except BaseException:  # cancelled (the loop is stopping): fail what was not handed
            with self._changed:
                leftover = [item for item in batch if item is not None] + list(self._items)
                self._items.clear()
                for *_record, sync in leftover:
                    if sync._delivery is None and sync._error is None:
                        sync._error = ProducerClosedError(
                            "the producer closed before this record was handed to it")
                    sync._handed_over()
                self._handed = self._queued  # every record is handed over or failed
                self._draining = False
                self._changed.notify_all()
            raise

    def _handed_over(self, handed: int) -> None:
        """The records up to number ``handed`` (in queue order) are handed over."""
        with self._changed:
            self._handed = handed
            self._changed.notify_all()

    def wait_handed(self, sync: SyncDelivery, timeout: float | None) -> None:
        """Block until ``sync``'s record has been handed to the producer."""
        self._portal.check()
        with self._changed:
            if sync._delivery is None and sync._error is None:
                self._refuse_loop_thread()
            if not self._changed.wait_for(
                    lambda: sync._delivery is not None or sync._error is not None, timeout):
                raise TimeoutError(f"the record was not even queued within {timeout} s")

    def wait_empty(self, timeout: float | None = None) -> bool:
        """Block until every record put before this call has been handed to the producer
        (False: ``timeout`` seconds passed first)."""
        self._portal.check()
        with self._changed:
            ticket = self._queued
            if self._handed < ticket:
                self._refuse_loop_thread()
            return self._changed.wait_for(lambda: self._handed >= ticket, timeout)

    def _refuse_loop_thread(self) -> None:
        if self._portal.in_loop_thread():
            raise RuntimeError("a trilog.sync call that must wait was made from the trio loop "
                               "thread itself (in a callback?): it would wait forever; use "
                               "the async client there")


class Producer(_Facade):
    """``trilog.open_producer`` for threads: ``send`` returns a ``SyncDelivery``.

    With ``transactional_id``, kafka-python's transactional API::

        producer.init_transactions()
        producer.begin_transaction()
        producer.send("out", b"...")
        producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
        producer.commit_transaction()   # or abort_transaction()

    ``send`` outside a transaction raises at once (``TransactionStateError``), as
    kafka-python's; commit and abort take in every record ``send`` queued before them.
    """

    def __init__(self, bootstrap_servers: str | list[str] | None = None,
                 **options: Unpack[ProducerOptions]) -> None:
        self._portal = Portal(_open("Producer", open_producer, bootstrap_servers, **options),
                              "trilog.sync.Producer")
        self._producer = self._portal.value
        self._outbox = _Outbox(self._portal, self._producer)

    def send(self, topic: str, value: Any = None, key: Any = None, *,
             partition: int | None = None, timestamp_ms: int | None = None,
             headers: Headers | None = None) -> SyncDelivery:
        """Queue a record and return at once (see ``_Outbox``); blocks only while the
        producer is full.  Its outcome, and an error of the send itself, come from
        ``SyncDelivery.get``; a key or value of the wrong type raises here."""
        self._portal.check()
        self._producer.check_types(key, value)
        txn = self._producer.transactions
        if txn is not None:  # (the loop thread changes the state only in our calls)
            txn.check_in_transaction(f"send() to {topic}")
        sync = SyncDelivery(None, self._portal, self._outbox)
        fields = {"partition": partition, "timestamp_ms": timestamp_ms, "headers": headers}
        self._outbox.put((topic, value, key, fields, sync))
        return sync

    def send_many(self, records: Iterable[Sequence[Any]]) -> list[SyncDelivery]:
        """Queue many records with one hop into the loop thread (for bulk writers).

        ``records`` are ``(topic, value[, key[, partition[, headers]]])`` tuples; blocks
        while ``buffer_memory`` is full, like ``send``."""
        batch = [tuple(r) + (None,) * (5 - len(r)) for r in records]
        producer = self._producer

        async def send_all() -> list[Delivery]:
            return [await producer.send(topic, value, key, partition=partition, headers=headers)
                    for topic, value, key, partition, headers in batch]

        self._outbox.wait_empty()  # after the records send() queued before
        return [SyncDelivery(d, self._portal) for d in self._portal.run(send_all)]

    def send_and_wait(self, topic: str, value: Any = None, key: Any = None, *,
                      partition: int | None = None, timestamp_ms: int | None = None,
                      headers: Headers | None = None) -> RecordMetadata:
        self._outbox.wait_empty()  # after the records send() queued before
        return self._portal.run(functools.partial(
            self._producer.send_and_wait, topic, value, key, partition=partition,
            timestamp_ms=timestamp_ms, headers=headers))

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every record sent so far is acknowledged or failed;
        ``TimeoutError`` after ``timeout`` seconds (kafka-python's ``flush(timeout=)``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._outbox.wait_empty(timeout):
            raise TimeoutError(f"flush did not finish within {timeout} s")
        left = float("inf") if deadline is None else max(deadline - time.monotonic(), 0)
        flush = self._producer.flush

        async def flush_within() -> None:
            with trio.fail_after(left):
                await flush()

        try:
            self._portal.run(flush_within)
        except trio.TooSlowError:
            raise TimeoutError(f"flush did not finish within {timeout} s") from None

    def close(self, timeout: float | None = None) -> None:
        """Hand over what ``send`` queued, flush, close (see ``_Facade.close``).  With
        ``timeout`` (seconds, kafka-python's ``close(timeout=)``), the records not
        acknowledged by then fail with ``ProducerClosedError``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.closed and not self._portal.forked:
            self._outbox.wait_empty(timeout)
        super().close(None if deadline is None else max(deadline - time.monotonic(), 0))

    def partitions_for(self, topic: str) -> tuple[int, ...]:
        return self._portal.run(self._producer.partitions_for, topic)

    def statistics(self) -> dict[str, Any]:
        """``trilog.Producer.statistics()`` (the last counters once closed)."""
        return self._statistics(self._producer.statistics)

    # -- transactions (kafka-python's names) -------------------------------------------------

    def init_transactions(self) -> None:
        """Once, before the first transaction (fences earlier producers of the id)."""
        self._portal.run(self._producer.init_transactions)

    def begin_transaction(self) -> None:
        self._portal.run_sync(self._producer.begin_transaction)

    def send_offsets_to_transaction(
            self, offsets: Mapping[Any, OffsetAndMetadata | int],
            group_metadata: ConsumerGroupMetadata | str) -> None:
        """Commit a group's ``offsets`` (``{TopicPartition: OffsetAndMetadata or offset}``,
        each the next to read) with the transaction; ``group_metadata``: the consumer's
        ``group_metadata()``, or the group id alone (kafka-python takes either)."""
        self._portal.run(self._producer.send_offsets_to_transaction, dict(offsets),
                         group_metadata)

    def commit_transaction(self) -> None:
        """Send every record queued before, wait for them, commit (``trilog.Producer``'s
        ``commit_transaction`` for the errors)."""
        self._outbox.wait_empty()
        self._portal.run(self._producer.commit_transaction)

    def abort_transaction(self) -> None:
        self._outbox.wait_empty()
        self._portal.run(self._producer.abort_transaction)

    def prepare_transaction(self) -> PreparedTransaction:
        """Send every record queued before and wait for them, but leave the transaction
        open, even at ``close()``: its ids, for ``end_transactions`` to end it from
        anywhere (``trilog.Producer.prepare_transaction``)."""
        self._outbox.wait_empty()
        return self._portal.run(self._producer.prepare_transaction)


def end_transactions(prepared: Iterable[PreparedTransaction], *, commit: bool,
                     bootstrap_servers: str | list[str] | None = None,
                     timeout_s: float = 30.0, **options: Unpack[ProducerOptions]) -> None:
    """The blocking twin of ``trilog.client.end_transaction``: commit (or abort) each
    prepared transaction by its ids, one after the other over one client, without their
    producers (for a Spark driver ending its tasks' transactions).  Takes the producer's
    connection keywords (``zookeeper``, ``client_id``, security...); each transaction's
    retries last up to ``timeout_s``.  The first that fails raises, and the ones after it
    are left as they were."""
    todo = list(prepared)
    if not todo:
        return
    config = config_from_options(ProducerConfig, options, "end_transactions")
    portal = Portal(open_client(bootstrap_servers, zookeeper=config.zookeeper,
                                client_id=config.client_id,
                                request_timeout_ms=config.request_timeout_ms,
                                metadata_max_age_ms=config.metadata_max_age_ms,
                                security=config.security), "trilog.sync.end_transactions")
    client = portal.value

    async def end_all() -> None:
        for one in todo:
            await end_transaction(client, one, commit=commit, timeout_s=timeout_s)

    try:
        portal.run(end_all)
    finally:
        portal.close()


class SimpleConsumer(_Facade):
    """``trilog.open_simple_consumer`` for threads."""

    def __init__(self, bootstrap_servers: str | list[str] | None = None,
                 **options: Unpack[SimpleConsumerOptions]) -> None:
        self._portal = Portal(_open("SimpleConsumer", open_simple_consumer, bootstrap_servers,
                                    **options), "trilog.sync.SimpleConsumer")
        self._consumer = self._portal.value

    def partitions_for(self, topic: str) -> tuple[int, ...]:
        return self._portal.run(self._consumer.partitions_for, topic)

    def statistics(self) -> dict[str, Any]:
        """``trilog.SimpleConsumer.statistics()`` (the last counters once closed)."""
        return self._statistics(self._consumer.statistics)

    def list_topics(self) -> list[str]:
        return self._portal.run(self._consumer.list_topics)

    def fetch(self, topic: str, partition: int = 0, offset: int = 0,
              max_bytes: int | None = None, *, max_wait_ms: int = 0,
              min_bytes: int = 0) -> FetchedRecords:
        """Records are decoded lazily, in the caller's thread, when iterated."""
        return self._portal.run(functools.partial(
            self._consumer.fetch, topic, partition, offset, max_bytes, max_wait_ms=max_wait_ms,
            min_bytes=min_bytes))

    def multifetch(self, requests: Sequence[tuple[str, int, int, int]], *,
                   max_wait_ms: int = 0, min_bytes: int = 0) -> list[FetchedRecords]:
        return self._portal.run(functools.partial(
            self._consumer.multifetch, requests, max_wait_ms=max_wait_ms, min_bytes=min_bytes))

    def offsets_before(self, topic: str, partition: int = 0, time: int = LATEST,
                       max_offsets: int = 1) -> list[int]:
        return self._portal.run(self._consumer.offsets_before, topic, partition, time,
                                max_offsets)

    def iterate(self, topic: str, partition: int = 0, offset: int = 0, *,
                end_offset: int | None = None, max_bytes: int | None = None
                ) -> Iterator[ConsumerRecord]:
        """Follow a partition with long-poll fetches; stop before ``end_offset`` if given.
        A partition that does not exist yet is waited for, as the async ``iterate`` does."""
        position = offset
        while end_offset is None or position < end_offset:
            fetched = self._portal.run(self._consumer.fetch_when_available, topic, partition,
                                       position, max_bytes)
            for record in fetched:
                if end_offset is not None and record.offset >= end_offset:
                    return
                yield record
            position = fetched.next_offset


class SyncMessageStream:
    """A blocking iterator over a group ``MessageStream``."""

    def __init__(self, stream: MessageStream, portal: Portal) -> None:
        self._stream = stream
        self._portal = portal
        self.name = stream.name

    def __iter__(self) -> "SyncMessageStream":
        return self

    def __next__(self) -> ConsumerRecord:
        try:
            return self._portal.run(self._stream.__anext__)
        except StopAsyncIteration:
            raise StopIteration from None

    def mark_processed(self) -> None:
        self._portal.run_sync(self._stream.mark_processed)


class Consumer(_Facade):
    """``trilog.open_consumer`` (Kafka's consumer) for threads, in kafka-python's
    ``KafkaConsumer`` shape: a script moves over by changing its import.

        with trilog.sync.Consumer("orders", group_id="billing",
                                  bootstrap_servers="127.0.0.1:9092") as consumer:
            for record in consumer:
                ...
            batch = consumer.poll(timeout_ms=100, max_records=500)

    Iterating and ``poll`` block; a rebalance listener's methods may be plain functions
    (they run in the loop thread, as kafka-python runs them inside ``poll``).
    """

    def __init__(self, *topics: str | Iterable[str],
                 **options: Unpack[KafkaConsumerOptions]) -> None:
        self._portal = Portal(_open("Consumer", open_consumer, *topics, **options),
                              "trilog.sync.Consumer")
        self._consumer: AsyncConsumer = self._portal.value
        self.config = self._consumer.config

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> ConsumerRecord:
        try:
            return self._portal.run(self._consumer.__anext__)
        except StopAsyncIteration:
            raise StopIteration from None

    def poll(self, timeout_ms: float = 0, max_records: int | None = None
             ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records at hand by partition, waiting up to ``timeout_ms`` for the first."""
        return self._portal.run(functools.partial(
            self._consumer.getmany, timeout_ms=timeout_ms, max_records=max_records))

    def subscribe(self, topics: Iterable[str] = (), pattern: str | None = None,
                  listener: Any = None) -> None:
        self._portal.run_sync(functools.partial(
            self._consumer.subscribe, topics, pattern=pattern, listener=listener))

    def unsubscribe(self) -> None:
        self._portal.run_sync(self._consumer.unsubscribe)

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        self._portal.run_sync(self._consumer.assign, list(partitions))

    def assignment(self) -> set[TopicPartition]:
        return self._portal.run_sync(self._consumer.assignment)

    def subscription(self) -> set[str]:
        return self._portal.run_sync(self._consumer.subscription)

    def pause(self, *partitions: tuple[str, int]) -> None:
        self._portal.run_sync(self._consumer.pause, *partitions)

    def resume(self, *partitions: tuple[str, int]) -> None:
        self._portal.run_sync(self._consumer.resume, *partitions)

    def paused(self) -> set[TopicPartition]:
        return self._portal.run_sync(self._consumer.paused)

    def seek(self, partition: tuple[str, int], offset: int) -> None:
        self._portal.run_sync(self._consumer.seek, partition, offset)

    def seek_to_beginning(self, *partitions: tuple[str, int]) -> None:
        self._portal.run(self._consumer.seek_to_beginning, *partitions)

    def seek_to_end(self, *partitions: tuple[str, int]) -> None:
        self._portal.run(self._consumer.seek_to_end, *partitions)

    def position(self, partition: tuple[str, int]) -> int:
        return self._portal.run(self._consumer.position, partition)

    def highwater(self, partition: tuple[str, int]) -> int | None:
        return self._portal.run_sync(self._consumer.highwater, partition)

    def committed(self, partition: tuple[str, int]) -> int | None:
        return self._portal.run(self._consumer.committed, partition)

    def commit(self, offsets: Any = None) -> None:
        """Commit ``offsets`` (``{partition: OffsetAndMetadata or offset}``), or every
        assigned partition's position."""
        self._portal.run(self._consumer.commit, offsets)

    def beginning_offsets(self, partitions: Iterable[tuple[str, int]]
                          ) -> dict[TopicPartition, int]:
        return self._portal.run(self._consumer.beginning_offsets, list(partitions))

    def end_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int]:
        return self._portal.run(self._consumer.end_offsets, list(partitions))

    def offsets_for_times(self, timestamps: dict[Any, int]
                          ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        return self._portal.run(self._consumer.offsets_for_times, timestamps)

    def topics(self) -> set[str]:
        return self._portal.run(self._consumer.topics)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The member as its group knows it now, for ``send_offsets_to_transaction``."""
        return self._portal.run_sync(self._consumer.group_metadata)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self._portal.run(self._consumer.partitions_for_topic, topic)

    def statistics(self) -> dict[str, Any]:
        """The consumer's ``statistics()`` (the last counters once closed)."""
        return self._statistics(self._consumer.statistics)


class ConsumerConnector(_Facade):
    """``trilog.open_consumer_connector`` (the seeds' group consumer, with streams) for
    threads.

    ``streams`` has the async twin's shape (``{topic: [stream, ...]}`` for ``topics=``, a
    list for ``topic_filter=``) with blocking iterators; each stream may be read from its
    own thread.
    """

    def __init__(self, group_id: str, *, topics: dict[str, int] | None = None,
                 topic_filter: TopicFilter | None = None,
                 **options: Unpack[ConsumerOptions]) -> None:
        opened: Any
        if topic_filter is None and topics is not None:
            opened = _open("ConsumerConnector", open_consumer_connector, group_id,
                           topics=topics, **options)
        elif topics is None and topic_filter is not None:
            opened = _open("ConsumerConnector", open_consumer_connector, group_id,
                           topic_filter=topic_filter, **options)
        else:
            raise ValueError("give exactly one of topics and topic_filter")
        self._portal = Portal(opened, "trilog.sync.ConsumerConnector")
        self._connector = self._portal.value
        streams = self._connector.streams
        if isinstance(streams, dict):
            self.streams: Any = {t: [SyncMessageStream(s, self._portal) for s in ss]
                                 for t, ss in streams.items()}
        else:
            self.streams = [SyncMessageStream(s, self._portal) for s in streams]

    def commit_offsets(self) -> None:
        self._portal.run(self._connector.commit_offsets)

    def statistics(self) -> dict[str, Any]:
        """The group consumer's ``statistics()`` (the last counters once closed)."""
        return self._statistics(self._connector.statistics)

    @property
    def owned(self) -> dict:
        return dict(self._portal.run_sync(lambda: self._connector.owned))
