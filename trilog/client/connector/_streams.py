"""A group consumer's streams: async iterators over the records of some of its partitions.

A connector (``_base.GroupConsumerConnector``) owns each stream's queue: its fetchers
put ``(generation, FetchedRecords)`` chunks in, and it empties the queue when it gives the
partitions up.  The stream reads the queue and tells its owner (``StreamOwner``) what the
application did: which record it finished with, and that it asks for records again after
holding one too long.  Neither reaches into the other's state.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import trio

from trilog._concurrency import YieldPacer
from trilog.client._simple_consumer import ConsumerRecord, FetchedRecords

#: what a fetcher queues for a stream: the assignment generation it fetched for, and records
Chunk = tuple[int, FetchedRecords]


class StreamOwner(Protocol):
    """What a stream needs from its connector."""

    @property
    def generation(self) -> int:
        """The current assignment: chunks fetched for another one are stale."""
        ...

    @property
    def poll_expired(self) -> MessageStream | None:
        """The stream whose application held a record past ``max_poll_interval_ms``."""
        ...

    def record_processed(self, record: ConsumerRecord) -> None:
        """The application finished with ``record``: its offset may be committed."""
        ...

    def resume_polling(self) -> None:
        """The ``poll_expired`` stream is asked for a record again."""
        ...


class MessageStream:
    """An async iterator over the records of the partitions assigned to one consumer thread.

    Iteration ends after ``consumer_timeout_ms`` without a record (never, by default).
    """

    def __init__(self, owner: StreamOwner, name: str,
                 chunks: trio.MemoryReceiveChannel[Chunk], timeout_s: float) -> None:
        self._owner = owner
        self.name = name
        self._receive = chunks
        self._timeout_s = timeout_s
        self._chunk: Iterator[ConsumerRecord] | None = None  # the current FetchedRecords
        self._chunk_generation = -1
        self._last: ConsumerRecord | None = None
        self._pacer = YieldPacer()
        self._holding = False
        self._handed = 0

    @property
    def holding(self) -> bool:
        """Whether the application has a record from this stream and has not asked for the
        next one yet (what ``max_poll_interval_ms`` watches)."""
        return self._holding

    @property
    def records_handed(self) -> int:
        """How many records this stream has handed out."""
        return self._handed

    def __aiter__(self) -> MessageStream:
        return self

    async def __anext__(self) -> ConsumerRecord:
        """The next record.  Every call is a cancellation point; while records are at hand
        it yields to other tasks at most once a millisecond (see ``YieldPacer``)."""
        self.mark_processed()
        self._holding = False
        owner = self._owner
        if owner.poll_expired is self:  # the stream that held a record too long
            owner.resume_polling()
        while True:
            if self._chunk is not None:
                if self._chunk_generation == owner.generation:
                    record = next(self._chunk, None)
                    if record is not None:
                        self._last = record
                        await trio.lowlevel.checkpoint_if_cancelled()
                        if self._pacer.due():
                            await trio.lowlevel.cancel_shielded_checkpoint()
                        self._holding = True
                        self._handed += 1
                        return record
                self._chunk = None  # used up, or from before a rebalance
            with trio.move_on_after(self._timeout_s) as scope:
                generation, fetched = await self._receive.receive()
            if scope.cancelled_caught:
                raise StopAsyncIteration
            if generation == owner.generation:
                self._chunk = iter(fetched)
                self._chunk_generation = generation

    def mark_processed(self) -> None:
        """Count the record last returned as processed (asking for the next one does)."""
        record, self._last = self._last, None
        if record is not None:
            self._owner.record_processed(record)


#: a connector's ``streams`` with ``topics=``: each topic's streams
TopicStreams = dict[str, list[MessageStream]]
#: a connector's ``streams`` with ``topic_filter=``: ``num_streams`` streams
FilterStreams = list[MessageStream]
