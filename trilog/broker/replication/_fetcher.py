"""Replica fetchers: a follower copies its leaders' logs (Kafka's ``ReplicaFetcherThread``).

One task per source broker (the leader of the partitions it serves), in the fetchers'
nursery.  Each sends Fetch with ``replica_id`` set to this broker, at the follower's log
end offsets, and appends the answered batches as they are (the leader's offsets and epochs
kept) through the replica manager's one append path (``append_as_follower``).  The leader learns the follower's progress from those offsets,
and answers with its high watermark, which the follower adopts (never past its own end).

A partition newly followed first asks the leader where their logs diverge
(OffsetForLeaderEpoch with the follower's latest epoch, KIP-101/279) and truncates its
tail there: records a dead leader wrote past the high watermark that no other replica
took are dropped, so that the replicas' logs end up identical.

A partition whose leader answers FENCED_LEADER_EPOCH (our epoch is older: a newer
LeaderAndIsr is on its way) is dropped until the controller's next LeaderAndIsr.  One it
answers NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION or UNKNOWN_LEADER_EPOCH is
retried: the controller tells the leader and its followers at once, and a follower's first
request may reach the leader a few milliseconds before the leader's LeaderAndIsr does.  The
first retry comes after 20 ms, each further one waits twice as long, up to
``replica.fetch.backoff.ms`` (Kafka waits the whole backoff at once: 1 s in which an
``acks=all`` produce to the new leader waits for this follower), and a long-poll fetch of
the other partitions waits no longer than the next retry is due.  A lost connection is
retried after ``replica.fetch.backoff.ms``.

A fetch connection to a leader that fails is reported (``leader_lost``): this broker's
metadata stops naming a leader whose process is gone (``LeaderLiveness``), so that clients
that lost it keep asking until the controller names the next one.

A partition added while the fetcher's long poll waits at the leader (a leader change moved
it here) does not wait for that poll (up to ``replica.fetch.wait.max.ms``, in which an
``acks=all`` produce to the new leader waits for this follower): the fetcher drops the
connection, whose poll the leader would answer only after the wait, and starts again at once
on a new one with the partition in its requests.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import trio

from trilog._topic import PartitionKey
from trilog.errors import (
    NO_ERROR,
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    TrilogError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
    raise_for_code,
)
from trilog.broker.network import Settings
from trilog.net import ClientSecurity, open_connection
from trilog.protocol import FetchRequest, OffsetForLeaderEpochRequest
from trilog.records import whole_batches_length

if TYPE_CHECKING:
    from trilog.broker.cluster import BrokerInfo
    from trilog.broker.replication._replica_manager import ReplicaManager
    from trilog.storage import Log

log = logging.getLogger("trilog.broker.fetcher")

FETCH_VERSION = 10
EPOCH_VERSION = 3
#: our leader epoch is older than the leader's: wait for the controller's LeaderAndIsr
_FENCED = {FencedLeaderEpochError.code}
#: the leader does not know (yet) that it leads at our epoch: try again after a backoff
_NOT_YET = {NotLeaderOrFollowerError.code, UnknownLeaderEpochError.code,
            UnknownTopicOrPartitionError.code}
#: the first retry of a partition whose leader does not know yet; doubled on each failure
FIRST_RETRY_S = 0.02


@dataclasses.dataclass(frozen=True)
class FetcherConfig:
    """The replica fetchers' settings (``replica.fetch.*``, ``replica.socket.timeout.ms``)."""

    wait_max_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 1 << 20
    backoff_ms: int = 1000
    socket_timeout_ms: int = 30_000

    @classmethod
    def of(cls, config: Settings) -> FetcherConfig:
        return cls(config["replica.fetch.wait.max.ms"], config["replica.fetch.min.bytes"],
                   config["replica.fetch.max.bytes"], config["replica.fetch.backoff.ms"],
                   config["replica.socket.timeout.ms"])


@dataclasses.dataclass(eq=False)
class FetchState:
    leader_epoch: int
    truncating: bool = True  # ask the leader where our logs diverge first
    retry_at: float = 0.0  # trio time before which this partition is not asked for
    failures: int = 0  # answers in a row that said the leader does not know yet

    def ready(self) -> bool:
        return trio.current_time() >= self.retry_at

    def not_yet(self, max_backoff_s: float) -> None:
        """The leader does not know yet: ask again soon, then less and less often."""
        delay = min(max_backoff_s, FIRST_RETRY_S * 2 ** min(self.failures, 16))
        self.failures += 1
        self.retry_at = trio.current_time() + delay


class ReplicaFetchers:
    """The fetcher tasks of one broker, one per source broker; ``brokers()`` says where the
    brokers are, ``replicas`` takes what they fetch (``append_as_follower``)."""

    def __init__(self, replicas: ReplicaManager, brokers: Callable[[], Iterable[BrokerInfo]],
                 config: FetcherConfig, *, security: ClientSecurity | None = None,
                 leader_lost: Callable[[int, tuple[str, int]], Awaitable[None]] | None = None
                 ) -> None:
        self.replicas = replicas
        #: told when a fetch connection to a leader fails (``LeaderLiveness.lost``)
        self.leader_lost = leader_lost
        self.brokers = brokers
        self.config = config
        self.security = security
        self._fetchers: dict[int, _Fetcher] = {}
        self.nursery: trio.Nursery  # set by run()

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            await trio.sleep_forever()

    def add(self, tp: PartitionKey, leader: int, leader_epoch: int) -> None:
        self.remove(tp)
        fetcher = self._fetchers.get(leader)
        if fetcher is None:
            fetcher = self._fetchers[leader] = _Fetcher(self, leader)
            self.nursery.start_soon(fetcher.run)
        fetcher.partitions[tp] = FetchState(leader_epoch)
        fetcher.wake()

    def remove(self, tp: PartitionKey) -> None:
        for fetcher in self._fetchers.values():
            fetcher.partitions.pop(tp, None)

    def following(self) -> dict[PartitionKey, int]:
        """``{partition: source broker}`` of every partition being fetched."""
        return {tp: f.leader for f in self._fetchers.values() for tp in f.partitions}


class _Fetcher:
    def __init__(self, owner: ReplicaFetchers, leader: int) -> None:
        self.owner = owner
        self.replicas = owner.replicas
        self.logs = owner.replicas.logs
        self.broker_id = owner.replicas.broker_id
        self.leader = leader
        self.partitions: dict[PartitionKey, FetchState] = {}
        self._wakeup = trio.Event()
        self._poll: trio.CancelScope | None = None  # the long poll waiting at the leader
        config = owner.config
        self.wait_ms = config.wait_max_ms
        self.min_bytes = config.min_bytes
        self.max_bytes = config.max_bytes
        self.backoff_s = config.backoff_ms / 1000
        self.timeout_s = max(config.socket_timeout_ms, self.wait_ms + 1000) / 1000

    def wake(self) -> None:
        """Partitions were added: start fetching them now, not after a long poll."""
        self._wakeup.set()
        if self._poll is not None:
            self._poll.cancel()

    async def run(self) -> None:
        while True:
            if not self.partitions:
                self._wakeup = trio.Event()
                await self._wakeup.wait()
                continue
            address = self._address()
            if address is None:
                await trio.sleep(self.backoff_s)
                continue
            try:
                async with open_connection(
                        *address, client_id=f"broker-{self.broker_id}-fetcher",
                        request_timeout_s=self.timeout_s,
                        security=self.owner.security) as conn:
                    while self.partitions:
                        await self._truncate(conn)
                        if not await self._fetch(conn):
                            break  # a poll given up: a new connection, at once
            except (TrilogError, OSError) as exc:
                log.info("fetching from broker %d failed (%s); retrying in %.1f s",
                         self.leader, exc, self.backoff_s)
                if self.owner.leader_lost is not None:
                    await self.owner.leader_lost(self.leader, address)
                await trio.sleep(self.backoff_s)

    def _address(self) -> tuple[str, int] | None:
        for broker in self.owner.brokers():
            if broker.node_id == self.leader:
                return broker.host, broker.port
        return None

    # -- truncation -------------------------------------------------------------------------

    async def _truncate(self, conn) -> None:
        pending = {tp: st for tp, st in self.partitions.items()
                   if st.truncating and st.ready()}
        if not pending:
            return
        logs = self.logs
        R = OffsetForLeaderEpochRequest
        asked: dict[PartitionKey, tuple[FetchState, int | None]] = {}
        by_topic: dict[str, list] = {}
        for tp, st in pending.items():
            lg = logs.get_log(*tp)
            if lg is None:
                continue
            epoch = lg.latest_epoch
            asked[tp] = (st, epoch)
            by_topic.setdefault(tp[0], []).append(R.OffsetForLeaderTopic.OffsetForLeaderPartition(
                partition=tp[1], current_leader_epoch=st.leader_epoch,
                leader_epoch=epoch if epoch is not None else -1))
        request = R(replica_id=self.broker_id, topics=[
            R.OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in by_topic.items()])
        response = await conn.request(request, version=EPOCH_VERSION)
        for topic in response.topics:
            for p in topic.partitions:
                tp = (topic.topic, p.partition)
                entry = asked.get(tp)
                if entry is None or self.partitions.get(tp) is not entry[0]:
                    continue
                st, our_epoch = entry
                if p.error_code in _FENCED:
                    self.partitions.pop(tp, None)
                    continue
                if p.error_code != NO_ERROR:
                    st.not_yet(self.backoff_s)
                    continue
                st.failures = 0
                lg = logs.get_log(*tp)
                if lg is None:
                    continue
                target = _truncation_offset(lg, our_epoch, p.leader_epoch, p.end_offset)
                if target < lg.log_end_offset:
                    log.info("%s-%d: truncating from %d to %d (leader %d's end of epoch %d)",
                             tp[0], tp[1], lg.log_end_offset, target, self.leader,
                             p.leader_epoch)
                    await trio.to_thread.run_sync(logs.truncate_to, tp[0], tp[1], target,
                                                  limiter=self.replicas.limiter)
                st.truncating = False

    # -- fetching ---------------------------------------------------------------------------

    async def _fetch(self, conn) -> bool:
        """One Fetch of every partition ready; False if partitions came while it waited at
        the leader (it was given up, and the connection must go)."""
        logs = self.logs
        R = FetchRequest
        sent: dict[PartitionKey, FetchState] = {}
        by_topic: dict[str, list] = {}
        for tp, st in self.partitions.items():
            lg = logs.get_log(*tp)
            if st.truncating or lg is None or not st.ready():
                continue
            sent[tp] = st
            by_topic.setdefault(tp[0], []).append(R.FetchTopic.FetchPartition(
                partition=tp[1], current_leader_epoch=st.leader_epoch,
                fetch_offset=lg.log_end_offset, log_start_offset=lg.log_start_offset,
                partition_max_bytes=self.max_bytes))
        if not sent:
            if self._truncation_due():
                return True
            # Every partition waits for a retry: until the first is due, or wake().
            soonest = min((st.retry_at for st in self.partitions.values()),
                          default=trio.current_time() + self.backoff_s)
            await self._until_woken(trio.sleep_until, max(soonest, trio.current_time() + 0.001))
            return True
        request = R(replica_id=self.broker_id, max_wait_ms=self._wait_ms(),
                    min_bytes=self.min_bytes, max_bytes=0x7FFFFFFF, isolation_level=0,
                    session_id=0, session_epoch=-1,
                    topics=[R.FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()],
                    forgotten_topics_data=[])
        response = await self._until_woken(conn.request, request, version=FETCH_VERSION)
        if response is None:  # given up by wake()
            return False
        for topic in response.responses:
            for p in topic.partitions:
                tp = (topic.topic, p.partition_index)
                sent_state = sent.get(tp)
                if sent_state is None or self.partitions.get(tp) is not sent_state:
                    continue  # no longer ours to fetch (a LeaderAndIsr came meanwhile)
                lg = logs.get_log(*tp)
                if lg is None:
                    continue
                if p.error_code in _FENCED:
                    self.partitions.pop(tp, None)
                elif p.error_code in _NOT_YET:
                    sent_state.not_yet(self.backoff_s)
                elif p.error_code == OffsetOutOfRangeError.code:
                    await self._out_of_range(lg, p)
                elif p.error_code == NO_ERROR:
                    sent_state.failures = 0
                    await self._append(lg, tp, p)
        return True

    async def _until_woken(self, fn, *args, **kwargs):
        """``await fn(*args, **kwargs)``, or None once ``wake()`` gives it up."""
        self._poll = scope = trio.CancelScope()
        try:
            with scope:
                return await fn(*args, **kwargs)
            return None
        finally:
            self._poll = None

    def _wait_ms(self) -> int:
        """The long poll's wait: ``replica.fetch.wait.max.ms``, but none while a partition
        is to be truncated (added since the last truncation), and no longer than until a
        partition waiting to retry is due (both are asked for only between fetches)."""
        if self._truncation_due():
            return 0
        waiting = [st.retry_at for st in self.partitions.values() if not st.ready()]
        if not waiting:
            return self.wait_ms
        due_ms = math.ceil((min(waiting) - trio.current_time()) * 1000 - 1e-6)
        return max(1, min(self.wait_ms, due_ms))

    def _truncation_due(self) -> bool:
        logs = self.logs
        return any(st.truncating and st.ready() and logs.get_log(*tp) is not None
                   for tp, st in self.partitions.items())

    async def _append(self, lg: Log, tp: PartitionKey, p) -> None:
        data = p.records
        size = whole_batches_length(data) if data else 0
        if size:
            result = await self.replicas.append_as_follower(tp, memoryview(data)[:size])
            if result.error != NO_ERROR:  # this connection starts over after the backoff
                raise_for_code(result.error, f"appending what broker {self.leader} sent to "
                                             f"{tp[0]}-{tp[1]} failed")
        if p.high_watermark >= 0:
            lg.update_high_watermark(min(p.high_watermark, lg.log_end_offset))
        if lg.log_start_offset < p.log_start_offset <= lg.high_watermark:
            # DeleteRecords (or retention) moved the leader's log start: follow it (Kafka's
            # maybeIncrementLogStartOffset on a follower).
            try:
                await trio.to_thread.run_sync(self.logs.delete_records_before, tp[0],
                                              tp[1], p.log_start_offset,
                                              limiter=self.replicas.limiter)
            except TrilogError as exc:  # a compact-only topic: its start never moves so
                log.warning("%s-%d: cannot follow the leader's log start %d: %s", tp[0],
                            tp[1], p.log_start_offset, exc)

    async def _out_of_range(self, lg: Log, p) -> None:
        """Our fetch offset is outside the leader's log: below its start (retention moved
        it), start again at the leader's log start; above its end, truncation missed it."""
        if p.log_start_offset >= 0 and lg.log_end_offset < p.log_start_offset:
            log.warning("%s-%d: the leader's log starts at %d, past our end %d; starting "
                        "over there", lg.topic, lg.partition, p.log_start_offset,
                        lg.log_end_offset)
            await trio.to_thread.run_sync(self.logs.truncate_fully_and_start_at,
                                          lg.topic, lg.partition, p.log_start_offset,
                                          limiter=self.replicas.limiter)
        else:
            st = self.partitions.get((lg.topic, lg.partition))
            if st is not None:
                st.truncating = True


def _truncation_offset(lg: Log, our_epoch: int | None, leader_epoch: int,
                       leader_end: int) -> int:
    """Where a follower's log is cut after OffsetForLeaderEpoch (Kafka's
    ``truncationOffset``): with no epochs known on either side, the high watermark (0.8's
    rule); else the smaller of the leader's end of the epoch and ours for that epoch."""
    if our_epoch is None or leader_epoch < 0 or leader_end < 0:
        return min(lg.high_watermark, lg.log_end_offset)
    if leader_epoch == our_epoch:
        return min(leader_end, lg.log_end_offset)
    _epoch, our_end = lg.end_offset_for_epoch(leader_epoch)
    return min(leader_end, our_end, lg.log_end_offset)
