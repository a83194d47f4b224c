"""A compacted topic on a real broker process: the log cleaner runs by itself and a consumer
from the beginning reads the latest value of every key, in offset order."""

from __future__ import annotations

import random
import time

import pytest
from broker_helpers import connect, fetch_request, only_partition, produce_request, roundtrip

from trilog import protocol as p
from trilog.records import build_batch, iter_batches

KEYS = 1000
UPDATES = 100_000
PER_BATCH = 100


def create_compacted(sock, name: str) -> None:
    R = p.CreateTopicsRequest
    configs = {"cleanup.policy": "compact", "segment.bytes": "16384",
               "min.cleanable.dirty.ratio": "0.01"}
    request = R(topics=[R.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, assignments=[],
        configs=[R.CreatableTopic.CreatableTopicConfig(name=k, value=v)
                 for k, v in configs.items()])], timeout_ms=10_000)
    (result,) = roundtrip(sock, request, 3).topics
    assert result.error_code == 0, result


def read_from_start(sock, topic: str) -> list:
    """Every record from offset 0 to the high watermark, following batches (a cleaned log
    has gaps, and an emptied batch may hold no record at all)."""
    out = []
    offset = 0
    while True:
        part = only_partition(roundtrip(sock, fetch_request(topic, 0, offset), 4))
        assert part.error_code == 0, part
        for batch in iter_batches(bytes(part.records or b"")):
            out.extend(r for r in batch.records() if r.offset >= offset)
            offset = max(offset, batch.next_offset)
        if offset >= part.high_watermark:
            return out


@pytest.mark.slow
def test_a_compacted_topic_shrinks_to_its_keys(broker_process):
    broker = broker_process(overrides={"log.cleaner.backoff.ms": 100})
    rng = random.Random(7)
    latest: dict[bytes, bytes] = {}
    with connect(broker.bootstrap) as sock:
        create_compacted(sock, "state")
        ts = int(time.time() * 1000)
        for first in range(0, UPDATES, PER_BATCH):
            records = []
            for i in range(first, first + PER_BATCH):
                key = b"key-%04d" % rng.randrange(KEYS)
                value = b"value-%06d" % i
                latest[key] = value
                records.append((ts, key, value))
            part = only_partition(roundtrip(sock, produce_request("state", 0,
                                                                  build_batch(records)), 3))
            assert part.error_code == 0, part
        deadline = time.monotonic() + 60
        while True:
            records = read_from_start(sock, "state")
            # The cleaned segments hold one record per key; the active segment (16 KB, up
            # to about 700 records) is never cleaned.
            if len(records) <= KEYS + 1000 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    assert len(records) <= KEYS + 1000, f"{len(records)} records after 60 s of cleaning"
    offsets = [r.offset for r in records]
    assert offsets == sorted(set(offsets))
    assert offsets[-1] == UPDATES - 1
    seen: dict[bytes, bytes] = {}
    for r in records:
        seen[r.key] = r.value
    assert seen == latest
