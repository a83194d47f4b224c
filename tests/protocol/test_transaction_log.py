"""The records of ``__transaction_state``: Kafka's bytes, round trips, malformed input."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trilog.errors import LocalProtocolError, RemoteProtocolError
from trilog.protocol import (
    TransactionLogRecordError,
    TxnLogValue,
    TxnStatus,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)

_i8, _i16, _i32, _i64 = (struct.Struct(f">{c}").pack for c in "bhiq")


def _string(text: str) -> bytes:
    return _i16(len(text.encode())) + text.encode()


def _cstring(text: str) -> bytes:
    return bytes([len(text.encode()) + 1]) + text.encode()


# Records laid out by hand from Kafka's TransactionLogKey / TransactionLogValue specs, field
# by field, as Kafka's TransactionLog.keyToBytes / valueToBytes write them at
# transaction.version 0.
KAFKA_KEY = _i16(0) + _string("orders-txn")
KAFKA_ONGOING = (
    _i16(0)  # value version
    + _i64(4001) + _i16(7)  # producer_id, producer_epoch
    + _i32(60000)  # transaction_timeout_ms
    + _i8(1)  # transaction_status: Ongoing
    + _i32(2)  # transaction_partitions: two topics
    + _string("orders") + _i32(2) + _i32(0) + _i32(3)
    + _string("audit") + _i32(1) + _i32(1)
    + _i64(1700000001000)  # transaction_last_update_timestamp_ms
    + _i64(1700000000000)  # transaction_start_timestamp_ms
)
ONGOING = TxnLogValue(
    producer_id=4001, producer_epoch=7, timeout_ms=60000, status=TxnStatus.ONGOING,
    partitions=(("orders", 0), ("orders", 3), ("audit", 1)),
    last_update_ms=1700000001000, start_ms=1700000000000,
)
# An Empty transaction: Kafka writes its partitions as null.
KAFKA_EMPTY = (_i16(0) + _i64(4001) + _i16(8) + _i32(60000) + _i8(0) + _i32(-1)
               + _i64(1700000002000) + _i64(-1))
EMPTY = TxnLogValue(4001, 8, 60000, TxnStatus.EMPTY, (), 1700000002000, -1)


def test_encoding_gives_kafkas_bytes():
    assert encode_txn_key("orders-txn") == KAFKA_KEY
    assert encode_txn_value(ONGOING) == KAFKA_ONGOING
    assert encode_txn_value(EMPTY) == KAFKA_EMPTY


def test_kafkas_records_decode():
    assert decode_txn_key(KAFKA_KEY) == "orders-txn"
    assert decode_txn_value(KAFKA_ONGOING) == ONGOING
    assert decode_txn_value(KAFKA_EMPTY) == EMPTY
    assert decode_txn_value(KAFKA_ONGOING).status is TxnStatus.ONGOING


def test_a_flexible_v1_value_decodes_and_its_tagged_fields_are_skipped():
    v1 = (
        _i16(1)
        + _i64(4001) + _i16(7) + _i32(60000) + _i8(2)  # PrepareCommit
        + b"\x03"  # two topics, as a compact array
        + _cstring("orders") + b"\x03" + _i32(0) + _i32(3) + b"\x00"
        + _cstring("audit") + b"\x02" + _i32(1) + b"\x01" + b"\x09\x01\x00"  # unknown tag 9
        + _i64(1700000001000) + _i64(1700000000000)
        + b"\x03"  # previous_producer_id, next_producer_id, client_transaction_version
        + b"\x00\x08" + _i64(4000) + b"\x01\x08" + _i64(4002) + b"\x02\x02" + _i16(2)
    )
    assert decode_txn_value(v1) == ONGOING._replace(status=TxnStatus.PREPARE_COMMIT)


def test_a_tombstone_and_other_key_versions():
    assert decode_txn_value(None) is None
    # Kafka's other coordinator record types share the int16 prefix: not a transaction key.
    assert decode_txn_key(_i16(1) + _string("group")) is None
    assert decode_txn_key(_i16(3) + b"whatever follows") is None


def test_an_empty_transactions_partitions_are_null_and_ignored():
    with pytest.raises(ValueError, match="Empty"):
        encode_txn_value(EMPTY._replace(partitions=(("t", 0),)))
    # A record of an Empty transaction that lists partitions anyway: Kafka ignores them.
    listed = KAFKA_EMPTY[:17] + _i32(1) + _string("t") + _i32(1) + _i32(0) + KAFKA_EMPTY[21:]
    assert decode_txn_value(listed) == EMPTY
    # A null list in another state reads as no partitions.
    null = KAFKA_ONGOING[:17] + _i32(-1) + KAFKA_ONGOING[-16:]
    assert decode_txn_value(null) == ONGOING._replace(partitions=())


def test_partitions_are_grouped_by_topic_in_order_of_first_appearance():
    mixed = ONGOING._replace(partitions=(("a", 1), ("b", 0), ("a", 0)))
    assert decode_txn_value(encode_txn_value(mixed)).partitions == (("a", 1), ("a", 0),
                                                                     ("b", 0))


def test_state_names_are_kafkas():
    names = [s.state_name for s in TxnStatus]
    assert names == ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                     "CompleteAbort", "Dead", "PrepareEpochFence"]
    assert [int(s) for s in TxnStatus] == list(range(8))
    assert TxnStatus.from_state_name("PrepareEpochFence") is TxnStatus.PREPARE_EPOCH_FENCE
    assert TxnStatus.from_state_name("ongoing") is None


def test_values_out_of_range_are_local_errors():
    with pytest.raises(LocalProtocolError, match="producer_epoch"):
        encode_txn_value(ONGOING._replace(producer_epoch=1 << 15))
    with pytest.raises(ValueError):
        encode_txn_value(ONGOING._replace(status=9))


names = st.text(max_size=30)
grouped_partitions = st.dictionaries(names, st.lists(st.integers(0, 2**31 - 1), min_size=1,
                                                     max_size=5), max_size=5).map(
    lambda d: tuple((t, p) for t, ps in d.items() for p in ps))
values = st.builds(
    TxnLogValue,
    producer_id=st.integers(-1, 2**63 - 1),
    producer_epoch=st.integers(-1, 2**15 - 1),
    timeout_ms=st.integers(0, 2**31 - 1),
    status=st.sampled_from([s for s in TxnStatus if s is not TxnStatus.EMPTY]),
    partitions=grouped_partitions,
    last_update_ms=st.integers(-1, 2**63 - 1),
    start_ms=st.integers(-1, 2**63 - 1),
)


@given(names)
def test_key_round_trip(transactional_id):
    assert decode_txn_key(encode_txn_key(transactional_id)) == transactional_id


@given(values)
def test_value_round_trip(value):
    assert decode_txn_value(encode_txn_value(value)) == value
    empty = value._replace(status=TxnStatus.EMPTY, partitions=())
    assert decode_txn_value(encode_txn_value(empty)) == empty


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        b"\x00\x00\x00",
        b"\x00\x02" + bytes(40),  # a value version this codec does not know
        b"\xff\xff" + bytes(40),
        KAFKA_ONGOING[:-1],  # cut short
        KAFKA_ONGOING[:16] + _i8(8) + KAFKA_ONGOING[17:],  # status 8: no such state
        KAFKA_ONGOING[:16] + _i8(-1) + KAFKA_ONGOING[17:],
        KAFKA_ONGOING[:17] + _i32(-2) + KAFKA_ONGOING[21:],  # an invalid count
        KAFKA_ONGOING[:17] + _i32(0x7FFFFFFF) + KAFKA_ONGOING[21:],  # a count no input holds
        KAFKA_ONGOING[:21] + _i16(0x7FFF) + KAFKA_ONGOING[23:],  # a topic past the end
        KAFKA_ONGOING[:21] + _i16(-1) + KAFKA_ONGOING[23:],  # a null topic
        KAFKA_ONGOING[:21] + _i16(2) + b"\xff\xfe" + KAFKA_ONGOING[29:],  # not UTF-8
        _i16(1) + _i64(1) + _i16(0) + _i32(0) + _i8(1) + b"\x02" + b"\x80",  # v1, cut short
        _i16(1) + _i64(1) + _i16(0) + _i32(0) + _i8(1) + b"\x01" + _i64(0) + _i64(0)
        + b"\x01\x00\x09" + _i64(0),  # v1: a tagged field whose size runs past the end
    ],
)
def test_malformed_values_raise_the_documented_error(data):
    with pytest.raises(TransactionLogRecordError) as info:
        decode_txn_value(data)
    assert isinstance(info.value, RemoteProtocolError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00", b"\x00\x00", b"\x00\x00\x00\x05ab", _i16(0) + _i16(-1),
     _i16(0) + _i16(0x7FFF)],
)
def test_malformed_keys_raise_the_documented_error(data):
    with pytest.raises(TransactionLogRecordError):
        decode_txn_key(data)


@given(st.binary(max_size=80))
def test_any_bytes_decode_or_raise_the_documented_error(data):
    for decode in (decode_txn_key, decode_txn_value):
        try:
            decode(data)
        except TransactionLogRecordError:
            pass


@given(st.integers(0, len(KAFKA_ONGOING) - 1), st.integers(0, 255))
def test_a_damaged_record_decodes_or_raises_the_documented_error(pos, byte):
    data = bytearray(KAFKA_ONGOING)
    data[pos] = byte
    try:
        decode_txn_value(bytes(data))
    except TransactionLogRecordError:
        pass


def test_a_memoryview_decodes_like_bytes_and_trailing_bytes_are_ignored():
    assert decode_txn_value(memoryview(KAFKA_ONGOING)) == ONGOING
    assert decode_txn_value(KAFKA_ONGOING + b"later") == ONGOING
    assert decode_txn_key(KAFKA_KEY + b"later") == "orders-txn"
