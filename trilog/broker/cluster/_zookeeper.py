"""Cluster mode: brokers and topics in ZooKeeper, the seeds' layout (see ``trilog.zk``).

Each broker:
- registers ``/brokers/ids/<id>`` (ephemeral; a second broker with the same id fails to start,
  the node of this broker's own crashed process does not stop it: ``_registration.py``)
  and reuses or creates ``/cluster/id``;
- watches ``/brokers/ids`` and ``/brokers/topics``, caching every broker's address and every
  topic's assignment, so Metadata is answered from memory for the whole cluster;
- removes the logs of topics that disappear from ``/brokers/topics`` (DeleteTopics);
- re-creates its ephemeral nodes after a session expiry;
- stands in the controller election (``_controller.py``); Metadata names the winner.

Which broker leads which partition, and which replicas are in sync, this broker learns from
the controller: its replica manager (``_replicas.py``) takes LeaderAndIsr for the partitions
it holds and hands UpdateMetadata to ``update_metadata`` here, the cache Metadata is
answered from.  A ZooKeeper outage stops none of this broker's serving: the cache stays,
and the watch loops retry when ZooKeeper is back.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
from contextlib import aclosing, asynccontextmanager
from typing import TYPE_CHECKING, AsyncIterator, Callable, NamedTuple

import trio

from trilog.broker._limits import PartitionBudget
from trilog.broker.cluster._cluster import (
    BrokerInfo,
    Cluster,
    PartitionDescription,
    broker_info,
    check_new_topic,
    load_or_create_meta,
    new_cluster_id,
    plan_new_partitions,
)
from trilog.broker.cluster._registration import (
    Occupant,
    judge_occupant,
    read_recorded_session,
    record_session,
)
from trilog.broker.configs._topic_configs import TopicConfigs, ZooKeeperConfigStore
from trilog.broker.controller._election import ControllerElection
from trilog.broker.controller._liveness import probe
from trilog.broker.network._listeners import SECURITY_PROTOCOL_IDS, Listener
from trilog.broker.configs._topic_properties import validate_overrides
from trilog.errors import (
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    RemoteProtocolError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    TrilogError,
    UnknownTopicOrPartitionError,
)
from trilog.zk import (
    BROKER_IDS,
    BROKER_TOPICS,
    CLUSTER_ID,
    BrokerRegistration,
    NodeExistsError,
    NoNodeError,
    ZooKeeper,
    ZooKeeperError,
    assign_replicas,
    broker_path,
    decode_cluster_id,
    decode_topic_assignment,
    encode_cluster_id,
    encode_topic_assignment,
    open_zookeeper,
    topic_path,
)

if TYPE_CHECKING:
    from trilog.broker.configs._broker_config import BrokerConfig
    from trilog.storage import LogManager

log = logging.getLogger("trilog.broker.zk")

#: How long CreateTopics waits for the new topic to show in this broker's cache.
CREATE_WAIT_S = 5.0
RETRY_S = 1.0
#: how long past the session timeout a broker waits for its previous life's registration
REGISTER_MARGIN_S = 3.0
REGISTER_POLL_S = 0.2
#: how long Metadata answers wait for the controller after a leader's process was found gone
SETTLE_S = 0.5


class PartitionMeta(NamedTuple):
    """A partition as the controller's last UpdateMetadata described it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    #: replicas on brokers the controller does not count live (UpdateMetadata v4+)
    offline: tuple[int, ...] = ()


class BrokerIdInUseError(TrilogError):
    """Another live broker is registered with this broker.id."""


class ZooKeeperCluster(Cluster):
    def __init__(self, zk: ZooKeeper, broker: BrokerInfo, cluster_id: str, logs,
                 default_partitions: int, limiter: trio.CapacityLimiter,
                 topic_configs: TopicConfigs, default_replication_factor: int = 1,
                 inter_broker_listener: str | None = None,
                 partition_budget: PartitionBudget | None = None,
                 log_dirs: list[str] | None = None, session_timeout_ms: int = 6000) -> None:
        self.zk = zk
        #: where this broker records the session it registered in (``_registration.py``)
        self._log_dirs = list(log_dirs or ())
        self.session_timeout_s = session_timeout_ms / 1000
        self.partition_budget = partition_budget
        #: the listener name brokers reach each other on (their ``host``/``port``)
        self.inter_broker_listener = inter_broker_listener
        self.default_replication_factor = default_replication_factor
        self.broker = broker
        self.cluster_id = cluster_id
        self.topic_configs = topic_configs
        self._logs = logs
        self._default_partitions = default_partitions
        self._limiter = limiter
        self._brokers: dict[int, BrokerInfo] = {}
        self._assignments: dict[str, dict[int, list[int]]] = {}
        self._topics_view: dict[str, dict[int, int]] = {}
        #: partition states as the controller last sent them (UpdateMetadata)
        self._states: dict[tuple[str, int], PartitionMeta] = {}
        self.changed = trio.Event()  # replaced on every cache change; tests and waits use it
        # Kafka's partition-modification watch: each topic's assignment is followed, so
        # partitions added by CreatePartitions are served (``_apply_assignment_changes``).
        self._topics_lock = trio.Lock()  # one cache update at a time
        self._followed: dict[str, Callable[[], None]] = {}
        self._changed_assignments: dict[str, dict[int, list[int]]] = {}
        self._assignment_changed = trio.Event()
        #: who the controller is (``/controller``): this broker stands in the election
        self.controller = ControllerElection(zk, broker.node_id)
        #: brokers this broker lost a connection to (``peer_lost``), by the trio time until
        #: which Metadata waits for the controller's word on them
        self._gone: dict[int, float] = {}

    # -- the cached view -------------------------------------------------------------------

    def brokers(self) -> list[BrokerInfo]:
        return sorted(self._brokers.values(), key=lambda b: b.node_id)

    @property
    def controller_id(self) -> int:
        """The broker holding ``/controller`` (-1 while there is none: Metadata says so)."""
        return self.controller.controller_id

    def topics(self) -> dict[str, dict[int, int]]:
        return self._topics_view

    def replica_info(self, topic: str, partition: int) -> tuple[list[int], list[int]]:
        meta = self._states.get((topic, partition))
        if meta is not None:
            return list(meta.replicas), list(meta.isr)
        return list(self._assignments.get(topic, {}).get(partition, ())), []

    def describe_partition(self, topic: str, partition: int,
                           live: frozenset[int]) -> PartitionDescription:
        """The controller's word: with its leader epoch, and offline replicas as it counts
        them (a broker found gone is listed until its registration ends, but offline)."""
        meta = self._states.get((topic, partition))
        if meta is None:
            return super().describe_partition(topic, partition, live)
        return PartitionDescription(meta.leader_epoch, list(meta.replicas), list(meta.isr),
                                    list(meta.offline))

    def _rebuild_view(self) -> None:
        live = self._brokers
        states = self._states
        view: dict[str, dict[int, int]] = {}
        for topic, parts in self._assignments.items():
            leaders = view[topic] = {}
            for p in parts:
                meta = states.get((topic, p))
                leaders[p] = meta.leader if meta is not None and meta.leader in live else -1
        self._topics_view = view
        self.changed.set()
        self.changed = trio.Event()

    # -- what the controller tells ------------------------------------------------------------

    def update_metadata(self, request) -> None:
        """An UpdateMetadata request's partition states (any version) become the cache: the
        controller sends every partition each time, so what it leaves out is gone."""
        states = {}
        flat = getattr(request, "ungrouped_partition_states", None) or []
        grouped = [(t.topic_name, st) for t in getattr(request, "topic_states", None) or ()
                   for st in t.partition_states]
        for topic, st in [(st.topic_name, st) for st in flat] + grouped:
            states[(topic, st.partition_index)] = PartitionMeta(
                st.leader, st.leader_epoch, tuple(st.isr), tuple(st.replicas),
                tuple(getattr(st, "offline_replicas", None) or ()))
        self._states = states
        # The controller's live brokers replace this broker's list, as in Kafka's metadata
        # cache: they carry current addresses (a broker restarted on another port quickly
        # enough may look unchanged in /brokers/ids' children), and a broker that left is
        # gone from them (kept, it would look like a replica able to take leadership).  A
        # broker found gone is among them while registered, leading nothing and offline.
        live = getattr(request, "live_brokers", None)
        if live:
            brokers = {}
            protocols = {v: k for k, v in SECURITY_PROTOCOL_IDS.items()}
            for b in live:
                endpoints = getattr(b, "endpoints", None)
                if endpoints:
                    info = broker_info(b.id, [
                        Listener(getattr(e, "listener", None)
                                 or protocols.get(e.security_protocol, "PLAINTEXT"),
                                 protocols.get(e.security_protocol, "PLAINTEXT"), e.host, e.port)
                        for e in endpoints], self.inter_broker_listener)
                    if info is not None:
                        brokers[b.id] = info
                elif getattr(b, "v0_host", None):
                    brokers[b.id] = BrokerInfo(b.id, b.v0_host, b.v0_port)
            self._brokers = brokers
        # A broker found gone here is settled once the controller names it the leader of
        # nothing (it moved its leadership) or lists it no more; until then Metadata waits
        # (``wait_settled``).
        if self._gone:
            leaders = {meta.leader for meta in states.values()}
            self._gone = {b: t for b, t in self._gone.items()
                          if b in self._brokers and b in leaders}
        self._rebuild_view()

    async def peer_lost(self, broker_id: int, address: tuple[str, int]) -> None:
        """This broker's connection to broker ``broker_id`` at ``address`` failed (a
        follower's fetch from its leader).  If a probe finds its process gone, Metadata
        answers wait (``wait_settled``) for the controller's next word, at most
        ``SETTLE_S``: a client that lost its connection to a killed leader asks for metadata
        within milliseconds, and an answer naming the dead leader would make it wait for
        its next periodic refresh (librdkafka: 1 s), one saying "no leader" would make it
        back off; the controller names the new leader within tens of milliseconds.  Only
        when Metadata answers changes: what they say is the controller's."""
        if broker_id not in self._brokers or broker_id in self._gone:
            await trio.lowlevel.checkpoint()
            return
        self._gone[broker_id] = trio.current_time() + SETTLE_S
        if await probe(*address) is not False:
            self._gone.pop(broker_id, None)
            self.changed.set()
            self.changed = trio.Event()

    async def wait_settled(self) -> None:
        """Return when no broker this broker found gone awaits the controller's word (at
        once, nearly always; see ``peer_lost``)."""
        await trio.lowlevel.checkpoint()
        with trio.move_on_at(max(self._gone.values(), default=0.0)):
            while any(t > trio.current_time() for t in self._gone.values()):
                await self.changed.wait()

    def update_isr(self, tp: tuple[str, int], isr: tuple[int, ...]) -> None:
        """This broker, leading ``tp``, changed its ISR (the controller tells the others)."""
        meta = self._states.get(tp)
        if meta is not None:
            self._states = {**self._states, tp: meta._replace(isr=isr)}

    def step_down(self, keep: set[tuple[str, int]] | None = None) -> None:
        """This broker's controlled shutdown is done: its metadata no longer names it the
        leader of anything but ``keep`` (the controller's UpdateMetadata may not reach a
        broker that is draining), so clients asking it look elsewhere."""
        me = self.broker.node_id
        keep = keep or set()
        self._states = {tp: (m._replace(leader=-1) if m.leader == me and tp not in keep
                             else m)
                        for tp, m in self._states.items()}
        self._rebuild_view()

    def leadership_changed(self) -> None:
        """A LeaderAndIsr or StopReplica was applied: wake whoever follows leadership."""
        self.changed.set()
        self.changed = trio.Event()

    # -- start -----------------------------------------------------------------------------

    def _registration(self) -> BrokerRegistration:
        me = self.broker
        endpoints = me.endpoints or (Listener("PLAINTEXT", "PLAINTEXT", me.host, me.port),)
        return BrokerRegistration(me.node_id, me.host, me.port,
                                  endpoints=tuple((e.name, e.host, e.port) for e in endpoints),
                                  protocols={e.name: e.protocol for e in endpoints})

    async def register(self) -> None:
        """Create ``/brokers/ids/<id>``.  A node already there is judged
        (``_registration.py``): our dead predecessor's is deleted, one naming our endpoints
        is waited for (at most the session timeout and ``REGISTER_MARGIN_S``), any other is
        ``BrokerIdInUseError`` at once."""
        reg = self._registration()
        path = broker_path(self.broker.node_id)
        await self.zk.ensure_path(BROKER_IDS)
        deadline = trio.current_time() + self.session_timeout_s + REGISTER_MARGIN_S
        waiting = False
        while True:
            try:
                await self.zk.create(path, reg.encode(), ephemeral=True)
                break
            except NodeExistsError:
                pass
            verdict = await self._judge_occupant(path, reg)
            if verdict is None:
                continue  # it vanished meanwhile
            if verdict is Occupant.OURS:
                break
            if verdict is Occupant.DEAD:
                log.warning("broker %d's registration is its previous process's, which is "
                            "gone (the session its log dirs name); deleting it",
                            self.broker.node_id)
                with contextlib.suppress(NoNodeError):
                    await self.zk.delete(path)
                continue
            if verdict is Occupant.REFUSE or trio.current_time() >= deadline:
                waited = (f" (waited {self.session_timeout_s + REGISTER_MARGIN_S:.0f} s for "
                          "it to expire)" if waiting else "")
                raise BrokerIdInUseError(
                    f"broker.id {self.broker.node_id} is already registered in ZooKeeper by a "
                    f"live broker; give each broker its own broker.id{waited}")
            if verdict is Occupant.WAIT and not waiting:
                waiting = True
                log.warning("broker %d is still registered at the same endpoints, most likely "
                            "by its previous process; waiting up to %.1f s for that session "
                            "to expire", self.broker.node_id,
                            deadline - trio.current_time())
            await trio.sleep(REGISTER_POLL_S)
        session = self.zk.session_id
        if session is not None and self._log_dirs:
            await trio.to_thread.run_sync(record_session, self._log_dirs, session,
                                          limiter=self._limiter)
        log.info("registered broker %d at %s", self.broker.node_id,
                 ", ".join(f"{name}://{h}:{p}" for name, h, p in reg.endpoints))

    async def _judge_occupant(self, path: str, reg: BrokerRegistration) -> Occupant | None:
        """What to do about the node at ``path`` (None: it vanished meanwhile)."""
        try:
            data, owner = await self.zk.get_owned(path)
        except NoNodeError:
            return None
        try:
            endpoints = BrokerRegistration.decode(self.broker.node_id, data).endpoints
        except RemoteProtocolError:
            endpoints = ()
        recorded = await trio.to_thread.run_sync(read_recorded_session, self._log_dirs,
                                                 limiter=self._limiter)
        return judge_occupant(owner, endpoints, session=self.zk.session_id,
                              recorded=recorded, ours=reg.endpoints)

    async def load(self) -> None:
        """Read brokers and topics once, so the first Metadata answer is complete."""
        await self.zk.ensure_path(BROKER_TOPICS)
        await self._refresh_brokers(await self.zk.get_children(BROKER_IDS))
        await self._refresh_topics(await self.zk.get_children(BROKER_TOPICS))
        await self.controller.settle()

    async def run(self) -> None:
        """The watch loops and the session keeper; runs in the broker's nursery."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch, BROKER_IDS, self._refresh_brokers)
            nursery.start_soon(self._watch, BROKER_TOPICS, self._refresh_topics)
            nursery.start_soon(self._apply_assignment_changes)
            nursery.start_soon(self._session_keeper)
            nursery.start_soon(self.controller.run)

    async def _watch(self, path: str, refresh) -> None:
        while True:
            try:
                value = await self.zk.watch_children(path)
                async with aclosing(value.eventual_values(lambda v: v is not None)) as values:
                    async for children in values:
                        await refresh(children)
            except ZooKeeperError as exc:
                log.warning("watching %s failed (%s); retrying", path, exc)
                await trio.sleep(RETRY_S)

    async def _session_keeper(self) -> None:
        async with aclosing(self.zk.session_generation.transitions()) as sessions:
            async for _generation in sessions:
                log.warning("ZooKeeper session expired; registering broker %d again",
                            self.broker.node_id)
                await self._reregister()

    async def _reregister(self) -> None:
        while True:
            try:
                await self.register()
                return
            except BrokerIdInUseError:
                # Our old ephemeral node may linger until the old session is gone.
                await trio.sleep(RETRY_S)
            except ZooKeeperError as exc:
                log.warning("re-registration failed (%s); retrying", exc)
                await trio.sleep(RETRY_S)

    # -- refreshing the cache ------------------------------------------------------------------

    async def _refresh_brokers(self, children: list[str]) -> None:
        ids = {int(c) for c in children if c.isdigit()}
        brokers = {}
        for node_id in ids:
            # Read again even when known: a broker restarted on another port keeps its id.
            try:
                reg = BrokerRegistration.decode(node_id, await self.zk.get(broker_path(node_id)))
            except NoNodeError:
                continue
            except RemoteProtocolError as exc:
                log.warning("ignoring broker %d: %s", node_id, exc)
                continue
            info = registered_broker(reg, self.inter_broker_listener)
            if info is not None:
                brokers[node_id] = info
        self._brokers = brokers
        self._rebuild_view()

    async def _refresh_topics(self, children: list[str]) -> None:
        async with self._topics_lock:
            await self._refresh_topics_locked(children)
            await self._follow_assignments()

    async def _follow_assignments(self) -> None:
        """Follow the assignment of every known topic, and no longer the ones gone."""
        for topic in set(self._followed) - set(self._assignments):
            self._followed.pop(topic)()
        for topic in sorted(set(self._assignments) - set(self._followed)):
            try:
                self._followed[topic] = await self.zk.follow_data(
                    topic_path(topic), functools.partial(self._assignment_data, topic))
            except ZooKeeperError as exc:  # the next change of the topic list tries again
                log.warning("cannot watch the assignment of %s: %s", topic, exc)

    def _assignment_data(self, topic: str, data: bytes | None) -> None:
        if data is None:
            return  # the topic is being deleted: the children watch drops it
        try:
            self._changed_assignments[topic] = decode_topic_assignment(topic, data)
        except RemoteProtocolError as exc:
            log.warning("ignoring the new assignment of %s: %s", topic, exc)
            return
        self._assignment_changed.set()

    async def _apply_assignment_changes(self) -> None:
        """Show the partitions a changed assignment adds (the controller serves them)."""
        while True:
            await self._assignment_changed.wait()
            self._assignment_changed = trio.Event()
            async with self._topics_lock:
                changes, self._changed_assignments = self._changed_assignments, {}
                changed = {t: a for t, a in changes.items()
                           if t in self._assignments and a != self._assignments[t]}
                if not changed:
                    continue
                self._assignments = {**self._assignments, **changed}
                self._rebuild_view()
                for topic, assignment in changed.items():
                    log.info("topic %s now has %d partitions", topic, len(assignment))

    async def _refresh_topics_locked(self, children: list[str]) -> None:
        assignments = {}
        for topic in children:
            known = self._assignments.get(topic)
            if known is not None:
                assignments[topic] = known
                continue
            try:
                data = await self.zk.get(topic_path(topic))
                assignments[topic] = decode_topic_assignment(topic, data)
            except NoNodeError:
                continue
            except RemoteProtocolError as exc:
                log.warning("ignoring topic %s: %s", topic, exc)
                continue
        gone = set(self._assignments) - set(assignments)
        self._assignments = assignments
        self._rebuild_view()
        for topic in gone:
            await self._drop_topic(topic)

    async def _drop_topic(self, topic: str) -> None:
        local = [lg.partition for lg in self._logs.logs() if lg.topic == topic]
        self._states = {tp: m for tp, m in self._states.items() if tp[0] != topic}
        if local:
            await trio.to_thread.run_sync(self._delete_logs, topic, local, limiter=self._limiter)
            log.info("topic %s was deleted; removed its %d local partitions", topic, len(local))
        await self.topic_configs.forget(topic, stored=False)

    def _delete_logs(self, topic: str, partitions: list[int]) -> None:
        for p in partitions:
            self._logs.delete_log(topic, p)

    # -- admin -----------------------------------------------------------------------------

    async def create_topic(self, name, num_partitions, replication_factor=-1, assignment=None,
                           validate_only=False, configs=None) -> None:
        live = sorted(self._brokers)
        check_new_topic(name, num_partitions, replication_factor, len(live), assignment)
        if assignment:
            unknown = {b for r in assignment.values() for b in r} - set(live)
            if unknown:
                raise InvalidReplicaAssignmentError(f"brokers {sorted(unknown)} are not live")
        else:
            n = self._default_partitions if num_partitions == -1 else num_partitions
            factor = (self.default_replication_factor if replication_factor == -1
                      else replication_factor)
            if factor > len(live):
                raise InvalidReplicationFactorError(
                    f"Replication factor: {factor} larger than available brokers: {len(live)}.")
            start = random.randrange(len(live))
            assignment = assign_replicas(n, live, start=start, replication_factor=factor,
                                         shift=random.randrange(len(live)))
        if name in self._assignments:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        if self.partition_budget is not None:
            here = sum(1 for r in assignment.values() if self.broker.node_id in r)
            self.partition_budget.check(name, len(assignment), here)
        overrides = validate_overrides(configs or {})
        if validate_only:
            return
        # The config first (Kafka's order), so every broker creating a log finds it.
        await self.topic_configs.set(name, overrides)
        try:
            await self.zk.create(topic_path(name), encode_topic_assignment(assignment),
                                 makepath=True)
        except NodeExistsError:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists") from None
        except ZooKeeperError as exc:
            raise RequestTimedOutError(f"cannot create {name!r}: {exc}") from None
        log.info("created topic %s: %s", name, assignment)
        # Answer once every partition has a leader as far as this broker knows: the
        # controller elected them, told the replicas (LeaderAndIsr), then every broker.
        await self._wait_served(name, len(assignment))

    async def create_partitions(self, name: str, count: int,
                                assignment: list[list[int]] | None = None,
                                validate_only: bool = False) -> None:
        try:
            current = decode_topic_assignment(name, await self.zk.get(topic_path(name)))
        except NoNodeError:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.") from None
        except ZooKeeperError as exc:
            raise RequestTimedOutError(f"cannot read {name!r}: {exc}") from None
        new = plan_new_partitions(name, current, count, assignment, sorted(self._brokers))
        if self.partition_budget is not None:
            here = sum(1 for r in new.values() if self.broker.node_id in r)
            self.partition_budget.check(name, count, here)
        if validate_only:
            return
        try:
            await self.zk.set(topic_path(name), encode_topic_assignment({**current, **new}))
        except NoNodeError:
            raise UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.") from None
        except ZooKeeperError as exc:
            raise RequestTimedOutError(f"cannot add partitions to {name!r}: {exc}") from None
        log.info("topic %s grows from %d to %d partitions: %s", name, len(current), count, new)
        await self._wait_served(name, count)

    async def _wait_served(self, name: str, count: int) -> None:
        """Wait (at most ``CREATE_WAIT_S``) until this broker's view shows ``count``
        partitions of ``name``, each with a leader."""
        with trio.move_on_after(CREATE_WAIT_S):
            while True:
                parts = self._topics_view.get(name, {})
                if len(parts) >= count and all(leader >= 0 for leader in parts.values()):
                    return
                await self.changed.wait()

    async def delete_topic(self, name: str) -> None:
        try:
            await self.zk.delete(topic_path(name), recursive=True)
            await self.topic_configs.forget(name)
        except NoNodeError:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist") from None
        except ZooKeeperError as exc:
            raise RequestTimedOutError(f"cannot delete {name!r}: {exc}") from None
        with trio.move_on_after(CREATE_WAIT_S):
            while name in self._assignments:
                await self.changed.wait()


async def _cluster_id(zk: ZooKeeper) -> str:
    try:
        return decode_cluster_id(await zk.get(CLUSTER_ID))
    except NoNodeError:
        pass
    try:
        await zk.create(CLUSTER_ID, encode_cluster_id(new_cluster_id()), makepath=True)
    except NodeExistsError:
        pass  # another broker won the race: use its id
    return decode_cluster_id(await zk.get(CLUSTER_ID))


def registered_broker(reg: BrokerRegistration, inter_broker: str | None) -> BrokerInfo | None:
    """The ``BrokerInfo`` of a broker's ZooKeeper registration."""
    if not reg.endpoints:
        return BrokerInfo(reg.broker_id, reg.host, reg.port)
    return broker_info(reg.broker_id, [Listener(name, reg.protocols.get(name, name), h, p)
                                       for name, h, p in reg.endpoints], inter_broker)


@asynccontextmanager
async def open_zookeeper_cluster(config: BrokerConfig, broker: BrokerInfo, logs: LogManager,
                                 limiter: trio.CapacityLimiter,
                                 partition_budget: PartitionBudget | None = None
                                 ) -> AsyncIterator[ZooKeeperCluster]:
    """A ZooKeeper session with this broker registered, its cache loaded and its watches
    running, for the body of the ``async with``; closing the session on exit removes the
    registration.  Registration errors (a broker id in use) reach the caller as themselves."""
    assert config.zookeeper_connect is not None
    async with open_zookeeper(
        config.zookeeper_connect,
        session_timeout_ms=config["zookeeper.session.timeout.ms"],
        connection_timeout_ms=config["zookeeper.connection.timeout.ms"],
    ) as zk:
        cluster_id = await _cluster_id(zk)
        await trio.to_thread.run_sync(load_or_create_meta, config.log_dirs, config.broker_id,
                                      cluster_id)
        topic_configs = TopicConfigs(config, logs, ZooKeeperConfigStore(zk), limiter)
        await topic_configs.load_all()
        cluster = ZooKeeperCluster(zk, broker, cluster_id, logs, config["num.partitions"],
                                   limiter, topic_configs, config["default.replication.factor"],
                                   config.inter_broker_listener.name, partition_budget,
                                   config.log_dirs, config["zookeeper.session.timeout.ms"])
        await cluster.register()
        await cluster.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cluster.run)
            nursery.start_soon(topic_configs.follow_changes)
            yield cluster
            nursery.cancel_scope.cancel()
