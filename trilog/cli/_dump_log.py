"""``trilog dump-log``: print what a segment file holds (like Kafka's ``DumpLogSegments``).

A ``.log`` file is walked batch by batch with positioned reads (memory stays at one batch):
each v2 header is checked with ``check_batch_header`` and its CRC-32C recomputed with
``batch_crc``; the records are decoded only for ``--deep-iteration``/``--print-data``.  A
header that fails its check, or a batch longer than what is left of the file, ends the walk:
the rest is reported as invalid bytes at the end (a torn write or corruption), as recovery
would truncate it.  ``.index`` and ``.timeindex`` files are loaded with storage's
``OffsetIndex`` and ``TimeIndex``; one they refuse is still listed entry by entry.

Files are opened read-only and the broker is never asked anything: dumping the files of a
running broker is safe.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import trio

from trilog.cli._common import run_tool
from trilog.records import (
    BATCH_PREFIX,
    CODEC_NAMES,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptRecordsError,
    RecordBatch,
    batch_crc,
    check_batch_header,
)
from trilog.storage import OffsetIndex, TimeIndex
from trilog.storage._index import IndexCorruptError

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "dump-log",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Print what segment files hold, like Kafka's DumpLogSegments. For a .log file,\n"
            "one line per record batch: baseOffset, lastOffset, count, position, size,\n"
            "CreateTime (or LogAppendTime: the batch's largest timestamp), magic,\n"
            "compresscodec, crc and isvalid (whether the CRC-32C matches). A batch that\n"
            "cannot be read (a bad header, a torn write) ends the dump with `Found N invalid\n"
            "bytes at the end`. For .index and .timeindex files, their entries.\n\n"
            "Files are only read (never written), and no broker is contacted: it is safe on\n"
            "a running broker's files. Exit status 1 if anything was invalid or unreadable."
        ),
        epilog=(
            "examples:\n"
            "  trilog dump-log data/orders-0/00000000000000000000.log\n"
            "  trilog dump-log --print-data data/orders-0/00000000000000000000.log\n"
            "  trilog dump-log data/orders-0/00000000000000000000.index"
        ),
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="segment files to dump")
    p.add_argument("--deep-iteration", action="store_true",
                   help="also one line per record (offset, timestamp, sizes, header keys)")
    p.add_argument("--print-data", action="store_true",
                   help="also each record's key, value and headers (UTF-8; undecodable bytes "
                        "become U+FFFD); implies --deep-iteration")
    p.set_defaults(run=run)


def run(args) -> int:
    return run_tool("trilog dump-log", _main, args)


async def _main(args) -> int:
    await trio.lowlevel.checkpoint()
    status = 0
    for path in args.files:
        if not dump_file(path, deep=args.deep_iteration or args.print_data,
                         print_data=args.print_data, out=sys.stdout):
            status = 1
    return status


@dataclass
class _Problems:
    path: str
    found: list[str] = field(default_factory=list)

    def add(self, what: str) -> None:
        self.found.append(what)


def dump_file(path: str, *, deep: bool = False, print_data: bool = False,
              out: TextIO = sys.stdout) -> bool:
    """Dump one file to ``out``; whether it was wholly valid.  Problems are also summed up
    in one line on stderr."""
    problems = _Problems(path)
    name = Path(path)
    try:
        if name.suffix == ".log":
            _dump_segment(path, deep, print_data, out, problems)
        elif name.suffix == ".index":
            _dump_offset_index(path, out, problems)
        elif name.suffix == ".timeindex":
            _dump_time_index(path, out, problems)
        else:
            problems.add("not a .log, .index or .timeindex file")
    except OSError as exc:
        problems.add(f"cannot read it: {exc.strerror or exc}")
    out.flush()
    if problems.found:
        print(f"trilog dump-log: {path}: {'; '.join(problems.found)}", file=sys.stderr)
    return not problems.found


def _base_offset(path: str) -> int | None:
    stem = Path(path).stem
    return int(stem) if stem.isdigit() else None


# -- .log ------------------------------------------------------------------------------------


def _dump_segment(path: str, deep: bool, print_data: bool, out: TextIO,
                  problems: _Problems) -> None:
    with open(path, "rb") as f:  # read-only: never the broker's write path
        fd = f.fileno()
        size = os.fstat(fd).st_size
        out.write(f"Dumping {path}\n")
        base = _base_offset(path)
        out.write(f"Log starting offset: {base if base is not None else 'unknown'}\n")
        position = invalid_batches = 0
        while position < size:
            left = size - position
            head = os.pread(fd, min(HEADER_SIZE, left), position)
            try:
                if left < LOG_OVERHEAD:
                    raise CorruptRecordsError(f"{left} bytes are too few for a batch")
                header = check_batch_header(head) if left >= HEADER_SIZE else None
                if header is None:
                    _offset, length = BATCH_PREFIX.unpack_from(head)
                    raise CorruptRecordsError(
                        f"a batch of {length + LOG_OVERHEAD} bytes is cut off after {left}")
                if header.size > left:
                    raise CorruptRecordsError(
                        f"a batch of {header.size} bytes is cut off after {left}")
            except CorruptRecordsError as exc:
                out.write(f"Found {left} invalid bytes at the end of {Path(path).name} "
                          f"(position {position}: {exc})\n")
                problems.add(f"{left} invalid bytes at the end, from position {position}")
                break
            data = os.pread(fd, header.size, position)
            valid = batch_crc(data, 0, header.size) == header.crc
            out.write(_batch_line(header, position, valid) + "\n")
            if not valid:
                invalid_batches += 1
            if deep:
                _dump_records(data, out, print_data, problems)
            position += header.size
        if invalid_batches:
            problems.add(f"{invalid_batches} batch(es) with a wrong CRC")


def _batch_line(h: BatchHeader, position: int, valid: bool) -> str:
    last_sequence = h.base_sequence + h.last_offset_delta if h.base_sequence >= 0 else -1
    time_type = "LogAppendTime" if h.attributes & 0x08 else "CreateTime"
    return (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {last_sequence} "
            f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
            f"partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {_bool(h.attributes & 0x10)} "
            f"isControl: {_bool(h.attributes & 0x20)} position: {position} "
            f"{time_type}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
            f"compresscodec: {CODEC_NAMES.get(h.compression_type, '?')} crc: {h.crc} "
            f"isvalid: {_bool(valid)}")


def _dump_records(data: bytes, out: TextIO, print_data: bool, problems: _Problems) -> None:
    batch = RecordBatch(data)
    try:
        records = batch.decode()
    except CorruptRecordsError as exc:
        out.write(f"| the records of this batch cannot be read: {exc}\n")
        problems.add(f"unreadable records in the batch at offset {batch.base_offset}")
        return
    time_type = "LogAppendTime" if batch.timestamp_type == LOG_APPEND_TIME else "CreateTime"
    for r in records:
        sequence = (batch.base_sequence + r.offset - batch.base_offset
                    if batch.base_sequence >= 0 else -1)
        line = (f"| offset: {r.offset} {time_type}: {r.timestamp} "
                f"keySize: {-1 if r.key is None else len(r.key)} "
                f"valueSize: {-1 if r.value is None else len(r.value)} sequence: {sequence} "
                f"headerKeys: [{','.join(h.key for h in r.headers)}]")
        if print_data:
            headers = ",".join(f"{h.key}={_text(h.value)}" for h in r.headers)
            line += f" key: {_text(r.key)} payload: {_text(r.value)} headers: [{headers}]"
        out.write(line + "\n")


def _text(data: bytes | None) -> str:
    return "null" if data is None else bytes(data).decode("utf-8", "replace")


def _bool(value: object) -> str:
    return "true" if value else "false"


# -- .index and .timeindex ---------------------------------------------------------------------


def _dump_offset_index(path: str, out: TextIO, problems: _Problems) -> None:
    base = _base_offset(path)
    size = os.stat(path).st_size
    out.write(f"Dumping {path}\n")
    index = OffsetIndex(path, base or 0, max(size, 8))
    try:
        index.load(_log_size(path))
        entries = index.entries()
    except IndexCorruptError as exc:
        problems.add(str(exc).replace(path, "the index").strip())
        entries = [(o + (base or 0), p) for o, p in _raw_entries(path, _OFFSET_ENTRY, out)]
    for offset, position in entries:
        out.write(f"offset: {offset} position: {position}\n")


def _dump_time_index(path: str, out: TextIO, problems: _Problems) -> None:
    base = _base_offset(path)
    size = os.stat(path).st_size
    out.write(f"Dumping {path}\n")
    index = TimeIndex(path, base or 0, max(size, 12))
    try:
        index.load()
        entries = index.entries()
    except IndexCorruptError as exc:
        problems.add(str(exc).replace(path, "the index").strip())
        entries = [(t, o + (base or 0)) for t, o in _raw_entries(path, _TIME_ENTRY, out)]
    for timestamp, offset in entries:
        out.write(f"timestamp: {timestamp} offset: {offset}\n")


def _log_size(index_path: str) -> int:
    """The size of the index's log (its entries must point below it); without the log, no
    bound."""
    try:
        return os.stat(str(Path(index_path).with_suffix(".log"))).st_size
    except OSError:
        return 1 << 31


def _raw_entries(path: str, entry: struct.Struct, out: TextIO) -> list[tuple[int, int]]:
    """The whole entries of an index that storage would not load; a torn tail is said."""
    with open(path, "rb") as f:
        data = f.read()
    whole = len(data) - len(data) % entry.size
    if whole != len(data):
        out.write(f"Found {len(data) - whole} invalid bytes at the end of {Path(path).name} "
                  f"(a torn entry)\n")
    return [(int(a), int(b)) for a, b in entry.iter_unpack(data[:whole])]
