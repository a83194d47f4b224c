"""CRC throughput: crcmod (the reference) against the fast implementations trilog uses.

    CRC-32C (RecordBatch v2):   crcmod  vs  the ``crc32c`` package (SSE4.2 / ARMv8 CRC)
    CRC32   (magic 0/1):        crcmod  vs  ``zlib.crc32``

over 1 MiB and 16 KiB buffers (a big fetch and a typical produce batch).  Prints MB/s
(10^6 bytes per second, best of several runs) and the speed-up over crcmod.

    .venv/bin/python benchmarks/crc.py [--seconds 0.5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import zlib

import crcmod.predefined

try:
    import crc32c as crc32c_package
except ImportError:  # pragma: no cover
    crc32c_package = None


def _throughput(fn, data: bytes, seconds: float) -> float:
    """Best MB/s of five timing rounds of about ``seconds / 5`` each."""
    fn(data)  # warm up
    n = 1
    while True:  # calibrate: how many calls fill a round
        t0 = time.perf_counter()
        for _ in range(n):
            fn(data)
        elapsed = time.perf_counter() - t0
        if elapsed > seconds / 20:
            break
        n *= 2
    per_round = max(1, int(n * (seconds / 5) / elapsed))
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(per_round):
            fn(data)
        best = min(best, (time.perf_counter() - t0) / per_round)
    return len(data) / best / 1e6


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="time per measurement")
    args = parser.parse_args(argv)

    crcmod_crc32c = crcmod.predefined.mkPredefinedCrcFun("crc-32c")
    crcmod_crc32 = crcmod.predefined.mkPredefinedCrcFun("crc-32")
    using_ext = getattr(sys.modules["crcmod.crcmod"], "_usingExtension", False)
    c_ext = "C extension" if using_ext else "pure Python"
    pairs = [("CRC-32C", f"crcmod ({c_ext})", crcmod_crc32c)]
    if crc32c_package is not None:
        kind = "hardware" if crc32c_package.hardware_based else "software"
        pairs.append(("CRC-32C", f"crc32c package ({kind})", crc32c_package.crc32c))
    pairs.append(("CRC32", f"crcmod ({c_ext})", crcmod_crc32))
    pairs.append(("CRC32", "zlib.crc32", zlib.crc32))

    print(f"{'checksum':8} {'implementation':28} {'buffer':>7} {'MB/s':>10} {'vs crcmod':>10}")
    for size, label in [(1 << 20, "1 MiB"), (16 << 10, "16 KiB")]:
        data = os.urandom(size)
        reference: dict[str, float] = {}
        for checksum, name, fn in pairs:
            mbps = _throughput(fn, data, args.seconds)
            base = reference.setdefault(checksum, mbps)
            print(f"{checksum:8} {name:28} {label:>7} {mbps:10,.0f} {mbps / base:9.1f}x")


if __name__ == "__main__":
    main()
