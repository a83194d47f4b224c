"""What both connectors share: streams, positions, commits and the fetcher.

A connector owns its streams (``_streams.MessageStream``) and their queues, the partitions
the member owns (``owned``: which stream each feeds), a ``SubscriptionState`` with where each
is fetched from and what the application finished with, the commits of those offsets to its
stores, and a ``Fetcher`` (Kafka's consumer's: one fetch task per leader broker), whose
answers go on the owning stream's bounded queue.  A mode (``_zookeeper``, ``_broker``)
decides only *which* partitions the member owns: it gives them up through ``_revoke`` (the
queues are emptied) and takes new ones through ``_assign`` (positions read before it
returns).

A record counts as *processed* once the application asks its stream for the next one (or
calls ``stream.mark_processed()``): only processed offsets are ever committed, so a consumer
cancelled in the middle of a record restarts from that record (at least once).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any, Generic, Protocol, TypeVar, cast

import trio

from trilog.client._client import Client
from trilog.client._isolation import isolation_level_id
from trilog.client._simple_consumer import ConsumerRecord, FetchedRecords, FetchStatistics
from trilog.client.connector._config import ConnectorSubscription, GroupConfig
from trilog.client.connector._streams import Chunk, FilterStreams, MessageStream, TopicStreams
from trilog.client.consumer import (
    Fetcher,
    FetchSettings,
    PartitionState,
    SubscriptionState,
    TopicPartition,
)
from trilog.client.consumer._coordinator import tell_listener
from trilog.errors import TrilogError

log = logging.getLogger("trilog.consumer.group")

#: the shape of a connector's ``streams``: by topic (``topics=``) or a list (a topic filter)
Streams = TypeVar("Streams", TopicStreams, FilterStreams)


class OffsetStore(Protocol):
    """Where a group's offsets go: ``{(topic, partition): next offset to consume}``."""

    async def commit(self, offsets: dict[tuple[str, int], int]) -> None: ...

    async def fetch(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]: ...


class _Outlet:
    """A stream's queue, as its connector holds it: the sending end for the fetcher, and a
    receiving end of its own to empty the queue when the partitions change hands."""

    __slots__ = ("receive", "send")

    def __init__(self, send: trio.MemorySendChannel[Chunk],
                 receive: trio.MemoryReceiveChannel[Chunk]) -> None:
        self.send = send
        self.receive = receive

    def drain(self) -> None:
        while True:
            try:
                self.receive.receive_nowait()
            except trio.WouldBlock:
                return


class GroupConsumerConnector(Generic[Streams]):
    """The member's streams, its partitions (``owned``: ``{(topic, partition): stream
    index}``), their positions and processed offsets, commits, and fetcher.

    ``streams`` is ``{topic: [MessageStream, ...]}`` for ``topics=``, a list of
    ``num_streams`` streams for a topic filter (the type parameter says which).

    ``generation`` counts local assignments: chunks queued under an older one are dropped by
    the streams.  ``poll_expired`` is the stream whose application held a record too long
    (broker coordination's ``max_poll_interval_ms``): the member is out of its group until
    that stream is asked for its next record.  ``rebalances`` counts completed ones.
    ``statistics()`` gives the member's counters.
    """

    def __init__(self, wanted: ConnectorSubscription, config: GroupConfig,
                 client: Client) -> None:
        self.config = config
        self.group_id = wanted.group_id
        self._wanted = wanted
        self._client = client
        self._stores: list[OffsetStore] = []
        self._outlets: dict[MessageStream, _Outlet] = {}
        streams: TopicStreams | FilterStreams
        if wanted.topics is not None:
            streams = {topic: [self._new_stream(f"{topic}-{n}") for n in range(count)]
                       for topic, count in wanted.topics.items()}
        else:
            streams = [self._new_stream(f"filter-{n}") for n in range(config.num_streams)]
        # The subscription decides the shape; the opener's overloads tell the type checker.
        self.streams: Streams = cast(Streams, streams)
        self.generation = 0
        self.owned: dict[tuple[str, int], int] = {}
        self._subscription = sub = SubscriptionState()
        if config.listener is not None:
            sub.listener = config.listener
        # The subscription's dicts, for the streams' per-record path.
        self._processed_offsets = sub.processed  # next offset to consume
        self._committed = sub.committed
        self._commit_lock = trio.Lock()
        self._failure: BaseException | None = None
        # Positions are read as partitions are assigned (``_assign``), not by the fetcher:
        # a connector's ``async with`` body starts with them known.
        self._fetcher = Fetcher(
            client, sub, FetchSettings(
                max_wait_ms=config.fetch_max_wait_ms, min_bytes=1,
                partition_max_bytes=config.fetch_max_bytes, max_bytes=None,
                retry_backoff_ms=config.retry_backoff_ms, reset_time=config.start_offset,
                reset_setting=f"auto_offset_reset={config.auto_offset_reset!r}",
                isolation_level=isolation_level_id(config.isolation_level)),
            deliver=self._deliver, fail=self._fail, committed=self._fetch_committed,
            statistics=FetchStatistics(), lazy_positions=False)
        self.rebalances = 0
        self.poll_expired: MessageStream | None = None

    def statistics(self) -> dict[str, Any]:
        """Counters since the consumer opened (see docs/consumer.md, "Statistics"): the
        simple consumer's (``records_consumed``, ``bytes_consumed``, ``fetches``,
        ``fetch_latency_avg_ms``/``_max_ms``, ``lag`` and ``lag_max``, here of the partitions
        owned now), ``rebalances`` completed and ``assigned_partitions``."""
        return {**self._fetcher.statistics.as_dict(self.owned), "rebalances": self.rebalances,
                "assigned_partitions": len(self.owned)}

    def _new_stream(self, name: str) -> MessageStream:
        send, receive = trio.open_memory_channel[Chunk](self.config.queued_max_chunks)
        stream = MessageStream(self, name, receive, self.config.consumer_timeout_s)
        self._outlets[stream] = _Outlet(send, receive.clone())
        return stream

    @property
    def consumer_id(self) -> str:
        raise NotImplementedError

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """The rebalance loop and the fetcher: ``task_status.started()`` after the first
        assignment."""
        raise NotImplementedError

    async def close(self) -> None:
        """Commit processed offsets and let go of the partitions (clean shutdown), once
        ``run`` has ended."""
        raise NotImplementedError

    # -- what the streams tell us ------------------------------------------------------------

    def record_processed(self, record: ConsumerRecord) -> None:
        tp = (record.topic, record.partition)
        if tp in self.owned:
            self._processed_offsets[tp] = record.offset + 1  # type: ignore[index]

    def resume_polling(self) -> None:
        """The application asks for records again after ``poll_expired`` was set."""
        self.poll_expired = None

    # -- assignments -------------------------------------------------------------------------

    def _rebalance_completed(self) -> None:
        self.rebalances += 1

    def _revoke(self) -> dict[tuple[str, int], int]:
        """Give up every partition (after committing); returns what was owned.  Queued
        records of those partitions are dropped."""
        owned, self.owned = self.owned, {}
        self._subscription.assign(())
        self._dropped()
        return owned

    def _dropped(self) -> None:
        """Partitions left ``owned``: what the streams hold of them is stale."""
        self.generation += 1
        for outlet in self._outlets.values():
            outlet.drain()

    async def _assign(self, mine: dict[tuple[str, int], int]) -> None:
        """Take ``mine`` (``{(topic, partition): stream index}``): read where to start,
        then let the fetcher fetch them."""
        self.generation += 1
        self.owned = mine
        sub = self._subscription
        sub.assign(TopicPartition(*tp) for tp in mine)
        await self._fetcher.resolve_positions(list(sub.assignment.values()))
        sub.wake_fetcher()

    async def _tell_listener(self, callback: str, partitions: set[TopicPartition]) -> None:
        await tell_listener(self._subscription.listener, callback, partitions, self._fail,
                            self.consumer_id)

    def _fail(self, exc: BaseException) -> None:
        """A connector has no poll to raise at: the error ends it (out of ``run``)."""
        self._failure = exc
        raise exc

    # -- offsets -----------------------------------------------------------------------------

    async def commit_offsets(self) -> None:
        """Commit the offsets the application finished processing (only changed ones)."""
        async with self._commit_lock:
            changed: dict[tuple[str, int], int] = {
                tp: off for tp, off in self._processed_offsets.items()
                if self._committed.get(tp) != off}
            if not changed:
                await trio.lowlevel.checkpoint()
                return
            for store in self._stores:
                await store.commit(changed)
            self._committed.update(changed)  # type: ignore[arg-type]

    async def _auto_committer(self) -> None:
        while True:
            await trio.sleep(self.config.auto_commit_interval_ms / 1000)
            try:
                await self.commit_offsets()
            except (TrilogError, OSError) as exc:
                log.warning("auto-commit failed: %s", exc)

    async def _fetch_committed(self, partitions: list[tuple[str, int]]
                               ) -> dict[tuple[str, int], int]:
        """The committed offsets: with two stores (dual commit), the larger."""
        committed: dict[tuple[str, int], int] = {}
        for store in self._stores:
            for tp, off in (await store.fetch(partitions)).items():
                committed[tp] = max(off, committed.get(tp, -1))
        return committed

    # -- the fetcher's answers -----------------------------------------------------------------

    def _deliver(self, st: PartitionState, fetched: FetchedRecords) -> Awaitable[None] | None:
        """The fetcher's delivery: ``fetched`` goes on its stream's queue, tagged with the
        assignment it was fetched for (the fetcher waits while the queue is full)."""
        if st.revoking:
            return None  # being given up: what was fetched goes to the next owner
        index = self.owned[st.tp]
        stream = self.streams[st.tp[0]][index] if isinstance(self.streams, dict) else \
            self.streams[index]
        return self._outlets[stream].send.send((self.generation, fetched))


_Connector = TypeVar("_Connector", bound=GroupConsumerConnector[Any])


@asynccontextmanager
async def running(connector: _Connector) -> AsyncIterator[_Connector]:
    """Run ``connector`` (its rebalance loop and fetcher, in a nursery of their own) for
    the body, from its first assignment on; then stop it and close it cleanly (commit
    processed offsets, let go of partitions), within 10 s even when cancelled."""
    try:
        async with trio.open_nursery() as nursery:
            try:
                await nursery.start(connector.run)
                yield connector
            finally:
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            try:
                await connector.close()
            except (TrilogError, OSError) as exc:
                log.warning("consumer %s: clean shutdown failed: %s",
                            connector.consumer_id, exc)
