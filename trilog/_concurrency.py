"""Small structured-concurrency helpers shared by the broker and the client (pure trio)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

#: The longest a per-record async call (``Producer.send``, ``MessageStream.__anext__``) goes
#: without yielding to other tasks.  Each call checks for cancellation, but a full yield to
#: the scheduler costs more than a record, so while records are at hand they yield at most
#: this often: other tasks never wait longer than that for them.
YIELD_INTERVAL_S = 0.001


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
