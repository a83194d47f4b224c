"""Kafka's record formats: RecordBatch v2, legacy message sets (magic 0/1), codecs, CRCs.

Pure: no I/O, no trio.  Each format module starts with its byte layout:

* ``_v2.py``      RecordBatch v2 (what trilog stores), ``RecordBatchBuilder``, and the one
                  source of the v2 header layout: ``BatchHeader``, ``read_batch_header``,
                  ``check_batch_header`` (the one rule a header must pass; its twin
                  ``check_batch_header_fields`` gives a plain tuple), ``batch_crc``
* ``_legacy.py``  message sets of magic 0 and 1, wrappers, ``LegacyMessageSetBuilder``
* ``_control.py`` control records: ``ControlRecordType``, ``EndTxnMarker`` (a transaction's
                  COMMIT or ABORT); ``_v2`` builds their batches (``build_end_txn_marker``) and
                  reads them from a header and a few bytes (``read_end_txn_marker``,
                  ``control_record_type``)
* ``_memory.py``  ``MemoryRecords``: walk a buffer of any magic without decoding records
* ``_convert.py`` up-conversion (legacy -> v2) and down-conversion (v2 -> legacy)
* ``_codecs.py``  none / gzip / snappy / lz4 / zstd, with a decompressed-size cap
* ``_crc.py``     CRC32 and CRC-32C (crcmod the reference, hardware when installed)

Every decoding failure raises ``CorruptRecordsError``, which is both a
``trilog.errors.CorruptMessageError`` and a ``trilog.errors.RemoteProtocolError``.
"""

from trilog.records._codecs import (
    CODEC_NAMES,
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    available_codecs,
    codec_for_name,
    compress,
    decompress,
    is_available,
)
from trilog.records._control import ControlRecordType, EndTxnMarker
from trilog.records._convert import legacy_to_v2, v2_to_legacy
from trilog.records._crc import (
    CRC32C_HARDWARE,
    CRC32C_IMPLEMENTATION,
    crc32,
    crc32_reference,
    crc32c,
    crc32c_reference,
)
from trilog.records._errors import CorruptRecordsError
from trilog.records._legacy import (
    NO_TIMESTAMP_TYPE,
    LegacyMessageSetBuilder,
    LegacyRecordBatch,
    build_message_set,
    iter_legacy_batches,
)
from trilog.records._memory import MemoryRecords
from trilog.records._v2 import (
    BATCH_PREFIX,
    CONTROL_MASK,
    CREATE_TIME,
    MAGIC_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    MIN_BATCH_LENGTH,
    TRANSACTIONAL_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    BatchHeader,
    Header,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    batch_crc,
    build_batch,
    build_end_txn_marker,
    check_batch_header,
    check_batch_header_fields,
    control_record_type,
    iter_batches,
    patch_base_offset,
    read_batch_header,
    read_end_txn_marker,
    rebuild_batch,
    stamp_log_append_time,
    whole_batches_length,
)

__all__ = [
    "BATCH_PREFIX",
    "MAGIC_OFFSET",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "whole_batches_length",
    "CODEC_NAMES",
    "CONTROL_MASK",
    "CRC32C_HARDWARE",
    "CRC32C_IMPLEMENTATION",
    "CREATE_TIME",
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "GZIP",
    "HEADER",
    "HEADER_SIZE",
    "LOG_APPEND_TIME",
    "LOG_OVERHEAD",
    "LZ4",
    "MIN_BATCH_LENGTH",
    "NONE",
    "NO_TIMESTAMP",
    "NO_TIMESTAMP_TYPE",
    "SNAPPY",
    "TRANSACTIONAL_MASK",
    "ZSTD",
    "BatchHeader",
    "ControlRecordType",
    "CorruptRecordsError",
    "EndTxnMarker",
    "Header",
    "LegacyMessageSetBuilder",
    "LegacyRecordBatch",
    "MemoryRecords",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "available_codecs",
    "batch_crc",
    "build_batch",
    "build_end_txn_marker",
    "build_message_set",
    "check_batch_header",
    "check_batch_header_fields",
    "codec_for_name",
    "compress",
    "control_record_type",
    "crc32",
    "crc32_reference",
    "crc32c",
    "crc32c_reference",
    "decompress",
    "is_available",
    "iter_batches",
    "iter_legacy_batches",
    "legacy_to_v2",
    "patch_base_offset",
    "read_batch_header",
    "read_end_txn_marker",
    "rebuild_batch",
    "stamp_log_append_time",
    "v2_to_legacy",
]
