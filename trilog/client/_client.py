"""The core every trilog client shares: broker connections and cluster metadata.

``async with open_client(bootstrap_servers="h:9092") as client`` (or ``zookeeper=...``) owns
a nursery holding one task per open broker connection (one connection per broker, opened on
first use, reopened with backoff after a failure) and the metadata refresher.

Metadata is a ``ClusterMetadata`` snapshot in ``client.metadata`` (a ``trio_util.AsyncValue``),
refreshed on demand (``refresh_metadata``, called by producers and consumers when a response
says their picture is stale), every ``metadata_max_age_ms``, and, in ZooKeeper mode, whenever
a watch on ``/brokers/ids`` or ``/brokers/topics`` fires (seed 002, "Automatic producer load
balancing": brokers and topics found in ZooKeeper and kept current by watches).  Concurrent
refresh requests share one round trip.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, aclosing, asynccontextmanager
from typing import TYPE_CHECKING, TypeVar

import trio
from trio_util import AsyncValue

from trilog._concurrency import unwrap_exception_group
from trilog.client._brokers import (
    DEFAULT_BOOTSTRAP_TIMEOUT_MS,
    parse_bootstrap,
    reach_cluster,
    registered_brokers,
)
from trilog.net import BrokerConnection, open_connection
from trilog.client._metadata import ClusterMetadata, Node
from trilog.client._retry import Backoff
from trilog.net import ClientSecurity
from trilog.errors import (
    LeaderNotAvailableError,
    NetworkError,
    TrilogError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from trilog.protocol import MetadataRequest

if TYPE_CHECKING:  # trilog.zk imports kazoo: only a client that uses ZooKeeper pays for it
    from trilog.zk import ZooKeeper

_T = TypeVar("_T")

log = logging.getLogger("trilog.client")

#: ``partitions_for``: how often to ask again for a topic that has no leaders yet
_TOPIC_WAIT = Backoff(first_s=0.01, max_s=0.5)
#: after a ZooKeeper change: until a broker's metadata shows it (it may lag), then give up
_ZOOKEEPER_CHANGE = Backoff(first_s=0.05, max_s=2.0, max_attempts=8)


class Client:
    """Connections and metadata; see the module docstring.  Use from one trio run."""

    def __init__(self, nursery: trio.Nursery, bootstrap: list[tuple[str, int]], *,
                 client_id: str, connect_timeout_ms: int, request_timeout_ms: int,
                 metadata_max_age_ms: int, reconnect_backoff_ms: int,
                 reconnect_backoff_max_ms: int, allow_auto_create_topics: bool,
                 security: ClientSecurity | None = None) -> None:
        self._nursery = nursery
        #: TLS and SASL of every connection (None: PLAINTEXT)
        self.security = security
        self._bootstrap = bootstrap
        self.client_id = client_id
        self._connect_timeout_s = connect_timeout_ms / 1000
        self.request_timeout_s = request_timeout_ms / 1000
        self._metadata_max_age_s = metadata_max_age_ms / 1000
        self._reconnect = Backoff(reconnect_backoff_ms / 1000, reconnect_backoff_max_ms / 1000,
                                  jitter=0.2)
        self.allow_auto_create_topics = allow_auto_create_topics
        self.metadata: AsyncValue[ClusterMetadata] = AsyncValue(ClusterMetadata())
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._connecting: dict[tuple[str, int], trio.Event] = {}
        self._failures: dict[tuple[str, int], int] = {}
        self._refresh_lock = trio.Lock()
        self._refresh_count = 0
        self._refresh_requested = False
        self._zk_brokers: list[tuple[str, int]] | None = None  # set in ZooKeeper mode

    # -- connections ---------------------------------------------------------------------------

    async def connection(self, node: Node | tuple[str, int]) -> BrokerConnection:
        """The open connection to ``node``, connecting (once, for all callers) if needed.

        Raises ``NetworkError`` when the broker cannot be reached; the next attempt waits an
        exponential backoff first.
        """
        address = (node.host, node.port) if isinstance(node, Node) else node
        while True:
            conn = self._connections.get(address)
            if conn is not None and not conn.closed:
                return conn
            pending = self._connecting.get(address)
            if pending is None:
                break
            await pending.wait()
            if address not in self._connections:
                raise NetworkError(f"cannot connect to {address[0]}:{address[1]}")
        done = trio.Event()
        self._connecting[address] = done
        try:
            failures = self._failures.get(address, 0)
            if failures:
                await trio.sleep(self._reconnect.delay(failures))
            try:
                conn = await self._nursery.start(self._hold, address)
            except NetworkError:
                self._failures[address] = failures + 1
                raise
            self._failures.pop(address, None)
            return conn
        finally:
            del self._connecting[address]
            done.set()

    async def _hold(self, address: tuple[str, int], *,
                    task_status: trio.TaskStatus[BrokerConnection]) -> None:
        """One task per connection: keeps it open until it fails or the client closes."""
        with unwrap_exception_group():
            async with open_connection(address[0], address[1], client_id=self.client_id,
                                       connect_timeout_s=self._connect_timeout_s,
                                       request_timeout_s=self.request_timeout_s,
                                       security=self.security) as conn:
                self._connections[address] = conn
                try:
                    task_status.started(conn)
                    await conn.wait_closed()
                finally:
                    if self._connections.get(address) is conn:
                        del self._connections[address]

    async def any_connection(self) -> BrokerConnection:
        """A connection to some broker: a known one, else a bootstrap server."""
        candidates = [(n.host, n.port) for n in self.metadata.value.brokers.values()]
        candidates += self._zk_brokers or self._bootstrap
        for address in candidates:
            conn = self._connections.get(address)
            if conn is not None and not conn.closed:
                return conn
        errors = []
        for address in dict.fromkeys(candidates):
            try:
                return await self.connection(address)
            except NetworkError as exc:
                errors.append(str(exc))
        raise NetworkError("no broker reachable: " + "; ".join(errors or ["no brokers known"]))

    async def bootstrap(self, timeout_ms: float) -> None:
        """The first contact (``reach_cluster``): the bootstrap servers in turn until one
        answers a Metadata request; ``NoBrokersAvailableError`` after ``timeout_ms``."""

        async def ask(server: tuple[str, int], deadline: float) -> None:
            with trio.fail_at(deadline):  # the connection's task is the client's
                conn = await self.connection(server)
                # No topics: the brokers and the cluster are what an opener needs to know.
                response = await conn.request(MetadataRequest(topics=[],
                                                              allow_auto_topic_creation=False))
            fresh = ClusterMetadata.from_response(response)
            self.metadata.value = self.metadata.value.merge(fresh, [])

        await reach_cluster(self._bootstrap, ask, timeout_ms=timeout_ms, security=self.security)

    # -- metadata ---------------------------------------------------------------------------------

    async def refresh_metadata(self, topics: list[str] | None = None, *,
                               allow_auto_create: bool | None = None) -> ClusterMetadata:
        """Ask a broker for fresh metadata (for ``topics``, or all) and publish it.

        Callers that arrive while a refresh is in flight wait for it instead of sending
        another (a burst of NOT_LEADER errors costs one round trip).  ``allow_auto_create``
        overrides the client's ``allow_auto_create_topics`` for this request (a simple
        consumer's one-shot calls never create topics; following a partition may).
        """
        seen = self._refresh_count
        async with self._refresh_lock:
            if self._refresh_count != seen and topics is None:
                return self.metadata.value
            conn = await self.any_connection()
            request = MetadataRequest(
                topics=None if topics is None else
                [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                allow_auto_topic_creation=self.allow_auto_create_topics
                if allow_auto_create is None else allow_auto_create,
            )
            response = await conn.request(request)
            fresh = ClusterMetadata.from_response(response)
            self.metadata.value = self.metadata.value.merge(fresh, topics)
            self._refresh_count += 1
            return self.metadata.value

    async def partitions_for(self, topic: str, *, timeout_s: float | None = None
                             ) -> tuple[int, ...]:
        """The partitions of ``topic``, refreshing (and auto-creating) until it has leaders."""
        meta = self.metadata.value
        known = meta.partitions_for(topic)
        if known and len(meta.available_partitions(topic)) == len(known):
            return known
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        with trio.move_on_after(timeout):
            async for _ in _TOPIC_WAIT.attempts():
                meta = await self.refresh_metadata([topic])
                if meta.available_partitions(topic):
                    return meta.partitions[topic]
                code = meta.topic_errors.get(topic)
                if code is not None and code not in (LeaderNotAvailableError.code,
                                                     UnknownTopicOrPartitionError.code):
                    error = error_for_code(code)
                    raise type(error)(f"topic {topic!r}: {error}")
                if code == UnknownTopicOrPartitionError.code and not self.allow_auto_create_topics:
                    raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        raise UnknownTopicOrPartitionError(
            f"topic {topic!r} has no available partitions after {timeout:.1f} s"
        )

    def request_metadata_refresh(self) -> None:
        """Refresh metadata soon, in the background (for callers that cannot wait)."""
        if not self._refresh_requested:
            self._refresh_requested = True
            self._nursery.start_soon(self._background_refresh)

    async def _background_refresh(self) -> None:
        try:
            await self.refresh_metadata()
        except TrilogError as exc:
            log.debug("background metadata refresh failed: %s", exc)
        finally:
            self._refresh_requested = False

    async def _refresh_periodically(self) -> None:
        while True:
            await trio.sleep(self._metadata_max_age_s)
            try:
                await self.refresh_metadata()
            except TrilogError as exc:
                log.warning("periodic metadata refresh failed: %s", exc)

    # -- ZooKeeper discovery --------------------------------------------------------------------

    async def _follow_zookeeper(self, zk: ZooKeeper, *,
                                task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                                ) -> None:
        """Keep the broker list from ZooKeeper, refreshing metadata when brokers or topics
        change (new broker, lost broker, new topic, new assignment)."""
        from trilog.zk import BROKER_IDS, BROKER_TOPICS

        ids = await zk.watch_children(BROKER_IDS)
        topics = await zk.watch_children(BROKER_TOPICS)

        async def read_brokers(children: list[str] | None) -> None:
            self._zk_brokers = [(b.host, b.port)
                                for b in await registered_brokers(zk, children or [])]

        await read_brokers(await _first_value(ids))
        if self._zk_brokers:
            try:
                await self.refresh_metadata()
            except TrilogError as exc:
                log.warning("metadata from ZooKeeper's brokers failed: %s", exc)
        task_status.started()

        async def on_brokers() -> None:
            async with aclosing(ids.eventual_values(lambda v: v is not None)) as values:
                async for children in values:
                    await read_brokers(children)
                    wanted = set(self._zk_brokers or ())
                    # The broker we ask may not have seen the change yet: ask until its
                    # answer lists every broker ZooKeeper does.
                    await self._refresh_until(lambda m: wanted <= {
                        (n.host, n.port) for n in m.brokers.values()})

        async def on_topics() -> None:
            async with aclosing(topics.eventual_values(lambda v: v is not None)) as values:
                async for children in values:
                    wanted = {t for t in children}
                    await self._refresh_until(lambda m: wanted <= set(m.partitions))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(on_brokers)
            nursery.start_soon(on_topics)

    async def _refresh_until(self, done: Callable[[ClusterMetadata], bool]) -> None:
        """Refresh metadata (backing off) until ``done(metadata)``; give up quietly."""
        async for _ in _ZOOKEEPER_CHANGE.attempts():
            try:
                if done(await self.refresh_metadata()):
                    return
            except TrilogError as exc:
                log.warning("metadata refresh after a ZooKeeper change failed: %s", exc)


async def _first_value(value: AsyncValue[list[str] | None]) -> list[str] | None:
    result: list[str] | None = await value.wait_value(lambda v: v is not None)
    return result


@asynccontextmanager
async def open_client(
    bootstrap_servers: str | list[str] | None = None,
    *,
    zookeeper: str | None = None,
    client_id: str = "trilog",
    connect_timeout_ms: int = 10_000,
    request_timeout_ms: int = 30_000,
    metadata_max_age_ms: int = 300_000,
    reconnect_backoff_ms: int = 50,
    reconnect_backoff_max_ms: int = 1000,
    allow_auto_create_topics: bool = True,
    security: ClientSecurity | None = None,
    bootstrap_timeout_ms: float = DEFAULT_BOOTSTRAP_TIMEOUT_MS,
) -> AsyncIterator[Client]:
    """A ``Client`` for the body of the ``async with``; every connection closes on exit
    (``security``: TLS and SASL, see ``ClientSecurity``).  With ``bootstrap_servers`` the
    body starts once a bootstrap server has answered (``Client.bootstrap``):
    ``NoBrokersAvailableError`` after ``bootstrap_timeout_ms`` without an answer."""
    if (bootstrap_servers is None) == (zookeeper is None):
        raise ValueError("give exactly one of bootstrap_servers and zookeeper")
    bootstrap = parse_bootstrap(bootstrap_servers) if bootstrap_servers is not None else []
    with unwrap_exception_group():
        async with trio.open_nursery() as nursery:
            client = Client(
                nursery, bootstrap, client_id=client_id,
                connect_timeout_ms=connect_timeout_ms, request_timeout_ms=request_timeout_ms,
                metadata_max_age_ms=metadata_max_age_ms,
                reconnect_backoff_ms=reconnect_backoff_ms,
                reconnect_backoff_max_ms=reconnect_backoff_max_ms,
                allow_auto_create_topics=allow_auto_create_topics, security=security,
            )
            try:
                if zookeeper is not None:
                    from trilog.zk import open_zookeeper

                    zk = await _enter(nursery, open_zookeeper(zookeeper))
                    await nursery.start(client._follow_zookeeper, zk)
                else:
                    await client.bootstrap(bootstrap_timeout_ms)
                nursery.start_soon(client._refresh_periodically)
                yield client
            finally:
                nursery.cancel_scope.cancel()


async def _enter(nursery: trio.Nursery, context_manager: AbstractAsyncContextManager[_T]) -> _T:
    """Enter an async context manager in a task of ``nursery``; it exits when the nursery
    is cancelled.  (The ZooKeeper session must outlive every task that uses it.)"""

    async def hold(*, task_status: trio.TaskStatus[_T]) -> None:
        async with context_manager as value:
            task_status.started(value)
            await trio.sleep_forever()

    return await nursery.start(hold)
