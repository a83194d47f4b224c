"""Compression codecs, numbered as in the attributes of every record format.

    0 none   1 gzip   2 snappy   3 lz4   4 zstd

gzip (zlib) and lz4 are always present; snappy and zstd work when their library is
installed and raise ``UnsupportedCodecError`` naming the library otherwise.
"""

from __future__ import annotations

import gzip
import zlib

from trilog.errors import RemoteProtocolError, UnsupportedCodecError

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_BY_NAME = {name: code for code, name in CODEC_NAMES.items()}


def codec_for_name(name: str | None) -> int:
    """``None``/"none"/"gzip"/"snappy"/"lz4"/"zstd" -> codec id, with a clear error otherwise."""
    if name is None:
        return NONE
    try:
        return CODEC_BY_NAME[name.lower()]
    except KeyError:
        raise ValueError(
            f"unknown compression type {name!r}; expected one of {sorted(CODEC_BY_NAME)}"
        ) from None


def compress(codec: int, data: bytes) -> bytes:
    if codec == GZIP:
        return gzip.compress(data, compresslevel=6, mtime=0)
    if codec == LZ4:
        import lz4.frame

        return lz4.frame.compress(data)
    if codec == NONE:
        return bytes(data)
    raise UnsupportedCodecError(f"compression codec {CODEC_NAMES.get(codec, codec)} is not supported")


def decompress(codec: int, data) -> bytes:
    try:
        if codec == GZIP:
            # wbits 47: accept gzip or zlib headers, as the JVM client's readers do.
            return zlib.decompress(bytes(data), 47)
        if codec == LZ4:
            import lz4.frame

            return lz4.frame.decompress(bytes(data))
        if codec == NONE:
            return bytes(data)
    except (zlib.error, RuntimeError, EOFError, ValueError) as exc:
        raise RemoteProtocolError(f"cannot decompress {CODEC_NAMES[codec]} data: {exc}") from exc
    raise UnsupportedCodecError(f"compression codec {CODEC_NAMES.get(codec, codec)} is not supported")
