"""Kafka's record formats: RecordBatch v2, legacy message sets (magic 0/1), codecs, CRCs.

Pure: no I/O, no trio.  See ``_v2.py`` for the v2 byte layout.
"""

from trilog.records._codecs import (
    CODEC_NAMES,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    codec_for_name,
    compress,
    decompress,
)
from trilog.records._crc import CRC32C_IMPLEMENTATION, crc32, crc32c
from trilog.records._v2 import (
    CREATE_TIME,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    Header,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    build_batch,
    iter_batches,
    patch_base_offset,
)

__all__ = [
    "CODEC_NAMES",
    "CRC32C_IMPLEMENTATION",
    "CREATE_TIME",
    "GZIP",
    "HEADER_SIZE",
    "Header",
    "LOG_APPEND_TIME",
    "LOG_OVERHEAD",
    "LZ4",
    "NONE",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "SNAPPY",
    "ZSTD",
    "build_batch",
    "codec_for_name",
    "compress",
    "crc32",
    "crc32c",
    "decompress",
    "iter_batches",
    "patch_base_offset",
]
