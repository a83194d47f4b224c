"""A check shared by the consumers' tests: per-record async iteration lets other tasks run."""

from __future__ import annotations

import trio


async def check_paced(records, n: int = 20_000) -> None:
    """``records`` holds more than ``n`` records, one or two fetches' worth: iterating ``n``
    of them lets other tasks run every millisecond or so (never ``n / 2`` records in a row
    without them), and asking for the next one, already at hand, is a cancellation point."""
    assert await longest_run_without_other_tasks(records, n) < n // 2
    with trio.CancelScope() as scope:
        scope.cancel()
        await records.__anext__()
    assert scope.cancelled_caught, "__anext__ did not check for cancellation"


async def longest_run_without_other_tasks(records, n: int) -> int:
    """Iterate ``n`` records of the async iterator ``records`` (doing nothing else) while a
    ticker task counts its turns; return the most records seen in a row without a turn."""
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await trio.sleep(0)

    seen = longest = run = last_ticks = 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        async for _record in records:
            seen += 1
            run = run + 1 if ticks == last_ticks else 0
            last_ticks, longest = ticks, max(longest, run)
            if seen == n:
                break
        nursery.cancel_scope.cancel()
    return longest
