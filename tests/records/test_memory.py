import os
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from records_helpers import RECORDS_SETTINGS

from trilog.errors import UnsupportedCodecError
from trilog.records import (
    GZIP,
    LZ4,
    CorruptRecordsError,
    LegacyRecordBatch,
    MemoryRecords,
    RecordBatch,
    build_batch,
    build_message_set,
)


def _mixed():
    return [
        build_message_set([(1, b"a", b"0")], magic=0, base_offset=0),
        build_message_set([(2, b"b", b"1")], magic=0, base_offset=1),
        build_message_set(
            [(3, b"c", b"2"), (4, b"d", b"3")], magic=1, base_offset=2, compression_type=GZIP
        ),
        build_batch([(5, b"e", b"4"), (6, b"f", b"5")], base_offset=4, compression_type=LZ4),
        build_batch([(7, None, b"6")], base_offset=6),
    ]


def test_walks_every_magic_without_decoding():
    parts = _mixed()
    mr = MemoryRecords(b"".join(parts))
    batches = list(mr.batches())
    assert [type(b) for b in batches] == [
        LegacyRecordBatch,
        LegacyRecordBatch,
        LegacyRecordBatch,
        RecordBatch,
        RecordBatch,
    ]
    assert [b.magic for b in batches] == [0, 0, 1, 2, 2]
    assert [b.size for b in batches] == [len(p) for p in parts]
    assert [b.last_offset for b in batches] == [0, 1, 3, 5, 6]
    assert [b.base_offset for b in batches] == [0, 1, 2, 4, 6]
    assert mr.magics() == {0, 1, 2}
    assert mr.next_offset() == 7
    mr.validate()
    assert all(b.is_valid() for b in batches)
    assert [(r.offset, r.value) for r in mr.records()] == [(i, str(i).encode()) for i in range(7)]
    assert mr.valid_bytes() == len(mr.buffer)
    assert not mr.has_partial_tail()


def test_partial_tail_dropped_at_every_cut():
    whole = b"".join(_mixed())
    ends = []
    pos = 0
    for part in _mixed():
        pos += len(part)
        ends.append(pos)
    for cut in range(len(whole) + 1):
        mr = MemoryRecords(whole[:cut])
        complete = max([e for e in ends if e <= cut], default=0)
        assert mr.valid_bytes() == complete
        assert mr.has_partial_tail() == (cut != complete)
        list(mr.records())  # never raises on a truncated tail
        mr.validate()


def test_position_and_end_and_views():
    whole = b"xx" + b"".join(_mixed()) + b"yy"
    for buf in (whole, bytearray(whole), memoryview(whole)):
        mr = MemoryRecords(buf, 2, len(whole) - 2)
        assert len([r for r in mr.records()]) == 7


def test_unknown_magic_raises():
    buf = bytearray(build_batch([(1, None, b"v")]))
    buf[16] = 7
    with pytest.raises(CorruptRecordsError, match="magic"):
        list(MemoryRecords(bytes(buf)).batches())


@pytest.mark.parametrize("length", [-1, 0, 3, 13, 48])
def test_impossible_lengths_raise(length):
    buf = bytearray(build_batch([(1, None, b"v")]))
    struct.pack_into(">i", buf, 8, length)
    with pytest.raises(CorruptRecordsError):
        MemoryRecords(bytes(buf)).valid_bytes()


def test_huge_length_is_just_a_partial_tail():
    buf = bytearray(build_batch([(1, None, b"v")]))
    struct.pack_into(">i", buf, 8, 2**31 - 1)
    assert list(MemoryRecords(bytes(buf)).batches()) == []


def test_flipped_bit_found_by_validate():
    parts = _mixed()
    buf = bytearray(b"".join(parts))
    buf[len(parts[0]) + len(parts[1]) + len(parts[2]) + 40] ^= 0x10
    with pytest.raises(CorruptRecordsError):
        MemoryRecords(bytes(buf)).validate()


def test_decompression_cap_is_passed_down():
    buf = build_batch([(1, None, bytes(2_000_000))], compression_type=GZIP)
    with pytest.raises(CorruptRecordsError, match="cap"):
        list(MemoryRecords(buf, max_decompressed_size=1_000_000).records())
    assert len(list(MemoryRecords(buf).records())) == 1


@RECORDS_SETTINGS
@given(st.binary(max_size=400))
def test_garbage_never_crashes(garbage):
    for prefix in (b"", b"".join(_mixed())):
        try:
            mr = MemoryRecords(prefix + garbage)
            for batch in mr.batches():
                batch.is_valid()
                list(batch)
        except (CorruptRecordsError, UnsupportedCodecError):  # snappy/zstd bits, no library
            pass


@RECORDS_SETTINGS
@given(st.data())
def test_random_corruption_never_crashes(data):
    buf = bytearray(b"".join(_mixed()) + build_batch([(1, None, os.urandom(30))]))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    try:
        for batch in MemoryRecords(bytes(buf)).batches():
            if batch.is_valid():
                list(batch)
            else:
                try:
                    list(batch)
                except (CorruptRecordsError, UnsupportedCodecError):  # snappy/zstd bits, no library
                    pass
    except (CorruptRecordsError, UnsupportedCodecError):  # snappy/zstd bits, no library
        pass
