"""Zig-zag varints (protobuf style), as RecordBatch v2 records use them.

Encoding is on the producer's per-record hot path, so small values come from a table.
"""

from __future__ import annotations

from trilog.errors import RemoteProtocolError
from trilog.records._types import BytesLike

_MAX_VARLONG_BYTES = 10


def _encode_unsigned(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


_TABLE_LIMIT = 1 << 13  # values in [-8192, 8192) encode from the table (one or two bytes)
_TABLE = [_encode_unsigned((v << 1) ^ (v >> 63)) for v in range(-_TABLE_LIMIT, _TABLE_LIMIT)]


def encode_varint(value: int) -> bytes:
    """Zig-zag encode a signed int (varint or varlong: the encoding is the same)."""
    if -_TABLE_LIMIT <= value < _TABLE_LIMIT:
        return _TABLE[value + _TABLE_LIMIT]
    return _encode_unsigned((value << 1) ^ (value >> 63))


def decode_varint(buf: BytesLike, pos: int) -> tuple[int, int]:
    """Decode a zig-zag varint at ``buf[pos]``; return ``(value, next_pos)``.

    Raises ``RemoteProtocolError`` when the buffer ends inside the varint or the varint does
    not fit in 64 bits (a varlong's limit).
    """
    b = buf[pos] if pos < len(buf) else -1
    if 0 <= b < 0x80:  # the common one-byte case
        return (b >> 1) ^ -(b & 1), pos + 1
    result = 0
    shift = 0
    end = len(buf)
    start = pos
    while True:
        if pos >= end:
            raise RemoteProtocolError("buffer ends inside a varint")
        if pos - start >= _MAX_VARLONG_BYTES:
            raise RemoteProtocolError("varint longer than 10 bytes")
        b = buf[pos]
        if pos - start == _MAX_VARLONG_BYTES - 1 and b > 1:
            raise RemoteProtocolError("varint does not fit in 64 bits")
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def size_of_varint(value: int) -> int:
    """Bytes the zig-zag encoding of ``value`` takes."""
    v = (value << 1) ^ (value >> 63)
    n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n
