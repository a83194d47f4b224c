"""The producers of one partition's log: idempotence and transactions (Kafka's
``ProducerStateManager``, ``ProducerAppendInfo`` and ``ProducerStateEntry``).

Per producer id the log keeps its epoch, its last five batches (sequence range -> offsets),
the epoch of the transaction coordinator that wrote its last marker, the time of its last
write, and the first offset of its ongoing transaction, if any.  Before an append the batches
are checked (``check_batches``) by who appends (``AppendOrigin``):

- a producer epoch older than the producer's: ``InvalidProducerEpochError`` (as Kafka
  answers a leader's append, a marker's too);
- a client's data batch: its sequence must follow the producer's last one (a new epoch
  starts at 0); a repeat of one of the last five batches is a duplicate (its first offset is
  the answer, nothing is appended); else ``OutOfOrderSequenceNumberError``.  The
  coordinators' batches (offset commits of a transaction) are not sequence-checked;
- a non-transactional batch from a producer with a transaction open:
  ``InvalidTxnStateError``;
- a marker whose coordinator epoch is below the producer's last one:
  ``TransactionCoordinatorFencedError``.

A follower's append (``REPLICATION``) is not checked.  Every append is recorded after its
write (``apply``): a transactional batch opens its producer's transaction at its first
offset unless one is open, a COMMIT or ABORT marker closes it; an aborted transaction is
handed back for the segment's ``.txnindex``, with the last stable offset of the moment.

The **first unstable offset** is the smallest first offset of an ongoing transaction or of a
completed one whose marker is not yet below the high watermark (Kafka's
``unreplicatedTxns``); ``Log`` derives the last stable offset from it.  Ongoing transactions
are kept by first offset in an ``OrderedDict`` (a new one always starts above every other:
offsets only grow), so the oldest is its first key.

Producers expire ``producer_id_expiration_ms`` after their last write unless a transaction
of theirs is open (``remove_expired``, and when a snapshot is loaded); at most
``MAX_PRODUCERS_PER_PARTITION`` are kept, the least recently used without an open
transaction going first.  ``snapshot_entries`` and ``load_snapshot`` are the state as
``_producer_snapshot`` stores it.

Reads only batch headers (and a marker's few bytes): no record is decoded.  Not
thread-safe: the log calls it under its append lock.  ``first_unstable_offset`` is read by
the log under that lock too; readers get the last stable offset from the log's snapshot.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from trilog.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
)
from trilog.records import (
    CONTROL_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    ControlRecordType,
    EndTxnMarker,
)
from trilog.storage._append import AppendOrigin, ProducerBatch, check_batches, producer_batches
from trilog.storage._producer_snapshot import SnapshotEntry
from trilog.storage._txn_index import TxnIndexEntry

MAX_PRODUCERS_PER_PARTITION = 10_000
RECENT_BATCHES = 5
_SEQ_MOD = 1 << 31
NO_EPOCH = -1
#: Kafka's ``producer.id.expiration.ms`` default: a day.
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000

_CLIENT = AppendOrigin.CLIENT
_REPLICATION = AppendOrigin.REPLICATION
_ABORT = ControlRecordType.ABORT

#: A producer as a check sees it: (epoch, next expected sequence, transaction open,
#: coordinator epoch).
_View = tuple[int, int, bool, int]
_NEW: _View = (NO_EPOCH, 0, False, -1)


class ProducerInfo(NamedTuple):
    """One producer of a log as DescribeProducers reports it (KIP-664)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int  # -1: none since its epoch began
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no transaction open


class ProducerStateEntry:
    """One producer of a partition.  ``batches`` holds its last batches, oldest first, as
    ``(first_sequence, last_sequence, base_offset, last_offset_delta)``; ``txn_first_offset``
    is -1 when no transaction of its is open."""

    __slots__ = ("batches", "coordinator_epoch", "epoch", "last_timestamp", "producer_id",
                 "txn_first_offset")

    def __init__(self, producer_id: int, epoch: int = NO_EPOCH, coordinator_epoch: int = -1,
                 last_timestamp: int = -1, txn_first_offset: int = -1) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.txn_first_offset = txn_first_offset
        self.batches: deque[tuple[int, int, int, int]] = deque(maxlen=RECENT_BATCHES)

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else -1

    def view(self) -> _View:
        batches = self.batches
        return (self.epoch, (batches[-1][1] + 1) % _SEQ_MOD if batches else 0,
                self.txn_first_offset >= 0, self.coordinator_epoch)

    def info(self) -> ProducerInfo:
        return ProducerInfo(self.producer_id, self.epoch, self.last_sequence,
                            self.last_timestamp, self.coordinator_epoch, self.txn_first_offset)

    def duplicate_of(self, epoch: int, first_sequence: int, last_offset_delta: int
                     ) -> int | None:
        """The base offset of the stored batch this one repeats (same epoch, same sequence
        range), or None."""
        if epoch != self.epoch:
            return None
        last_sequence = (first_sequence + last_offset_delta) % _SEQ_MOD
        for first, last, base_offset, _delta in self.batches:
            if first == first_sequence and last == last_sequence:
                return base_offset
        return None

    def __repr__(self) -> str:
        return (f"ProducerStateEntry(producer_id={self.producer_id}, epoch={self.epoch}, "
                f"last_sequence={self.last_sequence}, coordinator_epoch="
                f"{self.coordinator_epoch}, txn_first_offset={self.txn_first_offset})")


class ProducerStateManager:
    """The producers of one log (see the module docstring).

    ``load()``, if given, yields stored batch headers (oldest first) to build the state from
    the first time it is needed (a standalone object's way; ``Log`` builds it itself, from a
    snapshot and the headers after it, and calls ``reset`` first).  Until then ``apply``
    records nothing: the log holds those batches for the build.
    """

    def __init__(self, load: Callable[[], Iterable[BatchHeader]] | None = None) -> None:
        self._load = load
        self._producers: OrderedDict[int, ProducerStateEntry] | None = None  # None: not built
        self._ongoing: OrderedDict[int, int] = OrderedDict()  # first offset -> producer id
        #: completed transactions whose markers are not below the high watermark:
        #: first offset -> marker offset
        self._unreplicated: dict[int, int] = {}
        #: The smallest first offset of an ongoing or unreplicated transaction, or None.
        self.first_unstable_offset: int | None = None

    @property
    def loaded(self) -> bool:
        return self._producers is not None

    def reset(self) -> None:
        """Empty, and built (``Log`` then loads a snapshot and replays the log after it)."""
        self._producers = OrderedDict()
        self._ongoing.clear()
        self._unreplicated.clear()
        self.first_unstable_offset = None

    def clear(self) -> None:
        """Forget everything: built again from ``load()`` when next needed."""
        self.reset()
        self._producers = None

    def _built(self) -> OrderedDict[int, ProducerStateEntry]:
        producers = self._producers
        if producers is None:
            self.reset()
            if self._load is not None:
                for h in self._load():  # (headers alone: for idempotence, not markers)
                    self.apply_header(h)
            producers = self._producers
            assert producers is not None
        return producers

    # -- what a log asks -------------------------------------------------------------------

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._built().get(producer_id)

    def entries(self) -> list[ProducerStateEntry]:
        return list(self._built().values())

    def __len__(self) -> int:
        return len(self._built())

    def ongoing_transactions(self) -> list[tuple[int, int]]:
        """``(first_offset, producer_id)`` of each ongoing transaction, oldest first."""
        return list(self._ongoing.items())

    # -- before an append: the checks ------------------------------------------------------

    def check(self, records, origin: AppendOrigin = _CLIENT) -> int | None:
        """``check_batches`` of a buffer of v2 batches (checked already)."""
        return self.check_batches(_parse(records, origin) or (), origin)

    def check_batches(self, batches: Iterable[ProducerBatch], origin: AppendOrigin
                      ) -> int | None:
        """Before an append of ``batches`` by ``origin``: None to append, or the base
        offset of the stored batch a client's batch repeats (nothing is then appended).
        Raises the error of the first batch that breaks a rule (the module docstring)."""
        if origin is _REPLICATION:
            return None
        producers = self._built()
        views: dict[int, _View] = {}
        for _base, delta, attributes, pid, epoch, sequence, _ts, marker in batches:
            entry = producers.get(pid)
            view = views.get(pid)
            if view is None:
                view = entry.view() if entry is not None else _NEW
            cur_epoch, next_sequence, in_txn, coordinator_epoch = view
            if epoch < cur_epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid} epoch {epoch} is older than the current epoch {cur_epoch}")
            if attributes & CONTROL_MASK:
                if marker is None:
                    continue  # an emptied control batch says nothing
                if marker.coordinator_epoch < coordinator_epoch:
                    raise TransactionCoordinatorFencedError(
                        f"a marker of producer {pid} from coordinator epoch "
                        f"{marker.coordinator_epoch}, older than {coordinator_epoch}")
                views[pid] = (epoch, next_sequence if epoch == cur_epoch else 0, False,
                              marker.coordinator_epoch)
                continue
            expected = next_sequence if epoch == cur_epoch else 0
            if origin is _CLIENT and sequence != expected and cur_epoch != NO_EPOCH:
                if epoch != cur_epoch:
                    raise OutOfOrderSequenceNumberError(
                        f"producer {pid}: a new epoch {epoch} must start at sequence 0, not "
                        f"{sequence}")
                duplicate = entry.duplicate_of(epoch, sequence, delta) if entry else None
                if duplicate is not None:
                    return duplicate
                raise OutOfOrderSequenceNumberError(
                    f"producer {pid}: expected sequence {next_sequence}, got {sequence}")
            transactional = bool(attributes & TRANSACTIONAL_MASK)
            if in_txn and not transactional:
                raise InvalidTxnStateError(
                    f"a non-transactional batch of producer {pid}, whose transaction is open")
            views[pid] = (epoch, (sequence + delta + 1) % _SEQ_MOD if sequence >= 0 else
                          expected, in_txn or transactional, coordinator_epoch)
        return None

    # -- after an append: the records ------------------------------------------------------

    def record(self, records, first_offset: int) -> None:
        """``apply`` for a buffer of v2 batches appended at ``first_offset`` (the log's end
        offset before them, for a leader's append)."""
        self.apply(_parse(records, _CLIENT) or (), first_offset, None)

    def apply(self, batches: Iterable[ProducerBatch], shift: int,
              high_watermark: int | None) -> list[TxnIndexEntry]:
        """Record ``batches`` once appended (their base offsets + ``shift`` are where they
        went).  Return the transactions their ABORT markers ended, as ``.txnindex`` entries
        of the segment that holds the markers, in order.  ``high_watermark``: the one the
        log publishes after this append (None: every marker is below it)."""
        producers = self._producers
        if producers is None:
            return []  # not built yet: the build reads these from the log
        completed: list[tuple[int, int, int, bool]] | None = None
        for base, delta, attributes, pid, epoch, sequence, max_ts, marker in batches:
            if marker is None and attributes & CONTROL_MASK:
                continue  # an emptied control batch (the whole transaction was cleaned)
            base += shift
            entry = producers.get(pid)
            if entry is None:
                entry = producers[pid] = ProducerStateEntry(pid)
                if len(producers) > MAX_PRODUCERS_PER_PARTITION:
                    _evict_one(producers, pid)
            else:
                producers.move_to_end(pid)
            if epoch != entry.epoch:
                entry.epoch = epoch
                entry.batches.clear()
            entry.last_timestamp = max_ts
            if marker is not None:
                first = entry.txn_first_offset
                if first >= 0:
                    if completed is None:
                        completed = []
                    completed.append((pid, first, base, marker.control_type is _ABORT))
                    entry.txn_first_offset = -1
                entry.coordinator_epoch = marker.coordinator_epoch
                continue
            if sequence >= 0:
                entry.batches.append((sequence, (sequence + delta) % _SEQ_MOD, base, delta))
            if attributes & TRANSACTIONAL_MASK and entry.txn_first_offset < 0:
                entry.txn_first_offset = base
                self._ongoing[base] = pid
                if self.first_unstable_offset is None:
                    self.first_unstable_offset = base
        if completed is None:
            return []
        return self._complete(completed, high_watermark)

    def apply_header(self, header: BatchHeader, marker: EndTxnMarker | None = None,
                     high_watermark: int | None = None) -> list[TxnIndexEntry]:
        """``apply`` for one stored batch, from its header and, for a control batch, its
        marker (None: the batch was emptied): a replay of the log."""
        if header.producer_id < 0:
            return []
        return self.apply(((header.base_offset, header.last_offset_delta, header.attributes,
                            header.producer_id, header.producer_epoch, header.base_sequence,
                            header.max_timestamp, marker),), 0, high_watermark)

    def _complete(self, completed: list[tuple[int, int, int, bool]],
                  high_watermark: int | None) -> list[TxnIndexEntry]:
        """Close each completed transaction (Kafka's ``lastStableOffset(completedTxn)`` then
        ``completeTxn``); the aborted ones, as index entries."""
        aborted = []
        ongoing = self._ongoing
        for pid, first, marker_offset, is_abort in completed:
            if is_abort:
                aborted.append(TxnIndexEntry(pid, first, marker_offset,
                                             self._next_incomplete(pid, marker_offset + 1)))
            ongoing.pop(first, None)
            if high_watermark is not None and marker_offset >= high_watermark:
                self._unreplicated[first] = marker_offset
        self._update_first_unstable()
        return aborted

    def _next_incomplete(self, pid: int, otherwise: int) -> int:
        """The first offset of the oldest ongoing transaction of another producer, else
        ``otherwise`` (the last stable offset an abort is indexed with)."""
        for first, other in self._ongoing.items():
            if other != pid:
                return first
        return otherwise

    def _update_first_unstable(self) -> None:
        first = next(iter(self._ongoing), None)
        if self._unreplicated:
            oldest = min(self._unreplicated)
            first = oldest if first is None else min(first, oldest)
        self.first_unstable_offset = first

    # -- the offsets above and below the state -----------------------------------------------

    def on_high_watermark(self, high_watermark: int) -> None:
        """Completed transactions whose markers are now below ``high_watermark`` are stable."""
        unreplicated = self._unreplicated
        if unreplicated:
            for first, marker_offset in list(unreplicated.items()):
                if marker_offset < high_watermark:
                    del unreplicated[first]
            self._update_first_unstable()

    def on_log_start_offset(self, log_start_offset: int) -> None:
        """The log starts at ``log_start_offset`` now: markers below it are stable too."""
        self.on_high_watermark(log_start_offset)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget the producers without an open transaction whose last write is
        ``expiration_ms`` old; return how many went."""
        producers = self._built()
        expired = [pid for pid, e in producers.items()
                   if e.txn_first_offset < 0 and now_ms - e.last_timestamp >= expiration_ms]
        for pid in expired:
            del producers[pid]
        return len(expired)

    # -- snapshots ---------------------------------------------------------------------------

    def snapshot_entries(self) -> Iterator[SnapshotEntry]:
        """Each producer as a snapshot stores it (``_producer_snapshot``)."""
        for e in self._built().values():
            if e.batches:
                _first, last, base, delta = e.batches[-1]
                last_offset = base + delta
            else:
                last, last_offset, delta = -1, -1, 0
            yield (e.producer_id, e.epoch, last, last_offset, delta, e.last_timestamp,
                   e.coordinator_epoch, e.txn_first_offset)

    def load_snapshot(self, entries: Iterable[SnapshotEntry], now_ms: int,
                      expiration_ms: int) -> None:
        """Replace the state with a snapshot's, the expired producers left out (Kafka's
        ``loadFromSnapshot``)."""
        self.reset()
        producers = self._producers
        assert producers is not None
        ongoing = []
        for (pid, epoch, last_seq, last_offset, delta, timestamp, coordinator_epoch,
             txn_first) in entries:
            if txn_first < 0 and now_ms - timestamp >= expiration_ms:
                continue
            entry = producers[pid] = ProducerStateEntry(pid, epoch, coordinator_epoch,
                                                        timestamp, txn_first)
            if last_offset >= 0:
                entry.batches.append(((last_seq - delta) % _SEQ_MOD, last_seq,
                                      last_offset - delta, delta))
            if txn_first >= 0:
                ongoing.append((txn_first, pid))
        for first, pid in sorted(ongoing):
            self._ongoing[first] = pid
        self._update_first_unstable()


def _evict_one(producers: OrderedDict[int, ProducerStateEntry], keep: int) -> None:
    """Forget the least recently used producer without an open transaction (but ``keep``,
    the one being recorded)."""
    for pid, entry in producers.items():
        if entry.txn_first_offset < 0 and pid != keep:
            del producers[pid]
            return


def _parse(records, origin: AppendOrigin) -> list[ProducerBatch] | None:
    """The producer batches of a buffer of whole v2 batches (their offsets relative)."""
    mv = memoryview(records)
    if mv.itemsize != 1 or mv.ndim != 1:
        mv = mv.cast("B")
    return producer_batches(mv, check_batches(mv, 1 << 62, True, False), True, origin)
