"""Bad bytes on the wire: the offending connection is closed (or answered), never the broker.

Random frames, random unframed bytes, truncated and oversized frames, unsupported versions
and unknown API keys, over raw sockets to a ``trilog broker`` process.  After each, a fresh
connection gets correct answers and a connection opened beforehand is unaffected.  One
in-process test checks that such connections are not leaked.
"""

from __future__ import annotations

import random
import socket
import struct
import time

import pytest
import trio
from broker_helpers import (
    connect,
    create_topic,
    fetch_all,
    metadata_request,
    produce,
    recv_frame,
    roundtrip,
    send_request,
    trio_connect,
    trio_roundtrip,
    wait_closed,
)

from trilog import protocol as p
from trilog.broker import open_broker

UNSUPPORTED_VERSION = 35
TOPIC = "alive"


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _header(api_key: int, version: int, correlation_id: int, client_id: bytes = b"fuzz") -> bytes:
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


class Serving:
    """A broker with one topic holding known records, and a connection opened beforehand."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.observer = connect(broker.bootstrap)
        create_topic(self.observer, TOPIC)
        produce(self.observer, TOPIC, 0, [b"one", b"two", b"three"])

    def check(self) -> None:
        """The observer connection and a fresh one both get correct answers."""
        for sock in (self.observer, connect(self.broker.bootstrap)):
            sock.settimeout(10)
            meta = roundtrip(sock, metadata_request([TOPIC]), 1)
            assert [(t.name, t.error_code, len(t.partitions)) for t in meta.topics] == [
                (TOPIC, 0, 1)
            ]
            versions = roundtrip(sock, p.ApiVersionsRequest(), 0)
            assert versions.error_code == 0
            assert [r.value for r in fetch_all(sock, TOPIC, 0)] == [b"one", b"two", b"three"]
            if sock is not self.observer:
                sock.close()


@pytest.fixture
def serving(broker_process):
    s = Serving(broker_process(overrides={"socket.request.max.bytes": 1 << 20}))
    try:
        yield s
    finally:
        s.observer.close()


def _closed_or_still_serving(sock: socket.socket) -> str:
    """After bad input: either the broker closes the connection, or the connection still
    answers an ApiVersions request correctly (whatever came before it).  Never a hang."""
    sock.settimeout(10)
    corr = 0x5EED
    try:
        send_request(sock, p.ApiVersionsRequest(), 0, correlation_id=corr)
    except OSError:
        return "closed"
    for _ in range(100):  # answers to the fuzz frames may come first
        try:
            payload = recv_frame(sock)
        except TimeoutError:
            raise AssertionError("the broker neither answered nor closed the connection") from None
        except OSError:
            return "closed"
        if payload is None:
            return "closed"
        if p.read_correlation_id(payload) == corr:
            _, body = p.decode_response(payload, p.ApiKey.API_VERSIONS, 0)
            assert body.error_code == 0
            return "answered"
    raise AssertionError("endless answers")


def test_random_frames(serving):
    rng = random.Random(20240611)
    supported = sorted(p.API_VERSIONS.items())
    outcomes = {"closed": 0, "answered": 0}
    for i in range(300):
        kind = i % 3
        if kind == 0:  # pure garbage in a well-formed frame
            payload = rng.randbytes(rng.randrange(0, 64))
        elif kind == 1:  # a real API and version with a garbage body
            key, (lo, hi) = rng.choice(supported)
            if key in (p.ApiKey.CREATE_TOPICS, p.ApiKey.DELETE_TOPICS):
                key, lo, hi = p.ApiKey.METADATA, 0, 7
            payload = _header(key, rng.randint(lo, hi), i) + rng.randbytes(rng.randrange(0, 48))
        else:  # a valid request with a few bytes flipped
            request = p.encode_request(metadata_request([TOPIC]), 1, i, framed=False)
            b = bytearray(request)
            for _ in range(rng.randint(1, 3)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            payload = bytes(b)
        with connect(serving.broker.bootstrap) as sock:
            sock.sendall(_frame(payload))
            outcomes[_closed_or_still_serving(sock)] += 1
    assert outcomes["closed"] > 100, outcomes  # garbage is not silently accepted
    serving.check()


def test_random_unframed_bytes_then_half_close(serving):
    rng = random.Random(7)
    for _ in range(40):
        with connect(serving.broker.bootstrap) as sock:
            sock.sendall(rng.randbytes(rng.randrange(1, 3000)))
            sock.shutdown(socket.SHUT_WR)
            assert wait_closed(sock, 10), "the broker kept a half-closed garbage connection open"
    serving.check()


def test_truncated_frame(serving):
    # The size prefix promises more than ever arrives; the client goes away.
    for promised, sent in [(1000, 10), (100, 0), (50, 49), (12, 11)]:
        sock = connect(serving.broker.bootstrap)
        request = p.encode_request(metadata_request(None), 1, 1, framed=False)
        sock.sendall(struct.pack(">i", promised) + (request + bytes(1000))[:sent])
        sock.close()
    # The same, but the client half-closes and waits: the broker closes its side.
    with connect(serving.broker.bootstrap) as sock:
        sock.sendall(struct.pack(">i", 1000) + b"x" * 10)
        sock.shutdown(socket.SHUT_WR)
        assert wait_closed(sock, 10)
    # A valid request, then a truncated one on the same connection: the first is answered.
    with connect(serving.broker.bootstrap) as sock:
        corr = send_request(sock, metadata_request(None), 1)
        sock.sendall(struct.pack(">i", 500) + b"y" * 100)
        sock.shutdown(socket.SHUT_WR)
        payload = recv_frame(sock)
        assert payload is not None and p.read_correlation_id(payload) == corr
        assert wait_closed(sock, 10)
    serving.check()


@pytest.mark.parametrize("size", [2 << 20, (1 << 20) + 1, 0x7FFFFFFF, -1, -(2**31)])
def test_oversized_or_negative_frame_closes_without_reading_it(serving, size):
    with connect(serving.broker.bootstrap) as sock:
        t0 = time.monotonic()
        sock.sendall(struct.pack(">i", size) + b"z" * 100)
        assert wait_closed(sock, 10), "the broker waited for a frame over its limit"
        assert time.monotonic() - t0 < 5
    serving.check()


def test_frame_at_the_limit_is_read(serving):
    """socket.request.max.bytes is the largest legal frame: a 1 MiB Produce is accepted."""
    from broker_helpers import only_partition, produce_request

    from trilog.records import build_batch

    # A batch sized so the whole frame payload is exactly 1 MiB.
    size = (1 << 20) - 100
    for _ in range(10):
        records = build_batch([(int(time.time() * 1000), None, b"v" * size)])
        payload = p.encode_request(produce_request(TOPIC, 0, records), 3, 99, framed=False)
        if len(payload) == 1 << 20:
            break
        size += (1 << 20) - len(payload)
    assert len(payload) == 1 << 20
    with connect(serving.broker.bootstrap) as sock:
        sock.sendall(_frame(payload))
        answer = recv_frame(sock)
        assert answer is not None, "a frame of exactly socket.request.max.bytes was refused"
        _, response = p.decode_response(answer, p.ApiKey.PRODUCE, 3)
    # message.max.bytes (1 MiB + 12) admits this batch as well.
    assert only_partition(response).error_code == 0


def test_unsupported_request_version_closes_the_connection(serving):
    with connect(serving.broker.bootstrap) as sock:
        sock.sendall(_frame(_header(p.ApiKey.PRODUCE, 99, 5) + b"\x00" * 20))
        assert wait_closed(sock, 10)
    with connect(serving.broker.bootstrap) as sock:
        # Metadata v8 (flexible) is one past what trilog serves.
        sock.sendall(_frame(_header(p.ApiKey.METADATA, 8, 6) + b"\x00" * 6))
        assert wait_closed(sock, 10)
    serving.check()


@pytest.mark.parametrize("version", [99, 3, -1])
def test_api_versions_of_unknown_version_gets_the_v0_fallback(serving, version):
    with connect(serving.broker.bootstrap) as sock:
        sock.settimeout(10)
        # An ApiVersions v3+ request has a flexible header and body; the broker must only
        # need the fixed part of the header to answer.
        body = b"\x00" if version >= 3 else b""
        sock.sendall(_frame(_header(p.ApiKey.API_VERSIONS, version, 42) + body))
        payload = recv_frame(sock)
        assert payload is not None, "the broker closed instead of answering ApiVersions"
        header, response = p.decode_response(payload, p.ApiKey.API_VERSIONS, max(version, 0))
        assert header.correlation_id == 42
        assert response.error_code == UNSUPPORTED_VERSION
        ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        for key in (p.ApiKey.PRODUCE, p.ApiKey.FETCH, p.ApiKey.LIST_OFFSETS,
                    p.ApiKey.METADATA, p.ApiKey.API_VERSIONS, p.ApiKey.CREATE_TOPICS,
                    p.ApiKey.DELETE_TOPICS):
            assert ranges[key] == p.API_VERSIONS[key]
        for key, span in ranges.items():
            assert p.API_VERSIONS[key] == span
        # The v0 body is exactly what was sent (no v1+ throttle field after the array).
        _, v0 = p.decode_response(payload, p.ApiKey.API_VERSIONS, 0)
        assert v0 == response
        # Kafka keeps the connection open: the client retries with a supported version.
        assert roundtrip(sock, p.ApiVersionsRequest(), 2).error_code == 0
    serving.check()


@pytest.mark.parametrize("api_key", [p.ApiKey.INIT_PRODUCER_ID, 1000, -1, 0x7FFF])
def test_unknown_api_key_closes_the_connection(serving, api_key):
    with connect(serving.broker.bootstrap) as sock:
        sock.sendall(_frame(_header(int(api_key), 0, 9) + b"\x00" * 8))
        assert wait_closed(sock, 10)
    serving.check()


def test_malformed_header_closes_the_connection(serving):
    for payload in [b"", b"\x00", b"\x00\x03\x00\x01\x00\x00\x00",  # shorter than a header
                    struct.pack(">hhih", 3, 1, 1, 500) + b"short client id"]:
        with connect(serving.broker.bootstrap) as sock:
            sock.sendall(_frame(payload))
            assert wait_closed(sock, 10), payload
    serving.check()


async def test_bad_connections_are_not_leaked(tmp_path):
    """In-process: after each kind of bad input, the broker's connection count returns to
    the connections still open."""
    config = {"port": 0, "log.dirs": str(tmp_path / "data"), "socket.request.max.bytes": 1 << 20}
    async with open_broker(config) as broker:
        keeper = await trio_connect(broker.port)
        await trio_roundtrip(keeper, p.ApiVersionsRequest(), 0)

        async def open_connections(expected: int) -> None:
            with trio.fail_after(5):
                while broker.statistics()["open_connections"] != expected:
                    await trio.sleep(0.01)

        await open_connections(1)
        bad = [
            struct.pack(">i", 1000) + b"x" * 10,  # truncated, then the client leaves
            struct.pack(">i", 2 << 20),  # oversized
            _frame(_header(p.ApiKey.PRODUCE, 99, 1)),  # unsupported version
            _frame(_header(1000, 0, 1)),  # unknown API
            _frame(b"\xff" * 30),  # garbage
        ]
        for data in bad:
            stream = await trio_connect(broker.port)
            await stream.send_all(data)
            await trio.sleep(0.05)
            await stream.aclose()
        await open_connections(1)
        # A client that sends half a frame and stays: one open connection, not a stuck task.
        lingering = await trio_connect(broker.port)
        await lingering.send_all(struct.pack(">i", 1000) + b"x" * 10)
        await open_connections(2)
        await lingering.aclose()
        await open_connections(1)
        assert (await trio_roundtrip(keeper, p.ApiVersionsRequest(), 0)).error_code == 0
        assert broker.statistics()["connections_accepted"] == 2 + len(bad)
        await keeper.aclose()
