"""One batch of a partition, from its first record to its outcome.

The batch is the producer's unit of work: memory is reserved, bytes are built, requests are
formed, retries, splits and outcomes happen per batch, never per record.  A batch is *open*
while its ``RecordBatchBuilder`` takes records, *sealed* once its bytes are built (``data``;
the builder still knows its records' count and timestamps), and *done* when its outcome is
known (``done`` set; ``error``, or ``base_offset`` and ``log_append_time``).  A batch the
broker found too large goes again as two halves, each a batch of its own: its records'
outcomes are then theirs (``halves``; ``leaf`` finds a record's half).
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from trilog.client.producer._errors import DeliveryTimeoutError
from trilog.records import RecordBatchBuilder

#: a record's headers: ``(name, value)`` pairs
Headers = Sequence[tuple[str, bytes | None]]


class ProducerBatch:
    """One open or sealed batch of a partition, and the deliveries waiting on it."""

    __slots__ = (
        "attempts",
        "base_offset",
        "builder",
        "created",
        "data",
        "deadline",
        "done",
        "error",
        "halves",
        "log_append_time",
        "parent",
        "partition",
        "retry_at",
        "size",
        "topic",
    )

    def __init__(self, topic: str, partition: int, builder: RecordBatchBuilder, now: float,
                 delivery_timeout_s: float) -> None:
        self.topic = topic
        self.partition = partition
        self.builder = builder  # after sealing, it still knows its records' timestamps
        self.created = now
        self.deadline = now + delivery_timeout_s
        self.done = trio.Event()
        self.base_offset = -1
        self.error: BaseException | None = None
        self.attempts = 0
        self.size = 0  # bytes accounted against buffer_memory
        self.data: bytes | None = None  # the built batch, once sealed
        self.retry_at = 0.0
        self.log_append_time = -1
        # Set when the broker found the batch too large and it went again as two halves:
        # its records' outcomes are theirs (see RecordAccumulator.split).
        self.halves: tuple[ProducerBatch, ProducerBatch] | None = None
        self.parent: ProducerBatch | None = None

    def topic_partition(self) -> tuple[str, int]:
        return self.topic, self.partition

    def sealed_data(self) -> bytes:
        """The bytes of a sealed batch (an open one has none yet)."""
        if self.data is None:
            raise RuntimeError(f"a batch of {self.topic}-{self.partition} is not sealed")
        return self.data

    def leaf(self, index: int) -> tuple[ProducerBatch, int]:
        """The batch that carried record ``index`` to the broker, and its index there."""
        batch = self
        while batch.halves is not None:
            first, second = batch.halves
            if index < len(first.builder):
                batch = first
            else:
                batch, index = second, index - len(first.builder)
        return batch, index

    def timeout_error(self, delivery_timeout_s: float,
                      last: BaseException | None) -> DeliveryTimeoutError:
        """The error of a batch whose delivery deadline passed (``last``: why it was not
        acknowledged before, if known)."""
        return DeliveryTimeoutError(
            f"{len(self.builder)} records to {self.topic}-{self.partition} were not "
            f"acknowledged within {delivery_timeout_s:.1f} s"
            + (f" (last error: {last})" if last else ""))
