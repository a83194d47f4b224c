"""Small structured-concurrency helpers shared by the broker and the client (pure trio)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

#: The longest a per-record async call (``Producer.send``, the consumers' ``__anext__``) goes
#: without yielding to other tasks: see ``YieldPacer``.
YIELD_INTERVAL_S = 0.001


class YieldPacer:
    """Paces the full yields of a per-record async call.

    Every such call must be a cancellation point, but a full yield to the scheduler costs
    more than handling a record.  So the call checks for cancellation each time and yields
    only when ``due()``, at most once per ``YIELD_INTERVAL_S``: other tasks never wait
    longer than that for it::

        await trio.lowlevel.checkpoint_if_cancelled()
        if self._pacer.due():
            await trio.lowlevel.cancel_shielded_checkpoint()
    """

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last = 0.0

    def due(self) -> bool:
        now = time.perf_counter()  # wall time: trio's clock costs more, and may be virtual
        if now - self._last >= YIELD_INTERVAL_S:
            self._last = now
            return True
        return False


@contextmanager
def unwrap_exception_group() -> Iterator[None]:
    """Re-raise an exception group holding exactly one exception as that exception.

    ``async with open_x()`` objects own a nursery, and trio wraps everything that leaves a
    nursery in an ``ExceptionGroup``.  A caller of ``open_broker`` wants the
    ``BrokerIdInUseError`` or the ``AssertionError`` itself; a group of several real errors
    is left as it is.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        exc: BaseException = group
        while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
            exc = exc.exceptions[0]
        if exc is group:
            raise
        raise exc from None
