"""Waiting for a condition in a test, blocking or from trio (one copy for every folder:
``tests/`` is on ``sys.path``, see ``kafka_helpers``)."""

from __future__ import annotations

import time

import trio


def wait_for(predicate, timeout: float = 30.0, what: str = "condition",
             interval: float = 0.1):
    """Poll ``predicate`` every ``interval`` seconds until it returns something true
    (returned), failing the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(interval)


async def wait_until(predicate, timeout: float = 20.0, what: str = "condition",
                     interval: float = 0.01):
    """From trio: poll ``predicate`` (a plain function, called in the trio thread) every
    ``interval`` seconds until it returns something true (returned), failing the test
    after ``timeout`` seconds."""
    with trio.move_on_after(timeout):
        while True:
            value = predicate()
            if value:
                return value
            await trio.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
