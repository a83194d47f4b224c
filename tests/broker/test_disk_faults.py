"""A full disk: appends fail with KAFKA_STORAGE_ERROR and nothing else does.

The broker's log dir is a small tmpfs that a real client fills.  Then, still full: reads of
everything acknowledged, a clean stop (SIGTERM), a crash (SIGKILL), restarts; and once space
returns (the tmpfs is grown), appends again without a restart.  Mounting needs root: the test
skips with the reason otherwise.  Storage-level faults are also checked without a mount, by
making the file system calls fail.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
from pathlib import Path

import pytest
from broker_helpers import (
    batch,
    connect,
    create_topic,
    fetch_all,
    kafka_producer,
    only_partition,
    produce_request,
    roundtrip,
)

from trilog.storage import LogManager

KAFKA_STORAGE_ERROR = 56
TOPIC = "filling"


class SmallDisk:
    """A tmpfs of ``size_mb`` MiB mounted at ``path``; ``grow`` remounts it larger."""

    def __init__(self, path: Path, size_mb: int) -> None:
        self.path = path
        self._mount("-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path))

    def grow(self, size_mb: int) -> None:
        self._mount("-o", f"remount,size={size_mb}m", str(self.path))

    @staticmethod
    def _mount(*args: str) -> None:
        result = subprocess.run(["mount", *args], capture_output=True, text=True)
        if result.returncode:
            raise OSError(f"mount {' '.join(args)}: {result.stderr.strip()}")

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True)


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path = tmp_path / "disk"
    path.mkdir()
    try:
        disk = SmallDisk(path, 6)
    except OSError as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    try:
        yield disk
    finally:
        disk.unmount()


def storage_errors(broker) -> int:
    text = Path(broker.stderr_path).read_text()
    return sum(f"append of {TOPIC}-0 failed" in line for line in text.splitlines())


def fill(bootstrap: str) -> list[bytes]:
    """Produce 8 KiB records with kafka-python until the broker refuses; return the ones it
    acknowledged, in order."""
    from kafka.errors import KafkaStorageError

    producer = kafka_producer(bootstrap, acks=1, retries=0, enable_idempotence=False,
                              linger_ms=0, batch_size=16384)
    acknowledged = []
    try:
        for i in range(10_000):  # far more than 6 MiB: the loop ends on the error
            value = b"%06d" % i + bytes(8186)
            try:
                producer.send(TOPIC, value, partition=0).get(timeout=15)
            except KafkaStorageError:
                break
            acknowledged.append(value)
        else:
            raise AssertionError("the disk never filled")
    finally:
        producer.close(timeout=5)
    return acknowledged


def produce_code(bootstrap: str) -> int:
    with connect(bootstrap) as sock:
        part = only_partition(roundtrip(sock, produce_request(TOPIC, 0, batch([bytes(8192)])), 3))
        return part.error_code


def read_values(bootstrap: str) -> list[bytes]:
    with connect(bootstrap) as sock:
        return [r.value for r in fetch_all(sock, TOPIC, 0)]


@pytest.mark.slow
def test_a_full_disk_fails_appends_only_and_heals_when_space_returns(broker_process,
                                                                    small_disk):
    data = small_disk.path / "data"
    overrides = {"log.segment.bytes": 1 << 20}
    broker = broker_process(data, overrides=overrides)
    with connect(broker.bootstrap) as sock:
        create_topic(sock, TOPIC)
    acknowledged = fill(broker.bootstrap)
    assert len(acknowledged) > 100

    # Full: appends fail with the storage error, again and again, with one log line.
    for _ in range(20):
        assert produce_code(broker.bootstrap) == KAFKA_STORAGE_ERROR
    assert storage_errors(broker) == 1
    assert "Traceback" not in Path(broker.stderr_path).read_text()
    # Reads work, and hold exactly what was acknowledged (no partial batch).
    assert read_values(broker.bootstrap) == acknowledged

    # A clean stop on a full disk, and a restart on it.
    assert broker.stop(signal.SIGTERM) == 0
    broker = broker_process(data, overrides=overrides)
    assert read_values(broker.bootstrap) == acknowledged
    assert produce_code(broker.bootstrap) == KAFKA_STORAGE_ERROR

    # A crash on a full disk, and a restart (with recovery) on it.
    broker.kill()
    broker = broker_process(data, overrides=overrides)
    assert read_values(broker.bootstrap) == acknowledged
    assert produce_code(broker.bootstrap) == KAFKA_STORAGE_ERROR

    # Space returns: appends work again, with no restart.
    small_disk.grow(64)
    assert produce_code(broker.bootstrap) == 0
    after = read_values(broker.bootstrap)
    assert after[: len(acknowledged)] == acknowledged and len(after) == len(acknowledged) + 1
    assert broker.stop(signal.SIGTERM) == 0


def test_storage_survives_failing_writes_at_shutdown_and_start(tmp_path, monkeypatch):
    """Without a mount: index writes and checkpoints that fail with ENOSPC neither stop a
    shutdown nor the next start, and nothing appended is lost."""
    from trilog.records import build_batch
    from trilog.storage import _index

    manager = LogManager(tmp_path)
    lg = manager.get_or_create_log("t", 0)
    for i in range(50):
        lg.append(build_batch([(0, None, b"%d" % i + bytes(200))]))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_index, "_write_tail", full)
    monkeypatch.setattr("trilog.storage._checkpoint.write_atomically", full)
    manager.shutdown()  # logs the failures, raises nothing
    # The indexes could not be written: no clean-shutdown marker, so the next start recovers.
    assert not (tmp_path / ".kafka_cleanshutdown").exists()
    manager = LogManager(tmp_path)  # recovers, with its index writes still failing
    lg = manager.get_log("t", 0)
    assert lg.log_end_offset == 50
    with lg.read(0, 1 << 20) as slc:
        assert slc.length > 0
    monkeypatch.undo()
    manager.shutdown()
    assert (tmp_path / ".kafka_cleanshutdown").exists()


def test_an_append_that_fails_mid_write_leaves_no_partial_batch(tmp_path, monkeypatch):
    from trilog.records import build_batch
    from trilog.storage import Log

    lg = Log(tmp_path / "t-0")
    lg.append(build_batch([(0, None, b"kept")]))
    size = lg.size_in_bytes
    real_write = os.write

    def half_then_full(fd, data):  # a short write, then ENOSPC: what a filling disk does
        if len(data) > 10:
            return real_write(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "writev", lambda fd, parts: half_then_full(fd, b"".join(parts)))
    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(OSError) as info:
        lg.append(build_batch([(0, None, b"lost" * 100)]))
    assert info.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert lg.size_in_bytes == size and os.path.getsize(lg.active_segment.log_path) == size
    assert lg.append(build_batch([(0, None, b"next")])).first_offset == 1
    lg.close()
