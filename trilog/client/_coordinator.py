"""A consumer group's coordinator: the broker that runs the group and keeps its offsets;
or a transactional id's (``key_type=TRANSACTION``): the broker that runs its transactions.

``Coordinator`` finds it (FindCoordinator, seed 001 "Offset management"; key type 1 for a
transactional id, KIP-98), holds the connection its requests go on, and sends requests to
it with retries while it moves or loads.  The group consumers, the broker offset store, the
groups admin and the transactional producer all go through it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from trilog.client._client import Client
from trilog.net import BrokerConnection, open_connection
from trilog.client._metadata import Node
from trilog.client._retry import REQUEST_RETRY
from trilog.errors import (
    ApiError,
    CoordinatorLoadInProgressError,
    NetworkError,
    RequestTimedOutError,
    UnstableOffsetCommitError,
    error_for_code,
    raise_for_code,
)
from trilog.protocol import ApiKey, FindCoordinatorRequest, Message


#: FindCoordinator's key types: a consumer group, a transactional id (v1+)
GROUP = 0
TRANSACTION = 1


class Coordinator:
    """A group's coordinator: found with FindCoordinator, forgotten (``reset``) when it fails.

    Without a ``nursery`` requests share the client's connection to that broker.  With one,
    they go on a connection of their own, held by a task in ``nursery``, as Kafka's clients
    do: a JoinGroup parks for the whole rebalance and responses come back in order per
    connection, so group requests must not queue behind fetches or metadata (or make them
    time out).
    """

    def __init__(self, client: Client, group_id: str, *, nursery: trio.Nursery | None = None,
                 retry_unreachable: bool = True, key_type: int = GROUP) -> None:
        self._client = client
        #: the key FindCoordinator asks about: a group id, or a transactional id
        self.group_id = group_id
        self.key_type = key_type
        self._nursery = nursery
        self._retry_unreachable = retry_unreachable
        self._node: Node | None = None
        self._conn: BrokerConnection | None = None
        self._conn_scope: trio.CancelScope | None = None
        self._pinned: BrokerConnection | None = None
        self._lock = trio.Lock()

    @property
    def known(self) -> Node | None:
        return self._node

    async def node(self) -> Node:
        """The coordinator, asking a broker (FindCoordinator) if it is not known."""
        if self._node is not None:
            await trio.lowlevel.checkpoint()
            return self._node
        self._node = await find_coordinator(await self._client.any_connection(), self.group_id,
                                            self.key_type)
        return self._node

    async def connection(self) -> BrokerConnection:
        """The connection to the coordinator (found and connected on first use)."""
        if self._pinned is not None and not self._pinned.closed:
            await trio.lowlevel.checkpoint()
            return self._pinned
        async with self._lock:
            if self._nursery is None:
                return await self._client.connection(await self.node())
            if self._conn is not None and not self._conn.closed:
                return self._conn
            node = await self.node()
            self._conn, self._conn_scope = await self._nursery.start(self._hold, node)
            return self._conn

    async def _hold(self, node: Node, *,
                    task_status: trio.TaskStatus[tuple[BrokerConnection, trio.CancelScope]]
                    ) -> None:
        with trio.CancelScope() as scope:
            async with open_connection(node.host, node.port, client_id=self._client.client_id,
                                       request_timeout_s=self._client.request_timeout_s,
                                       security=self._client.security) as conn:
                task_status.started((conn, scope))
                await conn.wait_closed()

    @asynccontextmanager
    async def connection_in_this_task(self) -> AsyncIterator[BrokerConnection]:
        """Inside, requests to the coordinator go on a connection the calling task opens
        and owns.

        For shutdown: when the scope around a consumer is cancelled, so are the tasks that
        hold connections (the client's and ours); a shielded ``close()`` still reaches the
        coordinator through this one.
        """
        node = self._node
        if node is None:
            node = await self._find_directly()
        async with open_connection(node.host, node.port, client_id=self._client.client_id,
                                   request_timeout_s=self._client.request_timeout_s,
                                   security=self._client.security) as conn:
            self._pinned = conn
            try:
                yield conn
            finally:
                self._pinned = None

    async def _find_directly(self) -> Node:
        errors = []
        for broker in self._client.metadata.value.brokers.values():
            try:
                async with open_connection(broker.host, broker.port,
                                           client_id=self._client.client_id,
                                           request_timeout_s=self._client.request_timeout_s,
                                           security=self._client.security) as conn:
                    self._node = await find_coordinator(conn, self.group_id, self.key_type)
                    return self._node
            except (NetworkError, RequestTimedOutError) as exc:
                errors.append(str(exc))
        raise NetworkError("cannot find the coordinator: "
                           + "; ".join(errors or ["no brokers known"]))

    def reset(self) -> None:
        """Forget the coordinator (it moved or failed): the next request finds it again."""
        self._node = None
        self._conn = None
        if self._conn_scope is not None:
            self._conn_scope.cancel()
            self._conn_scope = None

    async def request(self, request: Message,
                      error_code: Callable[[Any], int] | None = None) -> Any:
        """Send ``request`` to the coordinator and return the answer, finding the coordinator
        again and retrying (``REQUEST_RETRY``) while it moves, loads or cannot be reached.
        ``error_code(response)`` (default: the first error code anywhere in it) that is not
        retriable is raised.  Without ``retry_unreachable``, a lookup that reaches no broker
        at all is raised at once: retrying will not find the coordinator."""
        tries = REQUEST_RETRY.attempts()
        async for _ in tries:
            try:
                conn = await self.connection()
                response = await conn.request(request)
                raise_for_code((error_code or first_error_code)(response))
                return response
            except ApiError as exc:
                unreachable = self._node is None and isinstance(
                    exc, (NetworkError, RequestTimedOutError))
                if not exc.retriable or tries.last or (
                        unreachable and not self._retry_unreachable):
                    raise
                if not isinstance(exc, (CoordinatorLoadInProgressError,
                                        UnstableOffsetCommitError)):
                    self.reset()  # moved, or gone: find it again
        raise AssertionError("unreachable: the last attempt returns or raises")


async def find_coordinator(conn: BrokerConnection, group_id: str, key_type: int = GROUP
                           ) -> Node:
    """Ask the broker at the other end of ``conn`` which broker coordinates ``group_id`` (a
    transactional id with ``key_type=TRANSACTION``)."""
    R = FindCoordinatorRequest
    # v0 has no key type: it would look up a group of that name
    version = None if key_type == GROUP else conn.version_for(
        ApiKey.FIND_COORDINATOR, (1, R.MAX_VERSION))
    response = await conn.request(R(key=group_id, key_type=key_type), version=version)
    if response.error_code:
        err = error_for_code(response.error_code)
        what = "group" if key_type == GROUP else "transactional id"
        raise type(err)(f"no coordinator for {what} {group_id!r}: {err}")
    return Node(response.node_id, response.host, response.port)


def first_error_code(response: Any) -> int:
    """The response's own error code, else the first of its topics' partitions."""
    code: int = getattr(response, "error_code", 0) or 0
    if code:
        return code
    for t in getattr(response, "topics", ()) or ():
        for p in getattr(t, "partitions", ()) or ():
            if getattr(p, "error_code", 0):
                return int(p.error_code)
    return 0
