"""One trio loop in a background thread, shared by the blocking facades of a process.

A facade (``trilog.sync.Producer`` ...) enters its ``async with open_*()`` inside the loop
thread, in a *holder* task that keeps the context open until ``close()``; every blocking
method is a ``trio.from_thread`` call into that loop.  The loop starts with the first facade
and its thread ends when the last one closes, so nothing is left running.

Fork safety: a loop belongs to the process that started it.  A facade used in a forked
child (Spark's Python workers fork) raises ``ForkedFacadeError``; a facade created in the
child gets a loop of its own.
"""

from __future__ import annotations

import os
import threading
from contextlib import AbstractAsyncContextManager
from typing import Any, Callable

import trio

from trilog.errors import TrilogError


class ForkedFacadeError(TrilogError):
    """A facade created before ``fork()`` was used in the child process."""


class FacadeClosedError(TrilogError):
    """A method was called on a facade after ``close()``."""


class _Loop:
    """A trio run in a daemon thread; ``token`` reaches it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.users = 0
        self._ready = threading.Event()
        self._stop: trio.Event | None = None
        self.token: trio.lowlevel.TrioToken | None = None
        self.nursery: trio.Nursery | None = None
        self._thread = threading.Thread(target=self._run, name="trilog-sync-loop", daemon=True)
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        trio.run(self._main)

    async def _main(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def stop(self) -> None:
        assert self._stop is not None
        trio.from_thread.run_sync(self._stop.set, trio_token=self.token)
        self._thread.join()

    @property
    def thread(self) -> threading.Thread:
        return self._thread


_lock = threading.Lock()
_loop: _Loop | None = None


def _acquire_loop() -> _Loop:
    global _loop
    with _lock:
        if _loop is None or _loop.pid != os.getpid():
            _loop = _Loop()  # a forked child never reuses its parent's (threadless) loop
        _loop.users += 1
        return _loop


def _release_loop(loop: _Loop) -> None:
    global _loop
    with _lock:
        loop.users -= 1
        if loop.users > 0:
            return
        if _loop is loop:
            _loop = None
    loop.stop()


class Portal:
    """Holds one async context open in the shared loop and calls into it from any thread."""

    def __init__(self, context: AbstractAsyncContextManager, what: str) -> None:
        self._what = what
        self._pid = os.getpid()
        self._loop = _acquire_loop()
        self._closed = False
        self._close_event: trio.Event | None = None
        self._scope: trio.CancelScope | None = None  # the holder's, to cut a close short
        self._done = threading.Event()
        self._close_error: BaseException | None = None
        try:
            self.value = trio.from_thread.run(self._open, context, trio_token=self._loop.token)
        except BaseException:
            _release_loop(self._loop)
            raise

    async def _open(self, context: AbstractAsyncContextManager):
        self._close_event = trio.Event()
        assert self._loop.nursery is not None
        return await self._loop.nursery.start(self._hold, context)

    async def _hold(self, context: AbstractAsyncContextManager, *, task_status) -> None:
        started = False
        try:
            with trio.CancelScope() as self._scope:
                async with context as value:
                    task_status.started(value)
                    started = True
                    assert self._close_event is not None
                    await self._close_event.wait()
        except Exception as exc:
            if not started:
                raise  # nursery.start hands it to the facade's constructor
            # Never let one facade's failure take down the loop the others share:
            # ``close()`` raises it in the caller's thread instead.
            self._close_error = exc
        finally:
            self._done.set()

    def check(self) -> None:
        """Raise ``ForkedFacadeError`` in a forked child, ``FacadeClosedError`` once closed."""
        self._check()

    def call_soon(self, fn: Callable[[], Any]) -> None:
        """Schedule the non-blocking ``fn()`` in the loop thread and return at once."""
        self._check()
        token = self._loop.token
        assert token is not None  # set before the loop's constructor returns
        try:
            token.run_sync_soon(fn)
        except trio.RunFinishedError:
            raise FacadeClosedError(f"this {self._what} is closed") from None

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._loop.thread

    @property
    def forked(self) -> bool:
        """True in a child forked after this facade was created."""
        return os.getpid() != self._pid

    def spawn(self, async_fn: Callable[[], Any]) -> None:
        """From the loop thread: run ``async_fn()`` as a task of the loop.  It must not
        raise (the loop is shared by every facade of the process).  Once the loop is
        stopping, the task is not started: ``async_fn`` must then tolerate never running."""
        assert self._loop.nursery is not None
        try:
            self._loop.nursery.start_soon(async_fn)
        except RuntimeError:  # the loop's nursery is closed: it is shutting down
            pass

    def _check(self) -> None:
        if os.getpid() != self._pid:
            raise ForkedFacadeError(
                f"this {self._what} was created in process {self._pid} before a fork(); "
                f"create a new one in this process ({os.getpid()})"
            )
        if self._closed:
            raise FacadeClosedError(f"this {self._what} is closed")

    def run(self, async_fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``async_fn(*args)`` in the loop and return its result (or raise its error).

        A ``KeyboardInterrupt`` while waiting cancels the call in the loop, then propagates.
        """
        self._check()
        scope_box: list[trio.CancelScope] = []

        async def call():
            with trio.CancelScope() as scope:
                scope_box.append(scope)
                return await async_fn(*args)
            return None  # only reached when the caller was interrupted and left

        try:
            return trio.from_thread.run(call, trio_token=self._loop.token)
        except KeyboardInterrupt:
            if scope_box:
                try:
                    trio.from_thread.run_sync(scope_box[0].cancel, trio_token=self._loop.token)
                except trio.RunFinishedError:
                    pass
            raise

    def run_sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run the non-blocking ``fn(*args)`` in the loop thread."""
        self._check()
        return trio.from_thread.run_sync(fn, *args, trio_token=self._loop.token)

    def close(self, timeout: float | None = None) -> None:
        """Leave the held context (it flushes/cleans up as its ``async with`` does) and
        release the loop; the loop's thread ends with its last facade.  Idempotent.

        ``timeout``: seconds the context's exit may take; after them it is cancelled (a
        producer fails the records it could not deliver yet with ``ProducerClosedError``)."""
        if self._closed or os.getpid() != self._pid:
            self._closed = True
            return
        self._closed = True
        try:
            assert self._close_event is not None
            trio.from_thread.run_sync(self._close_event.set, trio_token=self._loop.token)
            if not self._done.wait(timeout):
                assert self._scope is not None  # set before the constructor returned
                trio.from_thread.run_sync(self._scope.cancel, trio_token=self._loop.token)
                self._done.wait()
        finally:
            _release_loop(self._loop)
        if self._close_error is not None:
            raise self._close_error

    @property
    def closed(self) -> bool:
        return self._closed


def loop_thread() -> threading.Thread | None:
    """The shared loop's thread in this process, if one is running (for tests)."""
    with _lock:
        loop = _loop
    return loop.thread if loop is not None and loop.pid == os.getpid() else None
