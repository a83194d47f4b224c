"""Kafka's ConsumerProtocol: what group members send as JoinGroup metadata and SyncGroup
assignments when their protocol type is ``consumer``, and the range assignor over members.

Pure (style rules 1 and 8): bytes in, data out; no I/O.  Every Kafka consumer (Java,
kafka-python, librdkafka) reads and writes this layout, so they can share a group::

    Subscription (JoinGroup protocol metadata)
        version      int16      0 here; readers of any version read the v0 prefix
        topics       int32 n, then n x (int16 length, UTF-8 name)
        user_data    int32 length (-1: null), then bytes
        ...          (v1+: owned partitions, rack, generation: ignored here)

    Assignment (SyncGroup assignment)
        version      int16
        partitions   int32 n, then n x (topic: int16 length + UTF-8,
                                        int32 m, then m x int32 partition)
        user_data    int32 length (-1: null), then bytes

A version newer than ours only appends fields, which is why a reader stops after the v0
fields.  An empty assignment (b"", what a leader that gave a member nothing may send) means
no partitions.
"""

from __future__ import annotations

import struct
from typing import Iterable, Mapping, NamedTuple

from trilog.client._assignment import assign_ranges
from trilog.errors import RemoteProtocolError

PROTOCOL_TYPE = "consumer"
#: The assignor's name, as Kafka's ``RangeAssignor`` calls it.
RANGE = "range"

_MAX_ITEMS = 1 << 20  # topics or partitions in one message: far beyond any real group

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class Subscription(NamedTuple):
    topics: tuple[str, ...]
    user_data: bytes | None = None
    version: int = 0


class Assignment(NamedTuple):
    partitions: dict[str, tuple[int, ...]]
    user_data: bytes | None = None
    version: int = 0


# -- encoding -----------------------------------------------------------------------------------


def _string(out: bytearray, text: str) -> None:
    data = text.encode()
    out += _I16.pack(len(data))
    out += data


def _bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += _I32.pack(-1)
    else:
        out += _I32.pack(len(data))
        out += data


def encode_subscription(topics: Iterable[str], user_data: bytes | None = None) -> bytes:
    names = sorted(set(topics))
    out = bytearray(_I16.pack(0))
    out += _I32.pack(len(names))
    for name in names:
        _string(out, name)
    _bytes(out, user_data)
    return bytes(out)


def encode_assignment(partitions: Mapping[str, Iterable[int]],
                      user_data: bytes | None = None) -> bytes:
    out = bytearray(_I16.pack(0))
    topics = sorted(partitions)
    out += _I32.pack(len(topics))
    for topic in topics:
        parts = sorted(partitions[topic])
        _string(out, topic)
        out += _I32.pack(len(parts))
        for p in parts:
            out += _I32.pack(p)
    _bytes(out, user_data)
    return bytes(out)


# -- decoding -----------------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes | bytearray | memoryview, what: str) -> None:
        self._data = memoryview(data).cast("B") if not isinstance(data, bytes) else data
        self._pos = 0
        self._what = what

    def _take(self, n: int) -> bytes:
        end = self._pos + n
        if n < 0 or end > len(self._data):
            raise RemoteProtocolError(f"{self._what} is truncated at byte {self._pos}")
        chunk = bytes(self._data[self._pos:end])
        self._pos = end
        return chunk

    def int16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def count(self) -> int:
        n = self.int32()
        if n < 0:
            return 0  # a null array
        if n > _MAX_ITEMS or n > len(self._data) - self._pos:
            raise RemoteProtocolError(f"{self._what}: array length {n} is not plausible")
        return n

    def string(self) -> str:
        n = self.int16()
        if n < 0:
            raise RemoteProtocolError(f"{self._what}: null topic name")
        try:
            return self._take(n).decode()
        except UnicodeDecodeError:
            raise RemoteProtocolError(f"{self._what}: topic name is not UTF-8") from None

    def nullable_bytes(self) -> bytes | None:
        if self._pos == len(self._data):
            return None  # some writers leave out a null user_data at the very end
        n = self.int32()
        return None if n < 0 else self._take(n)


def decode_subscription(data: bytes | bytearray | memoryview) -> Subscription:
    r = _Reader(data, "consumer subscription")
    version = r.int16()
    if version < 0:
        raise RemoteProtocolError(f"consumer subscription: bad version {version}")
    topics = tuple(r.string() for _ in range(r.count()))
    return Subscription(topics, r.nullable_bytes(), version)


def decode_assignment(data: bytes | bytearray | memoryview) -> Assignment:
    if len(data) == 0:
        return Assignment({})
    r = _Reader(data, "consumer assignment")
    version = r.int16()
    if version < 0:
        raise RemoteProtocolError(f"consumer assignment: bad version {version}")
    partitions: dict[str, tuple[int, ...]] = {}
    for _ in range(r.count()):
        topic = r.string()
        parts = tuple(r.int32() for _ in range(r.count()))
        partitions[topic] = tuple(sorted(set(partitions.get(topic, ()) + parts)))
    return Assignment(partitions, r.nullable_bytes(), version)


# -- the range assignor over members --------------------------------------------------------------


def assign_members(subscriptions: Mapping[str, Iterable[str]],
                   partitions: Mapping[str, Iterable[int]]) -> dict[str, dict[str, list[int]]]:
    """Kafka's ``RangeAssignor``: ``{member id: {topic: [partitions]}}`` for every member.

    For each topic, the members subscribed to it, sorted by member id, get contiguous ranges
    of its sorted partitions (the first ``P mod M`` one more).  Topics without partitions
    (unknown to the cluster) assign nothing.
    """
    subs = {m: set(ts) for m, ts in subscriptions.items()}
    out: dict[str, dict[str, list[int]]] = {m: {} for m in subs}
    for topic in sorted({t for ts in subs.values() for t in ts}):
        members = [m for m in subs if topic in subs[m]]
        for member, parts in assign_ranges(partitions.get(topic, ()), members).items():
            if parts:
                out[member][topic] = parts
    return out


def spread_over_streams(assigned: Mapping[str, Iterable[int]],
                        streams: Mapping[str, int] | int) -> dict[tuple[str, int], int]:
    """Which of a member's streams gets each of its partitions: ``{(topic, p): index}``.

    Kafka assigns to members; a trilog member with several streams deals its partitions
    round robin: per topic over that topic's streams (``streams`` a mapping, ``topics=``),
    or over all its partitions in order (``streams`` a count, a topic filter).
    """
    out: dict[tuple[str, int], int] = {}
    if isinstance(streams, int):
        tps = sorted((t, p) for t, ps in assigned.items() for p in ps)
        for i, tp in enumerate(tps):
            out[tp] = i % max(streams, 1)
        return out
    for topic in sorted(assigned):
        count = streams.get(topic, 0)
        if count <= 0:
            continue  # not ours to read (a leader assigned a topic we did not ask for)
        for i, p in enumerate(sorted(assigned[topic])):
            out[(topic, p)] = i % count
    return out
