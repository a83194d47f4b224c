"""The controller's reads and writes of cluster state in ZooKeeper (Kafka's KafkaZkClient,
as the controller uses it): broker registrations, topic assignments, partition states and
the leaders' ISR change notifications.

Every write is conditional, so that two writers never overwrite each other blindly:

- a partition state is written with the znode version the view last saw (a new node with
  ``create``); a write that loses re-reads the state and decides again
  (``StateStore.update``), up to ``WRITE_ATTEMPTS`` times, after which the partition is
  left as it is until the next event about it decides again;
- a topic's assignment is rewritten for one partition at a time, leaving the others as
  ZooKeeper holds them, with the version it was read at;
- a partition's parents are created one by one, never the topic's node itself, so a topic
  deleted meanwhile is not brought back.

A state written by a controller with a higher epoch means this controller is stale: reading
one raises ``StaleController``, which ends the term.

What is read or written goes into the ``ClusterView`` given to the store, so the view
holds, for every state, the version the next write must name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import trio

from trilog._topic import PartitionKey
from trilog.broker.controller._errors import StaleController
from trilog.broker.controller._view import ClusterView
from trilog.errors import RemoteProtocolError
from trilog.zk import (
    BROKER_IDS,
    BROKER_TOPICS,
    CONTROLLER_EPOCH,
    ISR_CHANGE_NOTIFICATION,
    ISR_CHANGE_PREFIX,
    BadVersionError,
    BrokerRegistration,
    NodeExistsError,
    NoNodeError,
    PartitionState,
    ZooKeeper,
    ZooKeeperError,
    broker_path,
    decode_controller_epoch,
    decode_isr_change,
    decode_topic_assignment,
    encode_topic_assignment,
    partition_state_path,
    topic_path,
)

log = logging.getLogger("trilog.broker.controller")

#: a conditional write that keeps losing gives up after this many tries (the next event
#: about the partition decides again)
WRITE_ATTEMPTS = 5

#: what ``StateStore.update`` asks for each partition: the state to write given the one in
#: the view (None, or the same state: nothing to write)
Decide = Callable[[PartitionKey, PartitionState | None], PartitionState | None]


async def newer_controller_epoch(zk: ZooKeeper, epoch: int) -> bool:
    """Whether ``/controller_epoch`` is past ``epoch`` (True when it cannot be told: a
    stale controller must not take its place back on a guess)."""
    try:
        return decode_controller_epoch(await zk.get(CONTROLLER_EPOCH)) > epoch
    except (ZooKeeperError, RemoteProtocolError):
        return True


class StateStore:
    """Reads ZooKeeper into ``view`` and writes it back conditionally, for the controller of
    epoch ``epoch`` (see the module)."""

    def __init__(self, zk: ZooKeeper, view: ClusterView, epoch: int) -> None:
        self.zk = zk
        self.view = view
        self.epoch = epoch

    # -- brokers and topics ----------------------------------------------------------------

    async def read_broker_ids(self) -> list[str]:
        return await self.zk.get_children(BROKER_IDS)

    async def read_topic_names(self) -> list[str]:
        await self.zk.ensure_path(BROKER_TOPICS)
        return await self.zk.get_children(BROKER_TOPICS)

    async def read_brokers(self, children: Iterable[str]) -> dict[int, BrokerRegistration]:
        """The registrations of ``/brokers/ids``'s ``children`` (those that vanished or are
        malformed left out)."""
        brokers = {}
        for child in children:
            if not child.isdigit():
                continue
            broker_id = int(child)
            try:
                data = await self.zk.get(broker_path(broker_id))
                brokers[broker_id] = BrokerRegistration.decode(broker_id, data)
            except NoNodeError:
                continue  # gone meanwhile: the watch tells
            except RemoteProtocolError as exc:
                log.warning("ignoring broker %d: %s", broker_id, exc)
        return brokers

    async def read_assignment(self, topic: str, *, new: bool = True
                              ) -> dict[int, list[int]] | None:
        """``topic``'s assignment as ZooKeeper holds it now; None when it is gone or
        malformed (``new``: the topic is not known yet, else its assignment changed)."""
        try:
            data = await self.zk.get(topic_path(topic))
        except NoNodeError:
            return None
        try:
            return decode_topic_assignment(topic, data)
        except RemoteProtocolError as exc:
            if new:
                log.warning("ignoring topic %s: %s", topic, exc)
            else:
                log.warning("ignoring the new assignment of %s: %s", topic, exc)
            return None

    async def write_assignment(self, tp: PartitionKey, replicas: list[int]) -> bool:
        """Set ``tp``'s replicas in its topic's assignment node (conditionally, leaving the
        other partitions as they are) and in the view; False when the topic is gone."""
        topic, partition = tp
        for _attempt in range(WRITE_ATTEMPTS):
            try:
                data, version = await self.zk.get_versioned(topic_path(topic))
                assignment = decode_topic_assignment(topic, data)
                if partition not in assignment:
                    return False
                assignment[partition] = list(replicas)
                await self.zk.set(topic_path(topic), encode_topic_assignment(assignment),
                                  version=version)
            except NoNodeError:
                return False
            except BadVersionError:
                continue
            except RemoteProtocolError as exc:
                log.error("cannot reassign %s-%d: %s", topic, partition, exc)
                return False
            if topic in self.view.assignments:
                self.view.assignments[topic] = assignment
            return True
        log.warning("%s: its assignment kept changing; %s-%d not reassigned now", topic,
                    topic, partition)
        return False

    # -- partition states --------------------------------------------------------------------

    async def read_states(self, tps: Iterable[PartitionKey]) -> None:
        """``read_state`` for each of ``tps`` at once (the ZooKeeper client's threads)."""
        async with trio.open_nursery() as nursery:
            for tp in tps:
                nursery.start_soon(self.read_state, tp)

    async def read_state(self, tp: PartitionKey) -> None:
        """Read ``tp``'s state and version into the view; raises ``StaleController`` when
        a newer controller wrote it."""
        path = partition_state_path(*tp)
        try:
            data, version = await self.zk.get_versioned(path)
        except NoNodeError:
            self.view.forget_state(tp)
            return
        self.view.versions[tp] = version
        try:
            state = PartitionState.decode(data)
        except RemoteProtocolError as exc:
            log.error("%s is malformed (%s); it will be overwritten", path, exc)
            self.view.states.pop(tp, None)
            return
        if state.controller_epoch > self.epoch:
            raise StaleController(f"{path} was written by controller epoch "
                                  f"{state.controller_epoch}")
        self.view.states[tp] = state

    async def update(self, tps: Iterable[PartitionKey], decide: Decide) -> list[PartitionKey]:
        """Write ``decide(tp, state)`` for each partition (None or the same state: nothing
        to write), deciding again on the state another writer left; returns the partitions
        written."""
        written = []
        for tp in tps:
            for _attempt in range(WRITE_ATTEMPTS):
                current = self.view.states.get(tp)
                new = decide(tp, current)
                if new is None or new == current:
                    break
                if await self._write_state(tp, new):
                    written.append(tp)
                    log.info("%s-%d: leader %d, leader epoch %d, isr %s", tp[0], tp[1],
                             new.leader, new.leader_epoch, list(new.isr))
                    break
                if tp[0] not in self.view.assignments:
                    break
                await self.read_state(tp)
            else:
                log.warning("%s-%d: the state changed under %d writes; left as it is",
                            tp[0], tp[1], WRITE_ATTEMPTS)
        return written

    async def _write_state(self, tp: PartitionKey, state: PartitionState) -> bool:
        """Write ``state`` conditionally; False when another writer won (or the partition's
        topic is gone)."""
        path = partition_state_path(*tp)
        data = state.encode()
        try:
            version = self.view.versions.get(tp)
            if version is not None:
                version = await self.zk.set(path, data, version=version)
            else:
                await self._create_state(tp, data)
                version = 0
        except (BadVersionError, NodeExistsError, NoNodeError):
            return False
        self.view.set_state(tp, state, version)
        return True

    async def _create_state(self, tp: PartitionKey, data: bytes) -> None:
        path = partition_state_path(*tp)
        try:
            await self.zk.create(path, data)
            return
        except NoNodeError:
            pass
        # The parents, one by one and never the topic's node itself: a topic deleted
        # meanwhile is not brought back (NoNodeError).
        partitions = f"{topic_path(tp[0])}/partitions"
        for parent in (partitions, f"{partitions}/{tp[1]}"):
            try:
                await self.zk.create(parent)
            except NodeExistsError:
                pass
        await self.zk.create(path, data)

    # -- ISR change notifications ------------------------------------------------------------

    async def take_isr_changes(self, children: Iterable[str]) -> set[PartitionKey]:
        """The partitions named by the ``/isr_change_notification`` nodes ``children``,
        their states read again (known partitions only) and the nodes deleted."""
        changed: set[PartitionKey] = set()
        names = [c for c in children if c.startswith(ISR_CHANGE_PREFIX)]
        for name in names:
            path = f"{ISR_CHANGE_NOTIFICATION}/{name}"
            try:
                changed.update(decode_isr_change(await self.zk.get(path)))
            except NoNodeError:
                continue
            except RemoteProtocolError as exc:
                log.warning("ignoring %s: %s", path, exc)
        for tp in sorted(changed):
            if self.view.has_partition(tp):
                await self.read_state(tp)
        for name in names:
            try:
                await self.zk.delete(f"{ISR_CHANGE_NOTIFICATION}/{name}")
            except NoNodeError:
                pass
        return changed
