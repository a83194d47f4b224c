"""One controllership (a *term*, with controller epoch E): its lifetime, its event loop and
the handlers that turn events into decisions (Kafka's KafkaController event processing).

A term runs in a nursery that ``Controller`` cancels the moment this broker no longer
controls (or a ZooKeeper failure or a stale epoch ends it).  It starts by reading
everything from ZooKeeper into its ``ClusterView``, electing where no live leader leads and
telling every broker; then it runs:

- **one event loop** (Kafka's controller event queue): ZooKeeper watches (``/brokers/ids``,
  ``/brokers/topics`` and each topic's assignment, ``/isr_change_notification``,
  ``/admin/reassign_partitions``), the ControlledShutdown and ElectLeaders requests
  (``call``) and the leader-imbalance timer put events in a memory channel, and one task
  processes them one at a time, so that the view never changes under a decision;
- **one sender task per live broker** (``_channel.py``), fed by the requests each event
  makes (``_requests.py``), sent when the event is done.

ControlledShutdown, ElectLeaders and the leader-imbalance check are ``_leader_moves.py``'s,
run as events of the loop like the watches' (``call`` waits for the answer).

Decisions are the pure rules of ``_decisions.py``, applied by the ``PartitionStateMachine``
and written by the ``StateStore`` (conditional writes: a write that loses re-reads the
state and decides again).  Reassignments are ``_reassignment.py``'s, taken further after
every event that may let them move.

The parts are built here, each given what it needs, so none of them knows the term.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from typing import Any

import trio
from trio_util import AsyncValue

from trilog._topic import PartitionKey
from trilog.broker.configs._broker_config import BrokerConfig
from trilog.broker.controller._channel import ChannelManager
from trilog.broker.controller._leader_moves import LeaderMoves
from trilog.broker.controller._liveness import probe
from trilog.broker.controller._reassignment import Reassignments
from trilog.broker.controller._requests import (
    RequestBatch,
    RequestBuilder,
    inter_broker_address,
)
from trilog.broker.controller._state_machine import PartitionStateMachine
from trilog.broker.controller._store import StateStore
from trilog.broker.controller._view import ClusterView
from trilog.net import ClientSecurity
from trilog.zk import (
    BROKER_IDS,
    BROKER_TOPICS,
    ISR_CHANGE_NOTIFICATION,
    REASSIGN_PARTITIONS,
    BrokerRegistration,
    ZooKeeper,
    broker_path,
    topic_path,
)

log = logging.getLogger("trilog.broker.controller")

#: what the event loop runs, one at a time
Event = Callable[[], Awaitable[None]]
#: an event that takes longer is logged (every other event waits behind it)
SLOW_EVENT_S = 0.5
#: how often a fenced broker (found gone) is probed, in case it was not
FENCED_PROBE_S = 0.5
#: how long Metadata answers still list a fenced broker after its leadership moved: long
#: enough for the clients that lost their connection to it to ask and hear of the new
#: leaders while it is listed (``_requests.RequestBuilder.update_metadata``)
FENCED_LISTED_S = 1.0


class Call:
    """A request answered by the event loop (ControlledShutdown, ElectLeaders); ``result``
    stays None if the term ends first (the answer is then NOT_CONTROLLER)."""

    def __init__(self, fn: Callable[[Term], Awaitable[Any]]) -> None:
        self.fn = fn
        self.done = trio.Event()
        self.result: Any = None


class Term:
    """One controllership of broker ``broker_id`` with controller epoch ``epoch``, run in
    ``nursery`` (see the module).  ``watch_children(path)`` is the controller's children
    watch of ``path`` (shared by its terms); ``events_processed`` counts the events
    handled."""

    def __init__(self, zk: ZooKeeper, epoch: int, broker_id: int, config: BrokerConfig, *,
                 security: ClientSecurity | None, unclean_enabled: Callable[[str], bool],
                 watch_children: Callable[[str], Awaitable[AsyncValue]],
                 events_processed: AsyncValue[int], nursery: trio.Nursery) -> None:
        self.zk = zk
        self.epoch = epoch
        self.broker_id = broker_id
        self.config = config
        self.nursery = nursery
        self._watch_children = watch_children
        self._events_processed = events_processed
        self.view = ClusterView()
        self.store = StateStore(zk, self.view, epoch)
        self.machine = PartitionStateMachine(self.view, self.store, epoch, unclean_enabled)
        self.channels = ChannelManager(
            RequestBuilder(self.view, broker_id, epoch, config.inter_broker_listener.name),
            nursery, security=security, timeout_s=config["controller.socket.timeout.ms"] / 1000,
            on_gone=lambda reg: self.post(functools.partial(self._on_broker_gone, reg)))
        self.reassignments = Reassignments(zk, self.view, self.store, self.machine,
                                           self.channels.send)
        self.moves = LeaderMoves(self.view, self.machine, self.channels.send,
                                 config["leader.imbalance.per.broker.percentage"])
        self.calls: set[Call] = set()
        self._followed: dict[str, Callable[[], None]] = {}
        #: ``/brokers/ids``' children as the watch last gave them
        self._broker_ids: AsyncValue | None = None
        #: the probes of fenced brokers, by id (cancelled when the broker's node changes)
        self._fence_probes: dict[int, trio.CancelScope] = {}
        self._send_event, self._events = trio.open_memory_channel[Event](math.inf)

    def post(self, event: Event) -> None:
        self._send_event.send_nowait(event)

    def close(self) -> None:
        """The term is over: stop following nodes; unanswered calls get NOT_CONTROLLER."""
        for stop in self._followed.values():
            stop()
        self._followed.clear()
        for call in self.calls:
            call.done.set()
        self.calls.clear()

    async def call(self, fn: Callable[[Term], Awaitable[Any]]) -> Any:
        """``fn(term)`` run by the event loop, in its turn; None if the term ends first."""
        call = Call(fn)
        self.calls.add(call)
        self.post(functools.partial(self._answer, call))
        await call.done.wait()
        return call.result

    async def _answer(self, call: Call) -> None:
        try:
            call.result = await call.fn(self)
        finally:
            self.calls.discard(call)
            call.done.set()

    # -- the loop ------------------------------------------------------------------------------

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the watches, read everything, tell every broker (then ``task_status`` says
        the term is active), then process events."""
        brokers = self._broker_ids = await self._watch_children(BROKER_IDS)
        topics = await self._watch_children(BROKER_TOPICS)
        isr_changes = await self._watch_children(ISR_CHANGE_NOTIFICATION)
        await self._startup()
        # Watches post their latest value; the first (the value startup read, or a newer
        # one) is a no-op against the view, so nothing that changed meanwhile is missed.
        nursery = self.nursery
        nursery.start_soon(self._forward, brokers, self._on_brokers)
        nursery.start_soon(self._forward, topics, self._on_topics)
        nursery.start_soon(self._forward, isr_changes, self._on_isr_changes)
        if self.config["auto.leader.rebalance.enable"]:
            nursery.start_soon(self._rebalance_timer,
                               self.config["leader.imbalance.check.interval.seconds"])
        # Delivered now and after every change; each delivery re-reads the node, so a
        # reassignment left by the last controller resumes.
        self._followed[REASSIGN_PARTITIONS] = await self.zk.follow_data(
            REASSIGN_PARTITIONS, lambda _data: self.post(self.reassignments.on_node_changed))
        task_status.started()
        log.info("controller %d (epoch %d) started: %d live brokers, %d partitions",
                 self.broker_id, self.epoch, len(self.view.live), len(self.view.states))
        async for event in self._events:
            started = trio.current_time()
            await event()
            self._events_processed.value += 1
            took = trio.current_time() - started
            if took > SLOW_EVENT_S:
                log.warning("controller %d: an event (%s) took %.1f s", self.broker_id,
                            getattr(event, "func", event).__name__, took)

    async def _forward(self, value: AsyncValue, handle: Callable[[list[str]], Awaitable[None]]
                       ) -> None:
        async with aclosing(value.eventual_values(lambda v: v is not None)) as values:
            async for children in values:
                self.post(functools.partial(handle, children))

    async def _rebalance_timer(self, interval_s: float) -> None:
        while True:
            await trio.sleep(interval_s)
            self.post(self.moves.rebalance)

    # -- startup -------------------------------------------------------------------------------

    async def _startup(self) -> None:
        view = self.view
        view.live = await self.store.read_brokers(await self.store.read_broker_ids())
        for broker_id in sorted(view.live):
            self.channels.open(view.live[broker_id])
            await self._follow_broker(broker_id)
        for topic in sorted(await self.store.read_topic_names()):
            await self._add_topic(topic)
        fresh = {tp for tp in view.partitions() if tp not in view.states}
        written = await self.machine.elect_offline(list(view.partitions()))
        created = fresh & set(written)
        # Brokers that are not registered leave the ISRs that live leaders keep: after the
        # whole cluster went down, the first broker back must not lead with dead brokers in
        # its ISR (acks=all would wait for them until its lag check drops them).
        dead = {r for s in view.states.values() for r in s.isr} - set(view.live)
        await self.machine.remove_from_isr(view.followed_by(dead), dead)
        batch = RequestBatch()
        for tp in view.partitions():
            batch.add_leader_and_isr(view.recipients(tp), tp, is_new=tp in created)
        batch.update_metadata = True
        self.channels.send(batch)

    async def _add_topic(self, topic: str) -> list[PartitionKey]:
        """Read a topic's assignment, follow it and read its partitions' states; returns
        its partitions (none if the topic is gone or malformed)."""
        assignment = await self.store.read_assignment(topic)
        if assignment is None:
            return []
        self.view.assignments[topic] = assignment
        self._followed[topic] = await self.zk.follow_data(
            topic_path(topic), functools.partial(self._assignment_data, topic))
        tps = [(topic, p) for p in sorted(assignment)]
        await self.store.read_states(tps)
        return tps

    def _assignment_data(self, topic: str, data: bytes | None) -> None:
        if data is not None:
            self.post(functools.partial(self._on_assignment, topic))

    # -- broker changes ------------------------------------------------------------------------

    async def _follow_broker(self, broker_id: int) -> None:
        """Follow ``broker_id``'s registration node: a broker that restarts at once deletes
        its dead process's node and registers again, which the children watch may show as
        no change at all (the same ids); its data (a new timestamp) does change."""
        key = f"{BROKER_IDS}/{broker_id}"
        if key not in self._followed:
            self._followed[key] = await self.zk.follow_data(
                broker_path(broker_id), lambda _data: self.post(self._recheck_brokers))

    async def _recheck_brokers(self) -> None:
        if self._broker_ids is not None and self._broker_ids.value is not None:
            await self._on_brokers(self._broker_ids.value)

    async def _on_brokers(self, children: list[str]) -> None:
        view = self.view
        now = await self.store.read_brokers(children)
        for broker_id, dead in list(view.fenced.items()):
            if now.get(broker_id) == dead:
                del now[broker_id]  # still its dead life's registration
            else:
                self._unfence(broker_id)  # gone, or registered again: a new life
        gone = set(view.live) - set(now)
        # A broker that restarted within the watch's delay has a new registration: it is
        # treated as gone and back, as Kafka treats a bounced broker.
        bounced = {b for b in set(view.live) & set(now) if view.live[b] != now[b]}
        added = set(now) - set(view.live)
        if not (gone or bounced or added):
            return
        log.info("brokers: %s joined, %s left, %s restarted", sorted(added), sorted(gone),
                 sorted(bounced))
        batch = RequestBatch()
        removed = gone | bounced
        if removed:
            for broker_id in removed:
                self.channels.close(broker_id)
            view.live = dict(now)
            view.remove_brokers(removed)
            await self._brokers_removed(removed, batch)
        view.live = now
        joined = added | bounced
        if joined:
            for broker_id in sorted(joined):
                self.channels.open(view.live[broker_id])
                await self._follow_broker(broker_id)
            await self._brokers_added(joined, batch)
        batch.update_metadata = True
        self.channels.send(batch)
        await self.reassignments.advance(set(self.reassignments.under_way))

    # -- fast failover: a broker whose process is gone -----------------------------------------

    async def _on_broker_gone(self, registration: BrokerRegistration) -> None:
        """A sender found ``registration``'s broker gone (its listener refused): it leaves
        now, as if its session had ended, and stays out until that registration is replaced
        or vanishes, or a probe reaches it again (``_liveness.py``)."""
        view = self.view
        broker_id = registration.broker_id
        if view.live.get(broker_id) != registration:
            return  # left or registered again meanwhile
        log.warning("broker %d's process is gone (its listener refuses connections); "
                    "moving its leadership now, before its ZooKeeper session expires",
                    broker_id)
        view.fenced[broker_id] = registration
        view.still_listed.add(broker_id)
        self.channels.close(broker_id)
        view.remove_brokers({broker_id})
        batch = RequestBatch()
        await self._brokers_removed({broker_id}, batch)
        batch.update_metadata = True
        self.channels.send(batch)
        await self.reassignments.advance(set(self.reassignments.under_way))
        scope = self._fence_probes[broker_id] = trio.CancelScope()
        self.nursery.start_soon(self._probe_fenced, registration, scope)
        self.nursery.start_soon(self._unlist_later, registration)

    async def _unlist_later(self, registration: BrokerRegistration) -> None:
        await trio.sleep(FENCED_LISTED_S)
        self.post(functools.partial(self._unlist, registration))

    async def _unlist(self, registration: BrokerRegistration) -> None:
        """A fenced broker leaves the Metadata answers (``FENCED_LISTED_S`` after); every
        broker is told, also when it was unfenced meanwhile (its session ended)."""
        if self.view.fenced.get(registration.broker_id) == registration:
            self.view.still_listed.discard(registration.broker_id)
        batch = RequestBatch()
        batch.update_metadata = True
        self.channels.send(batch)

    async def _probe_fenced(self, registration: BrokerRegistration,
                            scope: trio.CancelScope) -> None:
        address = inter_broker_address(registration, self.config.inter_broker_listener.name)
        with scope:
            while await probe(*address) is not True:
                await trio.sleep(FENCED_PROBE_S)
            log.warning("broker %d answers again at %s:%d; it is live after all",
                        registration.broker_id, *address)
            self.post(functools.partial(self._on_broker_back, registration))

    async def _on_broker_back(self, registration: BrokerRegistration) -> None:
        if self.view.fenced.get(registration.broker_id) == registration:
            self._unfence(registration.broker_id)
            await self._recheck_brokers()

    def _unfence(self, broker_id: int) -> None:
        self.view.fenced.pop(broker_id, None)
        self.view.still_listed.discard(broker_id)
        scope = self._fence_probes.pop(broker_id, None)
        if scope is not None:
            scope.cancel()

    async def _brokers_removed(self, dead: set[int], batch: RequestBatch) -> None:
        """Kafka's onBrokerFailure: new leaders where the dead led, and the dead leave the
        ISRs they were in."""
        elected = await self.machine.elect_offline(self.view.led_by(dead))
        shrunk = await self.machine.remove_from_isr(self.view.followed_by(dead), dead)
        for tp in sorted(set(elected) | set(shrunk)):
            batch.add_leader_and_isr(self.view.recipients(tp), tp)

    async def _brokers_added(self, joined: set[int], batch: RequestBatch) -> None:
        """Kafka's onBrokerStartup: leaders where none could lead, and the brokers that
        joined are told about every partition they replicate."""
        view = self.view
        offline = view.without_eligible_leader()
        fresh = {tp for tp in offline if tp not in view.states}
        for tp in await self.machine.elect_offline(offline):
            batch.add_leader_and_isr(view.recipients(tp), tp, is_new=tp in fresh)
        for tp in view.partitions():
            mine = [b for b in sorted(joined) if b in view.replicas(tp)]
            if mine and tp in view.states:
                batch.add_leader_and_isr(mine, tp, is_new=tp in fresh)

    # -- topic changes -------------------------------------------------------------------------

    async def _on_topics(self, children: list[str]) -> None:
        now, known = set(children), set(self.view.assignments)
        batch = RequestBatch()
        new: list[PartitionKey] = []
        for topic in sorted(now - known):
            new.extend(await self._add_topic(topic))
        for topic in sorted(known - now):
            self._remove_topic(topic, batch)
        if new:
            await self._new_partitions(new, batch)
        if new or known - now:
            batch.update_metadata = True
            self.channels.send(batch)

    async def _on_assignment(self, topic: str) -> None:
        view = self.view
        old = view.assignments.get(topic)
        if old is None:
            return  # not followed any more (deleted), or not yet read: _on_topics reads it
        # The node as it is now: a delivery may be older than the controller's own writes
        # (a reassignment's), already in the view.  Gone: _on_topics removes it.
        assignment = await self.store.read_assignment(topic, new=False)
        if assignment is None or assignment == old:
            return
        moved = sorted(p for p in set(old) & set(assignment) if old[p] != assignment[p])
        if moved:
            log.warning("%s: the replicas of partitions %s changed outside a reassignment "
                        "(/admin/reassign_partitions); the new lists only show in metadata",
                        topic, moved)
        view.assignments[topic] = assignment
        new = [(topic, p) for p in sorted(set(assignment) - set(old))]
        for tp in new:
            await self.store.read_state(tp)
        batch = RequestBatch()
        await self._new_partitions(new, batch)
        batch.update_metadata = True
        self.channels.send(batch)

    async def _new_partitions(self, tps: list[PartitionKey], batch: RequestBatch) -> None:
        view = self.view
        fresh = {tp for tp in tps if tp not in view.states}
        created = fresh & set(await self.machine.elect_offline(tps))
        for tp in tps:
            if tp in view.states:
                batch.add_leader_and_isr(view.recipients(tp), tp, is_new=tp in created)

    def _remove_topic(self, topic: str, batch: RequestBatch) -> None:
        stop = self._followed.pop(topic, None)
        if stop is not None:
            stop()
        for tp in sorted(self.reassignments.topic_deleted(topic)):
            self.post(functools.partial(self.reassignments.remove_from_node, {tp}))
        live = set(self.view.live)
        for partition, replicas in sorted(self.view.remove_topic(topic).items()):
            batch.add_stop_replica([r for r in replicas if r in live], (topic, partition),
                                   delete=True)
        log.info("topic %s was deleted", topic)

    # -- ISR changes made by leaders ------------------------------------------------------------

    async def _on_isr_changes(self, children: list[str]) -> None:
        changed = await self.store.take_isr_changes(children)
        if changed:
            batch = RequestBatch()
            batch.update_metadata = True
            self.channels.send(batch)
            await self.reassignments.advance(changed & set(self.reassignments.under_way))
