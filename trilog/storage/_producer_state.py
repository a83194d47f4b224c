"""Idempotent producers of one partition's log (Kafka's ``ProducerStateManager``).

Today's Kafka clients are idempotent by default: each batch carries ``producer_id``,
``producer_epoch`` and ``base_sequence``, and a batch resent after a lost acknowledgement must
not be written twice.  The log keeps, per producer id, its epoch, the next expected sequence
and its last five batches (sequence range -> base offset), and decides before each append
that assigns offsets (a leader's):

- the next expected sequence: append;
- a repeat of one of the last five batches: answer with its original offset, append nothing;
- anything else from the current epoch: ``OUT_OF_ORDER_SEQUENCE_NUMBER``;
- an older epoch: ``INVALID_PRODUCER_EPOCH``; a newer epoch or an unknown producer: append.

Every append (a leader's and a follower's) is recorded, so a follower that becomes the leader
already knows its producers.  The state is built from the log itself the first time a check
needs it (the batch headers of the log's last 64 MiB: ``Log.batch_headers``), so a batch
resent across a broker restart is still recognised; until then appends record nothing (the
log holds them for that first build).  Truncation forgets it all, to be built again from
what is left.  (Kafka also snapshots this state beside the segments; the transactions'
producer state will.)

Reads only batch headers: no record is decoded.  Not thread-safe: the log calls it under
its append lock, around the write.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from trilog.errors import InvalidProducerEpochError, OutOfOrderSequenceNumberError
from trilog.records import HEADER, LOG_OVERHEAD, BatchHeader

MAX_PRODUCERS_PER_PARTITION = 10_000
RECENT_BATCHES = 5
_SEQ_MOD = 1 << 31


@dataclass
class _Producer:
    epoch: int
    next_sequence: int
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT_BATCHES))


class ProducerStateManager:
    """The producers of one log; ``load()`` gives the stored batch headers the state is
    built from (oldest first), when it is first needed."""

    def __init__(self, load: Callable[[], Iterable[BatchHeader]] | None = None) -> None:
        self._load = load
        self._producers: OrderedDict[int, _Producer] | None = None  # None: not built yet

    @property
    def loaded(self) -> bool:
        return self._producers is not None

    def check(self, records) -> int | None:
        """Before a leader's append: ``None`` to append, or the base offset of the
        duplicate it is.  Raises ``OutOfOrderSequenceNumberError`` /
        ``InvalidProducerEpochError``."""
        first = _first_idempotent_batch(records)
        if first is None:
            return None  # no idempotent producer: nothing to check (the common case)
        pid, epoch, base_seq, last_seq = first
        state = self._built().get(pid)
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

    def record(self, records, first_offset: int) -> None:
        """After an append at ``first_offset`` (a leader's or a follower's): remember each
        idempotent batch, if the state is built (else the log has them for the build)."""
        producers = self._producers
        if producers is None:
            return
        batches = _batch_producers(records)
        if not any(pid >= 0 and seq >= 0 for pid, _e, seq, _d in batches):
            return
        offset = first_offset
        for pid, epoch, base_sequence, last_offset_delta in batches:
            _remember(producers, pid, epoch, base_sequence, last_offset_delta, offset)
            offset += last_offset_delta + 1

    def clear(self) -> None:
        """The log was truncated: build the state again from what is left, when needed."""
        self._producers = None

    def _built(self) -> OrderedDict[int, _Producer]:
        producers = self._producers
        if producers is None:
            producers = OrderedDict()
            if self._load is not None:
                for h in self._load():
                    _remember(producers, h.producer_id, h.producer_epoch, h.base_sequence,
                              h.last_offset_delta, h.base_offset)
            self._producers = producers
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
    """``(producer_id, epoch, base_sequence, last_sequence)`` of the first batch, if its
    producer is idempotent (one header read: this runs for every append)."""
    if len(records) < HEADER.size:
        return None
    (_base, _length, _leader_epoch, _magic, _crc, _attributes, delta, _first_ts, _max_ts,
     pid, epoch, base_sequence, _count) = HEADER.unpack_from(records, 0)
    if pid < 0 or base_sequence < 0:
        return None
    return pid, epoch, base_sequence, (base_sequence + delta) % _SEQ_MOD


def _batch_producers(records) -> list[tuple[int, int, int, int]]:
    """``(producer_id, producer_epoch, base_sequence, last_offset_delta)`` of each v2 batch,
    read from the headers alone: the append checked them already."""
    view = memoryview(records)
    out: list[tuple[int, int, int, int]] = []
    pos, end = 0, len(view)
    while pos + HEADER.size <= end:
        (_base, length, _leader_epoch, _magic, _crc, _attributes, delta, _first_ts, _max_ts,
         pid, epoch, base_sequence, _count) = HEADER.unpack_from(view, pos)
        out.append((pid, epoch, base_sequence, delta))
        pos += LOG_OVERHEAD + length
    return out
