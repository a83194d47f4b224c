"""Request-level behaviour over the raw protocol: ordering, acks, error codes, limits."""

from __future__ import annotations

import time

import pytest
from broker_helpers import (
    batch,
    connect,
    create_topic,
    fetch_all,
    fetch_request,
    metadata_request,
    only_partition,
    produce,
    produce_request,
    read_response,
    records_of,
    roundtrip,
    send_request,
)

from trilog import protocol as p


@pytest.fixture
def broker(broker_process):
    b = broker_process()
    with connect(b.bootstrap) as sock:
        create_topic(sock, "t", 2)
    return b


def test_pipelined_requests_are_answered_in_order(broker):
    with connect(broker.bootstrap) as sock:
        sent = []
        for i in range(60):
            kind = i % 4
            if kind == 0:
                req, cls, v = produce_request("t", i % 2, batch([b"p%d" % i])), p.ProduceRequest, 3
            elif kind == 1:
                req, cls, v = fetch_request("t", 0, 0), p.FetchRequest, 4
            elif kind == 2:
                req, cls, v = metadata_request(["t"]), p.MetadataRequest, 1
            else:
                req, cls, v = p.ApiVersionsRequest(), p.ApiVersionsRequest, 0
            sent.append((send_request(sock, req, v), cls, v))
        for corr, cls, v in sent:
            read_response(sock, cls, v, corr)  # asserts the correlation id, in order
        assert len(fetch_all(sock, "t", 0)) + len(fetch_all(sock, "t", 1)) == 15


def test_acks_zero_has_no_answer_and_the_next_request_is_answered(broker):
    with connect(broker.bootstrap) as sock:
        send_request(sock, produce_request("t", 0, batch([b"fire", b"forget"]), acks=0), 3)
        meta = roundtrip(sock, metadata_request(["t"]), 1)  # the first answer is this one
        assert meta.topics[0].name == "t"
        assert [r.value for r in fetch_all(sock, "t", 0)] == [b"fire", b"forget"]


@pytest.mark.parametrize("acks", [2, -2, 5])
def test_invalid_acks(broker, acks):
    with connect(broker.bootstrap) as sock:
        part = only_partition(roundtrip(sock, produce_request("t", 0, batch([b"x"]), acks=acks),
                                        3))
        assert part.error_code == 21  # INVALID_REQUIRED_ACKS
        assert fetch_all(sock, "t", 0) == []


def test_corrupt_batch_is_refused_and_nothing_is_appended(broker):
    with connect(broker.bootstrap) as sock:
        data = bytearray(batch([b"a", b"b"]))
        data[-1] ^= 0x55  # the CRC-32C no longer matches
        part = only_partition(roundtrip(sock, produce_request("t", 0, bytes(data)), 3))
        assert part.error_code == 2  # CORRUPT_MESSAGE
        truncated = batch([b"whole"])[:-3]
        part = only_partition(roundtrip(sock, produce_request("t", 0, truncated), 3))
        assert part.error_code in (2, 87)  # CORRUPT_MESSAGE or INVALID_RECORD
        assert produce(sock, "t", 0, [b"fine"]) == 0
        assert [r.value for r in fetch_all(sock, "t", 0)] == [b"fine"]


def test_unknown_partition_and_offset_out_of_range(broker):
    with connect(broker.bootstrap) as sock:
        produce(sock, "t", 0, [b"a", b"b", b"c"])
        part = only_partition(roundtrip(sock, produce_request("t", 9, batch([b"x"])), 3))
        assert part.error_code == 3
        part = only_partition(roundtrip(sock, fetch_request("t", 9, 0), 4))
        assert part.error_code == 3
        part = only_partition(roundtrip(sock, fetch_request("t", 0, 4), 4))
        assert part.error_code == 1  # OFFSET_OUT_OF_RANGE
        part = only_partition(roundtrip(sock, fetch_request("t", 0, -1), 4))
        assert part.error_code == 1
        part = only_partition(roundtrip(sock, fetch_request("t", 0, 3), 4))  # the log end
        assert (part.error_code, part.high_watermark) == (0, 3)
        assert records_of(part.records) == []


def test_internal_topic_is_not_writable(broker):
    with connect(broker.bootstrap) as sock:
        meta = roundtrip(sock, metadata_request(["__consumer_offsets"]), 1)
        # Never auto-created by a Metadata request.
        assert meta.topics[0].error_code in (3, 0)
        part = only_partition(roundtrip(
            sock, produce_request("__consumer_offsets", 0, batch([b"x"])), 3))
        assert part.error_code in (3, 29)


def test_fetch_returns_a_whole_first_batch_larger_than_the_limit(broker):
    with connect(broker.bootstrap) as sock:
        produce(sock, "t", 0, [b"x" * 50_000])
        produce(sock, "t", 0, [b"y" * 10])
        part = only_partition(roundtrip(sock, fetch_request("t", 0, 0, max_bytes=1000), 4))
        assert part.error_code == 0
        got = records_of(part.records)
        assert [r.offset for r in got] == [0]  # whole first batch, not the second (KIP-74)
        assert got[0].value == b"x" * 50_000


def test_auto_create_disabled(broker_process):
    broker = broker_process(overrides={"auto.create.topics.enable": "false"})
    with connect(broker.bootstrap) as sock:
        meta = roundtrip(sock, metadata_request(["nope"]), 1)
        assert [(t.name, t.error_code) for t in meta.topics] == [("nope", 3)]
        assert roundtrip(sock, metadata_request(None), 1).topics == []
    assert not list(broker.log_dir.glob("nope-*"))


def test_auto_create_uses_num_partitions_and_v4_flag(broker_process):
    broker = broker_process(overrides={"num.partitions": 4})
    with connect(broker.bootstrap) as sock:
        meta = roundtrip(sock, metadata_request(["not-now"], allow_auto_topic_creation=False), 4)
        assert meta.topics[0].error_code == 3
        deadline = time.monotonic() + 5
        while True:
            meta = roundtrip(sock, metadata_request(["auto"]), 4)
            if meta.topics[0].error_code == 0:
                break
            assert meta.topics[0].error_code == 5  # LEADER_NOT_AVAILABLE while it is created
            assert time.monotonic() < deadline
        assert sorted(x.partition_index for x in meta.topics[0].partitions) == [0, 1, 2, 3]
    assert sorted(d.name for d in broker.log_dir.glob("auto-*")) == [f"auto-{i}" for i in range(4)]
    assert not list(broker.log_dir.glob("not-now-*"))


def test_message_max_bytes(broker_process):
    broker = broker_process(overrides={"message.max.bytes": 10_000})
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "small")
        part = only_partition(roundtrip(sock, produce_request("small", 0,
                                                              batch([b"z" * 20_000])), 3))
        assert part.error_code in (10, 18)  # MESSAGE_TOO_LARGE / RECORD_LIST_TOO_LARGE
        assert produce(sock, "small", 0, [b"z" * 5_000]) == 0
