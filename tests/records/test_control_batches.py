"""Control batches: the transaction markers, built byte for byte as Kafka builds them and
read from a header and a few bytes."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch
from records_helpers import RECORDS_SETTINGS

from trilog.records import (
    ControlRecordType,
    CorruptRecordsError,
    EndTxnMarker,
    RecordBatch,
    build_batch,
    build_end_txn_marker,
    control_record_type,
    crc32c_reference,
    read_end_txn_marker,
)
from trilog.records._control import encode_end_txn_marker_record


def kafka_marker_frame(pid: int, epoch: int, coordinator_epoch: int, commit: bool,
                       ts: int) -> bytes:
    """The batch Kafka's ``MemoryRecords.withEndTransactionMarker(0, ts, -1, pid, epoch,
    new EndTransactionMarker(type, coordinatorEpoch))`` writes, field by field from its
    code: ``DefaultRecordBatch.writeHeader`` and ``DefaultRecord.writeTo``."""
    record = bytes([
        0x20,  # record length 16, zig-zag varint
        0x00,  # attributes
        0x00,  # timestamp delta 0 (the record's timestamp is the batch's)
        0x00,  # offset delta 0
        0x08,  # key length 4
        0x00, 0x00, 0x00, 1 if commit else 0,  # key: version 0, type (COMMIT 1, ABORT 0)
        0x0C,  # value length 6
        0x00, 0x00, *coordinator_epoch.to_bytes(4, "big", signed=True),  # version 0, epoch
        0x00,  # no headers
    ])
    after_crc = b"".join([
        bytes.fromhex("0030"),  # attributes: transactional (0x10) | control (0x20), no codec
        bytes.fromhex("00000000"),  # last offset delta 0
        ts.to_bytes(8, "big"),  # base timestamp
        ts.to_bytes(8, "big"),  # max timestamp
        pid.to_bytes(8, "big", signed=True),
        epoch.to_bytes(2, "big", signed=True),
        bytes.fromhex("ffffffff"),  # base sequence -1 (RecordBatch.NO_SEQUENCE)
        bytes.fromhex("00000001"),  # one record
        record,
    ])
    return b"".join([
        bytes(8),  # base offset 0
        (4 + 1 + 4 + len(after_crc)).to_bytes(4, "big"),  # batch length: 66
        bytes.fromhex("ffffffff"),  # partition leader epoch -1 (NO_PARTITION_LEADER_EPOCH)
        b"\x02",  # magic
        crc32c_reference(after_crc).to_bytes(4, "big"),
        after_crc,
    ])


def test_a_marker_is_byte_for_byte_kafkas():
    for commit in (True, False):
        ours = build_end_txn_marker(producer_id=4001, producer_epoch=3, coordinator_epoch=17,
                                    commit=commit, timestamp_ms=1_700_000_000_123)
        assert ours == kafka_marker_frame(4001, 3, 17, commit, 1_700_000_000_123)
        assert len(ours) == 78


@RECORDS_SETTINGS
@given(pid=st.integers(0, 2**63 - 1), epoch=st.integers(0, 2**15 - 1),
       coordinator_epoch=st.integers(-(2**31), 2**31 - 1), commit=st.booleans(),
       ts=st.integers(0, 2**42))
def test_build_and_read_back(pid, epoch, coordinator_epoch, commit, ts):
    data = build_end_txn_marker(producer_id=pid, producer_epoch=epoch,
                                coordinator_epoch=coordinator_epoch, commit=commit,
                                timestamp_ms=ts)
    assert data == kafka_marker_frame(pid, epoch, coordinator_epoch, commit, ts)
    batch = RecordBatch(data)
    batch.validate()
    assert batch.is_control_batch and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (pid, epoch, -1)
    assert list(batch) == []  # no records for the caller
    kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    assert batch.end_txn_marker() == EndTxnMarker(kind, coordinator_epoch)
    assert batch.end_txn_marker().is_commit is commit
    assert control_record_type(data) == kind
    # Inside a larger buffer, at a position, as the three buffer types.
    padded = b"\x07" * 5 + data + b"\x01" * 9
    for view in (padded, bytearray(padded), memoryview(padded)):
        assert read_end_txn_marker(view, 5) == (kind, coordinator_epoch)


def test_kafka_python_reads_our_marker():
    data = build_end_txn_marker(producer_id=9, producer_epoch=1, coordinator_epoch=2,
                                commit=False, timestamp_ms=1000)
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc() and batch.is_control_batch and batch.is_transactional
    (record,) = list(batch)
    assert record.abort and record.version == 0 and record.timestamp == 1000
    assert record.value == b"\x00\x00\x00\x00\x00\x02"


def test_a_prefix_is_enough_and_a_shorter_one_is_corrupt():
    """A reader of headers reads the header and the record's first bytes only: the key and
    value end 77 bytes in (the header-count byte is not needed)."""
    data = build_end_txn_marker(producer_id=1, producer_epoch=0, coordinator_epoch=5,
                                commit=True, timestamp_ms=1)
    assert read_end_txn_marker(data[:77]) == (ControlRecordType.COMMIT, 5)
    assert control_record_type(data[:70]) == ControlRecordType.COMMIT  # the key's end
    for cut in (61, 62, 66, 69):
        with pytest.raises(CorruptRecordsError):
            read_end_txn_marker(data[:cut])
    with pytest.raises(CorruptRecordsError):
        read_end_txn_marker(data[:60])  # not even a header


def _control_batch(record: bytes, *, count: int = 1, codec: int = 0) -> bytes:
    """A control batch around ``record`` (a record's bytes, length prefix included)."""
    header = struct.pack(">qiibIhiqqqhii", 0, 49 + len(record), -1, 2, 0, 0x30 | codec, 0,
                         5, 5, 7, 0, -1, count)
    buf = bytearray(header + record)
    struct.pack_into(">I", buf, 17, crc32c_reference(bytes(buf[21:])))
    return bytes(buf)


def _record(key: bytes, value: bytes) -> bytes:
    from trilog.records._varint import encode_varint

    body = (b"\x00\x00\x00" + encode_varint(len(key)) + key + encode_varint(len(value))
            + value + b"\x00")
    return encode_varint(len(body)) + body


@pytest.mark.parametrize(("key", "value", "problem"), [
    (b"\x00\x00\x00", b"\x00\x00\x00\x00\x00\x01", "key of 3 bytes"),
    (b"\xff\xff\x00\x01", b"\x00\x00\x00\x00\x00\x01", "key version"),
    (b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x01", "value of 5 bytes"),
    (b"\x00\x00\x00\x01", b"\xff\xff\x00\x00\x00\x01", "marker version"),
    (b"\x00\x00\x00\x02", b"\x00\x00\x00\x00\x00\x01", "type 2 is not a transaction marker"),
])
def test_malformed_markers_are_corrupt(key, value, problem):
    data = _control_batch(_record(key, value))
    RecordBatch(data).validate()  # a sound batch: only the marker is off
    with pytest.raises(CorruptRecordsError, match=problem):
        read_end_txn_marker(data)


def test_other_control_types_and_newer_versions():
    """A control type trilog does not write is reported by ``control_record_type``; a newer
    marker version with more bytes is read for the fields it shares (Kafka's rule)."""
    assert control_record_type(_control_batch(_record(b"\x00\x00\x00\x02", b"x"))) == 2
    newer = _control_batch(_record(b"\x00\x01\x00\x01\x99", b"\x00\x01\x00\x00\x00\x09extra"))
    assert read_end_txn_marker(newer) == (ControlRecordType.COMMIT, 9)


def test_an_emptied_control_batch_has_no_marker():
    """The log cleaner's empty batch (no records) says nothing any more."""
    empty = _control_batch(b"", count=0)
    assert read_end_txn_marker(empty) is None and control_record_type(empty) is None
    assert RecordBatch(empty).end_txn_marker() is None


def test_not_a_control_batch_or_compressed():
    with pytest.raises(ValueError, match="not a control batch"):
        read_end_txn_marker(build_batch([(1, b"k", b"v")]))
    compressed = _control_batch(encode_end_txn_marker_record(ControlRecordType.ABORT, 1),
                                codec=1)
    with pytest.raises(CorruptRecordsError, match="never compressed"):
        read_end_txn_marker(compressed)


@RECORDS_SETTINGS
@given(st.binary(max_size=40))
def test_garbage_after_the_header_is_only_ever_corrupt(tail):
    data = _control_batch(tail)
    try:
        read_end_txn_marker(data)
    except CorruptRecordsError:
        pass
