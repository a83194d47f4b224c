"""kazoo under trio: blocking calls in worker threads, watches delivered into trio.

``async with open_zookeeper("host:port/chroot") as zk:`` gives a ``ZooKeeper`` whose
methods are async (each runs one kazoo call in a worker thread, bounded by a capacity
limiter) and whose watches are ``trio_util.AsyncValue`` objects holding the latest
children or data.  A watch burst therefore coalesces: a task that is busy when three
brokers join sees the latest list once, not three stale ones.

kazoo's threads reach trio only through ``trio.from_thread.run_sync`` with the loop's
token; once the ``async with`` exits, watch callbacks stop themselves.
"""

from __future__ import annotations

import functools
import logging
from contextlib import asynccontextmanager
from typing import AsyncIterator, Callable

import trio
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError as _KazooBadVersion,
    ConnectionLoss,
    KazooException,
    NodeExistsError as _KazooNodeExists,
    NoNodeError as _KazooNoNode,
    NotEmptyError as _KazooNotEmpty,
    RolledBackError as _KazooRolledBack,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from trio_util import AsyncValue

from trilog.errors import TrilogError

log = logging.getLogger("trilog.zk")


class ZooKeeperError(TrilogError):
    """A ZooKeeper operation failed."""


class ZooKeeperUnavailableError(ZooKeeperError):
    """ZooKeeper cannot be reached (not running, connection lost, session expired)."""


class NoNodeError(ZooKeeperError):
    """The znode does not exist."""


class NodeExistsError(ZooKeeperError):
    """The znode already exists."""


class NotEmptyError(ZooKeeperError):
    """The znode has children."""


class BadVersionError(ZooKeeperError):
    """A conditional write lost: the znode changed since the version it was read at."""


def _translate(exc: BaseException) -> BaseException:
    if isinstance(exc, _KazooNoNode):
        return NoNodeError(str(exc) or "no such znode")
    if isinstance(exc, _KazooNodeExists):
        return NodeExistsError(str(exc) or "znode exists")
    if isinstance(exc, _KazooNotEmpty):
        return NotEmptyError(str(exc) or "znode has children")
    if isinstance(exc, _KazooBadVersion):
        return BadVersionError(str(exc) or "znode version changed")
    if isinstance(exc, (ConnectionLoss, SessionExpiredError, KazooTimeoutError)):
        return ZooKeeperUnavailableError(f"ZooKeeper unavailable: {type(exc).__name__}")
    if isinstance(exc, KazooException):
        return ZooKeeperError(f"{type(exc).__name__}: {exc}")
    return exc


class ZooKeeper:
    """An open ZooKeeper session, used from trio.  Every method may be called concurrently.

    ``state`` holds "CONNECTED", "SUSPENDED" or "LOST"; ``session_generation`` counts the
    sessions this client has had, so an owner of ephemeral nodes can re-create them after
    an expiry (a new generation).
    """

    def __init__(self, client: KazooClient, limiter: trio.CapacityLimiter,
                 operation_timeout_s: float = 10.0) -> None:
        self._client = client
        self._operation_timeout_s = operation_timeout_s
        self._limiter = limiter
        self._token = trio.lowlevel.current_trio_token()
        self._closed = False
        self.state: AsyncValue[str] = AsyncValue("CONNECTED")
        self.session_generation: AsyncValue[int] = AsyncValue(1)
        self._lost = False
        client.add_listener(self._on_state)

    # -- calls -------------------------------------------------------------------------------

    async def _call(self, fn: Callable, *args, **kwargs):
        try:
            # While ZooKeeper is unreachable kazoo queues a call until the connection comes
            # back: bound the wait, and abandon the thread rather than pin the caller.
            with trio.move_on_after(self._operation_timeout_s):
                return await trio.to_thread.run_sync(
                    functools.partial(fn, *args, **kwargs),
                    limiter=self._limiter,
                    abandon_on_cancel=True,
                )
            raise ZooKeeperUnavailableError(
                f"ZooKeeper did not answer within {self._operation_timeout_s:.1f} s")
        except Exception as exc:
            translated = _translate(exc)
            if translated is exc:
                raise
            raise translated from exc

    async def get(self, path: str) -> bytes:
        data, _stat = await self._call(self._client.get, path)
        return data

    async def get_versioned(self, path: str) -> tuple[bytes, int]:
        """The node's data and its version (for ``set(..., version=)``)."""
        data, stat = await self._call(self._client.get, path)
        return data, stat.version

    async def get_owned(self, path: str) -> tuple[bytes, int]:
        """The node's data and the session that owns it (``ephemeralOwner``: 0 for a
        persistent node), which says whose life an ephemeral node belongs to."""
        data, stat = await self._call(self._client.get, path)
        return data, stat.ephemeralOwner

    @property
    def session_id(self) -> int | None:
        """This client's session (None while it has none): the ``ephemeralOwner`` of the
        ephemeral nodes it creates."""
        client_id = self._client.client_id
        return client_id[0] if client_id else None

    async def get_children(self, path: str) -> list[str]:
        return await self._call(self._client.get_children, path)

    async def exists(self, path: str) -> bool:
        return await self._call(self._client.exists, path) is not None

    async def create(self, path: str, value: bytes = b"", *, ephemeral: bool = False,
                     sequence: bool = False, makepath: bool = False) -> str:
        """Create a node; returns its path (with the number a ``sequence`` node got)."""
        return await self._call(self._client.create, path, value, ephemeral=ephemeral,
                                sequence=sequence, makepath=makepath)

    async def set(self, path: str, value: bytes, *, version: int = -1) -> int:
        """Set the node's data; with ``version`` only if the node is still at that version
        (``BadVersionError`` otherwise: another writer won).  Returns the new version."""
        stat = await self._call(self._client.set, path, value, version=version)
        return stat.version

    async def create_and_set(self, path: str, value: bytes, *, ephemeral: bool,
                             set_path: str, set_value: bytes, version: int) -> None:
        """Create ``path`` and set ``set_path`` (if still at ``version``) in one ZooKeeper
        transaction: both happen or neither.  ``NodeExistsError`` or ``BadVersionError``
        says which condition failed."""
        def run() -> None:
            transaction = self._client.transaction()
            transaction.create(path, value, ephemeral=ephemeral)
            transaction.set_data(set_path, set_value, version=version)
            for result in transaction.commit():
                if isinstance(result, Exception) and not isinstance(result, _KazooRolledBack):
                    raise result
        await self._call(run)

    async def delete_checked(self, path: str, *, check_path: str, version: int) -> None:
        """Delete ``path`` only if ``check_path`` is still at ``version``, in one ZooKeeper
        transaction (``BadVersionError`` or ``NoNodeError`` says which condition failed).
        For a node whose identity another node's version records (``/controller`` and
        ``/controller_epoch``, written together)."""
        def run() -> None:
            transaction = self._client.transaction()
            transaction.check(check_path, version)
            transaction.delete(path)
            for result in transaction.commit():
                if isinstance(result, Exception) and not isinstance(result, _KazooRolledBack):
                    raise result
        await self._call(run)

    async def ensure_path(self, path: str) -> None:
        await self._call(self._client.ensure_path, path)

    async def delete(self, path: str, *, recursive: bool = False) -> None:
        """Delete ``path`` (and its subtree if ``recursive``); ``NoNodeError`` if missing."""
        if recursive and not await self.exists(path):
            # kazoo's recursive delete is silent about a missing node; ours is not.
            raise NoNodeError(f"no such znode: {path}")
        await self._call(self._client.delete, path, recursive=recursive)

    async def put(self, path: str, value: bytes) -> None:
        """Set a persistent node's value, creating it (and its parents) if needed."""
        try:
            await self.set(path, value)
        except NoNodeError:
            try:
                await self.create(path, value, makepath=True)
            except NodeExistsError:
                await self.set(path, value)

    # -- watches -------------------------------------------------------------------------

    def _deliver(self, target: AsyncValue, value) -> bool:
        """Called in a kazoo thread; returns False to stop the watch."""
        if self._closed:
            return False
        try:
            self._token.run_sync_soon(setattr, target, "value", value)
        except trio.RunFinishedError:
            return False
        return True

    async def watch_children(self, path: str) -> AsyncValue:
        """An ``AsyncValue`` holding ``path``'s sorted children, kept current by a watch.

        The path is created if missing, so the watch survives until the session ends.
        """
        await self.ensure_path(path)
        value: AsyncValue = AsyncValue(None)
        await self._call(
            ChildrenWatch, self._client, path,
            lambda children: self._deliver(value, sorted(children)),
        )
        return value

    async def watch_data(self, path: str) -> AsyncValue:
        """An ``AsyncValue`` holding ``path``'s data (``None`` while the node is missing)."""
        value: AsyncValue = AsyncValue(None)
        await self._call(
            DataWatch, self._client, path,
            lambda data, _stat: self._deliver(value, data),
        )
        return value

    async def follow_data(self, path: str,
                          deliver: Callable[[bytes | None], None]) -> Callable[[], None]:
        """Call ``deliver(data)`` in the trio thread with ``path``'s data now and after every
        change (``None`` while the node is missing); returns ``stop``, after which nothing is
        delivered (kazoo drops the watch at its next event).  For many nodes followed by
        one task: each delivery is a plain call, with no task or ``AsyncValue`` per node."""
        stopped = False

        def relay(data: bytes | None) -> None:
            if not stopped:
                deliver(data)

        def on_data(data: bytes | None, _stat: object) -> bool:  # in a kazoo thread
            if stopped or self._closed:
                return False
            try:
                self._token.run_sync_soon(relay, data)
            except trio.RunFinishedError:
                return False
            return True

        def stop() -> None:
            nonlocal stopped
            stopped = True

        await self._call(DataWatch, self._client, path, on_data)
        return stop

    # -- session ---------------------------------------------------------------------------

    def _on_state(self, state: str) -> None:
        """kazoo's connection listener, in a kazoo thread; must not block."""
        if self._closed:
            return
        if state == KazooState.LOST:
            self._lost = True
            self._forward(state, None)
        elif state == KazooState.CONNECTED and self._lost:
            self._lost = False
            self._forward(state, 1)
        else:
            self._forward(state, None)

    def _forward(self, state: str, bump: int | None) -> None:
        def update() -> None:
            self.state.value = state
            if bump:
                self.session_generation.value += bump

        try:
            self._token.run_sync_soon(update)
        except trio.RunFinishedError:
            pass


@asynccontextmanager
async def open_zookeeper(
    connect: str,
    *,
    session_timeout_ms: int = 6000,
    connection_timeout_ms: int = 10_000,
    max_threads: int = 4,
) -> AsyncIterator[ZooKeeper]:
    """Connect to ZooKeeper (``host:port[,host:port][/chroot]``), creating the chroot.

    Raises ``ZooKeeperUnavailableError`` if no session is established within
    ``connection_timeout_ms``.
    """
    hosts, slash, chroot = connect.partition("/")
    if slash and chroot:
        await _ensure_chroot(hosts, "/" + chroot, connection_timeout_ms)
    client = KazooClient(
        hosts=connect,
        timeout=session_timeout_ms / 1000,
        connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 2.0},
        command_retry={"max_tries": 3, "delay": 0.1, "max_delay": 1.0},
        logger=log,
    )
    await _start(client, connect, connection_timeout_ms)
    zk = ZooKeeper(client, trio.CapacityLimiter(max_threads),
                   operation_timeout_s=max(session_timeout_ms / 1000, 2.0))
    try:
        yield zk
    finally:
        zk._closed = True
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(_stop, client)


async def _start(client: KazooClient, connect: str, timeout_ms: int) -> None:
    try:
        await trio.to_thread.run_sync(
            functools.partial(client.start, timeout=timeout_ms / 1000), abandon_on_cancel=True
        )
    except KazooTimeoutError:
        await trio.to_thread.run_sync(_stop, client)
        raise ZooKeeperUnavailableError(
            f"cannot connect to ZooKeeper at {connect} within {timeout_ms} ms; is it running? "
            "(`trilog zookeeper` starts one for development)"
        ) from None


async def _ensure_chroot(hosts: str, chroot: str, timeout_ms: int) -> None:
    client = KazooClient(hosts=hosts, timeout=10, logger=log,
                         connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 2.0})
    await _start(client, hosts, timeout_ms)
    try:
        await trio.to_thread.run_sync(client.ensure_path, chroot)
    finally:
        await trio.to_thread.run_sync(_stop, client)


def _stop(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()
