"""What ``send`` returns: a ``Delivery`` (the future of one record) and, once the record is
acknowledged, its ``RecordMetadata``.

A delivery is a batch and the record's index in it: no per-record state is kept anywhere
else, so a record costs one small object.  Its outcome is read from the batch (or from the
half that carried it, when the batch was split) once the batch is done.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from trilog.client.producer._batch import ProducerBatch


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int


#: ``on_delivery(outcome)``: each record's metadata, or its error
OnDelivery = Callable[[RecordMetadata | BaseException], None]


class Delivery:
    """The future result of one ``send``: ``await delivery.wait()``."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch: ProducerBatch, index: int) -> None:
        self._batch = batch
        self._index = index

    @property
    def batch(self) -> ProducerBatch:
        """The batch the record went into (for the producer's parts and their tests)."""
        return self._batch

    @property
    def index(self) -> int:
        """The record's index in ``batch``."""
        return self._index

    def done(self) -> bool:
        return self._batch.done.is_set()

    def result(self) -> RecordMetadata:
        """The metadata of a finished delivery (raises its error, or if not finished)."""
        if not self._batch.done.is_set():
            raise RuntimeError("the delivery has not finished; await wait()")
        outcome = record_outcome(self._batch, self._index)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def exception(self) -> BaseException | None:
        """The error of a finished delivery, or ``None`` if it was acknowledged (cheaper
        than ``result()`` for code that only counts failures)."""
        if not self._batch.done.is_set():
            raise RuntimeError("the delivery has not finished; await wait()")
        batch, _index = self._batch.leaf(self._index)
        return batch.error

    async def wait(self) -> RecordMetadata:
        await self._batch.done.wait()
        return self.result()


def record_outcome(batch: ProducerBatch, index: int) -> RecordMetadata | BaseException:
    """What became of record ``index`` of a finished batch: its metadata or its error."""
    batch, index = batch.leaf(index)
    if batch.error is not None:
        return batch.error
    offset = batch.base_offset + index if batch.base_offset >= 0 else -1
    timestamp = (batch.log_append_time if batch.log_append_time >= 0
                 else batch.builder.timestamp_at(index))
    return RecordMetadata(batch.topic, batch.partition, offset, timestamp)
