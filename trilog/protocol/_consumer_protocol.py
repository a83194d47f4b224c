"""Kafka's ConsumerProtocol: the bytes group members of protocol type ``consumer`` put inside
JoinGroup metadata, SyncGroup assignments and DescribeGroups answers.

Every Kafka consumer (Java, kafka-python, librdkafka) reads and writes this layout, so they
can share a group.  Types are those of ``_primitives`` (string: int16 length + UTF-8;
nullable bytes: int32 length, -1 for null)::

    Subscription (JoinGroup protocol metadata)
        version      int16      0, or 1 with owned partitions; any version >= 0 is read
        topics       int32 n (-1: none), then n x string
        user_data    nullable bytes; absent in some writers' encodings (null)
        owned        v1+: int32 n, then n x (topic string, int32 m, then m x int32): the
                     partitions the member owns now (what sticky assignors keep in place;
                     read as none when it does not decode: only a hint)
        ...          v2+: generation id, v3+: rack (not read)

    Assignment (SyncGroup assignment, DescribeGroups member_assignment)
        version      int16
        partitions   int32 n (-1: none), then n x (topic string,
                                                   int32 m (-1: none), then m x int32)
        user_data    nullable bytes; absent in some writers' encodings (null)
        ...          later versions append fields (not read)

A newer version only appends fields, which is why a reader stops after the v0 ones.  An
empty assignment (``b""``: a leader that gave a member nothing, a group not Stable) means no
partitions.  Every count is checked by ``Reader.check_length`` against the bytes left
before anything is allocated; malformed bytes raise ``RemoteProtocolError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from trilog.errors import RemoteProtocolError
from trilog.protocol._primitives import (
    INT16,
    INT32,
    NULLABLE_BYTES,
    STRING,
    Array,
    Reader,
    Writer,
)

#: The JoinGroup ``protocol_type`` of consumers.
CONSUMER_PROTOCOL_TYPE = "consumer"
#: The assignor's protocol name, as Kafka's ``RangeAssignor`` calls it.
RANGE_ASSIGNOR = "range"

_TOPICS = Array(STRING, nullable=True)
_PARTITIONS = Array(INT32, nullable=True)
#: the smallest encoding of one topic's entry in an assignment: empty name, no partitions
_MIN_TOPIC_ENTRY = STRING.min_size + _PARTITIONS.min_size


class ConsumerSubscription(NamedTuple):
    topics: tuple[str, ...]
    user_data: bytes | None = None
    version: int = 0
    #: v1+: the ``(topic, partition)`` pairs the member owns, sorted
    owned: tuple[tuple[str, int], ...] = ()


class ConsumerAssignment(NamedTuple):
    #: topic -> its partitions, sorted, each once
    partitions: dict[str, tuple[int, ...]]
    user_data: bytes | None = None
    version: int = 0

    def topic_partitions(self) -> list[tuple[str, int]]:
        """Every ``(topic, partition)``, sorted."""
        return sorted((t, p) for t, ps in self.partitions.items() for p in ps)


def encode_subscription(topics: Iterable[str], user_data: bytes | None = None,
                        owned: Iterable[tuple[str, int]] | None = None) -> bytes:
    """A subscription to ``topics`` (sorted, each once): v0, or v1 naming the ``owned``
    partitions when they are given."""
    w = Writer()
    INT16.write(w, 0 if owned is None else 1)
    _TOPICS.write(w, sorted(set(topics)))
    NULLABLE_BYTES.write(w, user_data)
    if owned is not None:
        by_topic: dict[str, set[int]] = {}
        for topic, partition in owned:
            by_topic.setdefault(topic, set()).add(partition)
        INT32.write(w, len(by_topic))
        for topic in sorted(by_topic):
            STRING.write(w, topic)
            _PARTITIONS.write(w, sorted(by_topic[topic]))
    return w.getvalue()


def encode_assignment(partitions: Mapping[str, Iterable[int]],
                      user_data: bytes | None = None) -> bytes:
    """A v0 assignment of ``{topic: partitions}`` (topics and partitions sorted)."""
    w = Writer()
    INT16.write(w, 0)
    INT32.write(w, len(partitions))
    for topic in sorted(partitions):
        STRING.write(w, topic)
        _PARTITIONS.write(w, sorted(partitions[topic]))
    NULLABLE_BYTES.write(w, user_data)
    return w.getvalue()


def decode_subscription(data: bytes | bytearray | memoryview) -> ConsumerSubscription:
    r = Reader(data)
    try:
        version = _version(r)
        topics = tuple(_TOPICS.read(r) or ())
        user_data = _user_data(r)
        owned: list[tuple[str, int]] = []
        if version >= 1 and r.remaining:
            try:
                count = r.check_length(r.int32(), "owned partitions", nullable=True,
                                       item_size=_MIN_TOPIC_ENTRY)
                for _ in range(max(count, 0)):
                    topic = r.string()
                    owned.extend((topic, p) for p in _PARTITIONS.read(r) or ())
            except RemoteProtocolError:
                # Only a hint for sticky assignors: unreadable, the member owns nothing.
                owned = []
        return ConsumerSubscription(topics, user_data, version, tuple(sorted(set(owned))))
    except RemoteProtocolError as exc:
        raise RemoteProtocolError(f"consumer subscription: {exc}") from None


def decode_assignment(data: bytes | bytearray | memoryview) -> ConsumerAssignment:
    if len(data) == 0:
        return ConsumerAssignment({})
    r = Reader(data)
    try:
        version = _version(r)
        count = r.check_length(r.int32(), "assignment", nullable=True,
                               item_size=_MIN_TOPIC_ENTRY)
        partitions: dict[str, tuple[int, ...]] = {}
        for _ in range(max(count, 0)):
            topic = r.string()
            parts = set(_PARTITIONS.read(r) or ())
            partitions[topic] = tuple(sorted(parts.union(partitions.get(topic, ()))))
        return ConsumerAssignment(partitions, _user_data(r), version)
    except RemoteProtocolError as exc:
        raise RemoteProtocolError(f"consumer assignment: {exc}") from None


def _version(r: Reader) -> int:
    version = r.int16()
    if version < 0:
        raise RemoteProtocolError(f"bad version {version}")
    return version


def _user_data(r: Reader) -> bytes | None:
    # Some writers leave a null user_data out altogether at the very end.
    return None if r.remaining == 0 else r.nullable_bytes()
