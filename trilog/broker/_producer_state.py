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

The table lives in memory and is rebuilt after a restart: the first time a partition is
checked, the batch headers of its last 64 MiB are replayed into it (``load``), so a batch
resent across a broker restart is still recognized as a duplicate.  (Kafka also snapshots
this state; a producer retrying across a restart sent its batch just before it, so the
tail of the log holds it.)  Reads only
batch headers.  Not thread-safe: the caller holds a lock around ``check`` + append +
``record``.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from trilog.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from trilog.records import HEADER, LOG_OVERHEAD
from trilog.storage import BatchHeader

MAX_PRODUCERS_PER_PARTITION = 10_000
RECENT_BATCHES = 5
_SEQ_MOD = 1 << 31


@dataclass
class _Producer:
    epoch: int
    next_sequence: int
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT_BATCHES))


class ProducerStateTable:
    def __init__(self, load: Callable[[tuple[str, int]], Iterable[BatchHeader]] | None = None
                 ) -> None:
        """``load(tp)`` gives the stored batch headers a partition's state is rebuilt from
        (oldest first); without it a partition starts empty."""
        self._partitions: dict[tuple[str, int], OrderedDict[int, _Producer]] = {}
        self._load = load

    def check(self, tp: tuple[str, int], records) -> int | None:
        """Before an append: ``None`` to append, or the base offset of the duplicate it is.

        Raises ``OutOfOrderSequenceNumberError`` / ``InvalidProducerEpochError``.
        """
        first = _first_idempotent_batch(records)
        if first is None:
            return None
        pid, epoch, base_seq, last_seq = first
        state = self._producers(tp).get(pid)
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
        batches = _batch_producers(records)
        if not any(pid >= 0 and seq >= 0 for pid, _e, seq, _d in batches):
            return  # no idempotent producer: nothing to remember (the common case)
        producers = self._producers(tp)
        offset = first_offset
        for pid, epoch, base_sequence, last_offset_delta in batches:
            _remember(producers, pid, epoch, base_sequence, last_offset_delta, offset)
            offset += last_offset_delta + 1

    def forget(self, tp: tuple[str, int]) -> None:
        """This broker just became the partition's leader: its producers are read again
        from the log (a follower appended batches the table never saw)."""
        self._partitions.pop(tp, None)

    def forget_topic(self, topic: str) -> None:
        """The topic was deleted: a new one of that name starts with no producers."""
        for tp in list(self._partitions):  # one C-level copy: safe beside worker threads
            if tp[0] == topic:
                self._partitions.pop(tp, None)

    def _producers(self, tp: tuple[str, int]) -> OrderedDict[int, _Producer]:
        producers = self._partitions.get(tp)
        if producers is None:
            producers = OrderedDict()
            if self._load is not None:
                for h in self._load(tp):
                    _remember(producers, h.producer_id, h.producer_epoch, h.base_sequence,
                              h.last_offset_delta, h.base_offset)
            self._partitions[tp] = producers
        return producers


def _remember(producers: OrderedDict[int, _Producer], pid: int, epoch: int, base_seq: int,
              last_offset_delta: int, base_offset: int) -> None:
    """One appended batch (stored at ``base_offset``) of producer ``pid``, if idempotent."""
    if pid < 0 or base_seq < 0:
        return
    state = producers.get(pid)
    if state is None or epoch > state.epoch:
        state = producers[pid] = _Producer(epoch, 0)
    last_seq = (base_seq + last_offset_delta) % _SEQ_MOD
    state.recent.append(((base_seq, last_seq), base_offset))
    state.next_sequence = (last_seq + 1) % _SEQ_MOD
    producers.move_to_end(pid)
    if len(producers) > MAX_PRODUCERS_PER_PARTITION:
        producers.popitem(last=False)


def _first_idempotent_batch(records) -> tuple[int, int, int, int] | None:
    for pid, epoch, base_sequence, last_offset_delta in _batch_producers(records, 1):
        if pid < 0 or base_sequence < 0:
            return None
        last_seq = (base_sequence + last_offset_delta) % _SEQ_MOD
        return pid, epoch, base_sequence, last_seq
    return None


def _batch_producers(records, limit: int = -1) -> list[tuple[int, int, int, int]]:
    """``(producer_id, producer_epoch, base_sequence, last_offset_delta)`` of each v2 batch
    (the first ``limit``), read from the headers alone: the append checked them already."""
    view = memoryview(records)
    out: list[tuple[int, int, int, int]] = []
    pos, end = 0, len(view)
    while pos + HEADER.size <= end and limit != len(out):
        (_base, length, _leader_epoch, _magic, _crc, _attributes, delta, _first_ts, _max_ts,
         pid, epoch, base_sequence, _count) = HEADER.unpack_from(view, pos)
        out.append((pid, epoch, base_sequence, delta))
        pos += LOG_OVERHEAD + length
    return out
