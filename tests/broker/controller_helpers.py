"""Helpers for the controller's part tests: an in-memory ZooKeeper that keeps znode versions
as ZooKeeper does, and a term's view, store and state machine over it (no server, no
brokers: ``test_control`` and ``test_reassign`` run the parts against the real ones)."""

from __future__ import annotations

from trilog.broker.controller._state_machine import PartitionStateMachine
from trilog.broker.controller._store import StateStore
from trilog.broker.controller._view import ClusterView
from trilog.zk import (
    REASSIGN_PARTITIONS,
    BadVersionError,
    BrokerRegistration,
    NodeExistsError,
    NoNodeError,
    PartitionState,
    decode_reassignment,
    decode_topic_assignment,
    encode_topic_assignment,
    partition_state_path,
    topic_path,
)


class MemoryZooKeeper:
    """The calls the controller's store and reassignment make, on a dict of
    ``path -> [data, version]``; ``interfere(path)`` runs before each ``set`` (a writer that
    gets there first)."""

    def __init__(self) -> None:
        self.nodes: dict[str, list] = {"/": [b"", 0]}
        self.interfere = lambda path: None

    def _parent(self, path: str) -> str:
        return path.rpartition("/")[0] or "/"

    async def get(self, path: str) -> bytes:
        return (await self.get_versioned(path))[0]

    async def get_versioned(self, path: str) -> tuple[bytes, int]:
        if path not in self.nodes:
            raise NoNodeError(path)
        data, version = self.nodes[path]
        return data, version

    async def create(self, path: str, value: bytes = b"", *, makepath: bool = False) -> str:
        if path in self.nodes:
            raise NodeExistsError(path)
        if self._parent(path) not in self.nodes:
            if not makepath:
                raise NoNodeError(self._parent(path))
            await self.create(self._parent(path), makepath=True)
        self.nodes[path] = [value, 0]
        return path

    async def set(self, path: str, value: bytes, *, version: int = -1) -> int:
        self.interfere(path)
        if path not in self.nodes:
            raise NoNodeError(path)
        node = self.nodes[path]
        if version != -1 and version != node[1]:
            raise BadVersionError(path)
        node[0], node[1] = value, node[1] + 1
        return node[1]

    async def delete(self, path: str) -> None:
        if path not in self.nodes:
            raise NoNodeError(path)
        del self.nodes[path]

    def state(self, topic: str, partition: int) -> PartitionState:
        return PartitionState.decode(self.nodes[partition_state_path(topic, partition)][0])

    def assignment(self, topic: str) -> dict[int, list[int]]:
        return decode_topic_assignment(topic, self.nodes[topic_path(topic)][0])

    def pending(self):
        """What ``/admin/reassign_partitions`` lists (None: no node)."""
        node = self.nodes.get(REASSIGN_PARTITIONS)
        return None if node is None else decode_reassignment(node[0])


async def zookeeper_with(topic: str, assignment, states) -> MemoryZooKeeper:
    """A ``MemoryZooKeeper`` holding ``topic``'s assignment and partition ``states``."""
    zk = MemoryZooKeeper()
    await zk.create(topic_path(topic), encode_topic_assignment(assignment), makepath=True)
    for partition, state in states.items():
        await zk.create(partition_state_path(topic, partition), state.encode(), makepath=True)
    return zk


class Parts:
    """A term's view (brokers ``live``), store and state machine over ``zk``, for the
    controller of epoch ``epoch``."""

    def __init__(self, zk: MemoryZooKeeper, live=(1, 2, 3, 4), epoch: int = 1) -> None:
        self.zk = zk
        self.view = ClusterView()
        self.view.live = {b: BrokerRegistration(b, "h", 9000 + b) for b in live}
        self.store = StateStore(zk, self.view, epoch)
        self.machine = PartitionStateMachine(self.view, self.store, epoch, lambda _t: False)

    async def load(self, topic: str) -> None:
        """Read ``topic`` into the view, as a term's startup does."""
        self.view.assignments[topic] = self.zk.assignment(topic)
        for partition in self.view.assignments[topic]:
            await self.store.read_state((topic, partition))

    async def join_isr(self, topic: str, partition: int, isr) -> None:
        """What a leader does once followers caught up, and the controller reading it."""
        path = partition_state_path(topic, partition)
        old = self.zk.state(topic, partition)
        await self.zk.set(path, PartitionState(old.leader, old.leader_epoch, tuple(isr),
                                               old.controller_epoch).encode())
        await self.store.read_state((topic, partition))
