"""A leader's ISR changes in a ZooKeeper cluster (the replica manager's ``IsrChannel``).

The leader writes the new ISR to the partition's state node with ZooKeeper's conditional
version: a newer state, written by the controller (a new leader epoch), wins and the write
is dropped, since the controller's LeaderAndIsr is on its way.  Once the leader has adopted
it, the change goes into its own metadata cache and an ``/isr_change_notification`` tells
the controller, which tells every broker (UpdateMetadata).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from trilog.zk import (
    ISR_CHANGE_NOTIFICATION,
    ISR_CHANGE_PREFIX,
    BadVersionError,
    PartitionState,
    ZooKeeperError,
    encode_isr_change,
    partition_state_path,
)

if TYPE_CHECKING:
    from trilog.broker.cluster import ZooKeeperCluster
    from trilog.broker.replication._partition import Partition

log = logging.getLogger("trilog.broker.replicas")


class ZooKeeperIsr:
    """``IsrChannel`` through ZooKeeper (see the module docstring)."""

    def __init__(self, broker_id: int, cluster: ZooKeeperCluster) -> None:
        self.broker_id = broker_id
        self.cluster = cluster

    async def write(self, part: Partition, isr: tuple[int, ...]) -> int | None:
        state = PartitionState(self.broker_id, part.leader_epoch, isr, part.controller_epoch)
        try:
            return await self.cluster.zk.set(
                partition_state_path(part.topic, part.partition), state.encode(),
                version=part.zk_version)
        except BadVersionError:
            log.info("%s-%d: the state changed in ZooKeeper; not writing ISR %s (the "
                     "controller's newer state will arrive)", part.topic, part.partition,
                     list(isr))
        except ZooKeeperError as exc:
            log.warning("%s-%d: cannot write ISR %s: %s", part.topic, part.partition,
                        list(isr), exc)
        return None

    async def announce(self, part: Partition) -> None:
        self.cluster.update_isr(part.tp, part.isr)
        try:
            await self.cluster.zk.create(
                f"{ISR_CHANGE_NOTIFICATION}/{ISR_CHANGE_PREFIX}",
                encode_isr_change([part.tp]), sequence=True, makepath=True)
        except ZooKeeperError as exc:
            log.warning("cannot post the ISR change of %s-%d: %s", part.topic,
                        part.partition, exc)
