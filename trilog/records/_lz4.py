"""LZ4 as Kafka frames it: the standard LZ4 frame format, plus magic 0's broken header.

LZ4 frame header (lz4 frame format 1.6):

    offset  size  field
    0       4     magic number 0x184D2204 (little-endian: 04 22 4D 18)
    4       1     FLG   bits 7-6 version (01), 5 block independence, 4 block checksum,
                        3 content size, 2 content checksum, 0 dictionary id
    5       1     BD    bits 6-4 block max size
    6       0/8   content size (when FLG bit 3)
    ..      0/4   dictionary id (when FLG bit 0)
    ..      1     HC    (xxh32(FLG .. end of descriptor, seed 0) >> 8) & 0xFF
    ..            blocks, end mark, optional content checksum

KAFKA-3160: Kafka before 0.10 (so every magic 0 message) computed HC over the bytes from the
*magic number* up to the end of the descriptor, and its reader does not accept the content size
field.  kafka-python matches this in ``lz4_encode_old_kafka``/``lz4_decode_old_kafka``, and so
do we.  Readers fix the HC before handing the frame to the lz4 library, whatever the magic: the
header checksum guards nothing the message CRC does not already guard, and producers in the wild
got it wrong both ways.

Kafka's Java reader supports neither dependent blocks nor (before 0.10) the content size, so we
write independent 64 KiB blocks without the content size.
"""

from __future__ import annotations

import lz4.frame

from trilog.records._types import BytesLike

_MAGIC = b"\x04\x22\x4d\x18"
_FLG_CONTENT_SIZE = 0x08
_FLG_DICT_ID = 0x01

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def _round(acc: int, lane: int) -> int:
    return _rotl((acc + lane * _P2) & _M, 13) * _P1 & _M


def xxh32(data: BytesLike, seed: int = 0) -> int:
    """xxHash32 in pure Python: only ever run over an LZ4 frame descriptor (a few bytes)."""
    data = bytes(data)
    n = len(data)
    i = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M
        v2 = (seed + _P2) & _M
        v3 = seed & _M
        v4 = (seed - _P1) & _M
        while i <= n - 16:
            v1 = _round(v1, int.from_bytes(data[i : i + 4], "little"))
            v2 = _round(v2, int.from_bytes(data[i + 4 : i + 8], "little"))
            v3 = _round(v3, int.from_bytes(data[i + 8 : i + 12], "little"))
            v4 = _round(v4, int.from_bytes(data[i + 12 : i + 16], "little"))
            i += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 4 <= n:
        h = _rotl((h + int.from_bytes(data[i : i + 4], "little") * _P3) & _M, 17) * _P4 & _M
        i += 4
    while i < n:
        h = _rotl((h + data[i] * _P5) & _M, 11) * _P1 & _M
        i += 1
    h ^= h >> 15
    h = h * _P2 & _M
    h ^= h >> 13
    h = h * _P3 & _M
    h ^= h >> 16
    return h


def _descriptor_end(frame: BytesLike) -> int:
    """Index of the HC byte of ``frame``; ``ValueError`` if this is no LZ4 frame."""
    if len(frame) < 7 or bytes(frame[:4]) != _MAGIC:
        raise ValueError("not an LZ4 frame (bad magic number)")
    flg = frame[4]
    end = 6
    if flg & _FLG_CONTENT_SIZE:
        end += 8
    if flg & _FLG_DICT_ID:
        end += 4
    if len(frame) <= end:
        raise ValueError("LZ4 frame header is truncated")
    return end


def header_checksum(frame: BytesLike, *, kafka_3160: bool = False) -> int:
    """The HC byte for ``frame``'s descriptor; with ``kafka_3160`` the broken one of magic 0."""
    end = _descriptor_end(frame)
    start = 0 if kafka_3160 else 4
    return (xxh32(bytes(frame[start:end])) >> 8) & 0xFF


def compress(data: BytesLike, *, kafka_3160: bool = False) -> bytes:
    """An LZ4 frame Kafka's readers accept; ``kafka_3160`` for magic 0's broken framing."""
    frame = lz4.frame.compress(
        bytes(data),
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )
    if not kafka_3160:
        return bytes(frame)  # (lz4 is untyped; it gives bytes: no copy)
    out = bytearray(frame)
    hc_at = _descriptor_end(out)
    out[hc_at] = header_checksum(out, kafka_3160=True)
    return bytes(out)


def normalize_header(frame: BytesLike) -> bytes:
    """``frame`` with its HC recomputed correctly, so the lz4 library accepts either framing."""
    frame = bytes(frame)
    hc_at = _descriptor_end(frame)
    correct = header_checksum(frame)
    if frame[hc_at] == correct:
        return frame
    return frame[:hc_at] + bytes((correct,)) + frame[hc_at + 1 :]


def decompress(data: BytesLike, max_size: int) -> bytes:
    """Decode one LZ4 frame; ``ValueError`` if corrupt, truncated or larger than ``max_size``.

    Bytes after the end of the frame are ignored, as Kafka's Java reader ignores them.
    """
    frame = normalize_header(data)
    decompressor = lz4.frame.LZ4FrameDecompressor()
    out = decompressor.decompress(frame, max_length=max_size + 1)
    if len(out) > max_size:
        raise OverflowError(f"decompressed size exceeds the {max_size}-byte limit")
    if not decompressor.eof:
        raise ValueError("LZ4 frame is truncated")
    return bytes(out)  # (lz4 is untyped; it gives bytes: no copy)
