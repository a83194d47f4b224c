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

import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Mapping

import trio

from trilog._concurrency import unwrap_exception_group
from trilog.broker._cluster import BrokerInfo, Cluster, StandaloneCluster, load_or_create_meta
from trilog.broker._config import BrokerConfig
from trilog.broker._coordinator import GroupCoordinator, client_address
from trilog.broker._handlers import RequestHandler
from trilog.broker._network import Network
from trilog.broker._purgatory import FetchPurgatory
from trilog.storage import LogConfig, LogManager

log = logging.getLogger("trilog.broker")

#: How often recovery points are checkpointed (Kafka's log.flush.offset.checkpoint.interval.ms).
CHECKPOINT_INTERVAL_S = 60.0


def log_config_from(config: BrokerConfig) -> LogConfig:
    props = {k: v for k, v in config.values.items() if v is not None and k.startswith(("log.", "message."))}
    return LogConfig.from_properties(props)


class Broker:
    """A running broker.  Read ``port``, ``broker_id``, ``cluster``; call ``shutdown()``."""

    def __init__(self, config: BrokerConfig, logs: LogManager) -> None:
        self.config = config
        self.logs = logs
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
        return {
            "open_connections": net.open_connections if net else 0,
            "connections_accepted": net.connection_count if net else 0,
            "parked_fetches": len(self.purgatory),
            "partitions": len(self.logs),
        }


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
    logs = await trio.to_thread.run_sync(LogManager, config.log_dirs, log_config_from(config))
    broker = Broker(config, logs)
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
        while network.open_connections:
            await trio.sleep(0.01)
    if network.open_connections:
        log.warning("%d connections still open after %.1f s; closing them",
                    network.open_connections, timeout_s)


async def _flush_scheduler(broker: Broker, limiter: trio.CapacityLimiter) -> None:
    """Time-based flushes (``log.flush.interval.ms``) and periodic recovery checkpoints."""
    interval = broker.config["log.flush.scheduler.interval.ms"] / 1000
    flush_ms = broker.config["log.flush.interval.ms"]
    if flush_ms is not None:
        interval = min(interval, max(flush_ms, 1) / 1000)
    since_checkpoint = 0.0
    while True:
        await trio.sleep(interval)
        await trio.to_thread.run_sync(broker.logs.flush_due_logs, limiter=limiter)
        since_checkpoint += interval
        if since_checkpoint >= CHECKPOINT_INTERVAL_S:
            since_checkpoint = 0.0
            await trio.to_thread.run_sync(broker.logs.checkpoint_recovery_points, limiter=limiter)


async def _retention_checker(broker: Broker, limiter: trio.CapacityLimiter) -> None:
    interval = broker.config["log.retention.check.interval.ms"] / 1000
    while True:
        await trio.sleep(interval)
        deleted = await trio.to_thread.run_sync(broker.logs.cleanup_logs, limiter=limiter)
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
