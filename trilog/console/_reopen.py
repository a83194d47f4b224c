"""The console's admin client, opened again after its connection broke.

An ``Admin`` talks to the cluster over the connection it opened first, and stays broken
once that closes (a broker restarted); a console runs for weeks.  ``ReopeningAdmin.get()``
gives the open admin, opening one if there is none; ``invalidate()`` (called when a request
raised ``NetworkError``) closes it, so that the next ``get()`` opens a fresh one; while the
cluster cannot be reached, pages get its error at once rather than each waiting out the
bootstrap timeout.  Each admin
lives in a task of the console's nursery (its context stays entered between requests).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import trio

from trilog.client import Admin
from trilog.errors import NetworkError

#: after a failed opening, how long ``get`` answers with its error instead of trying again
RETRY_AFTER_S = 3.0


class ReopeningAdmin:
    def __init__(self, nursery: trio.Nursery,
                 opener: Callable[[], AbstractAsyncContextManager[Admin]]) -> None:
        self._nursery = nursery
        self._opener = opener
        self._admin: Admin | None = None
        self._scope: trio.CancelScope | None = None
        self._lock = trio.Lock()
        self._failure: tuple[float, BaseException] | None = None
        #: how many admins were opened (the first one included)
        self.opened = 0

    async def get(self) -> Admin:
        """The open admin; opening one raises what ``open_admin`` raises (for example
        ``NoBrokersAvailableError`` after its bootstrap timeout)."""
        async with self._lock:
            if self._admin is None:
                if self._failure is not None and \
                        trio.current_time() - self._failure[0] < RETRY_AFTER_S:
                    # the cluster was just found down: say so at once
                    raise self._failure[1].with_traceback(None)
                try:
                    self._admin, self._scope = await self._nursery.start(self._hold)
                except NetworkError as exc:
                    self._failure = (trio.current_time(), exc)
                    raise
                self._failure = None
                self.opened += 1
            return self._admin

    def invalidate(self) -> None:
        """Close the admin: its connection is broken (the next ``get`` opens another)."""
        if self._scope is not None:
            self._scope.cancel()
        self._admin = self._scope = None

    async def _hold(self, *, task_status: trio.TaskStatus[tuple[Admin, trio.CancelScope]]
                    = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            async with self._opener() as admin:
                task_status.started((admin, scope))
                await trio.sleep_forever()
