"""Idempotent produce: per-partition sequence numbers of each producer id.

Today's Kafka clients are idempotent by default: each batch carries ``producer_id``,
``producer_epoch`` and ``base_sequence``, and a batch resent after a lost acknowledgement must
not be written twice.  For every partition this table keeps, per producer id, its epoch, the
next expected sequence and the last five batches (sequence range -> base offset), as Kafka's
``ProducerStateManager`` does:

- the next expected sequence: append;
- a repeat of one of the last five batches: answer with its original offset, append nothing;
- anything else from the current epoch: ``OUT_OF_ORDER_SEQUENCE_NUMBER``;
- an older epoch: ``INVALID_PRODUCER_EPOCH``; a newer epoch or an unknown producer: append.

The table lives in memory: after a broker restart the first batch of each producer is
accepted as new (a retry that straddles a restart may be written twice, as with a
non-idempotent producer).  Reads only batch headers.  Not thread-safe: the caller holds a
lock around ``check`` + append + ``record``.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

from trilog.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from trilog.records import iter_batches

MAX_PRODUCERS_PER_PARTITION = 10_000
RECENT_BATCHES = 5
_SEQ_MOD = 1 << 31


@dataclass
class _Producer:
    epoch: int
    next_sequence: int
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT_BATCHES))


class ProducerStateTable:
    def __init__(self) -> None:
        self._partitions: dict[tuple[str, int], OrderedDict[int, _Producer]] = {}

    def check(self, tp: tuple[str, int], records) -> int | None:
        """Before an append: ``None`` to append, or the base offset of the duplicate it is.

        Raises ``OutOfOrderSequenceNumberError`` / ``InvalidProducerEpochError``.
        """
        first = _first_idempotent_batch(records)
        if first is None:
            return None
        pid, epoch, base_seq, last_seq = first
        producers = self._partitions.get(tp)
        state = producers.get(pid) if producers else None
        if state is None or epoch > state.epoch:
            return None
        if epoch < state.epoch:
            raise InvalidProducerEpochError(
                f"producer {pid} epoch {epoch} is older than the current epoch {state.epoch}"
            )
        if base_seq == state.next_sequence:
            return None
        for seq_range, base_offset in state.recent:
            if seq_range == (base_seq, last_seq):
                return base_offset
        raise OutOfOrderSequenceNumberError(
            f"producer {pid}: expected sequence {state.next_sequence}, got {base_seq}"
        )

    def record(self, tp: tuple[str, int], records, first_offset: int) -> None:
        """After an append at ``first_offset``: remember each idempotent batch."""
        producers = self._partitions.setdefault(tp, OrderedDict())
        offset = first_offset
        for batch in iter_batches(records):
            count = batch.last_offset_delta + 1
            if batch.producer_id >= 0 and batch.base_sequence >= 0:
                state = producers.get(batch.producer_id)
                if state is None or batch.producer_epoch > state.epoch:
                    state = _Producer(batch.producer_epoch, 0)
                    producers[batch.producer_id] = state
                last_seq = (batch.base_sequence + batch.last_offset_delta) % _SEQ_MOD
                state.recent.append(((batch.base_sequence, last_seq), offset))
                state.next_sequence = (last_seq + 1) % _SEQ_MOD
                producers.move_to_end(batch.producer_id)
                if len(producers) > MAX_PRODUCERS_PER_PARTITION:
                    producers.popitem(last=False)
            offset += count

    def forget_partition(self, tp: tuple[str, int]) -> None:
        self._partitions.pop(tp, None)


def _first_idempotent_batch(records) -> tuple[int, int, int, int] | None:
    for batch in iter_batches(records):
        if batch.producer_id < 0 or batch.base_sequence < 0:
            return None
        last_seq = (batch.base_sequence + batch.last_offset_delta) % _SEQ_MOD
        return batch.producer_id, batch.producer_epoch, batch.base_sequence, last_seq
    return None
