"""The consumer's value types and errors, and the rebalance listener: what an application
handles, and what the subscription state, the coordinator and the connectors share.

``TopicPartition`` (declared once, in ``trilog._topic``) is a named tuple, equal to (and
hashing as) the plain ``(topic, partition)`` tuples the seeds' connectors key their
partitions by.
"""

from __future__ import annotations

import inspect
from typing import Any, NamedTuple

import trio

from trilog._topic import TopicPartition
from trilog.errors import TrilogError

__all__ = ["ConsumerGroupMetadata", "ConsumerRebalanceListener", "IllegalStateError",
           "NoOffsetForPartitionError", "OffsetAndMetadata", "OffsetAndTimestamp",
           "TopicPartition"]


class OffsetAndMetadata(NamedTuple):
    """What ``commit`` takes per partition: the next offset to consume, and a note."""

    offset: int
    metadata: str = ""


class ConsumerGroupMetadata(NamedTuple):
    """A group member as its group knows it now (Kafka's ``ConsumerGroupMetadata``), from
    ``consumer.group_metadata()``, for ``producer.send_offsets_to_transaction``: the group's
    coordinator takes a transaction's offsets only from this generation and member
    (KIP-447), so a member the group has moved on from cannot commit them.  Outside group
    management (``assign``): generation -1 and no member id."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class IllegalStateError(TrilogError):
    """The consumer cannot do that in its state (say, ``subscribe`` after ``assign``)."""


class NoOffsetForPartitionError(TrilogError):
    """``auto_offset_reset="none"`` and a partition has no committed offset (or its
    committed offset is out of range)."""


class ConsumerRebalanceListener:
    """Told when the group moves partitions; override what you need (sync or async).

    Eager rebalances: ``on_partitions_revoked(everything owned)`` before the member rejoins
    (after auto-commit committed the processed offsets), then
    ``on_partitions_assigned(the new assignment)`` (always, even when empty) before any of
    those partitions is fetched, so a ``seek`` there decides where reading starts.
    ``on_partitions_lost`` replaces ``revoked`` when the member learns that the group went on
    without it (its session expired): the partitions may already be another's, so nothing is
    committed.  By default it calls ``on_partitions_revoked``, as Kafka's.

    Heartbeats go on while a callback runs: a slow ``on_partitions_revoked`` (longer than
    the session timeout, say) does not cost the member its membership.

    An exception from a callback stops the consumer: the application's next
    ``__anext__``/``getmany`` (or the end of ``async with``) raises it.
    """

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        pass

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        await maybe_await(self.on_partitions_revoked(lost))


async def maybe_await(value: Any) -> None:
    """Await ``value`` if a callback (sync or async) returned an awaitable."""
    if inspect.isawaitable(value):
        await value
    else:
        await trio.lowlevel.checkpoint()
