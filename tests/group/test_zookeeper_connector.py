"""The ZooKeeper consumer connector against a real ZooKeeper and real brokers."""

from __future__ import annotations

import textwrap
import time

import pytest
import trio
from group_helpers import (
    check_cancel_mid_record_resumes_at_that_record,
    drain,
    produce,
    script_processes,
)
from kazoo.client import KazooClient

import trilog
from trilog.broker import open_broker
from trilog.client import ConsumerRebalanceFailedError


@pytest.fixture
async def cluster(zookeeper, tmp_path):
    """Two in-process brokers registered in ZooKeeper."""
    conf = {"port": 0, "zookeeper.connect": zookeeper, "num.partitions": 8}
    async with open_broker({**conf, "broker.id": 1, "log.dirs": str(tmp_path / "b1")}) as b1, \
            open_broker({**conf, "broker.id": 2, "log.dirs": str(tmp_path / "b2")}) as b2:
        yield b1, b2


async def test_members_split_partitions_and_share_the_work(cluster, zookeeper):
    b1, _b2 = cluster
    await produce(b1.bootstrap, "events", 800)
    got: list = []
    opts = dict(zookeeper=zookeeper, topics={"events": 1}, auto_offset_reset="smallest",
                consumer_timeout_ms=1500, rebalance_backoff_ms=200)
    async with trilog.open_consumer_connector("g", **opts) as c1, \
            trilog.open_consumer_connector("g", **opts) as c2, \
            trilog.open_consumer_connector("g", **opts) as c3:
        consumers = [c1, c2, c3]
        with trio.fail_after(20):
            while sorted(tp for c in consumers for tp in c.owned) != \
                    [("events", p) for p in range(8)] or any(not c.owned for c in consumers):
                await trio.sleep(0.05)
        owned = [set(c.owned) for c in consumers]
        assert sum(len(o) for o in owned) == 8 and not (owned[0] & owned[1] & owned[2])
        assert sorted(len(o) for o in owned) == [2, 3, 3]
        async with trio.open_nursery() as nursery:
            for c in consumers:
                nursery.start_soon(drain, c.streams["events"][0], got)
    assert sorted(int(r.value) for r in got) == list(range(800))


async def test_whitelist_picks_up_new_topics_and_blacklist_excludes(cluster, zookeeper):
    b1, _ = cluster
    await produce(b1.bootstrap, "logs.a", 10, partitions=2)
    await produce(b1.bootstrap, "other", 10, partitions=2)
    white, black = [], []
    async with trilog.open_consumer_connector(
                "w", zookeeper=zookeeper, topic_filter=trilog.Whitelist(r"logs\..*"),
                num_streams=2, auto_offset_reset="smallest", rebalance_backoff_ms=200) as cw, \
            trilog.open_consumer_connector(
                "b", zookeeper=zookeeper, topic_filter=trilog.Blacklist(r"logs\..*"),
                num_streams=1, auto_offset_reset="smallest", consumer_timeout_ms=1500) as cb:
        await produce(b1.bootstrap, "logs.b", 10, partitions=2, start=100)
        with trio.fail_after(20):
            while {t for t, _ in cw.owned} != {"logs.a", "logs.b"}:
                await trio.sleep(0.05)
        with trio.move_on_after(3):
            async with trio.open_nursery() as nursery:
                for s in cw.streams:
                    nursery.start_soon(drain, s, white)
                while len(white) < 20:
                    await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
        await drain(cb.streams[0], black)
    assert sorted((r.topic, int(r.value)) for r in white) == \
        [("logs.a", i) for i in range(10)] + [("logs.b", i) for i in range(100, 110)]
    assert {r.topic for r in black} == {"other"}


async def test_cancelled_consumer_restarts_from_the_first_unprocessed_record(cluster, zookeeper):
    b1, _ = cluster
    await check_cancel_mid_record_resumes_at_that_record(
        b1.bootstrap, {"zookeeper": zookeeper, "auto_offset_reset": "smallest"})


async def test_offsets_in_zookeeper_and_clean_shutdown_deregisters(cluster, zookeeper):
    b1, _ = cluster
    await produce(b1.bootstrap, "zk-offsets", 30, partitions=2)
    async with trilog.open_consumer_connector("o", zookeeper=zookeeper, topics={"zk-offsets": 1},
                                    auto_offset_reset="smallest", consumer_timeout_ms=1000,
                                    consumer_id="me") as c:
        assert len([r async for r in c.streams["zk-offsets"][0]]) == 30
    zk = KazooClient(zookeeper)
    zk.start(timeout=10)
    try:
        offsets = {p: int(zk.get(f"/consumers/o/offsets/zk-offsets/{p}")[0]) for p in (0, 1)}
        assert sum(offsets.values()) == 30
        assert zk.get_children("/consumers/o/ids") == []
        assert zk.get_children("/consumers/o/owners/zk-offsets") == []
    finally:
        zk.stop()
        zk.close()


async def test_a_partition_that_stays_owned_fails_the_rebalance_after_its_retries(
        cluster, zookeeper):
    """Kafka 0.8's ConsumerRebalanceFailedException: 1 + rebalance_max_retries attempts,
    rebalance_backoff_ms apart, then the error; what was claimed is released, and the
    registration goes."""
    b1, _ = cluster
    await produce(b1.bootstrap, "taken", 0, partitions=2)
    zk = KazooClient(zookeeper)
    zk.start(timeout=10)
    try:
        # An owner that never lets go (not one of this group's live consumers).
        zk.create("/consumers/stuck/owners/taken/1", b"gone-0", makepath=True)
        started = trio.current_time()
        with trio.fail_after(30), pytest.raises(ConsumerRebalanceFailedError,
                                                match="3 attempts"):
            async with trilog.open_consumer_connector(
                    "stuck", zookeeper=zookeeper, topics={"taken": 1}, consumer_id="me",
                    rebalance_max_retries=2, rebalance_backoff_ms=300):
                pytest.fail("the consumer started without its partitions")
        assert 0.6 <= trio.current_time() - started < 10  # two backoffs, then the error
        assert zk.get_children("/consumers/stuck/owners/taken") == ["1"]
        assert zk.get("/consumers/stuck/owners/taken/1")[0] == b"gone-0"
        assert zk.get_children("/consumers/stuck/ids") == []
    finally:
        zk.stop()
        zk.close()


CONSUMER_SCRIPT = textwrap.dedent("""
    import json, sys, time, trio, trilog
    async def main(zk, group):
        async with trilog.open_consumer_connector(group, zookeeper=zk, topics={"kill": 1},
                                        auto_offset_reset="smallest", auto_commit_interval_ms=100,
                                        zookeeper_session_timeout_ms=2000,
                                        rebalance_backoff_ms=300) as c:
            print(json.dumps({"id": c.consumer_id}), flush=True)
            async for r in c.streams["kill"][0]:
                print(json.dumps({"p": r.partition, "o": r.offset, "t": time.time()}),
                      flush=True)
    trio.run(main, sys.argv[1], sys.argv[2])
""")


@pytest.mark.slow
async def test_sigkill_moves_partitions_and_no_partition_ever_has_two_owners(cluster, zookeeper):
    b1, _ = cluster
    await produce(b1.bootstrap, "kill", 200, partitions=8)
    produced = {(p, o) for p in range(8) for o in range(_count_by_partition(200, 8)[p])}
    zk = KazooClient(zookeeper)
    zk.start(timeout=10)
    owners_seen: list[dict] = []

    def owners() -> dict:
        out = {}
        try:
            for p in zk.get_children("/consumers/k/owners/kill"):
                out[p] = zk.get(f"/consumers/k/owners/kill/{p}")[0].decode()
        except Exception:  # noqa: BLE001 - the path may not exist yet
            pass
        return out

    def wait_for(predicate, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            snapshot = owners()
            owners_seen.append(snapshot)
            if predicate(snapshot):
                return snapshot
            time.sleep(0.05)
        raise AssertionError(f"timed out; last owners {owners_seen[-1] if owners_seen else None}")

    try:
        with script_processes(CONSUMER_SCRIPT, (zookeeper, "k"), 3) as (procs, lines):

            def consumed() -> set:
                return {(item["p"], item["o"]) for ls in lines for item in list(ls)
                        if "p" in item}

            def ids_known():
                deadline = time.monotonic() + 30
                while not all(ls and "id" in ls[0] for ls in lines):
                    assert time.monotonic() < deadline, "consumers did not start"
                    time.sleep(0.05)
                return [ls[0]["id"] for ls in lines]

            ids = await trio.to_thread.run_sync(ids_known)
            await trio.to_thread.run_sync(
                wait_for,
                lambda o: len(o) == 8 and len({v.rsplit("-", 1)[0] for v in o.values()}) == 3,
                30)
            procs[0].kill()
            procs[0].wait()
            killed_at = time.monotonic()
            snap = await trio.to_thread.run_sync(
                wait_for,
                lambda o: len(o) == 8 and all(not v.startswith(ids[0]) for v in o.values()),
                30)
            assert time.monotonic() - killed_at < 15  # session timeout (2 s) plus a rebalance
            assert {v.rsplit("-", 1)[0] for v in snap.values()} == set(ids[1:])
            # Each snapshot names one owner per partition, always a member of the group.
            for seen in owners_seen:
                assert set(seen) <= {str(p) for p in range(8)}
                assert {v.rsplit("-", 1)[0] for v in seen.values()} <= set(ids)

            def all_consumed():
                deadline = time.monotonic() + 30
                while not produced <= consumed():
                    assert time.monotonic() < deadline, sorted(produced - consumed())[:10]
                    time.sleep(0.1)

            await trio.to_thread.run_sync(all_consumed)  # at least once, the victim included
            # Duplicates only after the kill: before it, no record was consumed twice.
            wall_killed_at = time.time() - (time.monotonic() - killed_at)
            before = [(item["p"], item["o"]) for ls in lines for item in list(ls)
                      if "p" in item and item["t"] < wall_killed_at]
            assert len(before) == len(set(before))
    finally:
        zk.stop()
        zk.close()


def _count_by_partition(n: int, partitions: int) -> dict[int, int]:
    from trilog.client import partition_for_key

    counts = {p: 0 for p in range(partitions)}
    for i in range(n):
        counts[partition_for_key(b"%d" % i, partitions)] += 1
    return counts


@pytest.mark.parametrize("storage", ["kafka", "dual"])
async def test_zookeeper_connector_with_broker_stored_offsets(cluster, zookeeper, storage):
    b1, _ = cluster
    await produce(b1.bootstrap, f"kept-{storage}", 40, partitions=2)
    opts = dict(zookeeper=zookeeper, topics={f"kept-{storage}": 1}, auto_offset_reset="smallest",
                offsets_storage="kafka", dual_commit_enabled=storage == "dual")
    seen = []
    with trio.move_on_after(20) as scope:
        async with trilog.open_consumer_connector(f"bk-{storage}", **opts) as consumer:
            async for record in consumer.streams[f"kept-{storage}"][0]:
                seen.append(record)
                if len(seen) == 25:
                    consumer.streams[f"kept-{storage}"][0].mark_processed()
                    scope.cancel()  # cancelled: close() must still commit through the broker
                    await trio.sleep(1)
    assert scope.cancelled_caught
    async with trilog.open_consumer_connector(f"bk-{storage}", **opts,
                                              consumer_timeout_ms=1500) as consumer:
        rest = [r async for r in consumer.streams[f"kept-{storage}"][0]]
    assert sorted(int(r.value) for r in seen + rest) == list(range(40))
    assert len(rest) == 15  # exactly the unprocessed ones
    zk = KazooClient(zookeeper)
    zk.start(timeout=10)
    try:
        in_zk = zk.exists(f"/consumers/bk-{storage}/offsets/kept-{storage}/0") is not None
    finally:
        zk.stop()
        zk.close()
    assert in_zk == (storage == "dual")
