"""Isolation levels (KIP-98): which records of transactions a consumer reads.

``read_uncommitted`` (Fetch's ``isolation_level`` 0, the default) reads every record up to
the high watermark, those of open and aborted transactions included.  ``read_committed``
(1) reads up to the partition's *last stable offset* (below it every transaction has ended)
and skips the records of aborted transactions: the broker answers each read_committed fetch
with the aborted transactions its records overlap (``aborted_transactions``: a producer id
and the offset its transaction started at), and the consumer drops, per batch, every
transactional batch of such a producer from that offset until the producer's ABORT marker
(Kafka's ``CompletedFetch``; ``aborted_batches`` here).  Either way control batches (the
COMMIT and ABORT markers) are never handed to the application, and a consumer's position
moves past them and past the skipped batches.

``ListOffsets`` takes the level too: "latest" under read_committed is the last stable offset,
so end offsets and lag count only what a read_committed consumer can read.

Pure: data in, data out.
"""

from __future__ import annotations

from collections.abc import Iterable

from trilog.records import MemoryRecords, RecordBatch
from trilog.records._types import BytesLike

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
#: the ``isolation_level`` settings (Kafka's names) and their ids on the wire
ISOLATION_LEVELS = {"read_uncommitted": READ_UNCOMMITTED, "read_committed": READ_COMMITTED}

#: one entry of a Fetch answer's ``aborted_transactions``: (producer id, first offset)
AbortedTransaction = tuple[int, int]


def isolation_level_id(name: str) -> int:
    """The wire id of an ``isolation_level`` setting; ``ValueError`` for another name."""
    level = ISOLATION_LEVELS.get(name) if isinstance(name, str) else None
    if level is None:
        raise ValueError(f"isolation_level must be 'read_uncommitted' or 'read_committed', "
                         f"not {name!r}")
    return level


def aborted_batches(data: BytesLike, aborted: Iterable[AbortedTransaction]
                    ) -> frozenset[int]:
    """The positions in ``data`` (a fetched partition's records) of the batches a
    read_committed consumer skips, given the answer's aborted transactions.

    Walking the batches in order, a producer joins the aborted set once an aborted
    transaction of it starts at or before a batch's last offset, and leaves it at its ABORT
    marker; a transactional data batch of a producer in the set is skipped.  Only batch
    headers are read (and the one record of an aborting producer's control batch)."""
    pending = sorted(aborted, key=lambda a: a[1])
    if not pending:
        return frozenset()
    next_pending = 0
    active: set[int] = set()
    skipped = []
    for batch in MemoryRecords(data).batches():
        if type(batch) is not RecordBatch or batch.producer_id < 0:
            continue
        last = batch.last_offset
        while next_pending < len(pending) and pending[next_pending][1] <= last:
            active.add(pending[next_pending][0])
            next_pending += 1
        producer_id = batch.producer_id
        if producer_id not in active:
            continue
        if batch.is_control_batch:
            marker = batch.end_txn_marker()
            if marker is not None and not marker.is_commit:
                active.discard(producer_id)  # its aborted transaction ends here
        elif batch.is_transactional:
            skipped.append(batch.position)
    return frozenset(skipped)
