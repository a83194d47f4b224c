"""Snappy as Kafka's Java client frames it (xerial snappy-java's block stream), and raw snappy.

xerial framing:

    offset  size  field
    0       8     magic  0x82 'S' 'N' 'A' 'P' 'P' 'Y' 0x00
    8       4     version  int32 (1)
    12      4     compatible version  int32 (1)
    16      ...   blocks: length int32 | raw snappy bytes (of at most 32 KiB of input each)

Raw snappy starts with the uncompressed length as an unsigned little-endian base-128 varint,
which we read to enforce the decompressed-size cap *before* the library allocates.

We write the xerial framing (what the JVM clients expect) and read both, as the JVM reader does.
The version fields are not checked: some producers (redpanda) write them little-endian.

Backends: ``python-snappy`` (``import snappy``) or ``cramjam``; without either the codec raises
``UnsupportedCodecError`` from ``_codecs``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from trilog.records._native import optional_import
from trilog.records._types import BytesLike

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
_BLOCK_LENGTH = struct.Struct(">i")

_python_snappy = optional_import("snappy")
_cramjam = optional_import("cramjam")

#: The library the codec uses: "python-snappy", "cramjam", or ``None`` (snappy unavailable).
BACKEND: str | None
_backend_compress: Callable[[bytes], Any]
_backend_decompress: Callable[[bytes], Any]


def _no_backend(data: bytes) -> bytes:
    raise AssertionError("no snappy backend")


if _python_snappy is not None:  # pragma: no cover - not installed in CI
    BACKEND = "python-snappy"
    _backend_compress, _backend_decompress = _python_snappy.compress, _python_snappy.decompress
elif _cramjam is not None:
    BACKEND = "cramjam"
    _backend_compress = _cramjam.snappy.compress_raw
    _backend_decompress = _cramjam.snappy.decompress_raw
else:  # pragma: no cover - cramjam is a dependency
    BACKEND = None
    _backend_compress = _backend_decompress = _no_backend


def _compress_raw(data: bytes) -> bytes:
    return bytes(_backend_compress(data))  # cramjam gives a Buffer


def _decompress_raw(data: bytes) -> bytes:
    return bytes(_backend_decompress(data))


def raw_uncompressed_length(block: BytesLike) -> int:
    """The length a raw snappy block declares in its varint preamble."""
    result = 0
    for i in range(5):
        if i >= len(block):
            raise ValueError("snappy block ends inside its length preamble")
        b = block[i]
        result |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            return result
    raise ValueError("snappy length preamble longer than 5 bytes")


def is_xerial(data: BytesLike) -> bool:
    return len(data) >= 16 and bytes(data[:8]) == XERIAL_MAGIC


def compress(data: BytesLike) -> bytes:
    """Xerial-framed snappy, in 32 KiB blocks like snappy-java's ``SnappyOutputStream``."""
    data = memoryview(data).cast("B")
    parts = [XERIAL_HEADER]
    # At least one block, empty input included: readers (kafka-python's among them) take a
    # bare 16-byte header for raw snappy.
    for start in range(0, max(len(data), 1), XERIAL_BLOCK_SIZE):
        block = _compress_raw(bytes(data[start : start + XERIAL_BLOCK_SIZE]))
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def decompress(data: BytesLike, max_size: int) -> bytes:
    """Xerial-framed or raw snappy; ``ValueError``/``OverflowError`` on corrupt or oversize."""
    data = bytes(data)
    if not is_xerial(data):
        return _decompress_block(data, max_size)
    out = []
    total = 0
    pos = 16
    end = len(data)
    while pos < end:
        if end - pos < 4:
            raise ValueError("xerial snappy stream ends inside a block length")
        (length,) = _BLOCK_LENGTH.unpack_from(data, pos)
        pos += 4
        if length < 0 or pos + length > end:
            raise ValueError(f"xerial snappy block length {length} runs past the payload")
        block = _decompress_block(data[pos : pos + length], max_size - total)
        total += len(block)
        out.append(block)
        pos += length
    return b"".join(out)


def _decompress_block(block: bytes, max_size: int) -> bytes:
    declared = raw_uncompressed_length(block)
    if declared > max_size:
        raise OverflowError(f"decompressed size exceeds the limit ({declared} > {max_size})")
    out = _decompress_raw(block)
    if len(out) != declared:
        raise ValueError("snappy block decoded to a different length than it declares")
    return out
