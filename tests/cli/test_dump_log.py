"""``trilog dump-log`` on the segment files a real broker process wrote: batches, records and
index entries as Kafka's DumpLogSegments prints them, and a flipped byte or a torn tail
reported (exit status 1), never a crash."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import trilog.sync

_MAIN = "import sys; from trilog.cli import main; sys.exit(main())"
TS = 1_700_000_000_000


def dump(*args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-c", _MAIN, "dump-log", *args],
                            capture_output=True, text=True, timeout=60)
    assert "Traceback" not in result.stderr, result.stderr
    return result


@pytest.fixture
def segment(broker_process) -> Path:
    """A stopped broker's partition directory: three batches (one gzip), keys, headers,
    a null value, and an undecodable value; indexed at every batch."""
    broker = broker_process(overrides={"log.index.interval.bytes": 1})
    try:
        with trilog.sync.Producer(broker.bootstrap, linger_ms=50) as producer:
            for i in range(3):
                producer.send("dumped", b"value-%d" % i, key=b"key-%d" % i, partition=0,
                              timestamp_ms=TS + i, headers=[("h", b"x%d" % i)])
            producer.flush()
            producer.send_and_wait("dumped", None, key=b"gone", partition=0,
                                   timestamp_ms=TS + 10)
        with trilog.sync.Producer(broker.bootstrap, compression_type="gzip") as producer:
            producer.send_and_wait("dumped", b"\xff\xfeok", partition=0, timestamp_ms=TS + 20)
    finally:
        assert broker.stop() == 0
    return broker.log_dir / "dumped-0"


def batch_lines(stdout: str) -> list[dict[str, str]]:
    return [dict(re.findall(r"(\w+): (\S+)", line)) for line in stdout.splitlines()
            if line.startswith("baseOffset:")]


def test_batches_of_a_real_segment(segment):
    log = segment / "00000000000000000000.log"
    result = dump(str(log))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == [f"Dumping {log}", "Log starting offset: 0"]
    batches = batch_lines(result.stdout)
    assert [(b["baseOffset"], b["lastOffset"], b["count"]) for b in batches] == [
        ("0", "2", "3"), ("3", "3", "1"), ("4", "4", "1")]
    assert [b["compresscodec"] for b in batches] == ["none", "none", "gzip"]
    assert [b["CreateTime"] for b in batches] == [str(TS + 2), str(TS + 10), str(TS + 20)]
    assert all(b["isvalid"] == "true" and b["magic"] == "2" for b in batches)
    positions = [int(b["position"]) for b in batches]
    sizes = [int(b["size"]) for b in batches]
    assert positions == [0, sizes[0], sizes[0] + sizes[1]]
    assert positions[-1] + sizes[-1] == log.stat().st_size
    assert not any(line.startswith("|") for line in lines)  # records only when asked


def test_print_data_decodes_each_record(segment):
    result = dump("--print-data", str(segment / "00000000000000000000.log"))
    assert result.returncode == 0, result.stderr
    records = [line for line in result.stdout.splitlines() if line.startswith("| ")]
    # The producer is idempotent (Kafka 3's default): its records carry sequence numbers.
    assert records[0] == (f"| offset: 0 CreateTime: {TS} keySize: 5 valueSize: 7 sequence: 0 "
                          "headerKeys: [h] key: key-0 payload: value-0 headers: [h=x0]")
    assert records[3].startswith("| offset: 3 ") and "valueSize: -1" in records[3]
    assert "key: gone payload: null headers: []" in records[3]
    assert records[4].endswith("key: null payload: \ufffd\ufffdok headers: []")
    deep = dump("--deep-iteration", str(segment / "00000000000000000000.log"))
    assert [line.split(" key:")[0] for line in records] == [
        line for line in deep.stdout.splitlines() if line.startswith("| ")]


def test_indexes(segment):
    batches = batch_lines(dump(str(segment / "00000000000000000000.log")).stdout)
    offsets = dump(str(segment / "00000000000000000000.index"))
    assert offsets.returncode == 0, offsets.stderr
    # An entry per batch after the first (log.index.interval.bytes=1): its last offset and
    # its position in the log.
    assert offsets.stdout.splitlines()[1:] == [
        f"offset: {b['lastOffset']} position: {b['position']}" for b in batches[1:]]
    times = dump(str(segment / "00000000000000000000.timeindex"))
    assert times.returncode == 0, times.stderr
    assert times.stdout.splitlines()[1:] == [f"timestamp: {TS + 10} offset: 3",
                                             f"timestamp: {TS + 20} offset: 4"]


def test_a_flipped_byte_and_a_torn_tail_are_reported(segment, tmp_path):
    log = tmp_path / "00000000000000000000.log"
    shutil.copy(segment / "00000000000000000000.log", log)
    data = bytearray(log.read_bytes())
    data[70] ^= 0xFF  # inside the first batch's records
    log.write_bytes(bytes(data[:-5]))  # and the last batch cut short
    result = dump("--print-data", str(log))
    assert result.returncode == 1
    batches = batch_lines(result.stdout)
    assert [(b["baseOffset"], b["isvalid"]) for b in batches] == [("0", "false"), ("3", "true")]
    tail = [line for line in result.stdout.splitlines() if line.startswith("Found ")]
    assert len(tail) == 1 and "invalid bytes at the end" in tail[0] and "cut off" in tail[0]
    assert "wrong CRC" in result.stderr and result.stderr.count("\n") == 1

    garbage = tmp_path / "00000000000000000042.log"
    garbage.write_bytes(b"\x00" * 8 + b"\x00\x00\x00\x31" + b"\x07" * 60)  # magic 7
    result = dump(str(garbage))
    assert result.returncode == 1
    assert "Log starting offset: 42" in result.stdout and "magic 7" in result.stdout

    torn = tmp_path / "00000000000000000000.index"
    torn.write_bytes((segment / "00000000000000000000.index").read_bytes() + b"\x01\x02")
    result = dump(str(torn))
    assert result.returncode == 1 and "offset: 3 position: " in result.stdout
    assert "torn" in result.stdout + result.stderr


def test_bad_files(tmp_path):
    missing = dump(str(tmp_path / "nope.log"))
    assert missing.returncode == 1 and "cannot read it" in missing.stderr
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    result = dump(str(other))
    assert result.returncode == 1 and "not a .log" in result.stderr
    empty = tmp_path / "00000000000000000000.log"
    empty.write_bytes(b"")
    result = dump(str(empty))
    assert result.returncode == 0 and batch_lines(result.stdout) == []
