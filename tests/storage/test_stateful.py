"""A hypothesis state machine: the log against a list of batches in memory.

Operations: append (plain and compressed), read, lookups by time, roll, flush, retention,
clean reopen, and crash-reopen (descriptors dropped without flushing, the unflushed tail
optionally cut and followed by zeros or garbage).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from storage_helpers import batches_in, check_indexes

from trilog.errors import OffsetOutOfRangeError
from trilog.records import GZIP, RecordBatch, build_batch, iter_batches
from trilog.storage import Log, LogConfig

T0 = 1_700_000_000_000


@dataclasses.dataclass
class ModelBatch:
    base_offset: int
    records: list[tuple[int, bytes]]  # (timestamp, value)

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.records) - 1


def decode(data: bytes) -> list[tuple[int, int, bytes]]:
    return [
        (r.offset, r.timestamp, r.value)
        for b in iter_batches(data)
        for r in RecordBatch(data, b.position)
    ]


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="trilog-stateful-")
        self.dir = os.path.join(self.tmp, "t-0")
        self.config = LogConfig(segment_bytes=700, index_interval_bytes=100)
        self.log = Log(self.dir, self.config)
        self.model: list[ModelBatch] = []
        self.start = 0

    # -- helpers -------------------------------------------------------------------------

    @property
    def end(self) -> int:
        return self.model[-1].last_offset + 1 if self.model else self.start

    def model_records(self, offset: int = 0) -> list[tuple[int, int, bytes]]:
        return [
            (b.base_offset + i, ts, value)
            for b in self.model
            for i, (ts, value) in enumerate(b.records)
            if b.base_offset + i >= offset
        ]

    def read_everything(self) -> bytes:
        parts = []
        offset = self.log.log_start_offset
        while offset < self.log.log_end_offset:
            with self.log.read(offset, 1000) as piece:
                data = piece.read()
            parts.append(data)
            offset = batches_in(data)[-1][1] + 1
        return b"".join(parts)

    # -- rules ---------------------------------------------------------------------------

    @rule(
        batches=st.lists(
            st.lists(
                st.tuples(st.integers(0, 10_000), st.binary(max_size=60)), min_size=1, max_size=6
            ),
            min_size=1,
            max_size=3,
        ),
        compressed=st.booleans(),
    )
    def append(self, batches, compressed):
        buffer = b"".join(
            build_batch(
                [(T0 + ts, None, value) for ts, value in records],
                compression_type=GZIP if compressed else 0,
            )
            for records in batches
        )
        info = self.log.append(buffer)
        assert info.first_offset == self.end
        for records in batches:
            self.model.append(ModelBatch(self.end, [(T0 + ts, v) for ts, v in records]))
        assert info.log_end_offset == self.end
        assert info.record_count == sum(len(r) for r in batches)

    @rule(data=st.data(), max_bytes=st.integers(1, 1500))
    def read(self, data, max_bytes):
        offset = data.draw(st.integers(self.start - 2, self.end + 2))
        if offset < self.start or offset > self.end:
            with pytest.raises(OffsetOutOfRangeError) as exc:
                self.log.read(offset, max_bytes)
            assert (exc.value.log_start_offset, exc.value.log_end_offset) == (
                self.start,
                self.end,
            )
            return
        with self.log.read(offset, max_bytes) as piece:
            got = piece.read()
            assert piece.high_watermark == self.end
        if offset == self.end:
            assert got == b""
            return
        found = batches_in(got)
        first = next(i for i, b in enumerate(self.model) if b.last_offset >= offset)
        expected = self.model[first : first + len(found)]
        assert [(b[0], b[1]) for b in found] == [(b.base_offset, b.last_offset) for b in expected]
        assert len(got) <= max_bytes or len(found) == 1
        records = decode(got)
        assert records == [
            (b.base_offset + i, ts, v) for b in expected for i, (ts, v) in enumerate(b.records)
        ]

    @rule(ts=st.integers(-10, 10_010))
    def offset_for_timestamp(self, ts):
        expected = next(((t, o) for o, t, _ in self.model_records() if t >= T0 + ts), None)
        assert self.log.offset_for_timestamp(T0 + ts) == expected

    @rule()
    def roll(self):
        self.log.roll()

    @rule()
    def flush(self):
        self.log.flush()
        assert self.log.recovery_point == self.end

    @rule(retain=st.integers(0, 3000))
    def retention(self, retain):
        self.log.config = dataclasses.replace(self.config, retention_bytes=retain)
        try:
            deleted = self.log.delete_old_segments()
        finally:
            self.log.config = self.config
        self.start = self.log.log_start_offset
        if deleted:
            assert self.log.size_in_bytes <= retain or len(self.log.segments) == 1
        boundaries = {b.base_offset for b in self.model} | {self.end}
        assert self.start in boundaries
        self.model = [b for b in self.model if b.base_offset >= self.start]

    @rule()
    def clean_reopen(self):
        self.log.close()
        self.log = Log(self.dir, self.config, recovery_point=self.end, needs_recovery=False)
        check_indexes(self.log)

    @precondition(lambda self: self.log.log_end_offset > 0)
    @rule(cut=st.integers(0, 10**6), tail=st.sampled_from(["none", "zeros", "garbage"]))
    def crash(self, cut, tail):
        log = self.log
        rp, leo = log.recovery_point, log.log_end_offset
        active = log.active_segment
        path = active.log_path
        size = active.size
        if rp >= leo:
            lowest = size
        elif rp >= active.base_offset:
            with log.read(rp, 1) as piece:
                lowest = piece.position if piece.segment_base_offset == active.base_offset else 0
        else:
            lowest = 0
        log._close_handles()
        cut_at = lowest + cut % (size - lowest + 1)
        os.truncate(path, cut_at)
        with open(path, "ab") as f:
            if tail == "zeros":
                f.write(bytes(cut % 5000))
            elif tail == "garbage":
                f.write(bytes((i * 7919 + cut) % 256 for i in range(cut % 3000)))
        self.log = Log(self.dir, self.config, recovery_point=rp, needs_recovery=True)
        new_end = self.log.log_end_offset
        assert new_end >= rp
        assert new_end in {b.base_offset for b in self.model} | {self.end}
        self.model = [b for b in self.model if b.last_offset < new_end]
        assert self.log.recovery_point == new_end
        check_indexes(self.log)

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def log_matches_model(self):
        assert (self.log.log_start_offset, self.log.log_end_offset) == (self.start, self.end)
        assert decode(self.read_everything()) == self.model_records()
        assert self.log.recovery_point <= self.end
        segments = self.log.segments
        assert [s.base_offset for s in segments] == sorted(s.base_offset for s in segments)

    def teardown(self):
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


TestLogMachine = LogMachine.TestCase
TestLogMachine.settings = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
