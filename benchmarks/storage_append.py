"""Append throughput of ``trilog.storage.Log`` against raw ``write()`` of the same bytes.

For each batch size (1 MiB and 16 KiB v2 batches by default) the same prebuilt batches are
written (a) with ``os.write`` to a plain file and (b) with ``Log.append`` to a fresh log,
both into the page cache (no fsync: the default flush policy), alternating batch by batch
so both see the same page-cache conditions.  Absolute figures swing between runs on a VM; the
ratio from the same run is the figure to compare.

    python benchmarks/storage_append.py            # 1 GiB per workload, 3 rounds
    python benchmarks/storage_append.py --size 256M --rounds 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

from trilog.records import RecordBatchBuilder
from trilog.storage import Log, LogConfig

TARGET_RATIO_BIG = 0.80
TARGET_BATCHES_SMALL = 20_000


def parse_size(text: str) -> int:
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    text = text.strip().lower().rstrip("ib")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def build_batches(batch_bytes: int, distinct: int) -> list[bytes]:
    """``distinct`` batches of about ``batch_bytes`` each, of 1 KiB records whose bytes
    differ from batch to batch (so the data is not one page repeated)."""
    batches = []
    value_size = 1000
    for n in range(distinct):
        builder = RecordBatchBuilder(max_bytes=batch_bytes)
        i = 0
        seed = os.urandom(value_size)
        while True:
            value = (seed[i % 97 :] + seed[: i % 97])[:value_size]
            if builder.append(1_700_000_000_000 + i, f"key-{n}-{i}".encode(), value) is None:
                break
            i += 1
        batches.append(builder.build())
    return batches


def run_round(base: str, batches: list[bytes], count: int) -> tuple[float, float]:
    """Write ``count`` batches both ways, alternating batch by batch so that both see the
    same page-cache weather (its stalls are long and random); return (raw seconds, append
    seconds)."""
    raw_path = os.path.join(base, "raw.bin")
    log_dir = os.path.join(base, "bench-0")
    fd = os.open(raw_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    log = Log(log_dir, LogConfig())
    raw_time = log_time = 0.0
    k = len(batches)
    write, append, clock = os.write, log.append, time.perf_counter
    try:
        for i in range(count):
            batch = batches[i % k]
            if i & 1:  # who goes first matters too (page reclaim hits the first): alternate
                t0 = clock()
                write(fd, batch)
                t1 = clock()
                append(batch)
                t2 = clock()
                raw_time += t1 - t0
                log_time += t2 - t1
            else:
                t0 = clock()
                append(batch)
                t1 = clock()
                write(fd, batch)
                t2 = clock()
                log_time += t1 - t0
                raw_time += t2 - t1
        assert log.log_end_offset > 0
    finally:
        os.close(fd)
        log._close_handles()  # a clean close would fsync: not part of the measurement
    os.unlink(raw_path)
    shutil.rmtree(log_dir)
    return raw_time, log_time


def workload(name: str, batch_bytes: int, total: int, rounds: int, base: str) -> dict:
    batches = build_batches(batch_bytes, distinct=8 if batch_bytes >= 512 * 1024 else 64)
    size = sum(len(b) for b in batches) / len(batches)
    count = max(1, int(total // size))
    nbytes = sum(len(batches[i % len(batches)]) for i in range(count))
    run_round(base, batches, count)  # discarded: fresh page-cache pages are slow
    raw_times, log_times = [], []
    for _ in range(rounds):
        raw, appended = run_round(base, batches, count)
        raw_times.append(raw)
        log_times.append(appended)
    raw_t, log_t = statistics.median(raw_times), statistics.median(log_times)
    result = {
        "name": name,
        "batch_size": size,
        "batches": count,
        "bytes": nbytes,
        "raw_mb_s": nbytes / raw_t / 1e6,
        "log_mb_s": nbytes / log_t / 1e6,
        "raw_batches_s": count / raw_t,
        "log_batches_s": count / log_t,
        "ratio": raw_t / log_t,
        "round_ratios": [r / l for r, l in zip(raw_times, log_times)],
    }
    print(
        f"{name:>14}: {count} batches of {size / 1024:.0f} KiB ({nbytes / 2**20:.0f} MiB), "
        f"median of {rounds} rounds\n"
        f"{'':>16}Log.append  {result['log_mb_s']:9.0f} MB/s {result['log_batches_s']:10.0f} "
        f"batches/s\n"
        f"{'':>16}raw write() {result['raw_mb_s']:9.0f} MB/s {result['raw_batches_s']:10.0f} "
        f"batches/s\n"
        f"{'':>16}append/raw  {result['ratio']:9.2f}   (rounds: "
        + ", ".join(f"{r:.2f}" for r in result["round_ratios"])
        + ")",
        flush=True,
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--size", default="1G", help="bytes per workload and round, e.g. 1G, 256M (default 1G)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--only", choices=["1M", "16K"], default=None, help="run one workload only")
    args = parser.parse_args(argv)
    total = parse_size(args.size)
    base = tempfile.mkdtemp(prefix="trilog-bench-", dir=args.dir)
    ok = True
    try:
        print(f"writing into {base}; python {sys.version.split()[0]}")
        if args.only in (None, "1M"):
            big = workload("1 MiB batches", 1024 * 1024, total, args.rounds, base)
            ok &= big["ratio"] >= TARGET_RATIO_BIG
            print(
                f"{'':>16}target append/raw >= {TARGET_RATIO_BIG:.2f}: "
                f"{'met' if big['ratio'] >= TARGET_RATIO_BIG else 'MISSED'}"
            )
        if args.only in (None, "16K"):
            small = workload("16 KiB batches", 16 * 1024, total, args.rounds, base)
            ok &= small["log_batches_s"] >= TARGET_BATCHES_SMALL
            print(
                f"{'':>16}target >= {TARGET_BATCHES_SMALL} batches/s: "
                f"{'met' if small['log_batches_s'] >= TARGET_BATCHES_SMALL else 'MISSED'}"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
