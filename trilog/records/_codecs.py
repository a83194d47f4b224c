"""Compression codecs, numbered as in the attributes of every record format.

    0 none   1 gzip   2 snappy   3 lz4   4 zstd

gzip (zlib) and lz4 are always present, and so are snappy and zstd through ``cramjam``, a
dependency of trilog (``python-snappy`` and ``zstandard`` are used too when they are there).
Should none be importable, they raise ``UnsupportedCodecError`` naming the libraries.

Framing follows the Java client: gzip streams (any number of members), LZ4 frames with
independent blocks (``_lz4``; magic 0 uses the broken KAFKA-3160 header checksum), snappy in
xerial-java's block framing (``_snappy``), zstd frames.

Decompression bombs: every decompression stops at ``max_size`` bytes of output
(``DEFAULT_MAX_DECOMPRESSED_SIZE``, 64 MiB, unless the caller passes another cap) and
raises ``CorruptRecordsError``.  64 MiB is 64 times Kafka's default ``message.max.bytes``
(1 MiB): real batches compress two to ten times, so only hostile or broken input hits it,
while one batch can never make the process allocate more than that.  A broker that raises
``message.max.bytes`` should pass a proportionally larger cap.

Every failure inside a library (corrupt or truncated payload, oversize output) surfaces as
``CorruptRecordsError``, which is both a ``CorruptMessageError`` and a ``RemoteProtocolError``.
"""

from __future__ import annotations

import zlib

from trilog.errors import UnsupportedCodecError
from trilog.records import _lz4, _snappy
from trilog.records._errors import CorruptRecordsError
from trilog.records._native import optional_import
from trilog.records._types import BytesLike

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_BY_NAME = {name: code for code, name in CODEC_NAMES.items()}

#: Default cap on the output of one decompression (see the module docstring).
DEFAULT_MAX_DECOMPRESSED_SIZE = 64 * 1024 * 1024

#: gzip level: the JVM's ``Deflater.DEFAULT_COMPRESSION`` (6), which Kafka's producer uses.
GZIP_LEVEL = 6
#: zstd level: Kafka's default (3).
ZSTD_LEVEL = 3

_zstandard = optional_import("zstandard")
_cramjam = optional_import("cramjam")

_MISSING = {
    SNAPPY: "snappy compression needs the cramjam or python-snappy library "
    "(cramjam is a dependency of trilog: pip install --force-reinstall cramjam)",
    ZSTD: "zstd compression needs the cramjam or zstandard library "
    "(cramjam is a dependency of trilog: pip install --force-reinstall cramjam)",
}


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


def is_available(codec: int) -> bool:
    """Whether this process can compress and decompress with ``codec``."""
    if codec in (NONE, GZIP, LZ4):
        return True
    if codec == SNAPPY:
        return _snappy.BACKEND is not None
    if codec == ZSTD:
        return _zstandard is not None or _cramjam is not None
    return False


def available_codecs() -> tuple[int, ...]:
    """The codec ids usable here, ascending."""
    return tuple(c for c in CODEC_NAMES if is_available(c))


def _check_available(codec: int) -> None:
    if codec not in CODEC_NAMES:
        raise UnsupportedCodecError(f"unknown compression codec id {codec}")
    if not is_available(codec):
        raise UnsupportedCodecError(_MISSING[codec])


def compress(codec: int, data: BytesLike, *, magic: int = 2) -> bytes:
    """``data`` compressed as Kafka's Java producer would for a batch of ``magic``."""
    if codec == NONE:
        return bytes(data)
    if codec == GZIP:
        # wbits 31: a gzip member with mtime 0, as ``gzip.compress(..., mtime=0)`` writes.
        co = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
        return co.compress(data) + co.flush()
    if codec == LZ4:
        return _lz4.compress(data, kafka_3160=magic == 0)
    _check_available(codec)
    if codec == SNAPPY:
        return _snappy.compress(data)
    if _zstandard is not None:  # codec == ZSTD
        return bytes(_zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(bytes(data)))
    assert _cramjam is not None  # _check_available
    return bytes(_cramjam.zstd.compress(bytes(data), ZSTD_LEVEL))  # pragma: no cover


def decompress(
    codec: int, data: BytesLike, *, magic: int = 2, max_size: int | None = None
) -> bytes:
    """Inverse of ``compress`` for any of the framings Kafka producers write.

    Raises ``CorruptRecordsError`` when ``data`` does not decode, its output would exceed
    ``max_size`` (default ``DEFAULT_MAX_DECOMPRESSED_SIZE``) or ``codec`` is no codec id;
    ``UnsupportedCodecError`` when the codec's library is missing.  ``magic`` is accepted
    for symmetry with ``compress``: readers accept either LZ4 header checksum (see ``_lz4``).
    """
    if codec == NONE:
        return bytes(data)
    if codec not in CODEC_NAMES:  # attributes bits 0-2 hold 5, 6 or 7: the bytes are bad
        raise CorruptRecordsError(f"unknown compression codec id {codec}")
    _check_available(codec)
    if max_size is None:
        max_size = DEFAULT_MAX_DECOMPRESSED_SIZE
    try:
        if codec == GZIP:
            return _gunzip(data, max_size)
        if codec == LZ4:
            return _lz4.decompress(data, max_size)
        if codec == SNAPPY:
            return _snappy.decompress(data, max_size)
        return _unzstd(data, max_size)
    except OverflowError as exc:
        raise CorruptRecordsError(
            f"{CODEC_NAMES[codec]} payload decompresses to more than {max_size} bytes "
            "(the decompressed-size cap; raise max_decompressed_size if this is legitimate)"
        ) from exc
    except CorruptRecordsError:
        raise
    except Exception as exc:
        raise CorruptRecordsError(
            f"cannot decompress {CODEC_NAMES[codec]} payload: {type(exc).__name__}: {exc}"
        ) from exc


def _gunzip(data: BytesLike, max_size: int) -> bytes:
    """gzip (or zlib) streams, concatenated members included, stopping at ``max_size``."""
    out = []
    total = 0
    data = bytes(data)
    while True:
        # wbits 47: a gzip or zlib header, as the JVM readers accept.
        d = zlib.decompressobj(47)
        chunk = d.decompress(data, max_size - total + 1)
        total += len(chunk)
        if total > max_size:
            raise OverflowError
        out.append(chunk)
        if not d.eof:
            raise ValueError("gzip stream is truncated")
        data = d.unused_data
        if not data.strip(b"\x00"):  # trailing padding is tolerated, as GZIPInputStream does
            return b"".join(out)


def _unzstd(data: BytesLike, max_size: int) -> bytes:  # pragma: no cover - zstandard not in CI
    if _zstandard is not None:
        # zstandard's decompressobj has no output cap and its stream_reader does not report a
        # truncated frame, so feed the decompressobj 1 KiB of input at a time and check the
        # total as we go: the overshoot is bounded by zstd's maximum ratio (~32768:1).
        view = memoryview(bytes(data))
        out = []
        total = 0
        pos = 0
        d = _zstandard.ZstdDecompressor().decompressobj()
        while pos < len(view):
            step = view[pos : pos + 1024]
            chunk = d.decompress(step)
            pos += len(step)
            total += len(chunk)
            if total > max_size:
                raise OverflowError
            out.append(chunk)
            if d.eof:  # the frame ended: more frames may follow, each with its own object
                rest = d.unused_data
                pos -= len(rest)
                d = _zstandard.ZstdDecompressor().decompressobj()
                if not bytes(view[pos:]).strip(b"\x00"):
                    return b"".join(out)
        if not d.eof:
            raise ValueError("zstd frame is truncated")
        return b"".join(out)
    # cramjam has no output cap: check after the fact (the allocation has happened).
    assert _cramjam is not None  # _check_available
    result = bytes(_cramjam.zstd.decompress(bytes(data)))
    if len(result) > max_size:
        raise OverflowError
    return result
