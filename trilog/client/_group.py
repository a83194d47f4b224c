"""The ZooKeeper consumer connector: the seeds' high-level group consumer.

    async with open_consumer(group_id="g", zookeeper="zk:2181", topics={"events": 2}) as c:
        async for record in c.streams["events"][0]: ...

Registration (seed 001, "Consumer registration algorithm"): the consumer registers
``/consumers/<group>/ids/<consumer id>`` (ephemeral JSON with its subscription), watches the
group's ids, ``/brokers/ids`` and, with a topic filter, ``/brokers/topics``; every watch
fires into one **rebalance loop** task that coalesces bursts and rebalances:

1. stop the fetchers; commit processed offsets; release the partitions it owns;
2. read the group's members and subscriptions and the topics' partitions, and compute the
   range assignment (``_assignment.assign_group``: every member computes the same answer);
3. claim its partitions with ephemeral ``/consumers/<group>/owners/<topic>/<partition>``
   nodes, backing off and starting over while a previous owner has not let go, up to
   ``rebalance_max_retries`` times (then it waits ``rebalance_backoff_ms`` and tries again);
4. read the committed offsets (``auto_offset_reset`` where there are none) and start one
   fetcher task per broker, which fills the bounded queues of the streams.

A stream may merge several partitions; each partition goes to exactly one stream.  A record
counts as *processed* once the application asks its stream for the next one (or calls
``stream.mark_processed()``): only processed offsets are ever committed, so a consumer
cancelled in the middle of a record restarts from that record (at least once).  Offsets go
to ``/consumers/<group>/offsets/<topic>/<partition>`` (``offsets_storage="zookeeper"``), to
the broker's offset manager (``"kafka"``), or both (``dual_commit_enabled``, the seed's
migration path: reads take the larger of the two).

``coordination="broker"`` (the default without ``zookeeper``) is Kafka's group protocol
instead, in ``_group_broker.py``.  Both modes share ``GroupConsumerConnector``: the streams,
the processed-offset bookkeeping, the commits and the fetchers; a mode decides only *which*
partitions the member owns and hands them to ``_assign``.
"""

from __future__ import annotations

import json
import logging
import math
import socket
import time
import uuid
from contextlib import AsyncExitStack, aclosing, asynccontextmanager
from typing import Any, AsyncIterator

import trio

from trilog._concurrency import YieldPacer, unwrap_exception_group
from trilog.client._assignment import Blacklist, TopicFilter, Whitelist, assign_group, thread_ids
from trilog.client._client import Client, open_client
from trilog.client._consumer import EARLIEST, LATEST, ConsumerRecord, FetchedRecords, SimpleConsumer
from trilog.client._offsets import BrokerOffsetStore, ZooKeeperOffsetStore
from trilog.errors import (
    ApiError,
    NetworkError,
    OffsetOutOfRangeError,
    ProtocolError,
    RequestTimedOutError,
    TrilogError,
)

log = logging.getLogger("trilog.consumer.group")


class ConsumerRebalanceFailedError(TrilogError):
    """A rebalance could not claim its partitions within ``rebalance_max_retries``."""


class MessageStream:
    """An async iterator over the records of the partitions assigned to one consumer thread.

    Iteration ends after ``consumer_timeout_ms`` without a record (never, by default).
    """

    def __init__(self, connector: "GroupConsumerConnector", name: str, queue_size: int,
                 timeout_s: float) -> None:
        self._connector = connector
        self.name = name
        self._send, self._receive = trio.open_memory_channel(queue_size)
        self._timeout_s = timeout_s
        self._chunk: Any = None  # iterator over the current FetchedRecords
        self._chunk_generation = -1
        self._last: ConsumerRecord | None = None
        self._pacer = YieldPacer()
        #: The application has a record from us and has not asked for the next one yet
        #: (``_handed`` counts records handed out): what ``max_poll_interval_ms`` watches.
        self._holding = False
        self._handed = 0

    def __aiter__(self) -> "MessageStream":
        return self

    async def __anext__(self) -> ConsumerRecord:
        """The next record.  Every call is a cancellation point; while records are at hand
        it yields to other tasks at most once a millisecond (see ``YieldPacer``)."""
        self.mark_processed()
        self._holding = False
        connector = self._connector
        if connector._poll_expired is self:  # the stream that held a record too long
            connector._resume_polling()
        while True:
            if self._chunk is not None:
                if self._chunk_generation == connector.generation:
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
            if generation == connector.generation:
                self._chunk = iter(fetched)
                self._chunk_generation = generation

    def mark_processed(self) -> None:
        """Count the record last returned as processed (asking for the next one does)."""
        record, self._last = self._last, None
        if record is not None:
            self._connector._processed(record)

    def _drain(self) -> None:
        """Drop queued chunks (a rebalance happened)."""
        while True:
            try:
                self._receive.receive_nowait()
            except trio.WouldBlock:
                return


class GroupConsumerConnector:
    """What both coordination modes share: the member's streams, its partitions
    (``owned``), the positions and processed offsets of those partitions, commits to
    ``_stores``, and the fetcher tasks.

    ``generation`` counts local assignments: chunks queued under an older one are dropped
    by the streams.  A subclass decides the assignment and calls ``_revoke`` (before giving
    partitions up) and ``_assign`` (to take new ones).
    """

    def __init__(self, *, group_id: str, client: Client, consumer: SimpleConsumer,
                 topics: dict[str, int] | None, topic_filter: TopicFilter | None,
                 num_streams: int, auto_offset_reset: str, auto_commit_enable: bool,
                 auto_commit_interval_ms: int, consumer_timeout_ms: int,
                 queued_max_chunks: int, fetch_max_bytes: int, fetch_wait_max_ms: int) -> None:
        if (topics is None) == (topic_filter is None):
            raise ValueError("give exactly one of topics and topic_filter")
        if auto_offset_reset not in ("smallest", "largest", "earliest", "latest"):
            raise ValueError("auto_offset_reset must be 'smallest' or 'largest'")
        self.group_id = group_id
        self._client = client
        self._consumer = consumer
        self._static = dict(topics) if topics is not None else None
        self._filter = topic_filter
        self._num_streams = num_streams
        self._reset = EARLIEST if auto_offset_reset in ("smallest", "earliest") else LATEST
        self._auto_commit = auto_commit_enable
        self._auto_commit_s = auto_commit_interval_ms / 1000
        self._fetch_max_bytes = fetch_max_bytes
        self._fetch_wait_ms = fetch_wait_max_ms
        timeout_s = math.inf if consumer_timeout_ms < 0 else consumer_timeout_ms / 1000
        self._stores: list = []
        if self._static is not None:
            self.streams: Any = {
                topic: [MessageStream(self, f"{topic}-{n}", queued_max_chunks, timeout_s)
                        for n in range(count)]
                for topic, count in self._static.items()
            }
            self._all_streams = [s for ss in self.streams.values() for s in ss]
        else:
            self.streams = [MessageStream(self, f"filter-{n}", queued_max_chunks, timeout_s)
                            for n in range(num_streams)]
            self._all_streams = list(self.streams)
        self.generation = 0
        #: (topic, partition) -> stream (thread) index, for the current generation
        self.owned: dict[tuple[str, int], int] = {}
        self._positions: dict[tuple[str, int], int] = {}  # next offset to fetch
        self._processed_offsets: dict[tuple[str, int], int] = {}  # next offset to consume
        self._committed: dict[tuple[str, int], int] = {}
        self._commit_lock = trio.Lock()
        self._fetch_scope: trio.CancelScope | None = None
        self.rebalances = 0
        self._rebalanced = trio.Event()
        #: The stream whose application held a record too long (broker coordination's
        #: ``max_poll_interval_ms``): the member left its group until that stream is asked
        #: for its next record, which calls ``_resume_polling``.
        self._poll_expired: MessageStream | None = None

    def _rebalance_completed(self) -> None:
        self.rebalances += 1
        self._rebalanced.set()
        self._rebalanced = trio.Event()

    def _resume_polling(self) -> None:
        """The application asks for records again after ``_poll_expired`` was set."""
        self._poll_expired = None

    def _revoke(self) -> dict[tuple[str, int], int]:
        """Give up every partition (after stopping the fetchers and committing); returns
        what was owned.  Queued records of those partitions are dropped."""
        owned, self.owned = self.owned, {}
        self.generation += 1
        for stream in self._all_streams:
            stream._drain()
        return owned

    async def _assign(self, mine: dict[tuple[str, int], int], nursery: trio.Nursery) -> None:
        """Take ``mine`` (``{(topic, partition): stream index}``): read where to start, and
        start the fetchers."""
        self.generation += 1
        self.owned = mine
        await self._load_positions(list(mine))
        self._start_fetchers(nursery)

    # -- offsets ---------------------------------------------------------------------------------

    def _processed(self, record: ConsumerRecord) -> None:
        tp = (record.topic, record.partition)
        if tp in self.owned:
            self._processed_offsets[tp] = record.offset + 1

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
            await trio.sleep(self._auto_commit_s)
            try:
                await self.commit_offsets()
            except (TrilogError, OSError) as exc:
                log.warning("auto-commit failed: %s", exc)

    async def _load_positions(self, partitions: list[tuple[str, int]]) -> None:
        committed: dict[tuple[str, int], int] = {}
        for store in self._stores:
            for tp, off in (await store.fetch(partitions)).items():
                committed[tp] = max(off, committed.get(tp, -1))  # dual commit: the larger
        self._positions = {}
        self._processed_offsets = {}
        self._committed = {}
        for tp in partitions:
            off = committed.get(tp, -1)
            if off < 0:
                off = await self._reset_offset(tp)
            else:
                self._committed[tp] = off
            self._positions[tp] = off
            self._processed_offsets[tp] = off

    async def _reset_offset(self, tp: tuple[str, int]) -> int:
        offsets = await self._consumer.offsets_before(tp[0], tp[1], self._reset)
        return offsets[0] if offsets else 0

    # -- fetchers -----------------------------------------------------------------------------------

    async def _stop_fetchers(self) -> None:
        if self._fetch_scope is not None:
            self._fetch_scope.cancel()
            self._fetch_scope = None
        await trio.lowlevel.checkpoint()

    def _stream_for(self, tp: tuple[str, int]) -> MessageStream:
        index = self.owned[tp]
        if self._static is not None:
            return self.streams[tp[0]][index]
        return self.streams[index]

    def _start_fetchers(self, nursery: trio.Nursery) -> None:
        scope = trio.CancelScope()
        self._fetch_scope = scope
        generation = self.generation
        nursery.start_soon(self._fetchers, scope, generation)

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

    async def _fetch_from(self, node, tps, generation: int, regroup: trio.Event) -> None:
        while True:
            wanted = [(t, p, self._positions[(t, p)], self._fetch_max_bytes) for t, p in tps]
            try:
                results = await self._consumer._fetch_from(node, wanted, self._fetch_wait_ms, 1)
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
                    await self._stream_for(tp)._send.send((generation, result))

    async def wait_rebalanced(self) -> None:
        """Wait for the next completed rebalance (tests and tools)."""
        await self._rebalanced.wait()


class ZooKeeperConsumerConnector(GroupConsumerConnector):
    """See the module docstring.  Create with ``open_consumer``."""

    def __init__(self, *, group_id: str, client: Client, consumer: SimpleConsumer, zk,
                 topics: dict[str, int] | None, topic_filter: TopicFilter | None,
                 num_streams: int, auto_offset_reset: str, auto_commit_enable: bool,
                 auto_commit_interval_ms: int, offsets_storage: str, dual_commit_enabled: bool,
                 consumer_timeout_ms: int, rebalance_max_retries: int,
                 rebalance_backoff_ms: int, queued_max_chunks: int, fetch_max_bytes: int,
                 fetch_wait_max_ms: int, consumer_id: str | None) -> None:
        if offsets_storage not in ("zookeeper", "kafka"):
            raise ValueError("offsets_storage must be 'zookeeper' or 'kafka'")
        super().__init__(
            group_id=group_id, client=client, consumer=consumer, topics=topics,
            topic_filter=topic_filter, num_streams=num_streams,
            auto_offset_reset=auto_offset_reset, auto_commit_enable=auto_commit_enable,
            auto_commit_interval_ms=auto_commit_interval_ms,
            consumer_timeout_ms=consumer_timeout_ms, queued_max_chunks=queued_max_chunks,
            fetch_max_bytes=fetch_max_bytes, fetch_wait_max_ms=fetch_wait_max_ms)
        self.consumer_id = consumer_id or f"{socket.gethostname()}-{uuid.uuid4().hex[:12]}"
        self._zk = zk
        self._retries = rebalance_max_retries
        self._backoff_s = rebalance_backoff_ms / 1000
        if offsets_storage == "zookeeper" or dual_commit_enabled:
            self._stores.append(ZooKeeperOffsetStore(zk, group_id))
        if offsets_storage == "kafka" or dual_commit_enabled:
            self._stores.append(BrokerOffsetStore(client, group_id))
        self._rebalance_needed = trio.Event()

    # -- registration ------------------------------------------------------------------------

    def _registration(self) -> bytes:
        if self._static is not None:
            subscription, pattern = self._static, "static"
        else:
            subscription, pattern = {self._filter.pattern: self._num_streams}, self._filter.kind
        return json.dumps({"version": 1, "subscription": subscription, "pattern": pattern,
                           "timestamp": str(int(time.time() * 1000))},
                          separators=(",", ":")).encode()

    async def _register(self) -> None:
        from trilog.zk import NodeExistsError, consumer_ids_path

        path = f"{consumer_ids_path(self.group_id)}/{self.consumer_id}"
        try:
            await self._zk.create(path, self._registration(), ephemeral=True, makepath=True)
        except NodeExistsError:
            await self._zk.set(path, self._registration())

    # -- the rebalance loop ------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        from trilog.zk import BROKER_IDS, BROKER_TOPICS, consumer_ids_path

        await self._register()
        watched = [consumer_ids_path(self.group_id), BROKER_IDS]
        if self._filter is not None:
            watched.append(BROKER_TOPICS)
        async with trio.open_nursery() as nursery:
            for path in watched:
                value = await self._zk.watch_children(path)
                nursery.start_soon(self._trigger_on_change, value)
            nursery.start_soon(self._session_keeper)
            if self._auto_commit:
                nursery.start_soon(self._auto_committer)
            await self._rebalance_with_retries(nursery)
            task_status.started()
            while True:
                await self._rebalance_needed.wait()
                await trio.sleep(0.05)  # let a burst of watch events settle into one
                await self._rebalance_with_retries(nursery)

    async def _trigger_on_change(self, value) -> None:
        async with aclosing(value.transitions()) as changes:
            async for _ in changes:
                self._rebalance_needed.set()

    async def _session_keeper(self) -> None:
        async with aclosing(self._zk.session_generation.transitions()) as sessions:
            async for _ in sessions:
                log.warning("consumer %s: ZooKeeper session expired; registering again",
                            self.consumer_id)
                await self._register()
                self._rebalance_needed.set()

    async def _rebalance_with_retries(self, nursery: trio.Nursery) -> None:
        while True:
            self._rebalance_needed = trio.Event()
            for attempt in range(self._retries + 1):
                try:
                    if await self._rebalance(nursery):
                        self._rebalance_completed()
                        return
                except (TrilogError, OSError) as exc:
                    log.warning("consumer %s: rebalance attempt %d failed: %s",
                                self.consumer_id, attempt + 1, exc)
                await trio.sleep(self._backoff_s)
                if self._rebalance_needed.is_set():
                    break  # the group changed again: start over with fresh data
            else:
                log.error("consumer %s: could not rebalance after %d attempts; retrying",
                          self.consumer_id, self._retries + 1)

    async def _rebalance(self, nursery: trio.Nursery) -> bool:
        """One attempt; False if a partition was still owned by someone else."""
        await self._stop_fetchers()
        await self.commit_offsets()
        await self._release_all()
        assignment = await self._compute_assignment()
        mine = {}
        for n, tid in enumerate(self._my_threads()):
            for topic, parts in assignment.get(tid, {}).items():
                for p in parts:
                    mine[(topic, p)] = self._thread_index(tid)
        claimed = []
        for tp, index in sorted(mine.items()):
            if await self._claim(tp, self._thread_name(tp[0], index)):
                claimed.append(tp)
            else:
                log.info("consumer %s: %s-%d is still owned; backing off", self.consumer_id, *tp)
                for done in claimed:
                    await self._release(done)
                return False
        await self._assign(mine, nursery)
        log.info("consumer %s (group %s) owns %s", self.consumer_id, self.group_id,
                 sorted(mine))
        return True

    def _my_threads(self) -> list[str]:
        count = max(self._static.values()) if self._static is not None else self._num_streams
        return thread_ids(self.consumer_id, count)

    def _thread_index(self, thread_id: str) -> int:
        return int(thread_id.rsplit("-", 1)[1])

    def _thread_name(self, topic: str, index: int) -> str:
        return f"{self.consumer_id}-{index}"

    async def _compute_assignment(self) -> dict[str, dict[str, list[int]]]:
        from trilog.zk import (
            BROKER_TOPICS,
            NoNodeError,
            consumer_ids_path,
            decode_topic_assignment,
            topic_path,
        )

        all_topics = await self._zk.get_children(BROKER_TOPICS)
        members = await self._zk.get_children(consumer_ids_path(self.group_id))
        subscriptions: dict[str, dict[str, int]] = {}
        for member in members:
            try:
                raw = await self._zk.get(f"{consumer_ids_path(self.group_id)}/{member}")
                reg = json.loads(raw.decode())
                sub = {str(k): int(v) for k, v in reg["subscription"].items()}
                kind = reg.get("pattern", "static")
            except NoNodeError:
                continue  # gone meanwhile; its ids watch will trigger another rebalance
            except (ValueError, KeyError, TypeError, AttributeError):
                log.warning("ignoring member %s with a malformed registration", member)
                continue
            if kind == "static":
                subscriptions[member] = sub
            else:
                cls = Whitelist if kind == "white_list" else Blacklist
                topics_of = {}
                for regex, streams in sub.items():
                    for t in cls(regex).select(all_topics):
                        topics_of[t] = streams
                subscriptions[member] = topics_of
        if self.consumer_id not in subscriptions:  # our own registration must count
            subscriptions[self.consumer_id] = self._my_subscription(all_topics)
        wanted = {t for sub in subscriptions.values() for t in sub}
        partitions = {}
        for topic in wanted:
            try:
                partitions[topic] = sorted(
                    decode_topic_assignment(topic, await self._zk.get(topic_path(topic))))
            except NoNodeError:
                partitions[topic] = []
            except ProtocolError:
                partitions[topic] = []
        return assign_group(subscriptions, partitions)

    def _my_subscription(self, all_topics) -> dict[str, int]:
        if self._static is not None:
            return dict(self._static)
        return {t: self._num_streams for t in self._filter.select(all_topics)}

    async def _claim(self, tp: tuple[str, int], thread: str) -> bool:
        from trilog.zk import NodeExistsError, consumer_owner_path

        path = consumer_owner_path(self.group_id, *tp)
        try:
            await self._zk.create(path, thread.encode(), ephemeral=True, makepath=True)
            return True
        except NodeExistsError:
            try:
                return (await self._zk.get(path)).decode() == thread
            except TrilogError:
                return False

    async def _release(self, tp: tuple[str, int]) -> None:
        from trilog.zk import NoNodeError, consumer_owner_path

        try:
            await self._zk.delete(consumer_owner_path(self.group_id, *tp))
        except NoNodeError:
            pass

    async def _release_all(self) -> None:
        owned = self._revoke()
        for tp in sorted(owned):
            await self._release(tp)

    # -- closing ----------------------------------------------------------------------------------

    async def close(self) -> None:
        """Commit processed offsets, release partitions and deregister (clean shutdown)."""
        from trilog.zk import NoNodeError, consumer_ids_path

        await self._stop_fetchers()
        try:
            async with AsyncExitStack() as stack:
                # Broker-stored offsets go on connections this task owns: when the scope
                # around the consumer was cancelled, the tasks holding the client's
                # connections are gone (see Coordinator.connection_in_this_task).
                for store in self._stores:
                    if isinstance(store, BrokerOffsetStore):
                        await stack.enter_async_context(
                            store.coordinator.connection_in_this_task())
                await self.commit_offsets()
        finally:
            await self._release_all()
            try:
                await self._zk.delete(f"{consumer_ids_path(self.group_id)}/{self.consumer_id}")
            except NoNodeError:
                pass


@asynccontextmanager
async def running(nursery: trio.Nursery, connector) -> AsyncIterator[None]:
    """Run ``connector`` in ``nursery`` for the body; then stop it and close it cleanly
    (commit processed offsets, let go of partitions), within 10 s even when cancelled."""
    await nursery.start(connector.run)
    try:
        yield
    finally:
        nursery.cancel_scope.cancel()
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            try:
                await connector.close()
            except (TrilogError, OSError) as exc:
                log.warning("consumer %s: clean shutdown failed: %s",
                            connector.consumer_id, exc)


@asynccontextmanager
async def open_consumer(
    group_id: str,
    *,
    zookeeper: str | None = None,
    bootstrap_servers: str | None = None,
    topics: dict[str, int] | None = None,
    topic_filter: TopicFilter | None = None,
    num_streams: int = 1,
    coordination: str | None = None,
    auto_offset_reset: str = "largest",
    auto_commit_enable: bool = True,
    auto_commit_interval_ms: int = 60_000,
    offsets_storage: str | None = None,
    dual_commit_enabled: bool = False,
    consumer_timeout_ms: int = -1,
    rebalance_max_retries: int = 4,
    rebalance_backoff_ms: int = 2000,
    queued_max_chunks: int = 2,
    fetch_max_bytes: int = 1 << 20,
    fetch_wait_max_ms: int = 100,
    client_id: str | None = None,
    consumer_id: str | None = None,
    zookeeper_session_timeout_ms: int = 6000,
    session_timeout_ms: int = 10_000,
    heartbeat_interval_ms: int = 3000,
    max_poll_interval_ms: int = 300_000,
    rebalance_timeout_ms: int | None = None,
    metadata_max_age_ms: int = 300_000,
    retry_backoff_ms: int = 100,
    request_timeout_ms: int = 30_000,
) -> AsyncIterator[GroupConsumerConnector]:
    """A group consumer (see the module docstring).

    ``coordination="zookeeper"`` (the default when ``zookeeper`` is given) is the seeds'
    connector: offsets default to ZooKeeper storage, Kafka 0.8's default, and
    ``rebalance_*``/``zookeeper_*`` tune it.  ``coordination="broker"`` (the default
    otherwise) is Kafka's group protocol through the group's coordinator, with offsets in
    the broker; ``session_timeout_ms``, ``heartbeat_interval_ms``,
    ``max_poll_interval_ms`` (the JoinGroup rebalance timeout unless
    ``rebalance_timeout_ms``), ``metadata_max_age_ms`` (how often a topic filter looks for
    new topics), ``retry_backoff_ms`` and ``request_timeout_ms`` tune it, as in
    ``KafkaConsumer``.
    """
    if coordination is None:
        coordination = "zookeeper" if zookeeper is not None else "broker"
    if coordination not in ("zookeeper", "broker"):
        raise ValueError("coordination must be 'zookeeper' or 'broker'")
    if coordination == "broker":
        from trilog.client._group_broker import open_broker_consumer

        if offsets_storage not in (None, "kafka") or dual_commit_enabled:
            raise ValueError("a broker-coordinated group keeps its offsets in the broker "
                             "(offsets_storage='kafka')")
        async with open_broker_consumer(
            group_id, bootstrap_servers=bootstrap_servers, zookeeper=zookeeper, topics=topics,
            topic_filter=topic_filter, num_streams=num_streams,
            auto_offset_reset=auto_offset_reset, auto_commit_enable=auto_commit_enable,
            auto_commit_interval_ms=auto_commit_interval_ms,
            consumer_timeout_ms=consumer_timeout_ms, queued_max_chunks=queued_max_chunks,
            fetch_max_bytes=fetch_max_bytes, fetch_wait_max_ms=fetch_wait_max_ms,
            client_id=client_id or consumer_id, session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            max_poll_interval_ms=max_poll_interval_ms,
            rebalance_timeout_ms=(max_poll_interval_ms if rebalance_timeout_ms is None
                                  else rebalance_timeout_ms),
            metadata_max_age_ms=metadata_max_age_ms, retry_backoff_ms=retry_backoff_ms,
            request_timeout_ms=request_timeout_ms,
        ) as connector:
            yield connector
        return
    if offsets_storage is None:
        offsets_storage = "zookeeper"
    if zookeeper is None:
        raise ValueError("the ZooKeeper consumer connector needs zookeeper='host:port[/chroot]'")
    from trilog.zk import open_zookeeper

    client_id = client_id or f"trilog-{group_id}"
    with unwrap_exception_group():
        async with open_zookeeper(zookeeper,
                                  session_timeout_ms=zookeeper_session_timeout_ms) as zk, \
                open_client(zookeeper=zookeeper, client_id=client_id,
                            allow_auto_create_topics=False) as client:
            async with trio.open_nursery() as nursery:
                consumer = SimpleConsumer(client, nursery, fetch_max_wait_ms=fetch_wait_max_ms,
                                          fetch_min_bytes=1,
                                          max_partition_fetch_bytes=fetch_max_bytes,
                                          key_deserializer=None, value_deserializer=None)
                connector = ZooKeeperConsumerConnector(
                    group_id=group_id, client=client, consumer=consumer, zk=zk, topics=topics,
                    topic_filter=topic_filter, num_streams=num_streams,
                    auto_offset_reset=auto_offset_reset, auto_commit_enable=auto_commit_enable,
                    auto_commit_interval_ms=auto_commit_interval_ms,
                    offsets_storage=offsets_storage, dual_commit_enabled=dual_commit_enabled,
                    consumer_timeout_ms=consumer_timeout_ms,
                    rebalance_max_retries=rebalance_max_retries,
                    rebalance_backoff_ms=rebalance_backoff_ms,
                    queued_max_chunks=queued_max_chunks, fetch_max_bytes=fetch_max_bytes,
                    fetch_wait_max_ms=fetch_wait_max_ms, consumer_id=consumer_id,
                )
                async with running(nursery, connector):
                    yield connector
