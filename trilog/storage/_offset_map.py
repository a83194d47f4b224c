"""``OffsetMap``: the log cleaner's key -> latest offset map, bounded by memory.

Kafka's ``SkimpyOffsetMap`` keeps a 16-byte MD5 hash of each key and its offset in a fixed
buffer of ``log.cleaner.dedupe.buffer.size`` bytes (24 bytes an entry).  Here the entries
live in a ``dict`` of MD5 digests, and the same setting bounds it by what an entry costs in
Python (``ENTRY_BYTES``: the digest object, the offset, the dict slot), so the memory the
setting names is the memory the map may use: the default 128 MiB holds about 800,000 keys
(Kafka's fits 5.6 million).  Hashing the keys keeps an entry's size independent of the
key's; two keys with one MD5 are as improbable as in Kafka.
"""

from __future__ import annotations

import hashlib

#: What one entry costs in CPython (measured: about 137 bytes, plus the dict's growth).
ENTRY_BYTES = 160


def _digest(key: bytes) -> bytes:
    return hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    """Keys (by MD5) -> the latest offset seen for them, at most ``slots`` keys.

    ``latest_offset`` is the last offset the map covers: the cleaner keeps every record
    past it.  Used by one cleaner thread at a time (not thread-safe).
    """

    def __init__(self, memory_bytes: int) -> None:
        if memory_bytes < ENTRY_BYTES:
            raise ValueError(
                f"an offset map of {memory_bytes} bytes holds no key; it needs at least "
                f"{ENTRY_BYTES} (raise log.cleaner.dedupe.buffer.size or lower "
                "log.cleaner.threads)"
            )
        self.slots = memory_bytes // ENTRY_BYTES
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def full(self) -> bool:
        return len(self._offsets) >= self.slots

    @property
    def utilization(self) -> float:
        """The share of the slots in use (Kafka's ``bufferUtilization``)."""
        return len(self._offsets) / self.slots

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1

    def put(self, key: bytes, offset: int) -> bool:
        """Record ``offset`` as the latest of ``key``; False (nothing recorded) when the map
        is full and ``key`` is not in it yet."""
        digest = _digest(key)
        offsets = self._offsets
        if len(offsets) >= self.slots and digest not in offsets:
            return False
        offsets[digest] = offset
        self.latest_offset = offset
        return True

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, or -1 when the map does not know it."""
        return self._offsets.get(_digest(key), -1)

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = max(self.latest_offset, offset)
