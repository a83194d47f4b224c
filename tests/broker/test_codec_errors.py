"""Every codec on a plain install, and codec or conversion errors as per-partition codes.

An old client's snappy message set is stored; a batch whose compressed payload is damaged
(its CRC still right: the broker stores v2 batches as received) or names no known codec gets
``CORRUPT_MESSAGE`` / ``UNSUPPORTED_COMPRESSION_TYPE`` for its partition when an old Fetch
version needs it down-converted, and the connection goes on serving.
"""

from __future__ import annotations

import struct
from importlib.metadata import requires

from broker_helpers import (
    create_topics_request,
    fetch_request,
    list_offsets_request,
    only_partition,
    produce_request,
    records_of,
    trio_connect,
    trio_roundtrip,
)

from trilog import protocol as p
from trilog.broker import open_broker
from trilog.records import SNAPPY, ZSTD, build_batch, build_message_set, crc32, crc32c

CORRUPT_MESSAGE = 2
UNSUPPORTED_COMPRESSION_TYPE = 76
_V2_CRC_START = 21


def test_a_plain_install_brings_every_codec_and_hardware_crc():
    plain = [r for r in requires("trilog") if "extra ==" not in r]
    names = {r.split(">")[0].split("=")[0].split("<")[0].strip() for r in plain}
    assert {"cramjam", "crc32c"} <= names, plain


def damaged_v2(codec: int) -> bytes:
    """A v2 batch compressed with ``codec`` whose payload does not decompress, CRC right."""
    data = bytearray(build_batch([(1000, b"k", b"value %d" % i) for i in range(50)],
                                 compression_type=codec))
    for i in range(61, len(data)):
        data[i] ^= 0x5A
    struct.pack_into(">I", data, 17, crc32c(bytes(data[_V2_CRC_START:])))
    return bytes(data)


def v2_with_codec_id(codec_id: int) -> bytes:
    data = bytearray(build_batch([(1000, None, b"x")]))
    (attributes,) = struct.unpack_from(">h", data, _V2_CRC_START)
    struct.pack_into(">h", data, _V2_CRC_START, (attributes & ~0x07) | codec_id)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[_V2_CRC_START:])))
    return bytes(data)


def damaged_legacy_snappy() -> bytes:
    """A magic 1 snappy wrapper (what sarama < 0.11 sends) whose value is not snappy."""
    data = bytearray(build_message_set([(1000, None, b"v%d" % i) for i in range(20)], magic=1,
                                       compression_type=SNAPPY))
    for i in range(38, len(data)):
        data[i] ^= 0x5A
    struct.pack_into(">I", data, 12, crc32(bytes(data[16:])))
    return bytes(data)


async def _produce(stream, topic: str, records: bytes, version: int = 3) -> int:
    response = await trio_roundtrip(stream, produce_request(topic, 0, records), version)
    return only_partition(response).error_code


async def _fetch(stream, topic: str, version: int):
    return only_partition(await trio_roundtrip(stream, fetch_request(topic, 0, 0), version))


async def test_old_clients_snappy_is_stored_and_served(tmp_path):
    async with open_broker({"port": 0, "log.dirs": str(tmp_path / "data")}) as broker:
        stream = await trio_connect(broker.port)
        for codec, topic in ((SNAPPY, "snappy"), (ZSTD, "zstd")):
            await trio_roundtrip(stream, create_topics_request({topic: 1}), 2)
            if codec == SNAPPY:  # magic 1: Produce v2, as an old client sends it
                legacy = build_message_set([(1000, None, b"old %d" % i) for i in range(5)],
                                           magic=1, compression_type=SNAPPY)
                assert await _produce(stream, topic, legacy, version=2) == 0
            else:
                batch = build_batch([(1000, None, b"old %d" % i) for i in range(5)],
                                    compression_type=ZSTD)
                assert await _produce(stream, topic, batch) == 0
            for version in (0, 2, 4):  # down-converted for v0-v3
                part = await _fetch(stream, topic, version)
                assert part.error_code == 0
                assert [r.value for r in records_of(part.records)] == [
                    b"old %d" % i for i in range(5)]
        await stream.aclose()


async def test_codec_errors_are_partition_errors_and_the_connection_goes_on(tmp_path):
    async with open_broker({"port": 0, "log.dirs": str(tmp_path / "data")}) as broker:
        stream = await trio_connect(broker.port)
        topics = {"damaged": damaged_v2(SNAPPY), "zstd-damaged": damaged_v2(ZSTD),
                  "codec-7": v2_with_codec_id(7)}
        await trio_roundtrip(stream, create_topics_request({**dict.fromkeys(topics, 1),
                                                            "legacy": 1}), 2)
        # An old client's damaged wrapper: refused for its partition, as Kafka does.
        assert await _produce(stream, "legacy", damaged_legacy_snappy(), version=2) in (
            CORRUPT_MESSAGE, UNSUPPORTED_COMPRESSION_TYPE)
        for topic, records in topics.items():
            code = await _produce(stream, topic, records)
            if code:  # refused at the door is fine too
                assert code in (CORRUPT_MESSAGE, UNSUPPORTED_COMPRESSION_TYPE), topic
                continue
            # Stored as received: a v2 fetch gets the bytes, an old one the error.
            assert (await _fetch(stream, topic, 4)).error_code == 0
            for version in (0, 3):
                part = await _fetch(stream, topic, version)
                assert part.error_code in (CORRUPT_MESSAGE, UNSUPPORTED_COMPRESSION_TYPE), (
                    topic, version, part)
            # A timestamp lookup that must decode the batch answers too.
            response = await trio_roundtrip(stream, list_offsets_request(topic, 0, 500), 1)
            assert only_partition(response).error_code in (
                0, CORRUPT_MESSAGE, UNSUPPORTED_COMPRESSION_TYPE)
        # Still the same connection, still serving.
        assert (await trio_roundtrip(stream, p.ApiVersionsRequest(), 0)).error_code == 0
        await stream.aclose()
