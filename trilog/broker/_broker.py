"""The broker, assembled in one place: its parts, its tasks, its start and its clean shutdown.

``serve_broker(config, task_status=...)`` runs a broker until cancelled or until
``Broker.shutdown()``; ``async with open_broker(config) as broker`` runs one in a nursery of
the caller's (tests run brokers in-process this way).

Start, in order: open the logs (recovering them if the last stop was not clean); bind the
listeners (their ports are part of the broker's registration); ``open_cluster``
(standalone, or a ZooKeeper session with this broker registered and its watches running);
then ``Broker`` builds its parts, each given what it uses when it is made (``Broker.__init__``
is the one place that knows them all), and one nursery holds their tasks: the network, the
log tasks (flushes, retention, the log cleaner), the replica manager, the group and
transaction coordinators, the quotas' change notifications and, in a cluster, the
replicas' leadership (fetchers) and the controller.

The parts: the replica manager (``replication/``: the one append path; standalone it leads
every partition) under the APIs that read and write partitions (``apis/``), the group
coordinator (``groups/``), the transaction coordinator (``transactions/``), security
(``security/``: the ACLs' ``Access`` every API asks, SASL logins), the client quotas
(``quotas/``: every request counted by the dispatcher's hook, a throttled connection muted
by the network), and in a ZooKeeper cluster the controller's word on this broker's
replicas, its controlled shutdown and the controller's own work (``controller/``).  Every
part that answers requests says which with ``apis()``; the request dispatcher
(``network/``) takes them all.

Clean shutdown, in order: make a running log cleaning give up; in a cluster move this
broker's leaderships away (controlled shutdown) and resign the controller's place; stop
accepting; stop reading new requests; wake parked long polls so queued requests answer now;
wait (``shutdown.timeout.ms``) for connections to drain; cancel what is left; leave the
cluster (closing the ZooKeeper session removes this broker's ephemeral registration); flush
every log, checkpoint and write the clean-shutdown markers.
"""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import trio

from trilog._concurrency import unwrap_exception_group
from trilog.broker._limits import (
    RESERVED_FDS,
    DescriptorBudget,
    PartitionBudget,
    log_capacity,
    raise_fd_limit,
)
from trilog.broker._log_tasks import (
    LogCleanerTask,
    LogFlusher,
    ProducerExpiry,
    RetentionChecker,
)
from trilog.broker._metrics import LogView, RequestMetrics, serve_metrics
from trilog.broker.apis import (
    AdminApis,
    ConfigApis,
    FetchApi,
    FindCoordinatorApi,
    ListOffsetsApi,
    MetadataApi,
    ProduceApi,
    QuotaApis,
    TopicApis,
    TxnMarkerApi,
)
from trilog.broker.cluster import (
    BrokerInfo,
    Cluster,
    StandaloneCluster,
    ZooKeeperCluster,
    broker_info,
    load_or_create_meta,
    open_zookeeper_cluster,
)
from trilog.broker.configs import BrokerConfig, TopicConfigs, standalone_store
from trilog.broker.controller import Controller
from trilog.broker.groups import GroupCoordinator
from trilog.broker.network import (
    ApiService,
    BoundListener,
    ConnectionLimits,
    Listener,
    Network,
    RequestDispatcher,
    inter_broker_security,
    server_ssl_context,
    tls_principal,
)
from trilog.broker.quotas import (
    ClientQuotas,
    QuotaManager,
    RateConfig,
    RequestQuotas,
    ZooKeeperQuotaStore,
    standalone_quota_store,
)
from trilog.broker.replication import (
    ControlledShutdown,
    FetcherConfig,
    FetchPurgatory,
    Leadership,
    LocalReplicaManager,
    ReplicaFetchers,
    ReplicaManager,
    ZooKeeperIsr,
)
from trilog.broker.security import (
    ALLOW_ALL,
    Access,
    AclManager,
    AclsDisabled,
    Authorizer,
    SaslAuthenticator,
    UserStore,
    ZooKeeperAclStore,
    ZooKeeperUserStore,
    refused_request,
    standalone_acl_store,
    standalone_user_store,
)
from trilog.broker.transactions import ProducerIds, TransactionCoordinator
from trilog.errors import TrilogError
from trilog.storage import SEGMENT_FILES, LogManager

log = logging.getLogger("trilog.broker")


class _ClusterParts:
    """What only a broker of a ZooKeeper cluster has: the controller's word on its replicas
    (and their fetchers), its controlled shutdown, and the controller's work."""

    def __init__(self, config: BrokerConfig, cluster: ZooKeeperCluster,
                 replicas: ReplicaManager, access: Access) -> None:
        security = inter_broker_security(config)
        fetchers = ReplicaFetchers(replicas, cluster.brokers, FetcherConfig.of(config),
                                   security=security, leader_lost=cluster.peer_lost)
        self.leadership = Leadership(
            replicas, fetchers, cluster, access,
            high_watermark_checkpoint_ms=config["replica.high.watermark.checkpoint.interval.ms"])
        self.shutdown = ControlledShutdown(
            replicas, cluster, max_retries=config["controlled.shutdown.max.retries"],
            retry_backoff_ms=config["controlled.shutdown.retry.backoff.ms"],
            timeout_ms=config["controller.socket.timeout.ms"], security=security)
        self.controller = Controller(
            cluster.zk, cluster.controller, config.broker_id, config,
            lambda topic: cluster.topic_configs.config_for(topic).unclean_leader_election_enable)
        self.election = cluster.controller


class Broker:
    """A running broker: read ``port``, ``bootstrap``, ``cluster``, ``statistics()``; call
    ``shutdown()``.  Built by ``serve_broker`` once its logs, listeners and cluster are up."""

    def __init__(self, config: BrokerConfig, logs: LogManager, cluster: Cluster,
                 listeners: list[BoundListener], limiter: trio.CapacityLimiter,
                 descriptors: DescriptorBudget) -> None:
        self.config = config
        self.logs = logs
        self.cluster = cluster
        self.limiter = limiter
        self.descriptors = descriptors
        #: the listeners, bound (their ports are known: port 0 picks one)
        self.listeners = listeners
        self.metrics = RequestMetrics()
        clustered = isinstance(cluster, ZooKeeperCluster)
        # In a cluster, consumers read below the high watermark: its moves wake them.
        self.purgatory = FetchPurgatory(follow_high_watermark=clustered)
        #: the ACLs (``authorizer.class.name``; None: everyone may do everything)
        self.acls = _acl_manager(config, cluster)
        access = Access(self.acls.authorizer) if self.acls is not None else ALLOW_ALL
        self.replicas = _replica_manager(config, cluster, logs, self.purgatory, limiter)
        #: the parts only a ZooKeeper cluster has (None standalone)
        self.clustered = (_ClusterParts(config, cluster, self.replicas, access)
                          if isinstance(cluster, ZooKeeperCluster) else None)
        self.coordinator = GroupCoordinator(config, cluster, self.replicas, access, limiter)
        #: WriteTxnMarkers: the markers of transactions, appended to the partitions led here
        self.txn_markers = TxnMarkerApi(
            self.replicas, access, timeout_ms=config["request.timeout.ms"],
            offsets_completed=self.coordinator.offsets.transaction_completed)
        self.transactions = TransactionCoordinator(
            config, cluster, self.replicas, access, limiter,
            ProducerIds(config.broker_id, config.log_dirs[0]), self.txn_markers.write,
            inter_broker_security(config) if clustered else None)
        self.users = _user_store(config, cluster)
        #: the client quotas (quotas/: the calculator, its store, the requests' hook)
        self.quotas = ClientQuotas(
            ZooKeeperQuotaStore(cluster.zk) if isinstance(cluster, ZooKeeperCluster)
            else standalone_quota_store(config.log_dirs),
            QuotaManager(RateConfig(config["quota.window.num"],
                                    config["quota.window.size.seconds"] * 1000)))
        sasl = SaslAuthenticator(config["sasl.enabled.mechanisms"], self.users)
        self.dispatcher = RequestDispatcher(
            self._services(access, sasl), max_request_bytes=config["socket.request.max.bytes"],
            metrics=self.metrics,
            gate=partial(refused_request, access) if access.enabled else None,
            before_login=sasl.before_login, raw_login=sasl.raw_token,
            throttle=RequestQuotas(self.quotas.manager))
        self.network = Network(
            self.dispatcher.handle, listeners,
            max_request_bytes=config["socket.request.max.bytes"],
            send_buffer_bytes=config["socket.send.buffer.bytes"],
            receive_buffer_bytes=config["socket.receive.buffer.bytes"],
            limiter=limiter, limits=ConnectionLimits.of(config), descriptors=descriptors)
        self.flusher = LogFlusher(
            logs, limiter, scheduler_ms=config["log.flush.scheduler.interval.ms"],
            flush_ms=config["log.flush.interval.ms"],
            checkpoint_ms=config["log.flush.offset.checkpoint.interval.ms"])
        self.retention = RetentionChecker(
            logs, limiter, interval_ms=config["log.retention.check.interval.ms"])
        self.producer_expiry = ProducerExpiry(
            logs, limiter, interval_ms=config["producer.id.expiration.check.interval.ms"])
        #: the log cleaner (``log.cleaner.enable``; None: compacted topics are not cleaned)
        self.cleaner = LogCleanerTask(
            logs, threads=config["log.cleaner.threads"],
            dedupe_buffer_bytes=config["log.cleaner.dedupe.buffer.size"],
            backoff_ms=config["log.cleaner.backoff.ms"],
        ) if config["log.cleaner.enable"] else None
        #: where ``/metrics`` is served (``metrics.port``; None: not served)
        self.metrics_port: int | None = None
        self._shutdown_requested = trio.Event()
        self.stopped = trio.Event()

    def _services(self, access: Access, sasl: SaslAuthenticator) -> list[ApiService]:
        """Every part that answers requests (the dispatcher takes their ``apis()``)."""
        config, cluster, replicas = self.config, self.cluster, self.replicas
        services: list[ApiService] = [
            ProduceApi(replicas, access, self.metrics),
            FetchApi(replicas, self.purgatory, access, self.metrics, self.limiter,
                     self.quotas.manager),
            ListOffsetsApi(replicas, access, self.limiter),
            MetadataApi(cluster, access, auto_create=config["auto.create.topics.enable"]),
            TopicApis(cluster, access, self.metrics,
                      delete_enabled=config["delete.topic.enable"]),
            FindCoordinatorApi(cluster, self.coordinator, self.transactions),
            self.transactions,
            self.txn_markers,
            AdminApis(cluster, self.logs, self.coordinator, access, self.limiter),
            ConfigApis(config, cluster, access),
            QuotaApis(self.quotas, access),
            self.coordinator,
            sasl,
            self.acls if self.acls is not None else AclsDisabled(),
        ]
        if self.clustered is not None:
            services += [self.clustered.leadership, self.clustered.controller]
        return services

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

    @property
    def controller(self) -> Controller | None:
        """The controller's work, done while this broker is the controller (a ZooKeeper
        cluster; None standalone)."""
        return self.clustered.controller if self.clustered is not None else None

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

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The broker's tasks until ``shutdown()``, then the drain; ``task_status.started(self)``
        once it serves."""
        config = self.config
        async with trio.open_nursery() as nursery:
            await self.users.check()  # a damaged store stops the broker (_json_store.py)
            await self.quotas.load_all()  # likewise
            nursery.start_soon(self.quotas.follow_changes)
            if self.acls is not None:
                await self.acls.load()  # before any request is served
                nursery.start_soon(self.acls.run)
            await nursery.start(self.network.serve)
            for task in (self.flusher.run, self.retention.run, self.producer_expiry.run,
                         self.replicas.run):
                nursery.start_soon(task)
            nursery.start_soon(self.coordinator.run, self._shutdown_requested)
            nursery.start_soon(self.transactions.run, self._shutdown_requested)
            if self.cleaner is not None:
                nursery.start_soon(self.cleaner.run)
            if self.clustered is not None:
                nursery.start_soon(self.clustered.leadership.run)
                nursery.start_soon(self.clustered.controller.run)
            if config["metrics.port"] is not None:
                self.metrics_port = await nursery.start(
                    serve_metrics, BrokerSource(self), config["metrics.host"],
                    config["metrics.port"])
            self._log_listening()
            task_status.started(self)
            await self._shutdown_requested.wait()
            if self.cleaner is not None:
                self.cleaner.stop()
            await self._controlled_shutdown()
            await self._drain(config["shutdown.timeout.ms"] / 1000)
            nursery.cancel_scope.cancel()

    def _log_listening(self) -> None:
        config = self.config
        log.info("broker %d listening on %s:%d, data in %s", config.broker_id, self.host,
                 self.port, ", ".join(config.log_dirs))
        if len(self.listeners) > 1 or self.listeners[0].protocol != "PLAINTEXT":
            for lst in self.listeners:
                log.info("listener %s (%s) on %s:%d", lst.name, lst.protocol,
                         *lst.socket_listener.socket.getsockname()[:2])

    async def _controlled_shutdown(self) -> None:
        """In a cluster, move this broker's leaderships away first (the controller elects
        other leaders and stops this broker's fetchers), so that clients see no
        unavailability; the controller itself then resigns its place."""
        if self.clustered is None or not self.config["controlled.shutdown.enable"]:
            return
        await self.clustered.shutdown.run()
        await self.clustered.election.resign()

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


class BrokerSource:
    """The metrics' ``MetricsSource`` of a running broker."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.requests = broker.metrics
        self.flushes = broker.flusher.times

    def network(self) -> Mapping[str, int]:
        network = self._broker.network
        return {**network.statistics(),
                "queued_request_limit": network.memory.capacity,
                "parked_fetches": len(self._broker.purgatory)}

    def logs(self) -> Iterable[LogView]:
        return self._broker.logs.logs()

    def groups(self) -> Mapping[str, tuple[str, int]]:
        return self._broker.coordinator.group_sizes()

    def committed_offsets(self) -> Iterable[tuple[str, str, int, int]]:
        return self._broker.coordinator.committed_offsets()

    def cleaner(self) -> Mapping[str, Any] | None:
        # The log cleaner's ``statistics()`` gives plain counters (trilog/storage/
        # _cleaner_manager.py's vocabulary); a broker without one has no cleaner metrics.
        cleaner = self._broker.cleaner
        return None if cleaner is None else cleaner.statistics()

    def quotas(self) -> Iterable[tuple[str, str, str, float, int, int]]:
        stats = self._broker.quotas.manager.statistics(trio.current_time() * 1000)
        return [(*key, rate, throttle_ms, count) for key, rate, throttle_ms, count in stats]

    def under_replicated_partitions(self) -> int:
        replicas = self._broker.replicas
        return sum(1 for part in replicas.partitions.values()
                   if part.leader == replicas.broker_id and len(part.isr) < len(part.replicas))


def _acl_manager(config: BrokerConfig, cluster: Cluster) -> AclManager | None:
    if not config["authorizer.class.name"]:
        return None
    authorizer = Authorizer(
        super_users=config["super.users"],
        allow_everyone_if_no_acl_found=config["allow.everyone.if.no.acl.found"])
    store = (ZooKeeperAclStore(cluster.zk) if isinstance(cluster, ZooKeeperCluster)
             else standalone_acl_store(config.log_dirs))
    return AclManager(authorizer, store)


def _user_store(config: BrokerConfig, cluster: Cluster) -> UserStore:
    if isinstance(cluster, ZooKeeperCluster):
        return ZooKeeperUserStore(cluster.zk)
    return standalone_user_store(config.log_dirs, config["sasl.credentials.file"])


def _replica_manager(config: BrokerConfig, cluster: Cluster, logs: LogManager,
                     purgatory: FetchPurgatory, limiter: trio.CapacityLimiter
                     ) -> ReplicaManager:
    """A ZooKeeper cluster's replica manager, whose ISR changes go to ZooKeeper; standalone,
    the local one that leads every partition here."""
    if isinstance(cluster, ZooKeeperCluster):
        return ReplicaManager(config.broker_id, logs, purgatory, limiter, cluster,
                              message_max_bytes=config["message.max.bytes"],
                              lag_max_ms=config["replica.lag.time.max.ms"],
                              isr_channel=ZooKeeperIsr(config.broker_id, cluster))
    return LocalReplicaManager(config.broker_id, logs, purgatory, limiter, cluster,
                               message_max_bytes=config["message.max.bytes"])


async def serve_broker(config: BrokerConfig | Mapping[str, Any] | None = None, *,
                       task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run a broker; ``task_status.started(broker)`` once it accepts connections."""
    if not isinstance(config, BrokerConfig):
        config = BrokerConfig.from_dict(config or {})
    limiter = trio.CapacityLimiter(config["num.io.threads"])
    fd_limit = raise_fd_limit()
    SEGMENT_FILES.set_capacity(log_capacity(fd_limit))  # before the logs open
    logs = await trio.to_thread.run_sync(_open_logs, config, fd_limit)
    descriptors = DescriptorBudget(fd_limit, logs.open_files)
    partitions = PartitionBudget(config["max.partitions.per.topic"],
                                 config["max.broker.partitions"], held=lambda: len(logs),
                                 descriptor_room=descriptors.partition_room)
    broker: Broker | None = None
    try:
        listeners = await _bind(config)
        try:
            info = _broker_info(config, listeners)
            async with open_cluster(config, info, logs, limiter, partitions) as cluster:
                broker = Broker(config, logs, cluster, listeners, limiter, descriptors)
                log.info("%s", descriptors.describe())
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
                       limiter: trio.CapacityLimiter, partition_budget: PartitionBudget | None
                       = None) -> AsyncIterator[Cluster]:
    """This broker's view of its cluster, for the body of the ``async with``.

    Standalone without ``zookeeper.connect``; otherwise a ZooKeeper session in which this
    broker is registered and kept current by watches (``cluster/_zookeeper.py``), closed on
    exit.  Either way the log dirs' ``meta.properties`` are checked against the cluster
    first, and ``partition_budget`` says what new partitions fit on this broker.
    """
    if config.zookeeper_connect is not None:
        async with open_zookeeper_cluster(config, broker, logs, limiter,
                                          partition_budget) as cluster:
            yield cluster
        return
    cluster_id = await trio.to_thread.run_sync(load_or_create_meta, config.log_dirs,
                                               config.broker_id, None)
    topic_configs = TopicConfigs(config, logs, standalone_store(config.log_dirs), limiter)
    await topic_configs.load_all()
    yield StandaloneCluster(broker, logs, cluster_id, config["num.partitions"], limiter,
                            topic_configs, partition_budget)


def _open_logs(config: BrokerConfig, fd_limit: int) -> LogManager:
    try:
        # In a ZooKeeper cluster partitions are replicated: their high watermarks are set by
        # the replica manager (standalone, a log's high watermark is its log end offset).
        return LogManager(config.log_dirs, config.log_config(),
                          replicated=config.zookeeper_connect is not None,
                          load_threads=config["num.recovery.threads.per.data.dir"])
    except OSError as exc:
        if exc.errno not in (errno.EMFILE, errno.ENFILE):
            raise
        raise TrilogError(
            f"cannot open the log: the descriptor limit ({fd_limit}, `ulimit -n`) is too low "
            f"for the segment files it keeps open ({log_capacity(fd_limit)}) plus "
            f"{RESERVED_FDS} reserved and the connections' floor; raise the limit"
        ) from None


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
