"""One partition as this broker holds it (Kafka's ``Partition``): who leads it, at which
leader epoch, its in-sync replicas, and, on the leader, what it knows of each follower.

A ZooKeeper cluster's controller sets the state (LeaderAndIsr, ``_leadership.py``); a
standalone broker holds every partition as its one replica (``Partition.local``: leader,
sole in-sync replica, no leader epoch).  The decisions here are pure: the high watermark
the in-sync replicas allow, whether a follower caught up, which followers lag.  The replica
manager acts on them.  Runs in the trio thread only.
"""

from __future__ import annotations

import dataclasses

import trio

from trilog._topic import PartitionKey
from trilog.errors import FencedLeaderEpochError, NotEnoughReplicasError, UnknownLeaderEpochError


@dataclasses.dataclass
class FollowerState:
    """What the leader knows of one follower (Kafka's ``Replica``)."""

    log_end_offset: int = -1  # unknown until its first fetch
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = 0
    last_caught_up_ms: int = 0

    def fetched(self, fetch_offset: int, leader_leo: int, now_ms: int) -> None:
        """A fetch at ``fetch_offset`` (the follower's log end offset) while the leader's
        log ended at ``leader_leo`` (Kafka's ``updateFetchState``): caught up when it asked
        for the leader's end, or for at least what the leader had at its previous fetch."""
        if fetch_offset >= leader_leo:
            self.last_caught_up_ms = now_ms
        elif fetch_offset >= self.last_fetch_leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_ms = now_ms
        self.last_fetch_leader_leo = leader_leo


@dataclasses.dataclass(eq=False)
class Partition:
    """This broker's replica of one partition, as the controller last described it."""

    topic: str
    partition: int
    replicas: tuple[int, ...] = ()
    leader: int = -1
    leader_epoch: int = -1  # -1: a standalone broker's partition, whose batches carry none
    isr: tuple[int, ...] = ()
    zk_version: int = -1
    controller_epoch: int = 0
    followers: dict[int, FollowerState] = dataclasses.field(default_factory=dict)
    #: set (and replaced) whenever the high watermark or the ISR changes
    changed: trio.Event = dataclasses.field(default_factory=trio.Event)
    isr_update_pending: bool = False

    @classmethod
    def local(cls, tp: PartitionKey, broker_id: int) -> Partition:
        """A standalone broker's partition: its only replica leads it and is in sync."""
        return cls(tp[0], tp[1], replicas=(broker_id,), leader=broker_id, isr=(broker_id,))

    @property
    def tp(self) -> PartitionKey:
        return (self.topic, self.partition)

    def signal(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    @property
    def stamped_epoch(self) -> int | None:
        """The epoch a leader's appends stamp on their batches (None: none, standalone)."""
        return self.leader_epoch if self.leader_epoch >= 0 else None

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """A request carrying the leader epoch its sender knows (Fetch v9+,
        OffsetForLeaderEpoch v2+): an older one is fenced, a newer one unknown here yet.
        A partition without epochs (standalone) checks none."""
        ours = self.leader_epoch
        if current_leader_epoch < 0 or ours < 0:
            return
        if current_leader_epoch < ours:
            raise FencedLeaderEpochError(f"{self.topic}-{self.partition}: leader epoch "
                                         f"{current_leader_epoch} is older than {ours}")
        if current_leader_epoch > ours:
            raise UnknownLeaderEpochError(f"{self.topic}-{self.partition}: leader epoch "
                                          f"{current_leader_epoch} is newer than {ours}")

    def check_min_isr(self, needed: int) -> None:
        """Before an ``acks=all`` append: enough in-sync replicas?"""
        if len(self.isr) < needed:
            raise NotEnoughReplicasError(
                f"{self.topic}-{self.partition} has {len(self.isr)} in-sync replicas, "
                f"min.insync.replicas is {needed}")

    def high_watermark_bound(self, broker_id: int, log_end_offset: int) -> int:
        """The smallest log end offset of the in-sync replicas (ours is ``log_end_offset``;
        a follower not heard of yet counts as -1): where the high watermark may move."""
        ends = [log_end_offset]
        for replica in self.isr:
            if replica != broker_id:
                state = self.followers.get(replica)
                ends.append(state.log_end_offset if state is not None else -1)
        return min(ends)

    def may_join_isr(self, replica: int, high_watermark: int, epoch_start: int) -> bool:
        """Has follower ``replica`` (not in the ISR) caught up: its log end at or past the
        high watermark and the start of the leader's epoch (Kafka's ``isFollowerInSync``)?"""
        state = self.followers.get(replica)
        return (state is not None and not self.isr_update_pending
                and state.log_end_offset >= max(high_watermark, epoch_start))

    def credit_stall(self, stalled_ms: int, now_ms: int) -> None:
        """This leader's own loop stood still for ``stalled_ms`` (the process was paused, or
        starved): its followers could not be heard meanwhile, so that time does not count
        against them.  Their fetches queued during the stall are handled after it; judged
        without the credit, every follower would look ``lag_max_ms`` behind at once and the
        ISR would shrink to the leader, then grow back within a second."""
        for state in self.followers.values():
            if state.last_caught_up_ms:
                state.last_caught_up_ms = min(now_ms, state.last_caught_up_ms + stalled_ms)

    def lagging(self, broker_id: int, now_ms: int, lag_max_ms: int) -> set[int]:
        """The in-sync followers that have not caught up for ``lag_max_ms``."""
        return {r for r in self.isr if r != broker_id
                and now_ms - self.followers.get(r, FollowerState()).last_caught_up_ms
                > lag_max_ms}
