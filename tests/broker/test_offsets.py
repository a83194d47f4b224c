"""The offset manager: FindCoordinator, OffsetCommit / OffsetFetch in every version, the
``__consumer_offsets`` records (Kafka's format), loading, compaction, expiry, restarts.

In-process brokers (``open_broker``) over trio streams; the record format and the group's
partition are checked as pure functions.
"""

from __future__ import annotations

import threading
from functools import partial

import pytest
import trio
from broker_helpers import create_topics_request, group_broker_config, trio_connect, trio_roundtrip

from trilog import _time
from trilog import protocol as p
from trilog.broker import open_broker
from trilog.broker.groups import _offsets
from trilog.broker.groups._offsets import OFFSETS_TOPIC, java_string_hashcode, partition_for
from trilog.protocol import (
    OffsetAndMetadata,
    OffsetKey,
    decode_offset_value,
    decode_offsets_key,
    encode_offset_key,
    encode_offset_value,
)

NONE, UNKNOWN_TOPIC, OFFSET_METADATA_TOO_LARGE = 0, 3, 12
LOADING, NOT_AVAILABLE, NOT_COORDINATOR = 14, 15, 16
ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID = 22, 25


# -- pure: the group's partition and the record format ------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("a", 97), ("hello", 99162322), ("Aa", 2112), ("BB", 2112),
     ("polygenelubricants", -(2**31)), ("caf\u00e9", 3045921), ("\U0001f600", 1772899)],
)
def test_java_string_hashcode(text, expected):
    assert java_string_hashcode(text) == expected


def test_partition_for_is_kafkas_rule():
    # Integer.MIN_VALUE has no absolute value in Java; Kafka's Utils.abs maps it to 0.
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    neg = "my-group"
    assert java_string_hashcode(neg) == -1906497762
    assert partition_for(neg, 7) == abs(java_string_hashcode(neg)) % 7


def test_record_format_is_kafkas():
    key = encode_offset_key("g", "t", 3)
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    assert decode_offsets_key(key) == OffsetKey("g", "t", 3)
    assert decode_offsets_key(b"\x00\x02\x00\x01g") == "g"  # group metadata: skipped by the loader
    om = OffsetAndMetadata(42, 7, "meta", 1000)
    value = encode_offset_value(om)
    assert value == (b"\x00\x03" + (42).to_bytes(8, "big") + (7).to_bytes(4, "big")
                     + b"\x00\x04meta" + (1000).to_bytes(8, "big"))
    assert decode_offset_value(value) == om
    with_expiry = OffsetAndMetadata(42, -1, "", 1000, 5000)
    value = encode_offset_value(with_expiry)
    assert value[:2] == b"\x00\x01"
    assert decode_offset_value(value) == with_expiry
    # Versions 0 and 2, as older Kafka brokers wrote them.
    v0 = b"\x00\x00" + (5).to_bytes(8, "big") + b"\x00\x00" + (9).to_bytes(8, "big")
    assert decode_offset_value(v0) == OffsetAndMetadata(5, -1, "", 9)
    v2 = b"\x00\x02" + (6).to_bytes(8, "big") + b"\x00\x01x" + (9).to_bytes(8, "big")
    assert decode_offset_value(v2) == OffsetAndMetadata(6, -1, "x", 9)
    for bad in (b"", b"\x00\x03\x00", b"\x00\x09" + bytes(30)):
        with pytest.raises(ValueError):
            decode_offset_value(bad)


# -- requests --------------------------------------------------------------------------------------


def commit_request(group: str, offsets: dict[tuple[str, int], int], *, generation: int = -1,
                   member_id: str = "", metadata: str | None = "meta",
                   retention_time_ms: int = -1, leader_epoch: int = -1):
    R = p.OffsetCommitRequest
    T = R.OffsetCommitRequestTopic
    by_topic: dict[str, list] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(T.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset,
            committed_leader_epoch=leader_epoch, commit_timestamp=-1,
            committed_metadata=metadata))
    return R(group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
             retention_time_ms=retention_time_ms,
             topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()])


def fetch_offsets_request(group: str, tps: list[tuple[str, int]] | None):
    R = p.OffsetFetchRequest
    if tps is None:
        return R(group_id=group, topics=None)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, []).append(partition)
    return R(group_id=group, topics=[R.OffsetFetchRequestTopic(name=t, partition_indexes=ps)
                                     for t, ps in by_topic.items()])


def commit_errors(response) -> dict[tuple[str, int], int]:
    return {(t.name, part.partition_index): part.error_code
            for t in response.topics for part in t.partitions}


def fetched(response) -> dict[tuple[str, int], tuple[int, str, int]]:
    return {(t.name, part.partition_index): (part.committed_offset, part.metadata,
                                             part.error_code)
            for t in response.topics for part in t.partitions}


async def find_coordinator(stream, group: str, version: int = 2):
    request = p.FindCoordinatorRequest(key=group, key_type=0)
    return await trio_roundtrip(stream, request, version)


async def wait_coordinator(stream, group: str):
    """FindCoordinator until it answers (the offsets topic is created on the first one)."""
    with trio.fail_after(10):
        while True:
            response = await find_coordinator(stream, group)
            if response.error_code == NONE:
                return response
            assert response.error_code == NOT_AVAILABLE, response
            await trio.sleep(0.01)


async def commit(stream, group: str, offsets, version: int = 2, **kw):
    """OffsetCommit, retried while the coordinator loads; returns the partition errors."""
    with trio.fail_after(10):
        while True:
            errors = commit_errors(await trio_roundtrip(stream, commit_request(group, offsets, **kw),
                                                        version))
            if set(errors.values()) != {LOADING}:
                return errors
            await trio.sleep(0.01)


config = partial(group_broker_config, offsets_partitions=3)


@pytest.fixture
async def broker(tmp_path):
    async with open_broker(config(tmp_path)) as b:
        admin = await trio_connect(b.port)
        response = await trio_roundtrip(admin, create_topics_request({"t": 4, "u": 1}), 2)
        assert all(t.error_code == 0 for t in response.topics)
        await admin.aclose()
        yield b


# -- FindCoordinator -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_find_coordinator_creates_the_offsets_topic(broker, version):
    stream = await trio_connect(broker.port)
    assert broker.cluster.partitions(OFFSETS_TOPIC) is None
    response = await find_coordinator(stream, "g", version)
    assert (response.error_code, response.node_id, response.port) == (0, broker.broker_id,
                                                                       broker.port)
    assert response.host == "127.0.0.1"
    assert sorted(broker.cluster.partitions(OFFSETS_TOPIC)) == [0, 1, 2]
    meta = await trio_roundtrip(stream, p.MetadataRequest(topics=[
        p.MetadataRequest.MetadataRequestTopic(name=OFFSETS_TOPIC)]), 1)
    (topic,) = meta.topics
    assert topic.is_internal and len(topic.partitions) == 3
    if version >= 1:
        # Key type 1, a transactional id: its coordinator (issue 24; this broker, which
        # creates __transaction_state for it).
        txn = await trio_roundtrip(stream, p.FindCoordinatorRequest(key="x", key_type=1), version)
        assert (txn.error_code, txn.node_id) == (0, broker.broker_id)
        assert broker.cluster.partitions("__transaction_state")
        other = await trio_roundtrip(stream, p.FindCoordinatorRequest(key="x", key_type=2),
                                     version)
        assert other.error_code == 42 and other.node_id == -1  # INVALID_REQUEST
    await stream.aclose()


async def test_group_apis_before_the_offsets_topic_exists(broker):
    stream = await trio_connect(broker.port)
    assert commit_errors(await trio_roundtrip(stream, commit_request("g", {("t", 0): 1}), 2)) == {
        ("t", 0): NOT_AVAILABLE}
    response = await trio_roundtrip(stream, fetch_offsets_request("g", [("t", 0)]), 3)
    assert response.error_code == NOT_AVAILABLE and response.topics == []
    response = await trio_roundtrip(stream, fetch_offsets_request("g", [("t", 0)]), 1)
    assert fetched(response) == {("t", 0): (-1, "", NOT_AVAILABLE)}
    await stream.aclose()


# -- OffsetCommit / OffsetFetch ------------------------------------------------------------------------


@pytest.mark.parametrize("commit_version", range(7))
async def test_commit_then_fetch_in_every_version(broker, commit_version):
    stream = await trio_connect(broker.port)
    await wait_coordinator(stream, "g")
    offsets = {("t", 0): 10 + commit_version, ("t", 3): 20, ("u", 0): 5}
    assert await commit(stream, "g", offsets, commit_version, leader_epoch=4) == dict.fromkeys(
        offsets, NONE)
    for version in range(6):
        response = await trio_roundtrip(
            stream, fetch_offsets_request("g", [("t", 0), ("t", 1), ("t", 3), ("u", 0)]), version)
        assert fetched(response) == {("t", 0): (10 + commit_version, "meta", 0),
                                     ("t", 1): (-1, "", 0),  # unknown: -1 and no error
                                     ("t", 3): (20, "meta", 0), ("u", 0): (5, "meta", 0)}
        if version >= 2:
            assert response.error_code == 0
        if version >= 5:
            epochs = {part.committed_leader_epoch for t in response.topics for part in t.partitions
                      if part.committed_offset >= 0}
            assert epochs == {4 if commit_version >= 6 else -1}
    await stream.aclose()


async def test_fetch_with_null_topics_returns_all_of_the_group(broker):
    stream = await trio_connect(broker.port)
    await wait_coordinator(stream, "all")
    await commit(stream, "all", {("t", 2): 7, ("u", 0): 8}, metadata=None)
    await commit(stream, "other", {("t", 0): 1})
    for version in (2, 3, 4, 5):
        response = await trio_roundtrip(stream, fetch_offsets_request("all", None), version)
        assert fetched(response) == {("t", 2): (7, "", 0), ("u", 0): (8, "", 0)}
    response = await trio_roundtrip(stream, fetch_offsets_request("nobody", None), 2)
    assert response.topics == [] and response.error_code == 0
    await stream.aclose()


async def test_commit_errors_per_partition(broker):
    stream = await trio_connect(broker.port)
    await wait_coordinator(stream, "g")
    errors = await commit(stream, "g", {("t", 0): 1, ("t", 9): 1, ("nope", 0): 1})
    assert errors == {("t", 0): NONE, ("t", 9): UNKNOWN_TOPIC, ("nope", 0): UNKNOWN_TOPIC}
    errors = await commit(stream, "g", {("t", 1): 1}, metadata="x" * 5000)
    assert errors == {("t", 1): OFFSET_METADATA_TOO_LARGE}
    # A generation for a group the coordinator does not know: a forgotten generation.
    errors = await commit(stream, "g", {("t", 1): 1}, generation=3, member_id="m")
    assert errors == {("t", 1): ILLEGAL_GENERATION}
    response = await trio_roundtrip(stream, fetch_offsets_request("g", [("t", 0), ("t", 1)]), 2)
    assert fetched(response) == {("t", 0): (1, "meta", 0), ("t", 1): (-1, "", 0)}
    await stream.aclose()


async def test_the_offsets_are_kafka_records_in_the_groups_partition(broker):
    stream = await trio_connect(broker.port)
    await wait_coordinator(stream, "g")
    await commit(stream, "g", {("t", 1): 99})
    lg = broker.logs.get_log(OFFSETS_TOPIC, partition_for("g", 3))
    groups = await trio.to_thread.run_sync(_offsets.read_offsets, lg)
    assert groups["g"][("t", 1)].offset == 99
    # And clients may read the internal topic like any other.
    fetch = p.FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=[],
        topics=[p.FetchRequest.FetchTopic(topic=OFFSETS_TOPIC, partitions=[
            p.FetchRequest.FetchTopic.FetchPartition(partition=lg.partition, fetch_offset=0,
                                                     partition_max_bytes=1 << 20)])])
    response = await trio_roundtrip(stream, fetch, 4)
    from trilog.records import MemoryRecords

    (record,) = MemoryRecords(bytes(response.responses[0].partitions[0].records)).records()
    assert decode_offsets_key(record.key) == OffsetKey("g", "t", 1)
    assert decode_offset_value(record.value).offset == 99
    await stream.aclose()


# -- restart, load, compaction, expiry -------------------------------------------------------------


async def test_offsets_survive_a_restart(tmp_path):
    async with open_broker(config(tmp_path)) as b:
        stream = await trio_connect(b.port)
        await trio_roundtrip(stream, create_topics_request({"t": 2}), 2)
        await wait_coordinator(stream, "g")
        for i in range(5):
            await commit(stream, "g", {("t", 0): i, ("t", 1): 100 + i}, version=i % 7)
        await stream.aclose()
    async with open_broker(config(tmp_path)) as b:
        stream = await trio_connect(b.port)
        with trio.fail_after(10):
            while True:
                response = await trio_roundtrip(stream, fetch_offsets_request("g", None), 3)
                if response.error_code != LOADING:
                    break
                await trio.sleep(0.01)
        assert fetched(response) == {("t", 0): (4, "meta", 0), ("t", 1): (104, "meta", 0)}
        await stream.aclose()


async def test_load_in_progress_is_answered_while_the_partition_is_read(tmp_path, monkeypatch):
    async with open_broker(config(tmp_path)) as b:
        stream = await trio_connect(b.port)
        await trio_roundtrip(stream, create_topics_request({"t": 1}), 2)
        await wait_coordinator(stream, "g")
        await commit(stream, "g", {("t", 0): 3})
        await stream.aclose()

    release = threading.Event()
    real = _offsets.read_offsets_and_pending  # (what a load reads: commits and pending ones)

    def slow_read(lg):
        release.wait(10)
        return real(lg)

    monkeypatch.setattr(_offsets, "read_offsets_and_pending", slow_read)
    async with open_broker(config(tmp_path)) as b:
        stream = await trio_connect(b.port)
        assert (await find_coordinator(stream, "g")).error_code == NONE
        response = await trio_roundtrip(stream, fetch_offsets_request("g", [("t", 0)]), 3)
        assert response.error_code == LOADING
        response = await trio_roundtrip(stream, fetch_offsets_request("g", [("t", 0)]), 1)
        assert fetched(response) == {("t", 0): (-1, "", LOADING)}
        assert commit_errors(await trio_roundtrip(
            stream, commit_request("g", {("t", 0): 4}), 2)) == {("t", 0): LOADING}
        listed = await trio_roundtrip(stream, p.ListGroupsRequest(), 1)
        assert listed.error_code == LOADING
        release.set()
        with trio.fail_after(10):
            while (response := await trio_roundtrip(
                    stream, fetch_offsets_request("g", [("t", 0)]), 3)).error_code == LOADING:
                await trio.sleep(0.01)
        assert fetched(response) == {("t", 0): (3, "meta", 0)}
        await stream.aclose()


async def test_the_log_cleaner_keeps_the_offsets_topic_small(tmp_path):
    segment = 4096
    cfg = config(tmp_path, **{"offsets.topic.segment.bytes": segment,
                              "offsets.topic.num.partitions": 1,
                              "log.cleaner.backoff.ms": 20})
    tps = [("t", i) for i in range(4)]
    async with open_broker(cfg) as b:
        stream = await trio_connect(b.port)
        await trio_roundtrip(stream, create_topics_request({"t": 4}), 2)
        await wait_coordinator(stream, "g")
        lg = b.logs.get_log(OFFSETS_TOPIC, 0)
        assert lg.config.compact and not lg.config.delete
        for i in range(1500):
            group = "g" if i % 3 else "h"
            errors = await commit(stream, group, {tp: i for tp in tps}, version=i % 7)
            assert set(errors.values()) == {NONE}
        # 1500 commits of 4 offsets are over 300 KB; the cleaner keeps the 8 latest
        # records in the segments it cleaned, and the active segment is at most 4 KB.
        with trio.fail_after(20):
            while lg.size_in_bytes >= 3 * segment:
                await trio.sleep(0.05)
        assert b.cleaner.statistics()["passes"] >= 1
        assert lg.log_start_offset == 0  # compaction removes records, not the log's start
        await stream.aclose()
    async with open_broker(cfg) as b:
        stream = await trio_connect(b.port)
        with trio.fail_after(10):
            while (response := await trio_roundtrip(
                    stream, fetch_offsets_request("g", None), 3)).error_code == LOADING:
                await trio.sleep(0.01)
        assert fetched(response) == {tp: (1499, "meta", 0) for tp in tps}
        response = await trio_roundtrip(stream, fetch_offsets_request("h", None), 3)
        assert fetched(response) == {tp: (1497, "meta", 0) for tp in tps}
        await stream.aclose()


async def test_expired_offsets_are_deleted_for_good(tmp_path):
    cfg = config(tmp_path, **{"offsets.retention.minutes": 1})
    async with open_broker(cfg) as b:
        stream = await trio_connect(b.port)
        await trio_roundtrip(stream, create_topics_request({"t": 2}), 2)
        await wait_coordinator(stream, "old")
        await commit(stream, "old", {("t", 0): 1})
        # Commit-requested retention (v2-v4) wins over offsets.retention.minutes.
        await commit(stream, "kept", {("t", 1): 2}, retention_time_ms=3_600_000)
        now = _time.now_ms()
        assert await b.coordinator.expire_offsets(now) == 0
        assert await b.coordinator.expire_offsets(now + 2 * 60_000) == 1
        response = await trio_roundtrip(stream, fetch_offsets_request("old", None), 3)
        assert response.topics == []
        listed = await trio_roundtrip(stream, p.ListGroupsRequest(), 0)
        assert [g.group_id for g in listed.groups] == ["kept"]
        await stream.aclose()
    async with open_broker(cfg) as b:  # the tombstone is in the log
        stream = await trio_connect(b.port)
        with trio.fail_after(10):
            while (response := await trio_roundtrip(
                    stream, fetch_offsets_request("old", None), 3)).error_code == LOADING:
                await trio.sleep(0.01)
        assert response.topics == []
        response = await trio_roundtrip(stream, fetch_offsets_request("kept", None), 3)
        assert fetched(response) == {("t", 1): (2, "meta", 0)}
        await stream.aclose()


async def test_the_loader_skips_records_it_does_not_know(tmp_path):
    from trilog.records import build_batch
    from trilog.storage import LogManager

    def prepare():
        with LogManager(str(tmp_path / "data")) as logs:
            logs.get_or_create_log("t", 0)
            lg = logs.get_or_create_log(OFFSETS_TOPIC, 0)
            lg.append(build_batch([
                (0, encode_offset_key("g", "t", 0), encode_offset_value(OffsetAndMetadata(7))),
                (0, b"\x00\x02\x00\x01g", b"group metadata: not read"),
                (0, encode_offset_key("g", "t", 1), b"\x00\x09 a future value version"),
                (0, b"\x00\x07 a future key version", b"x"),
                (0, None, b"no key"),
                (0, encode_offset_key("gone", "t", 0), encode_offset_value(OffsetAndMetadata(1))),
                (0, encode_offset_key("gone", "t", 0), None),  # tombstone
            ]))

    await trio.to_thread.run_sync(prepare)
    async with open_broker(config(tmp_path, **{"offsets.topic.num.partitions": 1})) as b:
        stream = await trio_connect(b.port)
        with trio.fail_after(10):
            while (response := await trio_roundtrip(
                    stream, fetch_offsets_request("g", None), 3)).error_code == LOADING:
                await trio.sleep(0.01)
        assert fetched(response) == {("t", 0): (7, "", 0)}
        listed = await trio_roundtrip(stream, p.ListGroupsRequest(), 0)
        assert [g.group_id for g in listed.groups] == ["g"]
        await stream.aclose()
