"""Partition reassignment (Kafka's ``onPartitionReassignment``), for each partition listed
in ``/admin/reassign_partitions`` with its new replicas, the *target*:

1. the assignment becomes target + the old replicas not in it (Kafka's RAR) and the state
   gets a new leader epoch: LeaderAndIsr to all of them makes the new replicas create their
   logs and fetch, and tells the leader whose fetches to accept;
2. the controller waits until every target replica is in the ISR (the leader adds it when it
   caught up and posts an ``/isr_change_notification``);
3. if the leader is not in the target, one of the target replicas is elected
   (``elect_for_reassignment``) and LeaderAndIsr goes to every replica;
4. the old replicas leave the ISR (a new leader epoch) and the assignment becomes the
   target; LeaderAndIsr to the target replicas, StopReplica with ``delete_partitions`` to
   the removed ones, UpdateMetadata to all;
5. the partition leaves ``/admin/reassign_partitions`` (the node goes with the last one).

Every step is decided from what ZooKeeper holds (``next_step``, a pure function of the
target, the assignment, the state and the eligible brokers), so a new controller resumes a
reassignment where the last one left it: states are written before the assignment, and the
assignment before the node.  A partition whose topic is unknown, whose target names a
broker that is not live, or whose target is its assignment already, is dropped from the
node at once (``check_plan``).  A removed replica on a broker that is down when the
reassignment ends is not deleted (no StopReplica reaches it; as in Kafka, it stays on that
broker's disk).

The term takes a reassignment further after every event that may let it move: the node
changed, a broker joined or left, an ISR changed.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Collection, Iterable, Sequence

import trio

from trilog._topic import PartitionKey
from trilog.broker.controller._requests import RequestBatch
from trilog.broker.controller._state_machine import PartitionStateMachine
from trilog.broker.controller._store import WRITE_ATTEMPTS, StateStore
from trilog.broker.controller._view import ClusterView
from trilog.errors import RemoteProtocolError
from trilog.zk import (
    REASSIGN_PARTITIONS,
    BadVersionError,
    NoNodeError,
    PartitionState,
    ZooKeeper,
    decode_reassignment,
    encode_reassignment,
)

log = logging.getLogger("trilog.broker.controller")


class Plan(enum.Enum):
    """What becomes of a partition newly listed in ``/admin/reassign_partitions``."""

    START = "start"
    UNKNOWN_PARTITION = "unknown partition"
    TARGET_NOT_LIVE = "target not live"
    ASSIGNED_ALREADY = "assigned already"


class Step(enum.Enum):
    """The next step of a reassignment (see the module)."""

    GONE = "the partition is gone"
    ADD_REPLICAS = "1: add the target replicas"
    WAIT_FOR_ISR = "2: wait for the target replicas to join the ISR"
    ELECT_LEADER = "3: elect a leader among the target replicas"
    RETIRE_OLD = "4: retire the old replicas"


def check_plan(target: Sequence[int], replicas: Sequence[int], has_state: bool,
               live: Collection[int]) -> Plan:
    """Whether a reassignment of a partition assigned to ``replicas`` (``has_state``: its
    state is known) to ``target`` may start."""
    if not replicas or not has_state:
        return Plan.UNKNOWN_PARTITION
    if not set(target) <= set(live):
        return Plan.TARGET_NOT_LIVE
    if list(replicas) == list(target):
        return Plan.ASSIGNED_ALREADY
    return Plan.START


def next_step(target: Sequence[int], replicas: Sequence[int], state: PartitionState | None,
              eligible: Collection[int]) -> Step:
    """The step a reassignment to ``target`` takes now, given the partition's assignment
    ``replicas`` and ``state`` as ZooKeeper holds them."""
    if not replicas or state is None:
        return Step.GONE
    if not set(target) <= set(replicas):
        return Step.ADD_REPLICAS
    if not set(target) <= set(state.isr):
        return Step.WAIT_FOR_ISR
    if state.leader not in target or state.leader not in eligible:
        return Step.ELECT_LEADER
    return Step.RETIRE_OLD


def adding_replicas(target: Sequence[int], replicas: Sequence[int]) -> list[int]:
    """The assignment during a reassignment (Kafka's RAR): the target, then the old
    replicas that are not in it."""
    return list(target) + [r for r in replicas if r not in target]


class Reassignments:
    """The reassignments under way in one term (``under_way``: partition -> target),
    taken as far as they can go after each event (see the module).  ``send`` queues an
    event's requests to the brokers."""

    def __init__(self, zk: ZooKeeper, view: ClusterView, store: StateStore,
                 machine: PartitionStateMachine, send: Callable[[RequestBatch], None]
                 ) -> None:
        self.zk = zk
        self.view = view
        self.store = store
        self.machine = machine
        self.send = send
        #: partitions being reassigned, with their target replicas
        self.under_way: dict[PartitionKey, list[int]] = {}

    async def on_node_changed(self) -> None:
        """``/admin/reassign_partitions`` changed (or the term started): start the
        reassignments it lists that are not under way."""
        try:
            wanted = decode_reassignment(await self.zk.get(REASSIGN_PARTITIONS))
        except NoNodeError:
            return
        except RemoteProtocolError as exc:
            log.error("ignoring %s: %s", REASSIGN_PARTITIONS, exc)
            return
        dropped: set[PartitionKey] = set()
        started: set[PartitionKey] = set()
        for tp, target in sorted(wanted.items()):
            if tp in self.under_way:
                if self.under_way[tp] != target:
                    log.warning("%s-%d is being reassigned to %s already; ignoring %s",
                                tp[0], tp[1], self.under_way[tp], target)
                continue
            if self._start(tp, target):
                started.add(tp)
            else:
                dropped.add(tp)
        if dropped:
            await self.remove_from_node(dropped)
        await self.advance(started)

    def _start(self, tp: PartitionKey, target: list[int]) -> bool:
        replicas = self.view.replicas(tp)
        plan = check_plan(target, replicas, tp in self.view.states, self.view.live)
        if plan is Plan.UNKNOWN_PARTITION:
            log.error("cannot reassign %s-%d: no such partition", *tp)
        elif plan is Plan.TARGET_NOT_LIVE:
            log.error("cannot reassign %s-%d to %s: brokers %s are not live", tp[0], tp[1],
                      target, sorted(set(target) - set(self.view.live)))
        elif plan is Plan.ASSIGNED_ALREADY:
            log.info("%s-%d is assigned to %s already", tp[0], tp[1], target)
        else:
            log.info("reassigning %s-%d from %s to %s", tp[0], tp[1], replicas, target)
            self.under_way[tp] = list(target)
            return True
        return False

    async def advance(self, tps: Iterable[PartitionKey]) -> None:
        """Take the reassignments of ``tps`` (those under way) as far as they go now;
        those that are over leave the node."""
        done = set()
        for tp in sorted(tps):
            if tp in self.under_way and await self._run(tp, self.under_way[tp]):
                del self.under_way[tp]
                done.add(tp)
        if done:
            await self.remove_from_node(done)
        else:
            await trio.lowlevel.checkpoint()

    def topic_deleted(self, topic: str) -> set[PartitionKey]:
        """Forget the reassignments of ``topic``'s partitions; returns them (for the node)."""
        gone = {tp for tp in self.under_way if tp[0] == topic}
        for tp in gone:
            del self.under_way[tp]
        return gone

    async def _run(self, tp: PartitionKey, target: list[int]) -> bool:
        """Take ``tp``'s reassignment to ``target`` step by step as far as it can go now;
        True when it is over (done, or its partition is gone)."""
        while True:
            view = self.view
            step = next_step(target, view.replicas(tp), view.states.get(tp), view.eligible())
            if step is Step.GONE:
                log.warning("%s-%d is gone; its reassignment ends", *tp)
                return True
            if step is Step.WAIT_FOR_ISR:
                return False
            if step is Step.ADD_REPLICAS:
                if not await self._add_replicas(tp, target):
                    return False
            elif step is Step.ELECT_LEADER:
                if not await self._elect_leader(tp, target):
                    return False
            else:
                return await self._retire_old(tp, target)

    async def _add_replicas(self, tp: PartitionKey, target: list[int]) -> bool:
        """Step 1, with a new leader epoch so that the replicas already there take the new
        replica list."""
        replicas = self.view.replicas(tp)
        added = [r for r in target if r not in replicas]
        if not await self.store.write_assignment(tp, adding_replicas(target, replicas)):
            return False
        await self.machine.next_leader_epoch(tp, lambda s: s.leader, lambda s: s.isr)
        batch = RequestBatch()
        eligible = self.view.eligible()
        batch.add_leader_and_isr([r for r in replicas if r in eligible], tp)
        batch.add_leader_and_isr([r for r in added if r in eligible], tp, is_new=True)
        self.send(batch)
        log.info("%s-%d: replicas %s added; waiting for them to join the ISR", tp[0],
                 tp[1], added)
        return True

    async def _elect_leader(self, tp: PartitionKey, target: list[int]) -> bool:
        """Step 3."""
        if not await self.machine.elect_for_reassignment(tp, target):
            log.info("%s-%d: no replica of %s can lead now; the reassignment waits",
                     tp[0], tp[1], target)
            return False
        batch = RequestBatch()
        batch.add_leader_and_isr(self.view.recipients(tp), tp)
        self.send(batch)
        return True

    async def _retire_old(self, tp: PartitionKey, target: list[int]) -> bool:
        """Step 4: the old replicas leave the ISR, the assignment and the brokers."""
        replicas = self.view.replicas(tp)
        if not await self.machine.next_leader_epoch(
                tp, lambda s: s.leader if s.leader in target else None,
                lambda s: tuple(r for r in s.isr if r in target)):
            return False
        removed = [r for r in replicas if r not in target]
        if not await self.store.write_assignment(tp, list(target)):
            return False
        batch = RequestBatch()
        batch.add_leader_and_isr(self.view.recipients(tp), tp)
        batch.add_stop_replica([r for r in removed if r in self.view.live], tp, delete=True)
        self.send(batch)
        log.info("%s-%d: reassigned to %s (removed %s)", tp[0], tp[1], target, removed)
        return True

    async def remove_from_node(self, tps: set[PartitionKey]) -> None:
        """Take ``tps`` out of ``/admin/reassign_partitions``; delete it when empty."""
        for _attempt in range(WRITE_ATTEMPTS):
            try:
                data, version = await self.zk.get_versioned(REASSIGN_PARTITIONS)
            except NoNodeError:
                return
            try:
                left = {tp: r for tp, r in decode_reassignment(data).items() if tp not in tps}
            except RemoteProtocolError:
                return  # logged when read; left for the operator
            try:
                if left:
                    await self.zk.set(REASSIGN_PARTITIONS, encode_reassignment(left),
                                      version=version)
                else:
                    # Nobody writes a node that exists: the tools create it only when it
                    # does not.
                    await self.zk.delete(REASSIGN_PARTITIONS)
                return
            except NoNodeError:
                return
            except BadVersionError:
                continue
