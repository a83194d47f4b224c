"""A controlled shutdown (Kafka's ``controlledShutdown``): before a clustered broker stops, the
controller moves its leaderships to other in-sync replicas, so clients see no
unavailability.

The broker sends ControlledShutdown to the controller until it answers with no partition
left here, at most ``controlled.shutdown.max.retries`` times.  Partitions the controller has
moved are given up here at once (``step_down``), on every answer: their new leaders'
LeaderAndIsr may reach this broker only after it stopped reading, and an ``acks=all``
produce waiting here must not wait for followers that went over to them.  Partitions no
other live replica can lead stay led here until the broker stops.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from trilog._topic import PartitionKey
from trilog.errors import NO_ERROR, TrilogError
from trilog.net import ClientSecurity, open_connection
from trilog.protocol import ControlledShutdownRequest

if TYPE_CHECKING:
    from trilog.broker.cluster import ZooKeeperCluster
    from trilog.broker.replication._replica_manager import ReplicaManager

log = logging.getLogger("trilog.broker.replicas")


class ControlledShutdown:
    """One broker's controlled shutdown (see the module docstring)."""

    def __init__(self, replicas: ReplicaManager, cluster: ZooKeeperCluster, *,
                 max_retries: int, retry_backoff_ms: int, timeout_ms: int,
                 security: ClientSecurity | None) -> None:
        self.replicas = replicas
        self.cluster = cluster
        self.broker_id = replicas.broker_id
        self.max_retries = max_retries
        self.backoff_s = retry_backoff_ms / 1000
        self.timeout_s = timeout_ms / 1000
        self.security = security

    async def run(self) -> bool:
        """Ask until this broker leads nothing (True), or give up (False): no controller
        answered in time, or what is left cannot move."""
        for attempt in range(self.max_retries + 1):
            if attempt:
                await trio.sleep(self.backoff_s)
            answer = await self._ask()
            if answer is None:
                continue
            error, remaining = answer
            if error == NO_ERROR and not remaining:
                log.info("controlled shutdown done: this broker leads no partition")
                self.step_down()
                return True
            log.info("controlled shutdown: error %d, %d partitions still led here", error,
                     len(remaining))
            if error != NO_ERROR:
                continue
            self.step_down(keep=set(remaining))
            if not self._movable(remaining):
                log.info("controlled shutdown: no other live replica can lead them")
                return False
        log.warning("controlled shutdown did not complete; stopping anyway")
        return False

    async def _ask(self) -> tuple[int, list[PartitionKey]] | None:
        """The controller's answer: its error code and the partitions still led here."""
        controller = self.cluster.controller_id
        address = next(((b.host, b.port) for b in self.cluster.brokers()
                        if b.node_id == controller), None)
        if address is None:
            log.info("controlled shutdown: no controller known yet")
            return None
        try:
            with trio.fail_after(self.timeout_s):
                async with open_connection(*address, client_id=f"broker-{self.broker_id}",
                                           request_timeout_s=self.timeout_s,
                                           security=self.security) as conn:
                    response = await conn.request(ControlledShutdownRequest(
                        broker_id=self.broker_id, broker_epoch=-1))
        except (TrilogError, OSError, trio.TooSlowError) as exc:
            log.info("controlled shutdown: controller %d did not answer (%s)", controller, exc)
            return None
        return response.error_code, [(p.topic_name, p.partition_index)
                                     for p in response.remaining_partitions]

    def _movable(self, remaining: list[PartitionKey]) -> bool:
        """Could another broker in the ISR of some of ``remaining`` lead it?  (The ISR,
        not the replicas: the controller moves leadership within it, and a broker found
        gone, still listed while registered, is in none.)"""
        live = {b.node_id for b in self.cluster.brokers()} - {self.broker_id}
        replicas: Callable[[str, int], tuple[list[int], list[int]]] = self.cluster.replica_info
        return any(set(replicas(*tp)[1]) & live for tp in remaining)

    def step_down(self, keep: set[PartitionKey] | None = None) -> None:
        """Lead nothing here any more but ``keep`` (partitions no other live replica can
        take).  The new leaders have the controller's word; a produce that still reaches
        this broker is sent elsewhere at once, and one waiting for its in-sync replicas
        answers NOT_LEADER_OR_FOLLOWER now, instead of waiting for followers that went over
        to the new leader."""
        keep = keep or set()
        for part in self.replicas.partitions.values():
            if part.leader == self.broker_id and part.tp not in keep:
                part.leader = -1
                part.signal()
        self.cluster.step_down(keep)
