"""What both group-consumer modes share: streams, positions, commits and fetchers.

A connector owns its streams (``_streams.MessageStream``) and their queues, the partitions
the member owns (``owned``), where each is fetched from and what the application finished
with, the commits of those offsets to its stores, and one fetcher task per leader broker.
A mode (``_group_zookeeper``, ``_group_broker``) decides only *which* partitions the member
owns: it calls ``_revoke`` before giving them up and ``_assign`` to take new ones.

A record counts as *processed* once the application asks its stream for the next one (or
calls ``stream.mark_processed()``): only processed offsets are ever committed, so a consumer
cancelled in the middle of a record restarts from that record (at least once).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Generic, Protocol, TypeVar, cast

import trio

from trilog.client._client import Client
from trilog.client._consumer import (
    ConsumerRecord,
    FetchedRecords,
    FetchStatistics,
    fetch_from_node,
    offset_at,
)
from trilog.client._group_config import GroupConfig
from trilog.client._metadata import Node
from trilog.client._streams import Chunk, FilterStreams, MessageStream, TopicStreams
from trilog.errors import (
    ApiError,
    NetworkError,
    OffsetOutOfRangeError,
    ProtocolError,
    RequestTimedOutError,
    TrilogError,
)

log = logging.getLogger("trilog.consumer.group")

TopicPartition = tuple[str, int]
#: the shape of a connector's ``streams``: by topic (``topics=``) or a list (a topic filter)
Streams = TypeVar("Streams", TopicStreams, FilterStreams)


class OffsetStore(Protocol):
    """Where a group's offsets go: ``{(topic, partition): next offset to consume}``."""

    async def commit(self, offsets: dict[TopicPartition, int]) -> None: ...

    async def fetch(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]: ...


class _Outlet:
    """A stream's queue, as its connector holds it: the sending end for the fetchers, and a
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
    index}``), their positions and processed offsets, commits, and fetchers.

    ``streams`` is ``{topic: [MessageStream, ...]}`` for ``topics=``, a list of
    ``num_streams`` streams for a topic filter (the type parameter says which).

    ``generation`` counts local assignments: chunks queued under an older one are dropped by
    the streams.  ``poll_expired`` is the stream whose application held a record too long
    (broker coordination's ``max_poll_interval_ms``): the member is out of its group until
    that stream is asked for its next record.  ``rebalances`` counts completed ones.
    ``statistics()`` gives the member's counters.
    """

    def __init__(self, config: GroupConfig, client: Client) -> None:
        self.config = config
        self.group_id = config.group_id
        self._client = client
        self._stores: list[OffsetStore] = []
        self._outlets: dict[MessageStream, _Outlet] = {}
        streams: TopicStreams | FilterStreams
        if config.topics is not None:
            streams = {topic: [self._new_stream(f"{topic}-{n}") for n in range(count)]
                       for topic, count in config.topics.items()}
        else:
            streams = [self._new_stream(f"filter-{n}") for n in range(config.num_streams)]
        # The config decides the shape; ``open_consumer``'s overloads tell the type checker.
        self.streams: Streams = cast(Streams, streams)
        self.generation = 0
        self.owned: dict[TopicPartition, int] = {}
        self._positions: dict[TopicPartition, int] = {}  # next offset to fetch
        self._processed_offsets: dict[TopicPartition, int] = {}  # next offset to consume
        self._committed: dict[TopicPartition, int] = {}
        self._commit_lock = trio.Lock()
        self._fetch_scope: trio.CancelScope | None = None
        self.rebalances = 0
        self._rebalanced = trio.Event()
        self.poll_expired: MessageStream | None = None
        self._fetch_stats = FetchStatistics()

    def statistics(self) -> dict[str, Any]:
        """Counters since the consumer opened (see docs/consumer.md, "Statistics"): the
        simple consumer's (``records_consumed``, ``bytes_consumed``, ``fetches``,
        ``fetch_latency_avg_ms``/``_max_ms``, ``lag`` and ``lag_max``, here of the partitions
        owned now), ``rebalances`` completed and ``assigned_partitions``."""
        return {**self._fetch_stats.as_dict(self.owned), "rebalances": self.rebalances,
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
        """The rebalance loop: ``task_status.started()`` after the first assignment."""
        raise NotImplementedError

    async def close(self) -> None:
        """Commit processed offsets and let go of the partitions (clean shutdown)."""
        raise NotImplementedError

    # -- what the streams tell us ------------------------------------------------------------

    def record_processed(self, record: ConsumerRecord) -> None:
        tp = (record.topic, record.partition)
        if tp in self.owned:
            self._processed_offsets[tp] = record.offset + 1

    def resume_polling(self) -> None:
        """The application asks for records again after ``poll_expired`` was set."""
        self.poll_expired = None

    # -- assignments -------------------------------------------------------------------------

    def _rebalance_completed(self) -> None:
        self.rebalances += 1
        self._rebalanced.set()
        self._rebalanced = trio.Event()

    async def wait_rebalanced(self) -> None:
        """Wait for the next completed rebalance (tests and tools)."""
        await self._rebalanced.wait()

    def _revoke(self) -> dict[TopicPartition, int]:
        """Give up every partition (after stopping the fetchers and committing); returns
        what was owned.  Queued records of those partitions are dropped."""
        owned, self.owned = self.owned, {}
        self.generation += 1
        for outlet in self._outlets.values():
            outlet.drain()
        return owned

    async def _assign(self, mine: dict[TopicPartition, int], nursery: trio.Nursery) -> None:
        """Take ``mine`` (``{(topic, partition): stream index}``): read where to start, and
        start the fetchers."""
        self.generation += 1
        self.owned = mine
        await self._load_positions(list(mine))
        self._start_fetchers(nursery)

    # -- offsets -----------------------------------------------------------------------------

    async def commit_offsets(self) -> None:
        """Commit the offsets the application finished processing (only changed ones)."""
        async with self._commit_lock:
            changed = {tp: off for tp, off in self._processed_offsets.items()
                       if self._committed.get(tp) != off}
            if not changed:
                await trio.lowlevel.checkpoint()
                return
            for store in self._stores:
                await store.commit(changed)
            self._committed.update(changed)

    async def _auto_committer(self) -> None:
        while True:
            await trio.sleep(self.config.auto_commit_interval_ms / 1000)
            try:
                await self.commit_offsets()
            except (TrilogError, OSError) as exc:
                log.warning("auto-commit failed: %s", exc)

    async def _load_positions(self, partitions: list[TopicPartition]) -> None:
        committed: dict[TopicPartition, int] = {}
        for store in self._stores:
            for tp, off in (await store.fetch(partitions)).items():
                committed[tp] = max(off, committed.get(tp, -1))  # dual commit: the larger
        self._forget_positions()
        for tp in partitions:
            off = committed.get(tp, -1)
            if off < 0:
                off = await self._reset_offset(tp)
            else:
                self._committed[tp] = off
            self._positions[tp] = off
            self._processed_offsets[tp] = off

    def _forget_positions(self) -> None:
        self._positions = {}
        self._processed_offsets = {}
        self._committed = {}

    async def _reset_offset(self, tp: TopicPartition) -> int:
        return await offset_at(self._client, tp[0], tp[1], self.config.start_offset)

    # -- fetchers ----------------------------------------------------------------------------

    async def _stop_fetchers(self) -> None:
        if self._fetch_scope is not None:
            self._fetch_scope.cancel()
            self._fetch_scope = None
        await trio.lowlevel.checkpoint()

    def _stream_for(self, tp: TopicPartition) -> MessageStream:
        index = self.owned[tp]
        if isinstance(self.streams, dict):
            return self.streams[tp[0]][index]
        return self.streams[index]

    def _start_fetchers(self, nursery: trio.Nursery) -> None:
        scope = trio.CancelScope()
        self._fetch_scope = scope
        nursery.start_soon(self._fetchers, scope, self.generation)

    async def _fetchers(self, scope: trio.CancelScope, generation: int) -> None:
        """One fetcher task per leader broker; regrouped when leaders move."""
        with scope:
            while True:
                by_node, leaderless = self._client.metadata.value.group_by_leader(self.owned)
                regroup = trio.Event()
                async with trio.open_nursery() as nursery:
                    for node, tps in by_node.items():
                        nursery.start_soon(self._fetch_from, node, tps, generation, regroup)
                    if leaderless:
                        regroup.set()
                    await regroup.wait()
                    nursery.cancel_scope.cancel()
                try:
                    await self._client.refresh_metadata()
                except TrilogError as exc:
                    log.debug("metadata refresh failed: %s", exc)
                await trio.sleep(0.1)

    async def _fetch_from(self, node: Node, tps: Sequence[TopicPartition], generation: int,
                          regroup: trio.Event) -> None:
        max_bytes, max_wait_ms = self.config.fetch_max_bytes, self.config.fetch_max_wait_ms
        while True:
            wanted = [(t, p, self._positions[(t, p)], max_bytes) for t, p in tps]
            try:
                results = await fetch_from_node(self._client, node, wanted,
                                                max_wait_ms=max_wait_ms, min_bytes=1,
                                                statistics=self._fetch_stats)
            except (NetworkError, RequestTimedOutError, ProtocolError) as exc:
                log.debug("fetch from broker %d failed: %s", node.node_id, exc)
                regroup.set()
                return
            for (topic, partition, offset, _max), result in zip(wanted, results):
                tp = (topic, partition)
                if isinstance(result, OffsetOutOfRangeError):
                    new = await self._reset_offset(tp)
                    log.warning("%s-%d: offset %d out of range; resetting to %d",
                                topic, partition, offset, new)
                    self._positions[tp] = new
                elif isinstance(result, ApiError):
                    if result.retriable:
                        regroup.set()
                        return
                    raise result
                elif isinstance(result, FetchedRecords) and result.size_in_bytes:
                    self._positions[tp] = result.next_offset
                    await self._outlets[self._stream_for(tp)].send.send((generation, result))


_Connector = TypeVar("_Connector", bound=GroupConsumerConnector[Any])


@asynccontextmanager
async def running(connector: _Connector) -> AsyncIterator[_Connector]:
    """Run ``connector`` (its rebalance loop, in a nursery of its own) for the body, from
    its first assignment on; then stop it and close it cleanly (commit processed offsets,
    let go of partitions), within 10 s even when cancelled."""
    async with trio.open_nursery() as nursery:
        try:
            await nursery.start(connector.run)
            yield connector
        finally:
            nursery.cancel_scope.cancel()
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                try:
                    await connector.close()
                except (TrilogError, OSError) as exc:
                    log.warning("consumer %s: clean shutdown failed: %s",
                                connector.consumer_id, exc)
