"""The two checksums of Kafka's record formats.

* CRC-32C (Castagnoli) guards RecordBatch v2 (magic 2).
* CRC32 (IEEE, zlib's) guards legacy messages (magic 0 and 1).

crcmod is the always-present reference.  On the hot path we use the fastest implementation
installed: the ``crc32c`` package computes CRC-32C with SSE4.2/ARMv8 instructions (tens of
times faster than crcmod), and ``zlib.crc32`` beats crcmod for CRC32.  ``docs/performance.md``
records the measured figures; ``tests/records/test_crc.py`` checks every implementation
against crcmod.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import crcmod.predefined

from trilog.records._types import BytesLike

#: crcmod's CRC-32C: the reference implementation, always present.
crc32c_reference = crcmod.predefined.mkPredefinedCrcFun("crc-32c")
#: crcmod's CRC32 (IEEE 802.3, as zlib): the reference for legacy messages.
crc32_reference = crcmod.predefined.mkPredefinedCrcFun("crc-32")

#: CRC-32C of ``data`` as an unsigned 32-bit int: the fastest implementation installed.
crc32c: Callable[[BytesLike], int]
try:
    import crc32c as _crc32c_hw
except ImportError:  # pragma: no cover - depends on the environment
    crc32c = crc32c_reference
    CRC32C_IMPLEMENTATION = "crcmod"
else:
    crc32c = _crc32c_hw.crc32c
    CRC32C_IMPLEMENTATION = (
        "crc32c (hardware)" if _crc32c_hw.hardware_based else "crc32c (software)"
    )
#: True when ``crc32c`` uses the CPU's instructions (~40 us per MiB; in software ~2 ms).
CRC32C_HARDWARE = CRC32C_IMPLEMENTATION == "crc32c (hardware)"


def crc32(data: BytesLike) -> int:
    """CRC32 (IEEE) of ``data`` as an unsigned 32-bit int."""
    return zlib.crc32(data) & 0xFFFFFFFF
