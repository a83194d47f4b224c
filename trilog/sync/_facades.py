"""Blocking twins of the trio client: ``Producer`` and ``SimpleConsumer``.

Same arguments as ``trilog.open_producer`` / ``trilog.open_simple_consumer``; every method
blocks the calling thread until the loop thread has the answer.  Thread-safe (all calls run
on the one trio loop), fork-safe (see ``_portal``), context managers with ``close()``.
Exceptions cross from the loop thread unchanged.
"""

from __future__ import annotations

import functools
from typing import Any, Iterator, Sequence

import trio

from trilog.client import (
    LATEST,
    MessageStream,
    open_consumer,
    BufferFullError,
    ConsumerRecord,
    Delivery,
    FetchedRecords,
    RecordMetadata,
    open_producer,
    open_simple_consumer,
)
from trilog.errors import UnknownTopicOrPartitionError
from trilog.sync._portal import Portal


class _Facade:
    _portal: Portal

    def close(self) -> None:
        """Close (a producer flushes first) and release the loop thread.  Idempotent."""
        self._portal.close()

    @property
    def closed(self) -> bool:
        return self._portal.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


class SyncDelivery:
    """The blocking view of a ``Delivery``: ``get(timeout=None) -> RecordMetadata``."""

    __slots__ = ("_delivery", "_portal")

    def __init__(self, delivery: Delivery, portal: Portal) -> None:
        self._delivery = delivery
        self._portal = portal

    def done(self) -> bool:
        return self._delivery.done()

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait for the acknowledgement; ``TimeoutError`` after ``timeout`` seconds."""
        if self._delivery.done():
            return self._delivery.result()

        async def wait():
            with trio.fail_after(timeout if timeout is not None else float("inf")):
                return await self._delivery.wait()

        try:
            return self._portal.run(wait)
        except trio.TooSlowError:
            raise TimeoutError(f"no acknowledgement within {timeout} s") from None


class Producer(_Facade):
    """``trilog.open_producer`` for threads: ``send`` returns a ``SyncDelivery``."""

    def __init__(self, bootstrap_servers: str | list[str] | None = None, **kwargs: Any) -> None:
        self._portal = Portal(open_producer(bootstrap_servers, **kwargs), "trilog.sync.Producer")
        self._producer = self._portal.value

    def send(self, topic: str, value=None, key=None, **kwargs: Any) -> SyncDelivery:
        """Queue a record; blocks only while ``buffer_memory`` is full."""
        try:
            delivery = self._portal.run_sync(
                functools.partial(self._producer.send_nowait, topic, value, key, **kwargs))
        except (BufferFullError, UnknownTopicOrPartitionError):
            # Wait for room, or for the topic's partitions: the async path does both.
            delivery = self._portal.run(
                functools.partial(self._producer.send, topic, value, key, **kwargs))
        return SyncDelivery(delivery, self._portal)

    def send_many(self, records) -> list[SyncDelivery]:
        """Queue many records with one hop into the loop thread (for bulk writers).

        ``records`` are ``(topic, value[, key[, partition[, headers]]])`` tuples; blocks
        while ``buffer_memory`` is full, like ``send``."""
        batch = [tuple(r) + (None,) * (5 - len(r)) for r in records]
        producer = self._producer

        async def send_all() -> list[Delivery]:
            return [await producer.send(topic, value, key, partition=partition, headers=headers)
                    for topic, value, key, partition, headers in batch]

        return [SyncDelivery(d, self._portal) for d in self._portal.run(send_all)]

    def send_and_wait(self, topic: str, value=None, key=None, **kwargs: Any) -> RecordMetadata:
        return self._portal.run(
            functools.partial(self._producer.send_and_wait, topic, value, key, **kwargs))

    def flush(self) -> None:
        self._portal.run(self._producer.flush)

    def partitions_for(self, topic: str) -> tuple[int, ...]:
        return self._portal.run(self._producer.partitions_for, topic)


class SimpleConsumer(_Facade):
    """``trilog.open_simple_consumer`` for threads."""

    def __init__(self, bootstrap_servers: str | list[str] | None = None, **kwargs: Any) -> None:
        self._portal = Portal(open_simple_consumer(bootstrap_servers, **kwargs),
                              "trilog.sync.SimpleConsumer")
        self._consumer = self._portal.value

    def partitions_for(self, topic: str) -> tuple[int, ...]:
        return self._portal.run(self._consumer.partitions_for, topic)

    def list_topics(self) -> list[str]:
        return self._portal.run(self._consumer.list_topics)

    def fetch(self, topic: str, partition: int = 0, offset: int = 0,
              max_bytes: int | None = None, **kwargs: Any) -> FetchedRecords:
        """Records are decoded lazily, in the caller's thread, when iterated."""
        return self._portal.run(
            functools.partial(self._consumer.fetch, topic, partition, offset, max_bytes, **kwargs))

    def multifetch(self, requests: Sequence[tuple[str, int, int, int]], **kwargs: Any
                   ) -> list[FetchedRecords]:
        return self._portal.run(functools.partial(self._consumer.multifetch, requests, **kwargs))

    def offsets_before(self, topic: str, partition: int = 0, time: int = LATEST,
                       max_offsets: int = 1) -> list[int]:
        return self._portal.run(self._consumer.offsets_before, topic, partition, time,
                                max_offsets)

    def iterate(self, topic: str, partition: int = 0, offset: int = 0, *,
                end_offset: int | None = None, max_bytes: int | None = None
                ) -> Iterator[ConsumerRecord]:
        """Follow a partition with long-poll fetches; stop before ``end_offset`` if given."""
        position = offset
        while end_offset is None or position < end_offset:
            fetched = self.fetch(topic, partition, position, max_bytes,
                                 max_wait_ms=self._consumer.fetch_max_wait_ms,
                                 min_bytes=self._consumer.fetch_min_bytes)
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
    """``trilog.open_consumer`` (the group consumer) for threads.

    ``streams`` has the async twin's shape (``{topic: [stream, ...]}`` for ``topics=``, a
    list for ``topic_filter=``) with blocking iterators; each stream may be read from its
    own thread.
    """

    def __init__(self, group_id: str, **kwargs: Any) -> None:
        self._portal = Portal(open_consumer(group_id, **kwargs), "trilog.sync.Consumer")
        self._connector = self._portal.value
        streams = self._connector.streams
        if isinstance(streams, dict):
            self.streams: Any = {t: [SyncMessageStream(s, self._portal) for s in ss]
                                 for t, ss in streams.items()}
        else:
            self.streams = [SyncMessageStream(s, self._portal) for s in streams]

    def commit_offsets(self) -> None:
        self._portal.run(self._connector.commit_offsets)

    @property
    def owned(self) -> dict:
        return dict(self._portal.run_sync(lambda: self._connector.owned))
