"""The broker: its tasks, its start and its clean shutdown.

``serve_broker(config, task_status=...)`` runs a broker until cancelled or until
``Broker.shutdown()``; ``async with open_broker(config) as broker`` runs one in a nursery of
the caller's (tests run brokers in-process this way).  One nursery holds every task: the
network (acceptor and processors), the flush scheduler and the retention checker; the
ZooKeeper session, when there is one, wraps it.

Clean shutdown, in order: stop accepting; stop reading new requests; wake parked long polls
so queued requests answer now; wait (``shutdown.timeout.ms``) for connections to drain; cancel
what is left; flush every log, checkpoint and write the clean-shutdown markers; close the
ZooKeeper session, which removes this broker's ephemeral registration.
"""

from __future__ import annotations

import errno
import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Mapping

import trio

from trilog._concurrency import unwrap_exception_group
from trilog.broker._cluster import BrokerInfo, Cluster, StandaloneCluster, load_or_create_meta
from trilog.broker._config import BrokerConfig
from trilog.broker._coordinator import GroupCoordinator, client_address
from trilog.broker._handlers import RequestHandler
from trilog.broker._limits import (
    RESERVED_FDS,
    DescriptorBudget,
    PartitionBudget,
    RateLimitedLog,
    raise_fd_limit,
)
from trilog.broker._network import ConnectionLimits, Network
from trilog.broker._purgatory import FetchPurgatory
from trilog.errors import TrilogError
from trilog.storage import Log, LogConfig, LogManager

log = logging.getLogger("trilog.broker")

#: A timer's fault that repeats (a full disk) is logged once a minute per partition.
_timer_faults = RateLimitedLog(log, 60.0)


def _timer_fault(what: str) -> Any:
    def report(lg: Log, exc: OSError) -> None:
        _timer_faults.error((what, lg.topic, lg.partition), "%s of %s-%d failed: %s", what,
                            lg.topic, lg.partition, exc)
    return report


def log_config_from(config: BrokerConfig) -> LogConfig:
    props = {k: v for k, v in config.values.items() if v is not None and k.startswith(("log.", "message."))}
    return LogConfig.from_properties(props)


class Broker:
    """A running broker.  Read ``port``, ``broker_id``, ``cluster``; call ``shutdown()``."""

    def __init__(self, config: BrokerConfig, logs: LogManager, fd_limit: int) -> None:
        self.config = config
        self.logs = logs
        self.descriptors = DescriptorBudget(fd_limit, logs.open_files)
        self.cluster: Cluster | None = None
        self.network: Network | None = None
        self.purgatory = FetchPurgatory()
        self.coordinator: GroupCoordinator | None = None
        self._shutdown_requested = trio.Event()
        self.stopped = trio.Event()

    @property
    def broker_id(self) -> int:
        return self.config.broker_id

    @property
    def port(self) -> int:
        assert self.network is not None
        return self.network.port

    @property
    def host(self) -> str:
        assert self.network is not None
        return self.network.host

    @property
    def bootstrap(self) -> str:
        """``host:port`` a client on this machine can connect to."""
        host = self.host if self.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return f"{host}:{self.port}"

    def shutdown(self) -> None:
        """Ask for a clean shutdown; ``serve_broker`` returns when it is done."""
        self._shutdown_requested.set()

    def statistics(self) -> dict[str, Any]:
        net = self.network
        stats: dict[str, Any] = {
            "open_connections": 0,
            "connections_accepted": 0,
            "connections_refused": 0,
            "connections_idled_out": 0,
            "queued_request_bytes": 0,
        }
        if net is not None:
            stats.update(net.statistics())
        stats["parked_fetches"] = len(self.purgatory)
        stats["partitions"] = len(self.logs)
        stats["descriptor_limit"] = self.descriptors.limit
        return stats


async def serve_broker(config: BrokerConfig | Mapping[str, Any] | None = None, *,
                       task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run a broker; ``task_status.started(broker)`` once it accepts connections."""
    if not isinstance(config, BrokerConfig):
        config = BrokerConfig.from_dict(config or {})
    limiter = trio.CapacityLimiter(config["num.io.threads"])
    cluster_id = None
    if config.zookeeper_connect is None:
        cluster_id = await trio.to_thread.run_sync(
            load_or_create_meta, config.log_dirs, config.broker_id, None
        )
    fd_limit = raise_fd_limit()
    logs = await trio.to_thread.run_sync(_open_logs, config, fd_limit)
    broker = Broker(config, logs, fd_limit)
    log.info("%s", broker.descriptors.describe())
    try:
        if config.zookeeper_connect is None:
            await _serve(broker, limiter, cluster_id, task_status)
        else:
            from trilog.broker._zkcluster import serve_with_zookeeper

            await serve_with_zookeeper(broker, limiter, _serve, task_status)
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(logs.shutdown)
            broker.stopped.set()
            log.info("broker %d stopped", config.broker_id)


def _open_logs(config: BrokerConfig, fd_limit: int) -> LogManager:
    try:
        return LogManager(config.log_dirs, log_config_from(config))
    except OSError as exc:
        if exc.errno not in (errno.EMFILE, errno.ENFILE):
            raise
        raise TrilogError(
            f"cannot open the log: the descriptor limit ({fd_limit}, `ulimit -n`) is too low "
            f"for the segments in {', '.join(config.log_dirs)} plus {RESERVED_FDS} reserved; "
            "raise the limit"
        ) from None


async def _serve(broker: Broker, limiter: trio.CapacityLimiter, cluster_id: str | None,
                 task_status, make_cluster=None, on_started=None) -> None:
    """The broker's nursery: network and timers, then the shutdown sequence."""
    config = broker.config
    host, port = config.listener
    handler_box: list[RequestHandler] = []

    async def handle(frame, peer):
        client_address.set(peer)
        return await handler_box[0].handle(frame, peer)

    network = Network(
        handle,
        host=host,
        port=port,
        num_processors=config["num.network.threads"],
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
        ),
        connection_room=broker.descriptors.connection_room,
    )
    broker.network = network
    await network.listen()
    try:
        # Registration happens before the nursery so that its errors (a broker id in use)
        # reach the caller as themselves, not wrapped in an exception group.
        adv = config.advertised
        info = BrokerInfo(config.broker_id, *(adv or (_advertised_host(host), network.port)))
        if make_cluster is None:
            cluster: Cluster = StandaloneCluster(info, broker.logs, cluster_id or "",
                                                 config["num.partitions"], limiter)
        else:
            cluster = await make_cluster(info)
    except BaseException:
        with trio.CancelScope(shield=True):
            await network.aclose_listeners()
        raise
    cluster.partition_budget = PartitionBudget(
        config["max.partitions.per.topic"],
        config["max.broker.partitions"],
        held=lambda: len(broker.logs),
        descriptor_room=lambda: broker.descriptors.partition_room(network.open_connections),
    )
    broker.cluster = cluster
    handler_box.append(RequestHandler(config, cluster, broker.logs, broker.purgatory, limiter))
    broker.coordinator = GroupCoordinator(config, cluster, broker.logs, limiter)
    broker.coordinator.register(handler_box[0])
    async with trio.open_nursery() as nursery:
        await nursery.start(network.serve)
        nursery.start_soon(_flush_scheduler, broker, limiter)
        nursery.start_soon(_retention_checker, broker, limiter)
        nursery.start_soon(broker.coordinator.run, broker._shutdown_requested)
        if on_started is not None:
            await on_started(nursery)
        log.info("broker %d listening on %s:%d, data in %s", config.broker_id, host,
                 network.port, ", ".join(config.log_dirs))
        task_status.started(broker)
        await broker._shutdown_requested.wait()
        await _drain(broker, config["shutdown.timeout.ms"] / 1000)
        nursery.cancel_scope.cancel()


def _advertised_host(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        import socket

        return socket.getfqdn()
    return host


async def _drain(broker: Broker, timeout_s: float) -> None:
    network = broker.network
    assert network is not None
    network.stop_accepting()
    network.stop_reading()
    broker.purgatory.wake_all()
    with trio.move_on_after(timeout_s):
        await network.wait_all_closed()
    if network.open_connections:
        log.warning("%d connections still open after %.1f s; closing them",
                    network.open_connections, timeout_s)


async def _flush_scheduler(broker: Broker, limiter: trio.CapacityLimiter) -> None:
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
        await trio.to_thread.run_sync(broker.logs.flush_due_logs, None, on_error,
                                      limiter=limiter)
        if trio.current_time() >= next_checkpoint:
            next_checkpoint = trio.current_time() + checkpoint_s
            try:
                await trio.to_thread.run_sync(broker.logs.checkpoint_recovery_points,
                                              limiter=limiter)
            except OSError as exc:
                _timer_faults.error("checkpoint", "writing the recovery-point checkpoints "
                                    "failed (the previous ones stay): %s", exc)


async def _retention_checker(broker: Broker, limiter: trio.CapacityLimiter) -> None:
    interval = broker.config["log.retention.check.interval.ms"] / 1000
    on_error = _timer_fault("retention")
    while True:
        await trio.sleep(interval)
        deleted = await trio.to_thread.run_sync(broker.logs.cleanup_logs, None, on_error,
                                                limiter=limiter)
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
