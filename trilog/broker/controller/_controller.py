"""The controller's work (Kafka's KafkaController), for the broker that won the election of
``_election.py``: the public ``Controller``, which follows the election and runs a term
while this broker controls, and answers ControlledShutdown and ElectLeaders.

``Controller.run`` follows ``ControllerElection.current`` for the broker's life.  While this
broker is the controller (a *term*, with controller epoch E) it runs a ``Term``
(``_term.py``), in a cancel scope that is cancelled the moment it no longer is.  The term's
parts, each a module of this package:

- ``_view.py``: the cluster as the controller knows it (live and shutting-down brokers,
  assignments, partition states and their znode versions) and pure queries over it;
- ``_store.py``: its reads and conditional writes of ZooKeeper state;
- ``_decisions.py`` and ``_state_machine.py``: the pure election and ISR rules, and their
  application to the view, written through the store;
- ``_requests.py`` and ``_channel.py``: what the brokers are told (LeaderAndIsr,
  UpdateMetadata, StopReplica) and the per-broker senders;
- ``_reassignment.py``: partition reassignment, resumable from ZooKeeper;
- ``_leader_moves.py``: ControlledShutdown, ElectLeaders and the leader-imbalance check;
- ``_term.py``: the term's lifetime, its event loop and the handlers of ZooKeeper's events;
- ``_liveness.py``: whether a broker's process is gone (its listener refuses), which the
  term's senders ask when a connection ends, to move a dead broker's leadership at once;
- ``_controller_watch.py``: while another broker controls, this one watches that
  controller's process, and a dead controller's node is deleted so the election runs now.

A state written by a controller with a higher epoch, or a broker that answers
STALE_CONTROLLER_EPOCH, means this controller is stale: the term ends, and the next waits
until the election moves on (or, when ZooKeeper says no newer controller exists, a
moment).  A ZooKeeper failure during a term ends it; the term starts again (reading
everything anew) while this broker is still the controller.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio
from trio_util import AsyncValue

from trilog._topic import PartitionKey
from trilog.broker.configs._broker_config import BrokerConfig
from trilog.broker.controller._controller_watch import ControllerWatch
from trilog.broker.controller._election import ControllerElection
from trilog.broker.controller._errors import StaleController
from trilog.broker.controller._leader_moves import PREFERRED, UNCLEAN
from trilog.broker.controller._store import newer_controller_epoch
from trilog.broker.controller._term import Term
from trilog.broker.network._listeners import inter_broker_security
from trilog.errors import NO_ERROR, InvalidRequestError, NotControllerError
from trilog.protocol import (
    ApiKey,
    ControlledShutdownResponse,
    ElectLeadersResponse,
    Message,
    RequestHeader,
)
from trilog.zk import PartitionState, ZooKeeper, ZooKeeperError

log = logging.getLogger("trilog.broker.controller")

RETRY_S = 1.0


class Controller:
    """The controller's work while ``election`` says this broker is the controller (see the
    module).  ``unclean_enabled(topic)`` is the topic's ``unclean.leader.election.enable``.

    ``events_processed`` counts the events the loop has handled; ``active_epoch`` is the
    epoch of the term whose startup is done (0 while this broker does not control), so that
    tests and the broker can wait for either."""

    def __init__(self, zk: ZooKeeper, election: ControllerElection, broker_id: int,
                 config: BrokerConfig, unclean_enabled: Callable[[str], bool]) -> None:
        self.zk = zk
        self.election = election
        self.broker_id = broker_id
        self.config = config
        self.unclean_enabled = unclean_enabled
        #: how the controller connects to the brokers
        self.security = inter_broker_security(config)
        self.events_processed: AsyncValue[int] = AsyncValue(0)
        self.active_epoch: AsyncValue[int] = AsyncValue(0)
        self._term: Term | None = None
        self._last_states: dict[PartitionKey, PartitionState] = {}
        self._watches: dict[str, AsyncValue] = {}

    def states(self) -> dict[PartitionKey, PartitionState]:
        """The partition states as this controller knows them (its last term's, when it no
        longer controls)."""
        if self._term is not None:
            return dict(self._term.view.states)
        return dict(self._last_states)

    # -- following the election -----------------------------------------------------------

    async def run(self) -> None:
        """Control while this broker is the controller, and watch the controller's process
        while another broker is (``_controller_watch.py``); runs until cancelled."""
        watch = ControllerWatch(self.zk, self.election, self.broker_id,
                                listener=self.config.inter_broker_listener.name,
                                security=self.security,
                                timeout_s=self.config["controller.socket.timeout.ms"] / 1000)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch.run)
            await self._follow_election()

    async def _follow_election(self) -> None:
        current = self.election.current
        while True:
            await current.wait_value(lambda _: self.election.is_controller)
            epoch = self.election.epoch
            try:
                await self._run_term(epoch)
            except* StaleController:
                log.error("controller %d (epoch %d) is stale; stopping", self.broker_id, epoch)
                if await newer_controller_epoch(self.zk, epoch):
                    await current.wait_value(lambda v: v != (self.broker_id, epoch))
                else:
                    await trio.sleep(RETRY_S)
            except* ZooKeeperError as group:
                log.warning("controller %d (epoch %d) lost ZooKeeper (%s); starting over",
                            self.broker_id, epoch, group.exceptions[0])
                await trio.sleep(RETRY_S)

    async def _run_term(self, epoch: int) -> None:
        term: Term | None = None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._end_when_not_controller, epoch, nursery.cancel_scope)
                term = self._term = Term(
                    self.zk, epoch, self.broker_id, self.config, security=self.security,
                    unclean_enabled=self.unclean_enabled, watch_children=self.watch_children,
                    events_processed=self.events_processed, nursery=nursery)
                await nursery.start(term.run)
                self.active_epoch.value = epoch
        finally:
            self._term = None
            if term is not None:
                self._last_states = dict(term.view.states)
                term.close()
            self.active_epoch.value = 0

    async def _end_when_not_controller(self, epoch: int, scope: trio.CancelScope) -> None:
        await self.election.current.wait_value(
            lambda _: not (self.election.is_controller and self.election.epoch == epoch))
        log.info("broker %d is no longer the controller (epoch %d)", self.broker_id, epoch)
        scope.cancel()

    async def watch_children(self, path: str) -> AsyncValue:
        """One children watch per path for the broker's life (kazoo's watches cannot be
        removed: terms share them)."""
        value = self._watches.get(path)
        if value is None:
            value = self._watches[path] = await self.zk.watch_children(path)
        return value

    # -- the APIs ---------------------------------------------------------------------------

    def apis(self) -> Mapping[int, Callable[[Any, Any], Awaitable[Any]]]:
        """ControlledShutdown (7) and ElectLeaders (43)."""
        return {ApiKey.CONTROLLED_SHUTDOWN: self.controlled_shutdown,
                ApiKey.ELECT_LEADERS: self.elect_leaders}

    async def _call(self, fn: Callable[[Term], Awaitable[Any]]) -> Any:
        """``fn(term)`` run by the event loop; None when this broker does not control."""
        term = self._term
        if term is None or not self.election.is_controller:
            await trio.lowlevel.checkpoint()
            return None
        return await term.call(fn)

    async def controlled_shutdown(self, request: Message, header: RequestHeader) -> Message:
        R = ControlledShutdownResponse
        result = await self._call(
            lambda term: term.moves.controlled_shutdown(request.broker_id))
        if result is None:
            return R(error_code=NotControllerError.code, remaining_partitions=[])
        code, remaining = result
        return R(error_code=code, remaining_partitions=[
            R.RemainingPartition(topic_name=t, partition_index=p) for t, p in remaining])

    async def elect_leaders(self, request: Message, header: RequestHeader) -> Message:
        R = ElectLeadersResponse
        asked: list[PartitionKey] | None = None
        if request.topic_partitions is not None:
            asked = [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
        kind = request.election_type if header.api_version >= 1 else PREFERRED
        top = NO_ERROR
        results: dict[PartitionKey, tuple[int, str | None]]
        if kind not in (PREFERRED, UNCLEAN):
            top = InvalidRequestError.code
            results = {tp: (InvalidRequestError.code, f"unknown election type {kind}")
                       for tp in asked or ()}
            await trio.lowlevel.checkpoint()
        else:
            answered = await self._call(lambda term: term.moves.elect_leaders(kind, asked))
            if answered is None:
                top = NotControllerError.code
                results = {tp: (NotControllerError.code, None) for tp in asked or ()}
            else:
                results = answered
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), (code, message) in sorted(results.items()):
            by_topic.setdefault(topic, []).append(R.ReplicaElectionResult.PartitionResult(
                partition_id=partition, error_code=code, error_message=message))
        return R(throttle_time_ms=0, error_code=top if header.api_version >= 1 else NO_ERROR,
                 replica_election_results=[
                     R.ReplicaElectionResult(topic=t, partition_result=r)
                     for t, r in by_topic.items()])
