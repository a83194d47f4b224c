"""The broker: its tasks, its start and its clean shutdown.

``serve_broker(config, task_status=...)`` runs a broker until cancelled or until
``Broker.shutdown()``; ``async with open_broker(config) as broker`` runs one in a nursery of
the caller's (tests run brokers in-process this way).

Start, in order: open the logs (recovering them if the last stop was not clean); bind the
listener (its port is part of the broker's registration); ``open_cluster`` (standalone, or
a ZooKeeper session with this broker registered and its watches running); then one nursery
holds the broker's tasks: the network, the flush scheduler, the retention checker, the
group coordinator and the log cleaner.

Clean shutdown, in order: make a running log cleaning give up; stop accepting; stop reading new requests; wake parked long polls
so queued requests answer now; wait (``shutdown.timeout.ms``) for connections to drain; cancel
what is left; leave the cluster (closing the ZooKeeper session removes this broker's
ephemeral registration); flush every log, checkpoint and write the clean-shutdown markers.
"""

from __future__ import annotations

import errno
import logging
import socket
import time
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, AsyncIterator, Callable, Mapping

import trio

from trilog._concurrency import unwrap_exception_group
from trilog._time import now_ms
from trilog.broker.security._acls import (
    Access,
    AclManager,
    AclStore,
    ZooKeeperAclStore,
    acls_disabled_answer,
    standalone_acl_store,
)
from trilog.broker.apis._admin import AdminApis
from trilog.broker.security._authorizer import Authorizer
from trilog.broker.cluster._cluster import (
    BrokerInfo,
    Cluster,
    StandaloneCluster,
    broker_info,
    load_or_create_meta,
)
from trilog.broker.configs._broker_config import BrokerConfig
from trilog.broker._log_tasks import LogCleanerTask
from trilog.broker.controller._controller import Controller
from trilog.broker.apis._configs import ConfigApis
from trilog.broker.configs._topic_configs import TopicConfigs, standalone_store
from trilog.broker.groups._coordinator import GroupCoordinator
from trilog.broker.apis._handlers import RequestHandler
from trilog.broker._limits import (
    RESERVED_FDS,
    DescriptorBudget,
    PartitionBudget,
    RateLimitedLog,
    raise_fd_limit,
)
from trilog.broker._metrics import FLUSH_BUCKETS_S, BrokerSource, Buckets, serve_metrics
from trilog.broker.network._listeners import Listener, server_ssl_context, tls_principal
from trilog.broker.network._network import (
    BoundListener,
    ConnectionLimits,
    Later,
    Network,
    ResponseParts,
    Session,
)
from trilog.broker.replication._purgatory import FetchPurgatory
from trilog.broker.replication._replica_manager import ReplicaManager
from trilog.broker.security._sasl import SaslAuthenticator
from trilog.broker.security._users import UserStore, ZooKeeperUserStore, standalone_user_store
from trilog.broker.cluster._zookeeper import ZooKeeperCluster, open_zookeeper_cluster
from trilog.errors import TrilogError
from trilog.protocol import ApiKey
from trilog.storage import Log, LogManager

log = logging.getLogger("trilog.broker")

#: A timer's fault that repeats (a full disk) is logged once a minute per partition.
_timer_faults = RateLimitedLog(log, 60.0)


class Broker:
    """A running broker: read ``port``, ``bootstrap``, ``cluster``, ``statistics()``; call
    ``shutdown()``.  Built by ``serve_broker`` once its logs, listener and cluster are up."""

    def __init__(self, config: BrokerConfig, logs: LogManager, cluster: Cluster,
                 listeners: list[BoundListener], limiter: trio.CapacityLimiter,
                 fd_limit: int) -> None:
        self.config = config
        self.logs = logs
        self.cluster = cluster
        self.limiter = limiter
        self.descriptors = DescriptorBudget(fd_limit, logs.open_files)
        self.purgatory = FetchPurgatory(
            follow_high_watermark=isinstance(cluster, ZooKeeperCluster))
        self.handler = RequestHandler(config, cluster, logs, self.purgatory, limiter)
        #: the replicas this broker holds (a ZooKeeper cluster; None standalone)
        self.replicas: ReplicaManager | None = None
        #: the controller's work, done while this broker is the controller (a ZooKeeper
        #: cluster; None standalone)
        self.controller: Controller | None = None
        if isinstance(cluster, ZooKeeperCluster):
            self.replicas = ReplicaManager(config, cluster, logs, self.purgatory, limiter)
            self.replicas.register(self.handler)
            self.replicas.on_leadership_change.append(self.handler.producers.forget)
            self.handler.replicas = self.replicas
        self.coordinator = GroupCoordinator(config, cluster, logs, limiter,
                                            purgatory=self.purgatory, replicas=self.replicas)
        self.coordinator.register(self.handler)
        admin_apis = AdminApis(cluster, logs, self.coordinator, limiter)
        admin_apis.register(self.handler)
        config_apis = ConfigApis(config, cluster)
        config_apis.register(self.handler)
        users: UserStore = (ZooKeeperUserStore(cluster.zk) if isinstance(cluster, ZooKeeperCluster)
                            else standalone_user_store(config.log_dirs,
                                                       config["sasl.credentials.file"]))
        SaslAuthenticator(config["sasl.enabled.mechanisms"], users).register(self.handler)
        #: the ACLs (``authorizer.class.name``; None: everyone may do everything)
        self.acls: AclManager | None = None
        if config["authorizer.class.name"]:
            authorizer = Authorizer(
                super_users=config["super.users"],
                allow_everyone_if_no_acl_found=config["allow.everyone.if.no.acl.found"])
            store: AclStore = (ZooKeeperAclStore(cluster.zk)
                               if isinstance(cluster, ZooKeeperCluster)
                               else standalone_acl_store(config.log_dirs))
            self.acls = AclManager(authorizer, store)
            self.acls.register(self.handler)
            access = Access(authorizer)
            self.handler.access = self.coordinator.access = access
            admin_apis.access = config_apis.access = access
            if self.replicas is not None:
                self.replicas.access = access
        else:
            for api in (ApiKey.CREATE_ACLS, ApiKey.DESCRIBE_ACLS, ApiKey.DELETE_ACLS):
                self.handler.register(api, partial(_acls_disabled, api))
        #: the listeners, bound (their ports are known: port 0 picks one)
        self.listeners = listeners
        if isinstance(cluster, ZooKeeperCluster):
            self.controller = Controller(
                cluster.zk, cluster.controller, config.broker_id, config,
                lambda topic: cluster.topic_configs.config_for(
                    topic).unclean_leader_election_enable)
            self.controller.register(self.handler)
        self.network = Network(
            self._handle,
            listeners,
            max_request_bytes=config["socket.request.max.bytes"],
            send_buffer_bytes=config["socket.send.buffer.bytes"],
            receive_buffer_bytes=config["socket.receive.buffer.bytes"],
            limiter=limiter,
            limits=ConnectionLimits(
                max_connections=config["max.connections"],
                max_connections_per_ip=config["max.connections.per.ip"],
                per_ip_overrides=config["max.connections.per.ip.overrides"],
                idle_ms=config["connections.max.idle.ms"],
                queued_request_bytes=config["queued.max.request.bytes"],
                failed_auth_delay_ms=config["connection.failed.authentication.delay.ms"],
            ),
            connection_room=self.descriptors.connection_room,
        )
        cluster.partition_budget = PartitionBudget(
            config["max.partitions.per.topic"],
            config["max.broker.partitions"],
            held=lambda: len(logs),
            descriptor_room=lambda: self.descriptors.partition_room(
                self.network.open_connections),
        )
        self._shutdown_requested = trio.Event()
        self.stopped = trio.Event()
        #: the flush timer's fsync times (``trilog_log_flush_seconds``)
        self.flush_times = Buckets(FLUSH_BUCKETS_S)
        #: where ``/metrics`` is served (``metrics.port``; None: not served)
        self.metrics_port: int | None = None
        #: the log cleaner (``log.cleaner.enable``; None: compacted topics are not cleaned)
        self.cleaner = LogCleanerTask(
            logs,
            threads=config["log.cleaner.threads"],
            dedupe_buffer_bytes=config["log.cleaner.dedupe.buffer.size"],
            backoff_ms=config["log.cleaner.backoff.ms"],
        ) if config["log.cleaner.enable"] else None

    @property
    def broker_id(self) -> int:
        return self.config.broker_id

    @property
    def port(self) -> int:
        return self.network.port

    @property
    def host(self) -> str:
        return self.network.host

    @property
    def bootstrap(self) -> str:
        """``host:port`` a client on this machine can connect to."""
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return f"{host}:{self.port}"

    def addresses(self) -> dict[str, str]:
        """``{listener name: host:port}`` a client on this machine can connect to."""
        out: dict[str, str] = {}
        for lst in self.listeners:
            host, port = lst.socket_listener.socket.getsockname()[:2]
            host = host if host not in ("0.0.0.0", "::", "") else "127.0.0.1"
            out.setdefault(lst.name, f"{host}:{port}")
        return out

    def shutdown(self) -> None:
        """Ask for a clean shutdown; ``serve_broker`` returns when it is done."""
        self._shutdown_requested.set()

    def statistics(self) -> dict[str, Any]:
        return {
            **self.network.statistics(),
            "parked_fetches": len(self.purgatory),
            "partitions": len(self.logs),
            "descriptor_limit": self.descriptors.limit,
        }

    async def _handle(self, frame: memoryview, session: Session) -> ResponseParts | Later | None:
        return await self.handler.handle(frame, session)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The broker's tasks until ``shutdown()``, then the drain; ``task_status.started(self)``
        once it serves."""
        config = self.config
        async with trio.open_nursery() as nursery:
            if self.acls is not None:
                await self.acls.load()  # before any request is served
                nursery.start_soon(self.acls.run)
            await nursery.start(self.network.serve)
            nursery.start_soon(_flush_scheduler, self)
            nursery.start_soon(_retention_checker, self)
            nursery.start_soon(self.coordinator.run, self._shutdown_requested)
            if self.cleaner is not None:
                nursery.start_soon(self.cleaner.run)
            if self.replicas is not None:
                nursery.start_soon(self.replicas.run)
            if self.controller is not None:
                nursery.start_soon(self.controller.run)
            if config["metrics.port"] is not None:
                self.metrics_port = await nursery.start(
                    serve_metrics, BrokerSource(self), config["metrics.host"],
                    config["metrics.port"])
            log.info("broker %d listening on %s:%d, data in %s", config.broker_id, self.host,
                     self.port, ", ".join(config.log_dirs))
            if len(self.listeners) > 1 or self.listeners[0].protocol != "PLAINTEXT":
                for lst in self.listeners:
                    log.info("listener %s (%s) on %s:%d", lst.name, lst.protocol,
                             *lst.socket_listener.socket.getsockname()[:2])
            task_status.started(self)
            await self._shutdown_requested.wait()
            if self.cleaner is not None:
                self.cleaner.stop()
            await self._controlled_shutdown()
            await self._drain(config["shutdown.timeout.ms"] / 1000)
            nursery.cancel_scope.cancel()

    async def _controlled_shutdown(self) -> None:
        """In a cluster, move this broker's leaderships away first (the controller elects
        other leaders and stops this broker's fetchers), so that clients see no
        unavailability; the controller itself then resigns its place."""
        if self.replicas is None or not self.config["controlled.shutdown.enable"]:
            return
        await self.replicas.controlled_shutdown()
        assert isinstance(self.cluster, ZooKeeperCluster)
        await self.cluster.controller.resign()

    async def _drain(self, timeout_s: float) -> None:
        network = self.network
        network.stop_accepting()
        await network.stop_reading()
        self.purgatory.wake_all()
        with trio.move_on_after(timeout_s):
            await network.wait_all_closed()
        if network.open_connections:
            log.warning("%d connections still open after %.1f s; closing them",
                        network.open_connections, timeout_s)


async def serve_broker(config: BrokerConfig | Mapping[str, Any] | None = None, *,
                       task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run a broker; ``task_status.started(broker)`` once it accepts connections."""
    if not isinstance(config, BrokerConfig):
        config = BrokerConfig.from_dict(config or {})
    limiter = trio.CapacityLimiter(config["num.io.threads"])
    fd_limit = raise_fd_limit()
    logs = await trio.to_thread.run_sync(_open_logs, config, fd_limit)
    broker: Broker | None = None
    try:
        listeners = await _bind(config)
        try:
            info = _broker_info(config, listeners)
            async with open_cluster(config, info, logs, limiter) as cluster:
                broker = Broker(config, logs, cluster, listeners, limiter, fd_limit)
                log.info("%s", broker.descriptors.describe())
                await broker.run(task_status=task_status)
        finally:
            with trio.CancelScope(shield=True):
                for listener in listeners:
                    await listener.socket_listener.aclose()
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(logs.shutdown)
            if broker is not None:
                broker.stopped.set()
            log.info("broker %d stopped", config.broker_id)


@asynccontextmanager
async def open_cluster(config: BrokerConfig, broker: BrokerInfo, logs: LogManager,
                       limiter: trio.CapacityLimiter) -> AsyncIterator[Cluster]:
    """This broker's view of its cluster, for the body of the ``async with``.

    Standalone without ``zookeeper.connect``; otherwise a ZooKeeper session in which this
    broker is registered and kept current by watches (``_zkcluster.py``), closed on exit.
    Either way the log dirs' ``meta.properties`` are checked against the cluster first.
    """
    if config.zookeeper_connect is not None:
        async with open_zookeeper_cluster(config, broker, logs, limiter) as cluster:
            yield cluster
        return
    cluster_id = await trio.to_thread.run_sync(load_or_create_meta, config.log_dirs,
                                               config.broker_id, None)
    topic_configs = TopicConfigs(config, logs, standalone_store(config.log_dirs), limiter)
    await topic_configs.load_all()
    yield StandaloneCluster(broker, logs, cluster_id, config["num.partitions"], limiter,
                            topic_configs)


def _open_logs(config: BrokerConfig, fd_limit: int) -> LogManager:
    try:
        # In a ZooKeeper cluster partitions are replicated: their high watermarks are set by
        # the replica manager (standalone, a log's high watermark is its log end offset).
        return LogManager(config.log_dirs, config.log_config(),
                          replicated=config.zookeeper_connect is not None)
    except OSError as exc:
        if exc.errno not in (errno.EMFILE, errno.ENFILE):
            raise
        raise TrilogError(
            f"cannot open the log: the descriptor limit ({fd_limit}, `ulimit -n`) is too low "
            f"for the segments in {', '.join(config.log_dirs)} plus {RESERVED_FDS} reserved; "
            "raise the limit"
        ) from None


async def _acls_disabled(api_key: int, request: Any, header: Any) -> Any:
    await trio.lowlevel.checkpoint()
    return acls_disabled_answer(api_key, request)


async def _bind(config: BrokerConfig) -> list[BoundListener]:
    """Bind every listener (``listeners``), each with its TLS context when it has TLS."""
    specs = config.listeners
    context = server_ssl_context(config.values) if any(s.tls for s in specs) else None
    principal = partial(tls_principal, rules=config["ssl.principal.mapping.rules"])
    bound: list[BoundListener] = []
    try:
        for spec in specs:
            try:
                sockets = await trio.open_tcp_listeners(spec.port, host=spec.host or "0.0.0.0",
                                                        backlog=1024)
            except OSError as exc:
                raise TrilogError(f"cannot listen on {spec}: {exc.strerror or exc}") from None
            bound.extend(BoundListener(s, spec.name, spec.protocol,
                                       context if spec.tls else None,
                                       principal if spec.tls else None) for s in sockets)
    except BaseException:
        with trio.CancelScope(shield=True):
            for listener in bound:
                await listener.socket_listener.aclose()
        raise
    return bound


def _broker_info(config: BrokerConfig, bound: list[BoundListener]) -> BrokerInfo:
    """This broker as the cluster sees it: each listener's advertised address (its own,
    with the port it bound, unless ``advertised.listeners`` says otherwise)."""
    advertised = config.advertised_listeners or {}
    endpoints = []
    for spec in config.listeners:
        if spec.name in advertised:
            endpoints.append(advertised[spec.name])
            continue
        port = next(b.port for b in bound if b.name == spec.name)
        endpoints.append(Listener(spec.name, spec.protocol, _advertised_host(spec.host), port))
    info = broker_info(config.broker_id, endpoints, config.inter_broker_listener.name)
    assert info is not None
    return info


def _advertised_host(host: str) -> str:
    return socket.getfqdn() if host in ("0.0.0.0", "::", "") else host


def _timer_fault(what: str) -> Callable[[Log, OSError], None]:
    def report(lg: Log, exc: OSError) -> None:
        _timer_faults.error((what, lg.topic, lg.partition), "%s of %s-%d failed: %s", what,
                            lg.topic, lg.partition, exc)
    return report


async def _flush_scheduler(broker: Broker) -> None:
    """Time-based flushes (``log.flush.interval.ms``) and periodic recovery checkpoints
    (``log.flush.offset.checkpoint.interval.ms``).  A failing disk is logged and retried on
    the next tick: it never stops the broker."""
    config = broker.config
    interval = config["log.flush.scheduler.interval.ms"] / 1000
    flush_ms = config["log.flush.interval.ms"]
    if flush_ms is not None:
        interval = min(interval, max(flush_ms, 1) / 1000)
    checkpoint_s = config["log.flush.offset.checkpoint.interval.ms"] / 1000
    interval = min(interval, checkpoint_s)
    next_checkpoint = trio.current_time() + checkpoint_s
    on_error = _timer_fault("flush")
    while True:
        await trio.sleep(interval)
        await trio.to_thread.run_sync(_flush_due_logs, broker.logs, on_error,
                                      broker.flush_times, limiter=broker.limiter)
        if trio.current_time() >= next_checkpoint:
            next_checkpoint = trio.current_time() + checkpoint_s
            try:
                await trio.to_thread.run_sync(broker.logs.checkpoint_recovery_points,
                                              limiter=broker.limiter)
            except OSError as exc:
                _timer_faults.error("checkpoint", "writing the recovery-point checkpoints "
                                    "failed (the previous ones stay): %s", exc)


def _flush_due_logs(logs: LogManager, on_error: Callable[[Log, OSError], None],
                    times: Buckets) -> None:
    """``LogManager.flush_due_logs``, timing each partition's flush for the metrics."""
    now = now_ms()
    for lg in logs.logs():
        try:
            if lg.flush_due(now):
                started = time.perf_counter()
                if lg.maybe_flush(now):
                    times.observe(time.perf_counter() - started)
        except OSError as exc:
            on_error(lg, exc)


async def _retention_checker(broker: Broker) -> None:
    interval = broker.config["log.retention.check.interval.ms"] / 1000
    on_error = _timer_fault("retention")
    while True:
        await trio.sleep(interval)
        deleted = await trio.to_thread.run_sync(broker.logs.cleanup_logs, None, on_error,
                                                limiter=broker.limiter)
        for (topic, partition), bases in deleted.items():
            log.info("retention deleted %d segments of %s-%d", len(bases), topic, partition)


@asynccontextmanager
async def open_broker(config: BrokerConfig | Mapping[str, Any] | None = None
                      ) -> AsyncIterator[Broker]:
    """Run a broker for the body of the ``async with``; shut it down cleanly on exit."""
    with unwrap_exception_group():
        async with trio.open_nursery() as nursery:
            broker = await nursery.start(serve_broker, config)
            try:
                yield broker
            finally:
                broker.shutdown()
