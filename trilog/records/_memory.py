"""``MemoryRecords``: the entries of a record buffer of any magic, walked without decoding.

Every entry, whatever its format, starts the same way:

    offset  size  field
    0       8     offset (legacy) / base_offset (v2)
    8       4     size of the rest of the entry (message_size / batch_length)
    16      1     magic: 0 or 1 -> legacy message (``_legacy``), 2 -> RecordBatch (``_v2``)

(bytes 12-15 are the legacy CRC or v2's partition leader epoch), so peeking byte 16 tells how
to read the rest.  Buffers may mix magics: a log written by an old broker and then by a new one
does.  A trailing entry cut short is dropped: a fetch response ends with one whenever the
batch straddled ``max_bytes``.
"""

from __future__ import annotations

from collections.abc import Iterator

from trilog.records._errors import CorruptRecordsError
from trilog.records._legacy import MESSAGE_OVERHEAD, LegacyRecordBatch
from trilog.records._types import BytesLike
from trilog.records._v2 import (
    BATCH_PREFIX,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    Record,
    RecordBatch,
)

_PEEK = MAGIC_OFFSET + 1  # bytes needed to see the magic
#: smallest legal size field per magic
_MIN_SIZE = {0: MESSAGE_OVERHEAD[0], 1: MESSAGE_OVERHEAD[1], 2: MIN_BATCH_LENGTH}

AnyBatch = RecordBatch | LegacyRecordBatch


def _scan(buffer: BytesLike, position: int, end: int) -> Iterator[tuple[int, int, int]]:
    """``(position, size, magic)`` of each complete entry; raises on impossible sizes/magics."""
    while end - position >= _PEEK:
        _, length = BATCH_PREFIX.unpack_from(buffer, position)
        magic = buffer[position + MAGIC_OFFSET]
        minimum = _MIN_SIZE.get(magic)
        if minimum is None:
            raise CorruptRecordsError(f"entry at byte {position} has unknown magic {magic}")
        if length < minimum:
            raise CorruptRecordsError(
                f"magic {magic} entry at byte {position} has impossible size {length}"
            )
        size = length + 12
        if position + size > end:
            return
        yield position, size, magic
        position += size


class MemoryRecords:
    """A read-only view of the record entries in ``buffer[position:end]``.

    ``batches()`` gives a ``RecordBatch`` (magic 2) or ``LegacyRecordBatch`` (magic 0/1) per
    entry, decoding only its header; ``records()`` flattens them, decoding lazily.  Nothing is
    validated unless asked (``validate()``, or each batch's own ``validate()``).  Impossible
    sizes and unknown magics raise ``CorruptRecordsError``; a partial last entry is dropped.
    Thread-safe as long as nobody mutates the buffer.
    """

    __slots__ = ("buffer", "end", "max_decompressed_size", "position")

    def __init__(
        self,
        buffer: BytesLike,
        position: int = 0,
        end: int | None = None,
        *,
        max_decompressed_size: int | None = None,
    ) -> None:
        self.buffer = buffer
        self.position = position
        self.end = len(buffer) if end is None else min(end, len(buffer))
        self.max_decompressed_size = max_decompressed_size

    def __repr__(self) -> str:
        return f"MemoryRecords({self.end - self.position} bytes)"

    def batches(self) -> Iterator[AnyBatch]:
        buffer = self.buffer
        for pos, _size, magic in _scan(buffer, self.position, self.end):
            yield RecordBatch(buffer, pos) if magic == 2 else LegacyRecordBatch(buffer, pos)

    __iter__ = batches

    def records(self) -> Iterator[Record]:
        """Every record of every batch, in order (control batches contribute none)."""
        cap = self.max_decompressed_size
        for batch in self.batches():
            yield from batch.iter_records(cap)

    def valid_bytes(self) -> int:
        """Bytes from ``position`` covered by complete entries (the partial tail excluded)."""
        last = self.position
        for pos, size, _magic in _scan(self.buffer, self.position, self.end):
            last = pos + size
        return last - self.position

    def has_partial_tail(self) -> bool:
        return self.valid_bytes() < self.end - self.position

    def validate(self) -> None:
        """Validate every complete entry (CRC and sizes); raise ``CorruptRecordsError``."""
        for batch in self.batches():
            batch.validate()

    def magics(self) -> set[int]:
        """The magic bytes present (``{2}`` for a modern buffer)."""
        return {magic for _pos, _size, magic in _scan(self.buffer, self.position, self.end)}

    def next_offset(self) -> int | None:
        """One past the last offset of the last complete entry, or ``None`` if there is none."""
        last = None
        for batch in self.batches():
            last = batch
        return None if last is None else last.next_offset
