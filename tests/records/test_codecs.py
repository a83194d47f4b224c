import gzip
import os
import zlib

import lz4.frame
import pytest
from hypothesis import given
from hypothesis import strategies as st
from records_helpers import CODECS, RECORDS_SETTINGS

from trilog.errors import CorruptMessageError, RemoteProtocolError, UnsupportedCodecError
from trilog.records import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    CorruptRecordsError,
    _lz4,
    _snappy,
    codec_for_name,
    compress,
    decompress,
    is_available,
)


@RECORDS_SETTINGS
@given(st.binary(max_size=100_000), st.sampled_from(CODECS), st.sampled_from([0, 1, 2]))
def test_round_trip(data, codec, magic):
    assert decompress(codec, compress(codec, data, magic=magic), magic=magic) == data


def test_codec_names():
    assert codec_for_name(None) == NONE
    assert codec_for_name("LZ4") == LZ4
    with pytest.raises(ValueError, match="brotli"):
        codec_for_name("brotli")


@pytest.mark.parametrize("codec", [SNAPPY, ZSTD])
def test_missing_library_is_named(codec, monkeypatch):
    from trilog.records import _codecs

    monkeypatch.setattr(_snappy, "BACKEND", None)
    monkeypatch.setattr(_codecs, "_zstandard", None)
    monkeypatch.setattr(_codecs, "_cramjam", None)
    assert not is_available(codec)
    library = {SNAPPY: "python-snappy", ZSTD: "zstandard"}[codec]
    for call in (compress, decompress):
        with pytest.raises(UnsupportedCodecError) as caught:
            call(codec, b"data")
        assert "cramjam" in str(caught.value) and library in str(caught.value)
        assert "pip install --force-reinstall cramjam" in str(caught.value)


def test_unknown_codec_id():
    with pytest.raises(UnsupportedCodecError):
        compress(6, b"data")
    with pytest.raises(CorruptRecordsError):  # bits 0-2 of attributes hold 6: bad bytes
        decompress(6, b"data")


@pytest.mark.parametrize("codec", CODECS[1:])
@pytest.mark.parametrize(
    "payload",
    [b"", b"garbage", b"\x04\x22\x4d\x18garbage", b"\x1f\x8b\x08\x00" + b"\x00" * 20],
)
def test_garbage_raises_corrupt(codec, payload):
    with pytest.raises(CorruptRecordsError) as info:
        decompress(codec, payload)
    assert isinstance(info.value, CorruptMessageError)
    assert isinstance(info.value, RemoteProtocolError)


@RECORDS_SETTINGS
@given(st.binary(min_size=1, max_size=2000), st.sampled_from(CODECS[1:]), st.data())
def test_mangled_payload_never_crashes(data, codec, draw):
    payload = bytearray(compress(codec, data))
    i = draw.draw(st.integers(0, len(payload) - 1))
    payload[i] ^= draw.draw(st.integers(1, 255))
    cut = draw.draw(st.integers(0, len(payload)))
    try:
        decompress(codec, bytes(payload[:cut]))
    except CorruptRecordsError:
        pass


@pytest.mark.parametrize("codec", CODECS[1:])
def test_truncated_payload_is_corrupt(codec):
    payload = compress(codec, os.urandom(5000))
    with pytest.raises(CorruptRecordsError):
        decompress(codec, payload[:-10])


@pytest.mark.parametrize("codec", CODECS[1:])
def test_decompression_bomb_is_capped(codec):
    bomb = compress(codec, bytes(10 * 1024 * 1024))
    assert len(bomb) < 1_000_000  # snappy tops out near 21:1
    with pytest.raises(CorruptRecordsError, match="cap"):
        decompress(codec, bomb, max_size=1024 * 1024)
    assert len(decompress(codec, bomb, max_size=10 * 1024 * 1024)) == 10 * 1024 * 1024


def test_gzip_reads_concatenated_members_and_zlib():
    data = gzip.compress(b"abc") + gzip.compress(b"def")
    assert decompress(GZIP, data) == b"abcdef"
    assert decompress(GZIP, zlib.compress(b"xyz")) == b"xyz"
    with pytest.raises(CorruptRecordsError):
        decompress(GZIP, data, max_size=5)


def test_lz4_frames_are_java_compatible():
    frame = compress(LZ4, os.urandom(200_000))
    flg = frame[4]
    assert flg & 0x20, "independent blocks"
    assert not flg & 0x08, "no content size"
    assert frame[_lz4._descriptor_end(frame)] == _lz4.header_checksum(frame)


def test_lz4_magic0_uses_kafka_3160_header_checksum():
    data = b"hello kafka 0.8" * 100
    broken = compress(LZ4, data, magic=0)
    hc_at = _lz4._descriptor_end(broken)
    assert broken[hc_at] == _lz4.header_checksum(broken, kafka_3160=True)
    assert broken[hc_at] != _lz4.header_checksum(broken)
    with pytest.raises(RuntimeError):  # the lz4 library alone rejects it...
        lz4.frame.decompress(broken)
    assert decompress(LZ4, broken, magic=0) == data  # ...we fix the header first
    assert decompress(LZ4, broken, magic=1) == data


@RECORDS_SETTINGS
@given(st.binary(max_size=64))
def test_xxh32_matches_lz4_content_checksum(data):
    frame = lz4.frame.compress(data, content_checksum=True)
    assert int.from_bytes(frame[-4:], "little") == _lz4.xxh32(data)


def test_xxh32_known_vectors():
    assert _lz4.xxh32(b"") == 0x02CC5D05
    assert _lz4.xxh32(b"a") == 0x550D7456
    assert _lz4.xxh32(b"abc") == 0x32D153FF


# -- snappy framing, exercised with a toy raw-snappy backend (literals only) ------------------


def _toy_compress_raw(data: bytes) -> bytes:
    out = bytearray()
    n = len(data)
    while True:  # uncompressed length preamble
        if n < 0x80:
            out.append(n)
            break
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    for i in range(0, len(data), 60):
        chunk = data[i : i + 60]
        out.append((len(chunk) - 1) << 2)  # literal tag, length in the tag
        out += chunk
    return bytes(out)


def _toy_decompress_raw(block: bytes) -> bytes:
    pos = 0
    while block[pos] & 0x80:
        pos += 1
    pos += 1
    out = bytearray()
    while pos < len(block):
        tag = block[pos]
        if tag & 3:
            raise ValueError("toy backend reads literals only")
        n = (tag >> 2) + 1
        out += block[pos + 1 : pos + 1 + n]
        pos += 1 + n
    return bytes(out)


@pytest.fixture
def toy_snappy(monkeypatch):
    monkeypatch.setattr(_snappy, "BACKEND", "toy")
    monkeypatch.setattr(_snappy, "_compress_raw", _toy_compress_raw)
    monkeypatch.setattr(_snappy, "_decompress_raw", _toy_decompress_raw)


def test_snappy_xerial_framing(toy_snappy):
    data = os.urandom(100_000)
    framed = compress(SNAPPY, data)
    assert framed.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    assert decompress(SNAPPY, framed) == data
    assert decompress(SNAPPY, _toy_compress_raw(data)) == data  # raw snappy too
    with pytest.raises(CorruptRecordsError, match="cap"):
        decompress(SNAPPY, framed, max_size=50_000)
    with pytest.raises(CorruptRecordsError):
        decompress(SNAPPY, framed[:-7])


def test_snappy_xerial_matches_kafka_python(toy_snappy, monkeypatch):
    import kafka.codec

    class ToySnappy:
        compress = staticmethod(_toy_compress_raw)
        decompress = staticmethod(_toy_decompress_raw)

    monkeypatch.setattr(kafka.codec, "snappy", ToySnappy)
    data = os.urandom(70_000)
    assert compress(SNAPPY, data) == kafka.codec.snappy_encode(data)
    assert kafka.codec.snappy_decode(compress(SNAPPY, data)) == data
