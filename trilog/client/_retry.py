"""Retrying: which errors are worth another try, and how long to wait before it.

One policy object for every retry loop of the client::

    tries = Backoff(first_s=0.05, max_s=1.0, max_attempts=10).attempts()
    async for _ in tries:
        try:
            return await something()
        except ApiError as exc:
            if not exc.retriable or tries.last:
                raise

The first attempt starts at once; each later one after ``first_s``, doubling up to
``max_s``, spread by ``jitter`` (a fraction: 0.2 waits 80% to 120%) so that clients
that failed together do not come back together.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import trio

from trilog.errors import ApiError


def is_retriable(exc: BaseException) -> bool:
    """Whether another try may succeed: a Kafka error marked retriable, which includes a
    lost connection (``NetworkError``) and a timeout (``RequestTimedOutError``)."""
    return isinstance(exc, ApiError) and exc.retriable


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff; ``max_attempts=None`` retries until the caller stops."""

    first_s: float = 0.05
    max_s: float = 1.0
    max_attempts: int | None = None
    jitter: float = 0.0

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` (>= 1) failures in a row."""
        delay: float = min(self.first_s * 2.0 ** min(failures - 1, 64), self.max_s)
        if self.jitter:
            delay *= random.uniform(1 - self.jitter, 1 + self.jitter)
        return delay

    def attempts(self) -> Attempts:
        return Attempts(self)


class Attempts:
    """``async for number in backoff.attempts()``: attempt numbers from 0, the backoff
    slept before every one but the first.  ``last`` is true during the final attempt."""

    __slots__ = ("_backoff", "number")

    def __init__(self, backoff: Backoff) -> None:
        self._backoff = backoff
        self.number = -1

    @property
    def last(self) -> bool:
        limit = self._backoff.max_attempts
        return limit is not None and self.number >= limit - 1

    def __aiter__(self) -> Attempts:
        return self

    async def __anext__(self) -> int:
        if self.last:
            raise StopAsyncIteration
        if self.number >= 0:
            await trio.sleep(self._backoff.delay(self.number + 1))
        else:  # the first attempt goes at once; its own I/O is its schedule point
            await trio.lowlevel.checkpoint_if_cancelled()
        self.number += 1
        return self.number


#: A request whose answer says "not now" (a coordinator moving or loading, a leader
#: changing): ten attempts within about 6 s.
REQUEST_RETRY = Backoff(first_s=0.05, max_s=1.0, max_attempts=10)
