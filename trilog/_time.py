"""The wall clock in Kafka's unit, shared by every layer (pure: no state, imports only time).

Kafka's timestamps, retention and roll ages are milliseconds since the epoch; ``now_ms`` is
the one place trilog reads them, so a test can pass its own ``now_ms`` to the functions that
take one and nothing else disagrees about rounding.
"""

from __future__ import annotations

import time


def now_ms() -> int:
    """Milliseconds since the epoch (wall clock, integer; ``time_ns`` avoids float rounding)."""
    return time.time_ns() // 1_000_000
