"""The controller's partition state changes (Kafka's PartitionStateMachine and the
controller's removeReplicasFromIsr): a pure rule of ``_decisions.py`` applied to each
partition as the view holds it, written through the ``StateStore``.

Each method names the partitions it may change and returns those it wrote; the caller
tells the brokers about those.  A rule sees the view as it is at each write, so that a
write that lost to another writer is decided again on the state that writer left, and
eligibility is the view's: live brokers that are not shutting down.  Every state written
carries this controller's epoch and a new leader epoch, except where dead or stopping
followers only leave an ISR whose leader lives (``remove_from_isr``, and
``_decisions.elect_for_shutdown``): the leader and its epoch stay, as in Kafka's KRaft
controller (KAFKA-15021), and the brokers take the newer ISR by the state's version; a new
epoch would make every consumer of the partition check its position (OffsetForLeaderEpoch)
for nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from trilog._topic import PartitionKey
from trilog.broker.controller._decisions import (
    NO_LEADER,
    elect_for_reassignment,
    elect_for_shutdown,
    elect_offline,
    elect_preferred,
    without_followers,
)
from trilog.broker.controller._store import StateStore
from trilog.broker.controller._view import ClusterView
from trilog.zk import PartitionState


class PartitionStateMachine:
    """Elections and ISR changes for the controller of epoch ``epoch``;
    ``unclean_enabled(topic)`` is the topic's ``unclean.leader.election.enable``."""

    def __init__(self, view: ClusterView, store: StateStore, epoch: int,
                 unclean_enabled: Callable[[str], bool]) -> None:
        self.view = view
        self.store = store
        self.epoch = epoch
        self.unclean_enabled = unclean_enabled

    async def elect_offline(self, tps: Iterable[PartitionKey]) -> list[PartitionKey]:
        """Elect leaders where there is no state yet or the leader may not lead (Kafka's
        OfflinePartitionLeaderElection)."""
        view = self.view

        def decide(tp: PartitionKey, state: PartitionState | None) -> PartitionState | None:
            live = view.eligible()
            if state is not None and state.leader in live:
                return None
            replicas = view.replicas(tp)
            if state is not None and not state.isr:
                # Created while none of its replicas was live: it never had a leader nor
                # a record, so it starts as a new partition would (with a newer epoch).
                new = elect_offline(replicas, None, live, self.epoch)
                if new.leader == NO_LEADER:
                    return None
                return PartitionState(new.leader, state.leader_epoch + 1, new.isr,
                                      self.epoch)
            return elect_offline(replicas, state, live, self.epoch,
                                 self.unclean_enabled(tp[0]))

        return await self.store.update([tp for tp in tps if view.replicas(tp)], decide)

    async def remove_from_isr(self, tps: Iterable[PartitionKey], dead: set[int]
                              ) -> list[PartitionKey]:
        """``dead`` followers leave the ISR (Kafka's removeReplicasFromIsr), the leader
        epoch unchanged; a partition without a live leader keeps its last ISR."""

        def decide(tp: PartitionKey, state: PartitionState | None) -> PartitionState | None:
            if state is None or state.leader == NO_LEADER or state.leader in dead:
                return None
            if not dead & set(state.isr):
                return None
            return without_followers(state, dead, self.epoch)

        return await self.store.update(tps, decide)

    async def elect_for_shutdown(self, tps: Iterable[PartitionKey]) -> list[PartitionKey]:
        """Leadership and ISR membership move away from the brokers shutting down (Kafka's
        ControlledShutdownLeaderElection)."""
        view = self.view

        def decide(tp: PartitionKey, state: PartitionState | None) -> PartitionState | None:
            if state is None or state.leader == NO_LEADER:
                return None
            return elect_for_shutdown(view.replicas(tp), state, set(view.live),
                                      view.shutting_down, self.epoch)

        return await self.store.update(tps, decide)

    async def elect_preferred(self, tps: Iterable[PartitionKey]) -> list[PartitionKey]:
        """The preferred (first) replica leads where it can (Kafka's
        PreferredReplicaPartitionLeaderElection)."""
        view = self.view
        return await self.store.update(tps, lambda tp, s: None if s is None else elect_preferred(
            view.replicas(tp), s, view.eligible(), self.epoch))

    async def elect_unclean(self, tps: Iterable[PartitionKey]) -> list[PartitionKey]:
        """Any live replica leads a partition without a live leader, in the ISR or not
        (ElectLeaders' unclean election, whatever the topic's setting)."""
        view = self.view

        def decide(tp: PartitionKey, state: PartitionState | None) -> PartitionState | None:
            if state is None or state.leader in view.eligible():
                return None
            new = elect_offline(view.replicas(tp), state, view.eligible(), self.epoch,
                                unclean=True)
            return new if new.leader != NO_LEADER else None

        return await self.store.update(tps, decide)

    async def elect_for_reassignment(self, tp: PartitionKey, target: list[int]) -> bool:
        """A leader among ``target`` (Kafka's ReassignPartitionLeaderElection)."""
        view = self.view
        return bool(await self.store.update([tp], lambda tp, s: None if s is None else
                                            elect_for_reassignment(target, s, view.eligible(),
                                                                   self.epoch)))

    async def next_leader_epoch(self, tp: PartitionKey,
                                leader: Callable[[PartitionState], int | None],
                                isr: Callable[[PartitionState], Iterable[int]]) -> bool:
        """Write ``tp``'s state with ``leader(state)`` (None: nothing to write),
        ``isr(state)`` and a new leader epoch, so that every replica takes the change."""

        def decide(tp: PartitionKey, state: PartitionState | None) -> PartitionState | None:
            if state is None:
                return None
            new_leader = leader(state)
            if new_leader is None:
                return None
            return PartitionState(new_leader, state.leader_epoch + 1, tuple(isr(state)),
                                  self.epoch)

        return bool(await self.store.update([tp], decide))
