"""The controller's work: Kafka's KafkaController, ControllerChannelManager and partition
state machine, for the broker that won the election of ``_controller.py``.

``Controller.run`` follows ``ControllerElection.current`` for the broker's life.  While this
broker is the controller (a *term*, with controller epoch E) it runs, in a cancel scope that
is cancelled the moment it no longer is:

- **one event loop** (Kafka's controller event queue): ZooKeeper watches (``/brokers/ids``,
  ``/brokers/topics`` and each topic's assignment, ``/isr_change_notification``,
  ``/admin/reassign_partitions``), the ControlledShutdown and ElectLeaders requests and the
  leader-imbalance timer put events in
  a memory channel, and one task processes them one at a time, so that the controller's view
  (live brokers, assignments, partition states with their znode versions) never changes
  under a decision;
- **one sender task per live broker** (Kafka's RequestSendThread): requests to a broker
  leave in the order the loop made them; a broker that does not answer is retried (the same
  request, on a new connection) until it leaves ``/brokers/ids``.  The controller sends to
  itself over its own listener, like to any broker.

Decisions are the pure rules of ``_election.py``.  Every state is written with ZooKeeper's
conditional version (a new node with ``create``): a write that loses re-reads the state and
decides again, and a state written by a controller with a higher epoch means this one is
stale: the term ends, as it does when a broker answers STALE_CONTROLLER_EPOCH.

What the brokers are told:

- LeaderAndIsr (v1) to a partition's live replicas, not the ones shutting down, whenever
  its state changes, and to a broker that (re)joins for every partition it replicates;
  ``partition_epoch`` is the state node's ZooKeeper version (Kafka's zkVersion), which a
  leader needs to write ISR changes conditionally.
- UpdateMetadata (v4) to every live broker after every change.  It always carries *every*
  partition and every live broker: a broker may replace its metadata with it (a deleted
  topic is one that is no longer listed).
- StopReplica (v0): ``delete_partitions`` to the replicas of a deleted topic and to those a
  reassignment removed; without it to a broker shutting down, for the partitions it no
  longer leads.

**Partition reassignment** (Kafka's ``onPartitionReassignment``, for each partition listed
in ``/admin/reassign_partitions`` with its new replicas, the *target*):

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

Every step is decided from what ZooKeeper holds, so a new controller resumes a reassignment
where the last one left it: states are written before the assignment, and the assignment
before the node.  A partition whose topic is unknown, whose target names a broker that is
not live, or whose target is its assignment already, is dropped from the node at once.
A removed replica on a broker that is down when the reassignment ends is not deleted
(no StopReplica reaches it; as in Kafka, it stays on that broker's disk).

A ZooKeeper failure during a term ends it; the term starts again (reading everything anew)
while this broker is still the controller.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import aclosing
from typing import Any

import trio
from trio_util import AsyncValue

from trilog._topic import PartitionKey
from trilog.broker.configs._broker_config import BrokerConfig
from trilog.broker.controller._election import ControllerElection
from trilog.broker.controller._decisions import (
    NO_LEADER,
    elect_for_reassignment,
    elect_for_shutdown,
    elect_offline,
    elect_preferred,
    imbalanced_brokers,
)
from trilog.broker._limits import RateLimitedLog
from trilog.broker.network._listeners import SECURITY_PROTOCOL_IDS, inter_broker_security
from trilog.net import BrokerConnection, open_connection
from trilog.errors import (
    NO_ERROR,
    BrokerNotAvailableError,
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    InvalidRequestError,
    NetworkError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
    RemoteProtocolError,
    RequestTimedOutError,
    StaleControllerEpochError,
    TrilogError,
    UnknownTopicOrPartitionError,
)
from trilog.protocol import (
    ApiKey,
    ControlledShutdownResponse,
    ElectLeadersResponse,
    LeaderAndIsrRequest,
    Message,
    RequestHeader,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from trilog.zk import (
    BROKER_IDS,
    BROKER_TOPICS,
    CONTROLLER_EPOCH,
    ISR_CHANGE_NOTIFICATION,
    ISR_CHANGE_PREFIX,
    REASSIGN_PARTITIONS,
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
    decode_reassignment,
    decode_topic_assignment,
    encode_reassignment,
    encode_topic_assignment,
    partition_state_path,
    topic_path,
)

log = logging.getLogger("trilog.broker.controller")


RETRY_S = 1.0
#: a conditional write that keeps losing gives up after this many tries (the next event
#: about the partition decides again)
WRITE_ATTEMPTS = 5
#: Kafka's versions of the controller's requests (non-flexible, flat partition lists)
LEADER_AND_ISR_VERSION = 1
UPDATE_METADATA_VERSION = 4
STOP_REPLICA_VERSION = 0
#: ElectLeaders' election_type
PREFERRED, UNCLEAN = 0, 1

_unreachable = RateLimitedLog(log, 30.0)


class _StaleController(Exception):
    """This controller's epoch is not the newest: its term ends."""


Event = Callable[[], Awaitable[None]]


class _Call:
    """A request answered by the event loop (ControlledShutdown, ElectLeaders); ``result``
    stays None if the term ends first (the answer is then NOT_CONTROLLER)."""

    def __init__(self, fn: Callable[[_Term], Awaitable[Any]]) -> None:
        self.fn = fn
        self.done = trio.Event()
        self.result: Any = None


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
        self._term: _Term | None = None
        self._last_states: dict[PartitionKey, PartitionState] = {}
        self._watches: dict[str, AsyncValue] = {}

    def states(self) -> dict[PartitionKey, PartitionState]:
        """The partition states as this controller knows them (its last term's, when it no
        longer controls)."""
        if self._term is not None:
            return dict(self._term.states)
        return dict(self._last_states)

    # -- following the election -----------------------------------------------------------

    async def run(self) -> None:
        """Control while this broker is the controller; runs until cancelled."""
        current = self.election.current
        while True:
            await current.wait_value(lambda _: self.election.is_controller)
            epoch = self.election.epoch
            try:
                await self._run_term(epoch)
            except* _StaleController:
                log.error("controller %d (epoch %d) is stale; stopping", self.broker_id, epoch)
                if await self._newer_epoch_exists(epoch):
                    await current.wait_value(lambda v: v != (self.broker_id, epoch))
                else:
                    await trio.sleep(RETRY_S)
            except* ZooKeeperError as group:
                log.warning("controller %d (epoch %d) lost ZooKeeper (%s); starting over",
                            self.broker_id, epoch, group.exceptions[0])
                await trio.sleep(RETRY_S)

    async def _newer_epoch_exists(self, epoch: int) -> bool:
        try:
            return decode_controller_epoch(await self.zk.get(CONTROLLER_EPOCH)) > epoch
        except (ZooKeeperError, RemoteProtocolError):
            return True

    async def _run_term(self, epoch: int) -> None:
        term = _Term(self, epoch)
        try:
            async with trio.open_nursery() as nursery:
                term.nursery = nursery
                nursery.start_soon(self._end_when_not_controller, epoch, nursery.cancel_scope)
                self._term = term
                await term.run(nursery)
        finally:
            self._term = None
            self._last_states = dict(term.states)
            self.active_epoch.value = 0
            term.close()

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

    async def _call(self, fn: Callable[[_Term], Awaitable[Any]]) -> Any:
        """``fn(term)`` run by the event loop; None when this broker does not control."""
        term = self._term
        if term is None or not self.election.is_controller:
            await trio.lowlevel.checkpoint()
            return None
        call = _Call(fn)
        term.calls.add(call)
        term.post(functools.partial(term.answer, call))
        await call.done.wait()
        return call.result

    async def controlled_shutdown(self, request: Message, header: RequestHeader) -> Message:
        R = ControlledShutdownResponse
        result = await self._call(lambda term: term.controlled_shutdown(request.broker_id))
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
            answered = await self._call(lambda term: term.elect_leaders(kind, asked))
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


class _Batch:
    """The requests one event makes (Kafka's ControllerBrokerRequestBatch), sent together
    at its end: LeaderAndIsr, then UpdateMetadata, then StopReplica to each broker."""

    def __init__(self) -> None:
        self.leader_and_isr: dict[int, dict[PartitionKey, bool]] = {}
        self.update_metadata = False
        self.stop_replica: dict[tuple[int, bool], set[PartitionKey]] = {}

    def add_leader_and_isr(self, brokers: Iterable[int], tp: PartitionKey,
                           is_new: bool = False) -> None:
        for broker in brokers:
            self.leader_and_isr.setdefault(broker, {})[tp] = is_new
        self.update_metadata = True

    def add_stop_replica(self, brokers: Iterable[int], tp: PartitionKey,
                         delete: bool) -> None:
        for broker in brokers:
            self.stop_replica.setdefault((broker, delete), set()).add(tp)


class _Term:
    """One controllership (epoch ``epoch``): the controller's view and the event loop."""

    def __init__(self, controller: Controller, epoch: int) -> None:
        self.controller = controller
        self.zk = controller.zk
        self.epoch = epoch
        self.broker_id = controller.broker_id
        config = controller.config
        self.timeout_s = config["controller.socket.timeout.ms"] / 1000
        #: the listener brokers reach each other on, and how to connect to it
        self.inter_broker = config.inter_broker_listener.name
        self.security = controller.security
        self.nursery: trio.Nursery | None = None
        #: live brokers by id (from /brokers/ids)
        self.live: dict[int, BrokerRegistration] = {}
        #: brokers in a controlled shutdown: elections avoid them until they leave
        self.shutting_down: set[int] = set()
        self.assignments: dict[str, dict[int, list[int]]] = {}
        self.states: dict[PartitionKey, PartitionState] = {}
        #: the znode version of each state read or written (for conditional writes)
        self.versions: dict[PartitionKey, int] = {}
        self.channels: dict[int, _BrokerChannel] = {}
        self.calls: set[_Call] = set()
        #: partitions being reassigned, with their target replicas
        self.reassigning: dict[PartitionKey, list[int]] = {}
        self._followed: dict[str, Callable[[], None]] = {}
        self._send_event, self._events = trio.open_memory_channel[Event](math.inf)

    def post(self, event: Event) -> None:
        self._send_event.send_nowait(event)

    def close(self) -> None:
        for stop in self._followed.values():
            stop()
        self._followed.clear()
        for call in self.calls:
            call.done.set()  # unanswered: NOT_CONTROLLER
        self.calls.clear()

    # -- the loop ------------------------------------------------------------------------------

    async def run(self, nursery: trio.Nursery) -> None:
        """Start the watches, read everything, tell every broker, then process events."""
        brokers = await self.controller.watch_children(BROKER_IDS)
        topics = await self.controller.watch_children(BROKER_TOPICS)
        isr_changes = await self.controller.watch_children(ISR_CHANGE_NOTIFICATION)
        await self._startup()
        # Watches post their latest value; the first (the value startup read, or a newer
        # one) is a no-op against the view, so nothing that changed meanwhile is missed.
        nursery.start_soon(self._forward, brokers, self._on_brokers)
        nursery.start_soon(self._forward, topics, self._on_topics)
        nursery.start_soon(self._forward, isr_changes, self._on_isr_changes)
        config = self.controller.config
        if config["auto.leader.rebalance.enable"]:
            nursery.start_soon(self._rebalance_timer,
                               config["leader.imbalance.check.interval.seconds"])
        # Delivered now and after every change; each delivery re-reads the node, so a
        # reassignment left by the last controller resumes.
        self._followed[REASSIGN_PARTITIONS] = await self.zk.follow_data(
            REASSIGN_PARTITIONS, lambda _data: self.post(self._on_reassignments))
        self.controller.active_epoch.value = self.epoch
        log.info("controller %d (epoch %d) started: %d live brokers, %d partitions",
                 self.broker_id, self.epoch, len(self.live), len(self.states))
        processed = self.controller.events_processed
        async for event in self._events:
            await event()
            processed.value += 1

    async def _forward(self, value: AsyncValue, handle: Callable[[list[str]], Awaitable[None]]
                       ) -> None:
        async with aclosing(value.eventual_values(lambda v: v is not None)) as values:
            async for children in values:
                self.post(functools.partial(handle, children))

    async def _rebalance_timer(self, interval_s: float) -> None:
        while True:
            await trio.sleep(interval_s)
            self.post(self.rebalance)

    async def answer(self, call: _Call) -> None:
        try:
            call.result = await call.fn(self)
        finally:
            self.calls.discard(call)
            call.done.set()

    # -- startup -------------------------------------------------------------------------------

    async def _startup(self) -> None:
        await self.zk.ensure_path(BROKER_TOPICS)
        self.live = await self._read_brokers(await self.zk.get_children(BROKER_IDS))
        for broker_id in sorted(self.live):
            self._open_channel(broker_id)
        for topic in sorted(await self.zk.get_children(BROKER_TOPICS)):
            await self._add_topic(topic)
        fresh = {tp for tp in self._partitions() if tp not in self.states}
        written = await self._elect_offline(list(self._partitions()))
        created = fresh & set(written)
        batch = _Batch()
        for tp in self._partitions():
            batch.add_leader_and_isr(self._recipients(tp), tp, is_new=tp in created)
        batch.update_metadata = True
        self._flush(batch)

    async def _read_brokers(self, children: Iterable[str]) -> dict[int, BrokerRegistration]:
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

    async def _add_topic(self, topic: str) -> list[PartitionKey]:
        """Read a topic's assignment, follow it and read its partitions' states; returns
        its partitions (none if the topic is gone or malformed)."""
        try:
            data = await self.zk.get(topic_path(topic))
            assignment = decode_topic_assignment(topic, data)
        except NoNodeError:
            return []
        except RemoteProtocolError as exc:
            log.warning("ignoring topic %s: %s", topic, exc)
            return []
        self.assignments[topic] = assignment
        self._followed[topic] = await self.zk.follow_data(
            topic_path(topic), functools.partial(self._assignment_data, topic))
        tps = [(topic, p) for p in sorted(assignment)]
        async with trio.open_nursery() as nursery:  # the ZooKeeper client's threads at once
            for tp in tps:
                nursery.start_soon(self._read_state, tp)
        return tps

    def _assignment_data(self, topic: str, data: bytes | None) -> None:
        if data is not None:
            self.post(functools.partial(self._on_assignment, topic, data))

    # -- the view ------------------------------------------------------------------------------

    def _partitions(self) -> Iterable[PartitionKey]:
        for topic, parts in sorted(self.assignments.items()):
            for partition in sorted(parts):
                yield topic, partition

    def _replicas(self, tp: PartitionKey) -> list[int]:
        return self.assignments.get(tp[0], {}).get(tp[1], [])

    def _eligible(self) -> set[int]:
        """The brokers that may lead or join an ISR now."""
        return set(self.live) - self.shutting_down

    def _recipients(self, tp: PartitionKey) -> list[int]:
        """The brokers a partition's LeaderAndIsr goes to: its live replicas that are not
        shutting down."""
        eligible = self._eligible()
        return [r for r in self._replicas(tp) if r in eligible]

    # -- reading and writing states --------------------------------------------------------

    async def _read_state(self, tp: PartitionKey) -> None:
        path = partition_state_path(*tp)
        try:
            data, version = await self.zk.get_versioned(path)
        except NoNodeError:
            self.states.pop(tp, None)
            self.versions.pop(tp, None)
            return
        self.versions[tp] = version
        try:
            state = PartitionState.decode(data)
        except RemoteProtocolError as exc:
            log.error("%s is malformed (%s); it will be overwritten", path, exc)
            self.states.pop(tp, None)
            return
        if state.controller_epoch > self.epoch:
            raise _StaleController(f"{path} was written by controller epoch "
                                   f"{state.controller_epoch}")
        self.states[tp] = state

    async def _write_state(self, tp: PartitionKey, state: PartitionState) -> bool:
        """Write ``state`` conditionally; False when another writer won (or the partition's
        topic is gone)."""
        path = partition_state_path(*tp)
        data = state.encode()
        try:
            version = self.versions.get(tp)
            if version is not None:
                self.versions[tp] = await self.zk.set(path, data, version=version)
            else:
                await self._create_state(tp, data)
                self.versions[tp] = 0
        except (BadVersionError, NodeExistsError, NoNodeError):
            return False
        self.states[tp] = state
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

    async def _update(self, tps: Iterable[PartitionKey],
                      decide: Callable[[PartitionKey, PartitionState | None],
                                       PartitionState | None]) -> list[PartitionKey]:
        """Write ``decide(tp, state)`` for each partition (None or the same state: nothing
        to write), deciding again on the state another writer left; returns the partitions
        written."""
        written = []
        for tp in tps:
            for _attempt in range(WRITE_ATTEMPTS):
                current = self.states.get(tp)
                new = decide(tp, current)
                if new is None or new == current:
                    break
                if await self._write_state(tp, new):
                    written.append(tp)
                    log.info("%s-%d: leader %d, leader epoch %d, isr %s", tp[0], tp[1],
                             new.leader, new.leader_epoch, list(new.isr))
                    break
                if tp[0] not in self.assignments:
                    break
                await self._read_state(tp)
            else:
                log.warning("%s-%d: the state changed under %d writes; left as it is",
                            tp[0], tp[1], WRITE_ATTEMPTS)
        return written

    async def _elect_offline(self, tps: Iterable[PartitionKey]) -> list[PartitionKey]:
        """Elect leaders where there is no state yet or the leader is not live (Kafka's
        OfflinePartitionLeaderElection); returns the partitions written."""

        def decide(tp: PartitionKey, state: PartitionState | None) -> PartitionState | None:
            live = self._eligible()
            if state is not None and state.leader in live:
                return None
            replicas = self._replicas(tp)
            if state is not None and not state.isr:
                # Created while none of its replicas was live: it never had a leader nor
                # a record, so it starts as a new partition would (with a newer epoch).
                new = elect_offline(replicas, None, live, self.epoch)
                if new.leader == NO_LEADER:
                    return None
                return PartitionState(new.leader, state.leader_epoch + 1, new.isr,
                                      self.epoch)
            return elect_offline(replicas, state, live, self.epoch,
                                 self.controller.unclean_enabled(tp[0]))

        return await self._update([tp for tp in tps if self._replicas(tp)], decide)

    # -- broker changes ------------------------------------------------------------------------

    async def _on_brokers(self, children: list[str]) -> None:
        now = await self._read_brokers(children)
        gone = set(self.live) - set(now)
        # A broker that restarted within the watch's delay has a new registration: it is
        # treated as gone and back, as Kafka treats a bounced broker.
        bounced = {b for b in set(self.live) & set(now) if self.live[b] != now[b]}
        added = set(now) - set(self.live)
        if not (gone or bounced or added):
            return
        log.info("brokers: %s joined, %s left, %s restarted", sorted(added), sorted(gone),
                 sorted(bounced))
        batch = _Batch()
        removed = gone | bounced
        if removed:
            for broker_id in removed:
                self._close_channel(broker_id)
            self.live = {b: r for b, r in now.items() if b not in removed}
            self.shutting_down -= removed
            await self._brokers_removed(removed, batch)
        self.live = now
        joined = added | bounced
        if joined:
            for broker_id in sorted(joined):
                self._open_channel(broker_id)
            await self._brokers_added(joined, batch)
        batch.update_metadata = True
        self._flush(batch)
        await self._continue_reassignments(set(self.reassigning))

    async def _brokers_removed(self, dead: set[int], batch: _Batch) -> None:
        led = [tp for tp, s in sorted(self.states.items()) if s.leader in dead]
        elected = await self._elect_offline(led)

        def without_dead(tp: PartitionKey, state: PartitionState | None
                         ) -> PartitionState | None:
            # A follower leaves the ISR with a new leader epoch, as Kafka's controller's
            # removeReplicasFromIsr; an offline partition keeps its last ISR.
            if state is None or state.leader == NO_LEADER or state.leader in dead:
                return None
            isr = tuple(r for r in state.isr if r not in dead)
            if len(isr) == len(state.isr):
                return None
            return PartitionState(state.leader, state.leader_epoch + 1, isr, self.epoch)

        followed = [tp for tp, s in sorted(self.states.items())
                    if s.leader not in dead and set(s.isr) & dead]
        shrunk = await self._update(followed, without_dead)
        for tp in sorted(set(elected) | set(shrunk)):
            batch.add_leader_and_isr(self._recipients(tp), tp)

    async def _brokers_added(self, joined: set[int], batch: _Batch) -> None:
        live = self._eligible()
        offline = [tp for tp in self._partitions()
                   if tp not in self.states or self.states[tp].leader not in live]
        fresh = {tp for tp in offline if tp not in self.states}
        for tp in await self._elect_offline(offline):
            batch.add_leader_and_isr(self._recipients(tp), tp, is_new=tp in fresh)
        for tp in self._partitions():
            mine = [b for b in sorted(joined) if b in self._replicas(tp)]
            if mine and tp in self.states:
                batch.add_leader_and_isr(mine, tp, is_new=tp in fresh)

    def _open_channel(self, broker_id: int) -> None:
        assert self.nursery is not None
        channel = _BrokerChannel(self, self.live[broker_id])
        self.channels[broker_id] = channel
        self.nursery.start_soon(channel.run)

    def _close_channel(self, broker_id: int) -> None:
        channel = self.channels.pop(broker_id, None)
        if channel is not None:
            channel.close()

    # -- topic changes -------------------------------------------------------------------------

    async def _on_topics(self, children: list[str]) -> None:
        now, known = set(children), set(self.assignments)
        batch = _Batch()
        new: list[PartitionKey] = []
        for topic in sorted(now - known):
            new.extend(await self._add_topic(topic))
        for topic in sorted(known - now):
            self._remove_topic(topic, batch)
        if new:
            await self._new_partitions(new, batch)
        if new or known - now:
            batch.update_metadata = True
            self._flush(batch)

    async def _on_assignment(self, topic: str, data: bytes) -> None:
        old = self.assignments.get(topic)
        if old is None:
            return  # not followed any more (deleted), or not yet read: _on_topics reads it
        try:
            # The node as it is now: a delivery may be older than the controller's own
            # writes (a reassignment's), already in the view.
            data = await self.zk.get(topic_path(topic))
        except NoNodeError:
            return  # deleted: _on_topics removes it
        try:
            assignment = decode_topic_assignment(topic, data)
        except RemoteProtocolError as exc:
            log.warning("ignoring the new assignment of %s: %s", topic, exc)
            return
        if assignment == old:
            return
        moved = sorted(p for p in set(old) & set(assignment) if old[p] != assignment[p])
        if moved:
            log.warning("%s: the replicas of partitions %s changed outside a reassignment "
                        "(/admin/reassign_partitions); the new lists only show in metadata",
                        topic, moved)
        self.assignments[topic] = assignment
        new = [(topic, p) for p in sorted(set(assignment) - set(old))]
        for tp in new:
            await self._read_state(tp)
        batch = _Batch()
        await self._new_partitions(new, batch)
        batch.update_metadata = True
        self._flush(batch)

    async def _new_partitions(self, tps: list[PartitionKey], batch: _Batch) -> None:
        fresh = {tp for tp in tps if tp not in self.states}
        created = fresh & set(await self._elect_offline(tps))
        for tp in tps:
            if tp in self.states:
                batch.add_leader_and_isr(self._recipients(tp), tp, is_new=tp in created)

    def _remove_topic(self, topic: str, batch: _Batch) -> None:
        stop = self._followed.pop(topic, None)
        if stop is not None:
            stop()
        assignment = self.assignments.pop(topic, {})
        for tp in [tp for tp in self.reassigning if tp[0] == topic]:
            del self.reassigning[tp]
            self.post(functools.partial(self._remove_reassignments, {tp}))
        live = set(self.live)
        for partition, replicas in sorted(assignment.items()):
            tp = (topic, partition)
            self.states.pop(tp, None)
            self.versions.pop(tp, None)
            batch.add_stop_replica([r for r in replicas if r in live], tp, delete=True)
        log.info("topic %s was deleted", topic)

    # -- ISR changes made by leaders ------------------------------------------------------------

    async def _on_isr_changes(self, children: list[str]) -> None:
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
            if tp[0] in self.assignments and tp[1] in self.assignments[tp[0]]:
                await self._read_state(tp)
        for name in names:
            try:
                await self.zk.delete(f"{ISR_CHANGE_NOTIFICATION}/{name}")
            except NoNodeError:
                pass
        if changed:
            batch = _Batch()
            batch.update_metadata = True
            self._flush(batch)
            await self._continue_reassignments(changed & set(self.reassigning))

    # -- partition reassignment (see the module) ---------------------------------------------

    async def _on_reassignments(self) -> None:
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
            if tp in self.reassigning:
                if self.reassigning[tp] != target:
                    log.warning("%s-%d is being reassigned to %s already; ignoring %s",
                                tp[0], tp[1], self.reassigning[tp], target)
                continue
            replicas = self._replicas(tp)
            dead = sorted(set(target) - set(self.live))
            if not replicas or tp not in self.states:
                log.error("cannot reassign %s-%d: no such partition", *tp)
                dropped.add(tp)
            elif dead:
                log.error("cannot reassign %s-%d to %s: brokers %s are not live", tp[0],
                          tp[1], target, dead)
                dropped.add(tp)
            elif replicas == target:
                log.info("%s-%d is assigned to %s already", tp[0], tp[1], target)
                dropped.add(tp)
            else:
                log.info("reassigning %s-%d from %s to %s", tp[0], tp[1], replicas, target)
                self.reassigning[tp] = list(target)
                started.add(tp)
        if dropped:
            await self._remove_reassignments(dropped)
        await self._continue_reassignments(started)

    async def _continue_reassignments(self, tps: Iterable[PartitionKey]) -> None:
        done = set()
        for tp in sorted(tps):
            if tp in self.reassigning and await self._reassign_step(tp, self.reassigning[tp]):
                del self.reassigning[tp]
                done.add(tp)
        if done:
            await self._remove_reassignments(done)
        else:
            await trio.lowlevel.checkpoint()

    async def _reassign_step(self, tp: PartitionKey, target: list[int]) -> bool:
        """Take ``tp``'s reassignment to ``target`` as far as it can go now; True when it
        is over (done, or its partition is gone)."""
        replicas = self._replicas(tp)
        if not replicas or tp not in self.states:
            log.warning("%s-%d is gone; its reassignment ends", *tp)
            return True
        if not set(target) <= set(replicas):
            # Step 1: add the new replicas (RAR), with a new leader epoch so that the
            # replicas already there take the new replica list.
            added = [r for r in target if r not in replicas]
            if not await self._write_assignment(
                    tp, list(target) + [r for r in replicas if r not in target]):
                return False
            await self._update([tp], self._next_epoch(lambda s: s.leader, lambda s: s.isr))
            batch = _Batch()
            eligible = self._eligible()
            batch.add_leader_and_isr([r for r in replicas if r in eligible], tp)
            batch.add_leader_and_isr([r for r in added if r in eligible], tp, is_new=True)
            self._flush(batch)
            log.info("%s-%d: replicas %s added; waiting for them to join the ISR", tp[0],
                     tp[1], added)
        # Step 2: every target replica in the ISR.
        if not set(target) <= set(self.states[tp].isr):
            return False
        # Step 3: a leader among the target replicas.
        state = self.states[tp]
        if state.leader not in target or state.leader not in self._eligible():
            written = await self._update([tp], lambda tp, s: None if s is None else
                                         elect_for_reassignment(target, s, self._eligible(),
                                                                self.epoch))
            if not written:
                log.info("%s-%d: no replica of %s can lead now; the reassignment waits",
                         tp[0], tp[1], target)
                return False
            batch = _Batch()
            batch.add_leader_and_isr(self._recipients(tp), tp)
            self._flush(batch)
        # Step 4: the old replicas leave the ISR, the assignment and the brokers.
        if not await self._update([tp], self._next_epoch(
                lambda s: s.leader if s.leader in target else None,
                lambda s: tuple(r for r in s.isr if r in target))):
            return False
        removed = [r for r in replicas if r not in target]
        if not await self._write_assignment(tp, list(target)):
            return False
        batch = _Batch()
        batch.add_leader_and_isr(self._recipients(tp), tp)
        batch.add_stop_replica([r for r in removed if r in self.live], tp, delete=True)
        self._flush(batch)
        log.info("%s-%d: reassigned to %s (removed %s)", tp[0], tp[1], target, removed)
        return True

    def _next_epoch(self, leader: Callable[[PartitionState], int | None],
                    isr: Callable[[PartitionState], tuple[int, ...]]
                    ) -> Callable[[PartitionKey, PartitionState | None],
                                  PartitionState | None]:
        """A ``decide`` for ``_update``: the state with ``leader(state)`` (None: nothing to
        write), ``isr(state)`` and a new leader epoch."""
        def decide(tp: PartitionKey, state: PartitionState | None) -> PartitionState | None:
            if state is None:
                return None
            new_leader = leader(state)
            if new_leader is None:
                return None
            return PartitionState(new_leader, state.leader_epoch + 1, tuple(isr(state)),
                                  self.epoch)
        return decide

    async def _write_assignment(self, tp: PartitionKey, replicas: list[int]) -> bool:
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
            if topic in self.assignments:
                self.assignments[topic] = assignment
            return True
        log.warning("%s: its assignment kept changing; %s-%d not reassigned now", topic,
                    topic, partition)
        return False

    async def _remove_reassignments(self, tps: set[PartitionKey]) -> None:
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

    # -- requests answered by the loop ----------------------------------------------------

    async def controlled_shutdown(self, broker_id: int
                                  ) -> tuple[int, list[PartitionKey]]:
        """Kafka's doControlledShutdown: leadership and ISR membership move away from
        ``broker_id``; returns the error code and the partitions it still leads."""
        if broker_id not in self.live:
            await trio.lowlevel.checkpoint()
            return BrokerNotAvailableError.code, []
        self.shutting_down.add(broker_id)
        log.info("broker %d is shutting down", broker_id)
        mine = [tp for tp in self._partitions()
                if broker_id in self._replicas(tp) and tp in self.states]

        def decide(tp: PartitionKey, state: PartitionState | None) -> PartitionState | None:
            if state is None or state.leader == NO_LEADER:
                return None
            return elect_for_shutdown(self._replicas(tp), state, set(self.live),
                                      self.shutting_down, self.epoch)

        changed = await self._update(mine, decide)
        batch = _Batch()
        for tp in changed:
            batch.add_leader_and_isr(self._recipients(tp), tp)
        remaining = [tp for tp in mine if tp in self.states
                     and self.states[tp].leader == broker_id]
        for tp in mine:
            if tp not in remaining:
                batch.add_stop_replica([broker_id], tp, delete=False)
        batch.update_metadata = True
        self._flush(batch)
        return NO_ERROR, remaining

    async def elect_leaders(self, kind: int, asked: Sequence[PartitionKey] | None
                            ) -> dict[PartitionKey, tuple[int, str | None]]:
        """ElectLeaders' per-partition answers (Kafka's processReplicaLeaderElection)."""
        tps = list(self._partitions()) if asked is None else list(dict.fromkeys(asked))
        results: dict[PartitionKey, tuple[int, str | None]] = {}
        electable = []
        live = self._eligible()
        for tp in tps:
            state = self.states.get(tp)
            replicas = self._replicas(tp)
            if not replicas or state is None:
                results[tp] = (UnknownTopicOrPartitionError.code, None)
            elif kind == PREFERRED and state.leader == replicas[0]:
                results[tp] = (ElectionNotNeededError.code, None)
            elif kind == UNCLEAN and state.leader in live:
                results[tp] = (ElectionNotNeededError.code, None)
            else:
                electable.append(tp)

        def decide(tp: PartitionKey, state: PartitionState | None) -> PartitionState | None:
            if state is None:
                return None
            if kind == PREFERRED:
                return elect_preferred(self._replicas(tp), state, self._eligible(), self.epoch)
            if state.leader in self._eligible():
                return None
            new = elect_offline(self._replicas(tp), state, self._eligible(), self.epoch,
                                unclean=True)
            return new if new.leader != NO_LEADER else None

        written = set(await self._update(electable, decide))
        batch = _Batch()
        for tp in electable:
            if tp in written:
                results[tp] = (NO_ERROR, None)
                batch.add_leader_and_isr(self._recipients(tp), tp)
            elif kind == PREFERRED:
                results[tp] = (PreferredLeaderNotAvailableError.code,
                               f"preferred replica {self._replicas(tp)[0]} is not live or "
                               "not in the ISR")
            else:
                results[tp] = (EligibleLeadersNotAvailableError.code,
                               "no live replica can lead")
        if written:
            self._flush(batch)
        if asked is None:
            # Kafka's answer to "every partition": only those that needed an election.
            results = {tp: r for tp, r in results.items()
                       if r[0] != ElectionNotNeededError.code}
        return results

    async def rebalance(self) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance."""
        assignments = {tp: self._replicas(tp) for tp in self._partitions()}
        leaders = {tp: s.leader for tp, s in self.states.items()}
        percent = self.controller.config["leader.imbalance.per.broker.percentage"]
        imbalanced = imbalanced_brokers(assignments, leaders, percent)
        live = self._eligible()
        tps = [tp for broker, tps in sorted(imbalanced.items()) if broker in live for tp in tps]
        if not tps:
            await trio.lowlevel.checkpoint()
            return
        log.info("leader imbalance: electing preferred leaders for %d partitions", len(tps))
        written = await self._update(tps, lambda tp, s: None if s is None else elect_preferred(
            self._replicas(tp), s, self._eligible(), self.epoch))
        if written:
            batch = _Batch()
            for tp in written:
                batch.add_leader_and_isr(self._recipients(tp), tp)
            self._flush(batch)

    # -- requests to brokers ---------------------------------------------------------------

    def _flush(self, batch: _Batch) -> None:
        for broker_id, tps in sorted(batch.leader_and_isr.items()):
            channel = self.channels.get(broker_id)
            if channel is not None:
                channel.send(self._leader_and_isr(tps), LEADER_AND_ISR_VERSION)
        if batch.update_metadata:
            request = self._update_metadata()
            for channel in self.channels.values():
                channel.send(request, UPDATE_METADATA_VERSION)
        for (broker_id, delete), stopped in sorted(batch.stop_replica.items()):
            channel = self.channels.get(broker_id)
            if channel is not None:
                channel.send(StopReplicaRequest(
                    controller_id=self.broker_id, controller_epoch=self.epoch,
                    delete_partitions=delete, ungrouped_partitions=[
                        StopReplicaRequest.StopReplicaPartitionV0(topic_name=t,
                                                                  partition_index=p)
                        for t, p in sorted(stopped)]), STOP_REPLICA_VERSION)

    def _leader_and_isr(self, tps: dict[PartitionKey, bool]) -> Message:
        R = LeaderAndIsrRequest
        states = []
        leaders = set()
        for tp, is_new in sorted(tps.items()):
            state = self.states.get(tp)
            if state is None:
                continue
            leaders.add(state.leader)
            states.append(R.LeaderAndIsrPartitionState(
                topic_name=tp[0], partition_index=tp[1],
                controller_epoch=state.controller_epoch, leader=state.leader,
                leader_epoch=state.leader_epoch, isr=list(state.isr),
                partition_epoch=self.versions.get(tp, 0), replicas=self._replicas(tp),
                is_new=is_new))
        return R(controller_id=self.broker_id, controller_epoch=self.epoch,
                 ungrouped_partition_states=states, live_leaders=[
                     R.LeaderAndIsrLiveLeader(broker_id=b, host_name=address[0],
                                              port=address[1])
                     for b in sorted(leaders) if b in self.live
                     for address in [self.address(self.live[b])]])

    def address(self, broker: BrokerRegistration) -> tuple[str, int]:
        """Where brokers reach ``broker``: its inter-broker listener."""
        return broker.address(self.inter_broker) or (broker.host, broker.port)

    def _update_metadata(self) -> Message:
        R = UpdateMetadataRequest
        live = set(self.live)
        states = []
        for tp in self._partitions():
            state = self.states.get(tp)
            if state is None:
                continue
            replicas = self._replicas(tp)
            states.append(R.UpdateMetadataPartitionState(
                topic_name=tp[0], partition_index=tp[1],
                controller_epoch=state.controller_epoch, leader=state.leader,
                leader_epoch=state.leader_epoch, isr=list(state.isr),
                zk_version=self.versions.get(tp, 0), replicas=replicas,
                offline_replicas=[r for r in replicas if r not in live]))
        return R(controller_id=self.broker_id, controller_epoch=self.epoch,
                 ungrouped_partition_states=states, live_brokers=[
                     R.UpdateMetadataBroker(id=b.broker_id, rack=None, endpoints=[
                         R.UpdateMetadataBroker.UpdateMetadataEndpoint(
                             port=port, host=host, listener=name,
                             security_protocol=SECURITY_PROTOCOL_IDS[
                                 b.protocols.get(name, "PLAINTEXT")])
                         for name, host, port in (b.endpoints
                                                  or (("PLAINTEXT", b.host, b.port),))])
                     for _id, b in sorted(self.live.items())])


class _BrokerChannel:
    """Requests to one broker, in order, over one connection (Kafka's RequestSendThread):
    a request that fails on the network is sent again on a new connection until the
    broker leaves ``/brokers/ids`` (``close``)."""

    def __init__(self, term: _Term, broker: BrokerRegistration) -> None:
        self.term = term
        self.broker = broker
        self._send, self._receive = trio.open_memory_channel[tuple[Message, int]](math.inf)
        self._scope = trio.CancelScope()

    def send(self, request: Message, version: int) -> None:
        self._send.send_nowait((request, version))

    def close(self) -> None:
        self._scope.cancel()

    async def run(self) -> None:
        broker, term = self.broker, self.term
        host, port = term.address(broker)
        pending: tuple[Message, int] | None = None
        backoff = 0.1
        with self._scope:
            while True:
                try:
                    async with open_connection(
                            host, port, security=term.security,
                            client_id=f"controller-{term.broker_id}",
                            connect_timeout_s=term.timeout_s,
                            request_timeout_s=term.timeout_s) as conn:
                        backoff = 0.1
                        warned: set[int] = set()
                        while True:
                            if pending is None:
                                pending = await self._receive.receive()
                            await self._deliver(conn, *pending, warned)
                            pending = None
                except (NetworkError, RequestTimedOutError) as exc:
                    _unreachable.warning(broker.broker_id, "controller %d cannot reach "
                                         "broker %d at %s:%d (%s); retrying",
                                         term.broker_id, broker.broker_id, host, port, exc)
                except TrilogError as exc:  # not the network: the request is dropped
                    log.error("broker %d failed a %s request: %s", broker.broker_id,
                              pending[0].API_NAME if pending else "", exc)
                    pending = None
                await trio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    async def _deliver(self, conn: BrokerConnection, request: Message, version: int,
                       warned: set[int]) -> None:
        api_key = request.API_KEY
        if api_key not in conn.api_versions:
            if api_key not in warned:
                warned.add(api_key)
                log.warning("broker %d does not serve %s; not sent", self.broker.broker_id,
                            request.API_NAME)
            await trio.lowlevel.checkpoint()
            return
        response = await conn.request(request, version=version)
        if response.error_code == StaleControllerEpochError.code:
            raise _StaleController(f"broker {self.broker.broker_id} has seen a newer "
                                   "controller epoch")
        if response.error_code != NO_ERROR:
            log.warning("broker %d answered %s with error %d", self.broker.broker_id,
                        request.API_NAME, response.error_code)
        # Per partition, STALE_CONTROLLER_EPOCH is Kafka's answer to a leader epoch that is
        # not newer than the broker's (a state sent again, as a new controller does): no
        # news.  Other errors are logged.
        failed = sorted({(e.topic_name, e.partition_index, e.error_code)
                         for e in getattr(response, "partition_errors", ())
                         if e.error_code not in (NO_ERROR, StaleControllerEpochError.code)})
        if failed:
            log.warning("broker %d answered %s with partition errors %s",
                        self.broker.broker_id, request.API_NAME, failed)
