"""The fetcher: one fetch loop per leader broker, for Kafka's consumer and the connectors.

``Fetcher.run`` groups a ``SubscriptionState``'s assigned partitions by leader and runs one
task per leader broker, each sending Fetch for the partitions it leads that are
``fetchable`` (position known, not paused, no fetched answer waiting), and hands each answer
to the consumer's ``deliver``: Kafka's consumer buffers it in the partition's state (so it
keeps at most one fetch ahead of what the application reads); a connector puts it on its
stream's bounded queue (so a slow stream holds its fetcher back).  The tasks are regrouped
when the assignment changes (``SubscriptionState.regroup``), a leader moves, or a request
fails (from fresh metadata, after ``retry_backoff_ms``).

Positions: a partition assigned without one starts at the group's committed offset, else
where ``reset_time`` says (``auto_offset_reset``); ``resolve_positions`` finds them (the
fetcher itself for Kafka's consumer, lazily; a connector eagerly, while it takes its
assignment).  A fetch offset out of range is reset the same way, unless the application
sought meanwhile (``PartitionState.epoch``).  An answer for a partition sought or given up
meanwhile is dropped.  An error that retrying cannot help is handed to ``fail``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

import trio

from trilog.client._client import Client
from trilog.client._isolation import READ_UNCOMMITTED
from trilog.client._simple_consumer import (
    Deserializer,
    FetchedRecords,
    FetchStatistics,
    FetchWanted,
    fetch_from_node,
    offset_at,
)
from trilog.client._metadata import ClusterMetadata, Node
from trilog.client.consumer._structs import NoOffsetForPartitionError, TopicPartition
from trilog.client.consumer._subscription_state import PartitionState, SubscriptionState
from trilog.errors import (
    ApiError,
    NetworkError,
    OffsetOutOfRangeError,
    ProtocolError,
    RequestTimedOutError,
    TrilogError,
)

log = logging.getLogger("trilog.consumer")

#: takes a fetched answer for its partition: returns None, or an awaitable to wait on
#: (a bounded queue with no room yet)
Deliver = Callable[[PartitionState, FetchedRecords], Awaitable[None] | None]
#: the group's committed offsets of some partitions (those without one left out)
Committed = Callable[[list[tuple[str, int]]], Awaitable[Mapping[tuple[str, int], int]]]


@dataclass(frozen=True)
class FetchSettings:
    """How a fetcher fetches: Fetch's ``max_wait_ms`` and ``min_bytes``, each partition's
    ``partition_max_bytes`` and the whole answer's ``max_bytes`` (None: no cap), the
    deserializers, how long to back off, ``reset_time``: where a partition without a
    committed offset starts (``EARLIEST``/``LATEST``; None: ``NoOffsetForPartitionError``),
    and the ``isolation_level`` of its fetches and offset lookups (``trilog.client._isolation``:
    ``READ_COMMITTED`` reads committed transactions only, and LATEST is the last stable
    offset)."""

    max_wait_ms: int
    min_bytes: int
    partition_max_bytes: int
    max_bytes: int | None
    retry_backoff_ms: int
    reset_time: int | None
    #: the setting that chose ``reset_time``, for messages: ``"auto_offset_reset='none'"``
    reset_setting: str
    key_deserializer: Deserializer | None = None
    value_deserializer: Deserializer | None = None
    isolation_level: int = READ_UNCOMMITTED


class Fetcher:
    """See the module docstring.  ``committed`` reads the group's committed offsets (None:
    no group); ``lazy_positions``: ``run`` finds the positions it lacks itself."""

    def __init__(self, client: Client, subscription: SubscriptionState,
                 settings: FetchSettings, *, deliver: Deliver,
                 fail: Callable[[BaseException], None], committed: Committed | None,
                 statistics: FetchStatistics, lazy_positions: bool = True) -> None:
        self._client = client
        self._subscription = subscription
        self.settings = settings
        self._deliver = deliver
        self._fail = fail
        self._committed = committed
        self.statistics = statistics
        self._lazy_positions = lazy_positions
        self._backoff_s = settings.retry_backoff_ms / 1000

    async def run(self) -> None:
        """Resolve unknown positions, then run one fetch task per leader broker until the
        partitions or their leaders change; again and again."""
        sub = self._subscription
        while True:
            sub.regroup = trio.Event()
            unknown = [st for st in sub.assignment.values() if st.position is None]
            if unknown and self._lazy_positions:
                try:
                    await self.resolve_positions(unknown)
                except (NetworkError, RequestTimedOutError, ProtocolError) as exc:
                    log.info("consumer %s: cannot find where to start yet: %s",
                             self._client.client_id, exc)
                    await trio.sleep(self._backoff_s)
                    continue
                except TrilogError as exc:
                    if isinstance(exc, ApiError) and exc.retriable:
                        await trio.sleep(self._backoff_s)
                        continue
                    self._fail(exc)
                    return
            meta = self._client.metadata.value
            by_node, leaderless = meta.group_by_leader(list(sub.assignment))
            async with trio.open_nursery() as nursery:
                for node in by_node:
                    nursery.start_soon(self._fetch_from, node, meta)
                if leaderless:
                    nursery.start_soon(self._refresh_then_regroup)
                await sub.regroup.wait()
                nursery.cancel_scope.cancel()

    async def _refresh_then_regroup(self) -> None:
        await trio.sleep(self._backoff_s)
        try:
            await self._client.refresh_metadata()
        except TrilogError as exc:
            log.debug("metadata refresh failed: %s", exc)
        self._subscription.regroup.set()

    # -- positions -----------------------------------------------------------------------------

    async def resolve_positions(self, states: Sequence[PartitionState]) -> None:
        """Give ``states`` a position: the committed offset, else ``reset_time``'s (the
        partitions sought or given up meanwhile are left alone)."""
        sub = self._subscription
        committed: Mapping[tuple[str, int], int] = {}
        if self._committed is not None:
            tps: list[tuple[str, int]] = [st.tp for st in states]
            committed = await self._committed(tps)
            sub.committed.update((TopicPartition(*tp), o) for tp, o in committed.items()
                                 if o >= 0 and TopicPartition(*tp) in sub.assignment)
        for st in states:
            if st.position is not None or not sub.owns(st):
                continue
            offset = committed.get(st.tp)
            if offset is None or offset < 0:
                offset = await self.reset_offset(st.tp)
            if st.position is None and sub.owns(st):
                st.seek(offset)
                sub.processed.setdefault(st.tp, offset)

    async def reset_offset(self, tp: TopicPartition) -> int:
        """Where ``tp`` starts without a committed offset (``reset_time``)."""
        time = self.settings.reset_time
        if time is None:
            raise NoOffsetForPartitionError(
                f"{tp.topic}-{tp.partition} has no committed offset (or it is out of range) "
                f"and {self.settings.reset_setting}")
        return await offset_at(self._client, tp.topic, tp.partition, time,
                               isolation_level=self.settings.isolation_level)

    # -- one leader ----------------------------------------------------------------------------

    async def _fetch_from(self, node: Node, meta: ClusterMetadata) -> None:
        """Fetch, again and again, the fetchable partitions ``node`` leads."""
        sub, settings = self._subscription, self.settings
        while True:
            wakeup = sub.wakeup
            if self._client.metadata.value is not meta:
                sub.regroup.set()  # leaders may have moved
                return
            states = [st for st in sub.assignment.values()
                      if st.fetchable and meta.leader_for(*st.tp) == node]
            if not states:
                await wakeup.wait()
                continue
            wanted: list[FetchWanted] = [
                (st.tp.topic, st.tp.partition, st.fetch_offset, settings.partition_max_bytes)
                for st in states]
            epochs = [st.epoch for st in states]
            try:
                results = await fetch_from_node(
                    self._client, node, wanted, max_wait_ms=settings.max_wait_ms,
                    min_bytes=settings.min_bytes, key_deserializer=settings.key_deserializer,
                    value_deserializer=settings.value_deserializer,
                    statistics=self.statistics, max_bytes=settings.max_bytes,
                    isolation_level=settings.isolation_level)
            except TrilogError as exc:
                if isinstance(exc, ApiError) and not exc.retriable and \
                        not isinstance(exc, NetworkError):
                    self._fail(exc)
                    return
                # A lost connection, a timeout, a garbled answer, a failed login: again,
                # from fresh metadata.
                log.debug("fetch from broker %d failed: %s", node.node_id, exc)
                await self._regroup_later()
                return
            for st, epoch, result in zip(states, epochs, results):
                if not sub.owns(st) or st.epoch != epoch:
                    continue  # sought or reassigned meanwhile
                if isinstance(result, FetchedRecords):
                    st.highwater = result.high_watermark
                    if result.next_offset > st.fetch_offset:
                        # Delivered even without records (a batch the cleaner emptied): the
                        # position moves past it when it is read.
                        st.fetch_offset = result.next_offset
                        waiting = self._deliver(st, result)
                        if waiting is not None:
                            await waiting
                elif isinstance(result, OffsetOutOfRangeError):
                    await self._out_of_range(st, epoch, result)
                elif result.retriable:
                    await self._regroup_later()
                    return
                else:
                    self._fail(result)
                    return

    async def _regroup_later(self) -> None:
        self._client.request_metadata_refresh()
        await trio.sleep(self._backoff_s)
        self._subscription.regroup.set()

    async def _out_of_range(self, st: PartitionState, epoch: int,
                            error: OffsetOutOfRangeError) -> None:
        """``st``'s fetch offset is gone (retention) or beyond the end: reset it as
        ``reset_time`` says, unless the application sought meanwhile."""
        try:
            offset = await self.reset_offset(st.tp)
        except NoOffsetForPartitionError:
            self._fail(NoOffsetForPartitionError(f"{error}; {self.settings.reset_setting}"))
            return
        except TrilogError as exc:
            if isinstance(exc, ApiError) and exc.retriable or isinstance(exc, NetworkError):
                log.info("%s; cannot reset it yet: %s", error, exc)
                await trio.sleep(self._backoff_s)  # the next fetch tries again
                return
            self._fail(exc)
            return
        if not self._subscription.owns(st) or st.epoch != epoch:
            return  # sought or given up meanwhile: that wins
        log.warning("%s; resetting to %d (%s)", error, offset, self.settings.reset_setting)
        st.seek(offset)
