"""Helpers for the broker's end-to-end tests: raw protocol over sockets, kafka-python clients
(built on the shared ``kafka_helpers``).

Blocking helpers (``connect``, ``roundtrip`` ...) talk to a broker process over a plain
socket; ``trio_*`` twins do the same over a trio stream for in-process brokers.
"""

from __future__ import annotations

import itertools
import socket
import struct
import time

import kafka_helpers
import trio
from wait_helpers import wait_for  # noqa: F401  (the tests of this folder import it from here)

from trilog import protocol as p
from trilog.records import MemoryRecords, build_batch

_correlation = itertools.count(1)

EARLIEST = -2
LATEST = -1


def host_port(bootstrap: str | int) -> tuple[str, int]:
    if isinstance(bootstrap, int):
        return "127.0.0.1", bootstrap
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


def connect(bootstrap: str | int, timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection(host_port(bootstrap), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    """``n`` bytes, or None if the peer closed (cleanly or by reset) first."""
    chunks = []
    while n:
        try:
            chunk = sock.recv(min(n, 1 << 20))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket) -> bytes | None:
    """One response payload (size prefix removed), or None if the connection closed."""
    head = _recv_exactly(sock, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    assert 0 <= size < 1 << 30, size
    if size == 0:
        return b""
    return _recv_exactly(sock, size)


def send_request(sock: socket.socket, request: p.Message, version: int,
                 correlation_id: int | None = None) -> int:
    corr = next(_correlation) if correlation_id is None else correlation_id
    sock.sendall(p.encode_request(request, version, corr, client_id="e2e"))
    return corr


def read_response(sock: socket.socket, request_class: type[p.Message], version: int,
                  correlation_id: int):
    payload = recv_frame(sock)
    assert payload is not None, "the broker closed the connection instead of answering"
    header, body = p.decode_response(payload, request_class.API_KEY, version)
    assert header.correlation_id == correlation_id
    return body


def roundtrip(sock: socket.socket, request: p.Message, version: int):
    """Send ``request`` at ``version`` and return the decoded response body."""
    corr = send_request(sock, request, version)
    return read_response(sock, type(request), version, corr)


def wait_closed(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True if the broker closes the connection within ``timeout`` (data read is dropped)."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        sock.settimeout(left)
        try:
            data = sock.recv(65536)
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
        if not data:
            return True


# -- requests --------------------------------------------------------------------------------


def metadata_request(topics: list[str] | None, allow_auto_topic_creation: bool = True):
    R = p.MetadataRequest
    return R(
        topics=None if topics is None else [R.MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=allow_auto_topic_creation,
    )


def create_topics_request(names_partitions: dict[str, int], timeout_ms: int = 10000):
    R = p.CreateTopicsRequest
    return R(
        topics=[R.CreatableTopic(name=name, num_partitions=n, replication_factor=1,
                                 assignments=[], configs=[])
                for name, n in names_partitions.items()],
        timeout_ms=timeout_ms,
        validate_only=False,
    )


def produce_request(topic: str, partition: int, records: bytes, acks: int = 1):
    R = p.ProduceRequest
    return R(
        transactional_id=None,
        acks=acks,
        timeout_ms=10000,
        topic_data=[R.TopicProduceData(name=topic, partition_data=[
            R.TopicProduceData.PartitionProduceData(index=partition, records=records)
        ])],
    )


def fetch_request(topic: str, partition: int, offset: int, *, max_wait_ms: int = 0,
                  min_bytes: int = 1, max_bytes: int = 10 << 20):
    R = p.FetchRequest
    return R(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[R.FetchTopic(topic=topic, partitions=[
            R.FetchTopic.FetchPartition(partition=partition, fetch_offset=offset,
                                        partition_max_bytes=max_bytes)
        ])],
        forgotten_topics_data=[],
    )


def list_offsets_request(topic: str, partition: int, timestamp: int, max_num_offsets: int = 1):
    R = p.ListOffsetsRequest
    return R(
        replica_id=-1,
        isolation_level=0,
        topics=[R.ListOffsetsTopic(name=topic, partitions=[
            R.ListOffsetsTopic.ListOffsetsPartition(partition_index=partition,
                                                    timestamp=timestamp,
                                                    max_num_offsets=max_num_offsets)
        ])],
    )


def batch(values, *, key=None, timestamp: int | None = None) -> bytes:
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    return build_batch([(ts, key, v) for v in values])


def only_partition(response):
    """The single partition entry of a one-topic, one-partition response."""
    (topic,) = response.responses if hasattr(response, "responses") else response.topics
    parts = getattr(topic, "partition_responses", None) or topic.partitions
    (part,) = parts
    return part


def records_of(records, validate: bool = True) -> list:
    """Every record in a fetch response's ``records`` bytes (each batch's CRC checked)."""
    data = bytes(records or b"")
    mem = MemoryRecords(data)
    if validate:
        mem.validate()
    return list(mem.records())


def create_topic(sock: socket.socket, name: str, partitions: int = 1) -> None:
    response = roundtrip(sock, create_topics_request({name: partitions}), 2)
    (result,) = response.topics
    assert result.error_code == 0, result


def produce(sock: socket.socket, topic: str, partition: int, values, **kw) -> int:
    """Produce one batch (acks=1); return its base offset."""
    request = produce_request(topic, partition, batch(values, **kw))
    part = only_partition(roundtrip(sock, request, 3))
    assert part.error_code == 0, part
    return part.base_offset


def fetch_all(sock: socket.socket, topic: str, partition: int, start: int = 0,
              version: int = 4) -> list:
    """Every record from ``start`` to the high watermark (several fetches if needed)."""
    out = []
    offset = start
    for _ in range(10_000):
        part = only_partition(roundtrip(sock, fetch_request(topic, partition, offset), version))
        assert part.error_code == 0, part
        recs = [r for r in records_of(part.records) if r.offset >= offset]
        out.extend(recs)
        if recs:
            offset = recs[-1].offset + 1
        if offset >= part.high_watermark:
            return out
    raise AssertionError("fetch_all did not reach the high watermark")


# -- trio twins (in-process brokers) ---------------------------------------------------------


def group_broker_config(tmp_path, offsets_partitions: int, **extra) -> dict:
    """Settings of an in-process broker (``open_broker``) for the group and offset tests: a free
    port, the log under ``tmp_path / "data"`` (the same again for a restart),
    ``offsets_partitions`` partitions of ``__consumer_offsets``, no initial rebalance delay;
    ``extra`` adds to these or overrides them."""
    base = {"port": 0, "log.dirs": str(tmp_path / "data"),
            "offsets.topic.num.partitions": offsets_partitions,
            "group.initial.rebalance.delay.ms": 0}
    base.update(extra)
    return base


async def trio_connect(port: int) -> trio.SocketStream:
    return await trio.open_tcp_stream("127.0.0.1", port)


async def trio_recv_frame(stream: trio.SocketStream) -> bytes | None:
    buf = bytearray()
    need = 4
    size = None
    while True:
        while len(buf) < need:
            try:
                chunk = await stream.receive_some(1 << 20)
            except trio.BrokenResourceError:
                return None
            if not chunk:
                return None
            buf += chunk
        if size is None:
            (size,) = struct.unpack(">i", buf[:4])
            need = 4 + size
            continue
        return bytes(buf[4:need])


async def trio_send(stream: trio.SocketStream, request: p.Message, version: int) -> int:
    corr = next(_correlation)
    await stream.send_all(p.encode_request(request, version, corr, client_id="e2e"))
    return corr


async def trio_read_response(stream, request_class, version, correlation_id):
    payload = await trio_recv_frame(stream)
    assert payload is not None, "the broker closed the connection instead of answering"
    header, body = p.decode_response(payload, request_class.API_KEY, version)
    assert header.correlation_id == correlation_id
    return body


async def trio_roundtrip(stream: trio.SocketStream, request: p.Message, version: int):
    corr = await trio_send(stream, request, version)
    return await trio_read_response(stream, type(request), version, corr)


# -- kafka-python (the shared helpers, with this suite's settings) -----------------------------


def kafka_producer(bootstrap: str, **kw):
    """A kafka-python producer for the volume tests: acks=1 without idempotence (kafka-python
    3's default is acks='all' with idempotence; tests of that set it themselves)."""
    settings = {"acks": 1, "enable_idempotence": False, "batch_size": 256 * 1024}
    settings.update(kw)
    return kafka_helpers.kafka_producer(bootstrap, **settings)


def kafka_consumer(bootstrap: str, **kw):
    """kafka_helpers' consumer, with room for large fetches."""
    settings = {"fetch_max_bytes": 32 << 20, "max_partition_fetch_bytes": 8 << 20}
    settings.update(kw)
    return kafka_helpers.kafka_consumer(bootstrap, **settings)


async def serve_kafka(stream, answer, versions=None) -> None:
    """A stand-in Kafka server on one trio stream: ApiVersions answered here (``versions``,
    default every API), every other request handed to ``await answer(header, request)``,
    whose response goes back in order (an ``answer`` that never returns parks its request,
    and the ones behind it, like a long poll)."""
    splitter = p.FrameSplitter()
    async for data in stream:
        for payload in splitter.feed(data):
            header, request = p.decode_request(payload)
            if header.api_key == p.ApiKey.API_VERSIONS:
                response = p.api_versions_response(versions=versions)
            else:
                response = await answer(header, request)
            await stream.send_all(p.encode_response(response, header.api_version,
                                                    header.correlation_id))
