"""The broker-coordinated group consumer (Kafka's group protocol, no ZooKeeper): the pure
ConsumerProtocol and assignor, then real brokers, trilog members and kafka-python members."""

from __future__ import annotations

import signal
import textwrap
import threading
from contextlib import AsyncExitStack

import pytest
import trio
from group_helpers import (
    check_cancel_mid_record_resumes_at_that_record,
    drain,
    produce,
    script_processes,
)
from pacing_helpers import check_paced
from wait_helpers import wait_until

import trilog
from trilog.broker import open_broker
from trilog.client import open_client
from trilog.client._assignment import assign_members, spread_over_streams
from trilog.client._offsets import BrokerOffsetStore
from trilog.errors import RemoteProtocolError
from trilog.protocol import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

# -- pure: ConsumerProtocol bytes, the range assignor over members, streams -------------------


def test_consumer_protocol_matches_kafka_python_both_ways():
    from kafka.protocol.consumer.metadata import (
        ConsumerProtocolAssignment,
        ConsumerProtocolSubscription,
    )

    ours = encode_subscription(["b", "a"], b"x")
    theirs = ConsumerProtocolSubscription.decode(ours)
    assert (theirs.version, theirs.topics, theirs.user_data) == (0, ["a", "b"], b"x")
    assert decode_subscription(ConsumerProtocolSubscription(
        version=0, topics=["t", "u"], user_data=b"").encode()).topics == ("t", "u")

    ours = encode_assignment({"t": [2, 0, 1], "a": [5]})
    theirs = ConsumerProtocolAssignment.decode(ours)
    assert sorted((tp.topic, tp.partitions) for tp in theirs.assigned_partitions) == \
        [("a", [5]), ("t", [0, 1, 2])]
    back = ConsumerProtocolAssignment(
        version=0, assigned_partitions=[("t", [3, 1])], user_data=None).encode()
    assert decode_assignment(back).partitions == {"t": (1, 3)}
    assert decode_assignment(b"").partitions == {}


def test_newer_versions_are_read_by_their_v0_prefix_and_garbage_is_refused():
    newer = bytearray(encode_subscription(["t"]))
    newer[0:2] = b"\x00\x03"
    newer += b"\x00\x00\x00\x00" * 3  # owned partitions, generation, rack...
    assert decode_subscription(bytes(newer)).topics == ("t",)
    for bad in (b"\x00", b"\x00\x00\x7f\xff\xff\xff", b"\x00\x00\x00\x00\x00\x01\x00\x09ab"):
        with pytest.raises(RemoteProtocolError):
            decode_subscription(bad)
    with pytest.raises(RemoteProtocolError):
        decode_assignment(b"\x00\x00\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x05\x00")


def test_range_assignor_assigns_per_member_and_members_deal_over_streams():
    plan = assign_members({"m2": ["t"], "m1": ["t", "u"], "m3": ["t"]},
                          {"t": range(8), "u": [0, 1]})
    assert plan == {"m1": {"t": [0, 1, 2], "u": [0, 1]}, "m2": {"t": [3, 4, 5]},
                    "m3": {"t": [6, 7]}}
    assert assign_members({"a": ["missing"], "b": []}, {}) == {"a": {}, "b": {}}
    assert spread_over_streams({"t": [0, 1, 2], "u": [0, 1]}, {"t": 2, "u": 1}) == {
        ("t", 0): 0, ("t", 1): 1, ("t", 2): 0, ("u", 0): 0, ("u", 1): 0}
    assert spread_over_streams({"t": [0, 1, 2], "u": [0]}, 2) == {
        ("t", 0): 0, ("t", 1): 1, ("t", 2): 0, ("u", 0): 1}
    assert spread_over_streams({"x": [0]}, {"t": 1}) == {}


# -- against a broker ----------------------------------------------------------------------------


@pytest.fixture
async def broker(tmp_path):
    """A standalone in-process broker: no ZooKeeper anywhere."""
    async with open_broker({"port": 0, "log.dirs": str(tmp_path / "data"), "num.partitions": 8,
                            "group.initial.rebalance.delay.ms": 0,
                            "group.min.session.timeout.ms": 500,
                            "offsets.topic.num.partitions": 3}) as b:
        yield b


def options(broker, **kw):
    opts = dict(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                heartbeat_interval_ms=100, session_timeout_ms=2000, metadata_max_age_ms=300,
                retry_backoff_ms=50)
    opts.update(kw)
    return opts


def split_exactly(consumers, topic, partitions):
    owned = [set(c.owned) for c in consumers]
    every = sorted(tp for o in owned for tp in o)
    return every == [(topic, p) for p in range(partitions)] and all(owned)


async def test_members_split_partitions_consume_everything_and_take_over_on_leave(broker):
    await produce(broker.bootstrap, "events", 800)
    opts = options(broker, topics={"events": 1}, consumer_timeout_ms=1000)
    async with AsyncExitStack() as stack:
        consumers = [await stack.enter_async_context(trilog.open_consumer_connector("g", **opts))
                     for _ in range(2)]
        async with trilog.open_consumer_connector("g", **opts) as c3:
            consumers.append(c3)
            assert isinstance(c3, trilog.client.BrokerConsumerConnector)
            await wait_until(lambda: split_exactly(consumers, "events", 8))
            assert sorted(len(c.owned) for c in consumers) == [2, 3, 3]
            assert len({c.generation_id for c in consumers}) == 1
            assert sum(c.is_leader for c in consumers) == 1
            got: list[list] = [[] for _ in consumers]
            async with trio.open_nursery() as nursery:
                for c, out in zip(consumers, got):
                    nursery.start_soon(drain, c.streams["events"][0], out)
            assert sorted(int(r.value) for out in got for r in out) == list(range(800))
            for c, out in zip(consumers, got):  # each read only its own partitions
                assert {(r.topic, r.partition) for r in out} == set(c.owned)
        # c3 committed what it processed and left: the others take its partitions now.
        remaining = consumers[:2]
        await wait_until(lambda: split_exactly(remaining, "events", 8), timeout=10)
        await produce(broker.bootstrap, "events", 80, start=800)
        more: list = []
        async with trio.open_nursery() as nursery:
            for c in remaining:
                nursery.start_soon(drain, c.streams["events"][0], more)
        # Nothing processed before (by anyone) is seen again: commits carried over.
        assert sorted(int(r.value) for r in more) == list(range(800, 880))


async def test_a_member_that_stops_heartbeating_loses_its_partitions(broker):
    await produce(broker.bootstrap, "beats", 0)
    opts = options(broker, topics={"beats": 1}, enable_auto_commit=False)
    async with trilog.open_consumer_connector("h", **opts) as c1, \
            trilog.open_consumer_connector("h", **opts) as c2, \
            trilog.open_consumer_connector("h", **opts) as c3:
        await wait_until(lambda: split_exactly([c1, c2, c3], "beats", 8))
        c3._coordinator.stop_heartbeat()  # c3 hangs, as far as the group can tell
        silent_at = trio.current_time()
        await wait_until(lambda: split_exactly([c1, c2], "beats", 8), timeout=15)
        # The session timeout (2 s) plus a rejoin, not more.
        assert trio.current_time() - silent_at < 2 + 2


CONSUMER_SCRIPT = textwrap.dedent("""
    import json, sys, trio, trilog
    async def main(bootstrap, group):
        async with trilog.open_consumer_connector(group, bootstrap_servers=bootstrap,
                                        topics={"kill": 2}, auto_offset_reset="earliest",
                                        auto_commit_interval_ms=100, session_timeout_ms=2000,
                                        heartbeat_interval_ms=100, retry_backoff_ms=50) as c:
            print(json.dumps({"id": c.member_id}), flush=True)
            async def follow(stream):
                async for r in stream:
                    print(json.dumps({"p": r.partition, "o": r.offset}), flush=True)
            async with trio.open_nursery() as nursery:
                for s in c.streams["kill"]:
                    nursery.start_soon(follow, s)
    trio.run(main, sys.argv[1], sys.argv[2])
""")


@pytest.mark.slow
async def test_sigkill_moves_the_partitions_within_the_session_timeout(broker):
    await produce(broker.bootstrap, "kill", 0)
    opts = options(broker, topics={"kill": 1}, auto_commit_interval_ms=100)

    def consumed_by(ls) -> set:
        return {(x["p"], x["o"]) for x in list(ls) if "p" in x}

    with script_processes(CONSUMER_SCRIPT, (broker.bootstrap, "k"), 2) as (procs, lines):
        async with trilog.open_consumer_connector("k", **opts) as me:
            mine: list = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain, me.streams["kill"][0], mine)
                await wait_until(lambda: all(ls and "id" in ls[0] for ls in lines), 30)
                # Three members: 2 or 3 partitions each.
                await wait_until(lambda: len(me.owned) in (2, 3), 30)
                await produce(broker.bootstrap, "kill", 200)
                await wait_until(lambda: all(consumed_by(ls) for ls in lines) and mine, 30)
                procs[0].send_signal(signal.SIGKILL)
                procs[0].wait()
                killed_at = trio.current_time()
                before = len(me.owned)
                await wait_until(lambda: len(me.owned) == 4, 15)  # 8 over the two left
                assert before < 4 and trio.current_time() - killed_at < 2 + 3
                # Everything is consumed at least once, the victim's share included.
                counts = [0] * 8
                for i in range(200):
                    counts[trilog.client.partition_for_key(b"%d" % i, 8)] += 1
                produced = {(p, o) for p in range(8) for o in range(counts[p])}
                await wait_until(lambda: produced <= {(r.partition, r.offset) for r in mine}
                                 | consumed_by(lines[0]) | consumed_by(lines[1]), 30)
                nursery.cancel_scope.cancel()


async def test_commit_offsets_and_restart_resume_from_the_committed_offset(broker):
    await produce(broker.bootstrap, "resume", 30, partitions=1)
    opts = options(broker, topics={"resume": 1}, enable_auto_commit=False)
    async with trilog.open_consumer_connector("r", **opts) as c:
        stream = c.streams["resume"][0]
        seen = [await stream.__anext__() for _ in range(10)]
        stream.mark_processed()
        await c.commit_offsets()
        async with open_client(broker.bootstrap) as client:
            assert await BrokerOffsetStore(client, "r").fetch([("resume", 0)]) == \
                {("resume", 0): 10}
        assert [r.offset for r in seen] == list(range(10))
    async with trilog.open_consumer_connector("r", **opts, consumer_timeout_ms=800) as c:
        assert [r.offset async for r in c.streams["resume"][0]] == list(range(10, 30))


async def test_cancelled_consumer_restarts_from_the_first_unprocessed_record(broker):
    await check_cancel_mid_record_resumes_at_that_record(broker.bootstrap, options(broker))


async def test_topic_filter_picks_up_a_new_matching_topic(broker):
    await produce(broker.bootstrap, "logs.a", 10, partitions=2)
    await produce(broker.bootstrap, "other", 10, partitions=2)
    got: list = []
    async with trilog.open_consumer_connector("w", **options(
            broker, topic_filter=trilog.Whitelist(r"logs\..*"), num_streams=2)) as c:
        assert {t for t, _ in c.owned} == {"logs.a"}
        assert len(c.streams) == 2 and sorted(c.owned.values()) == [0, 1]
        await produce(broker.bootstrap, "logs.b", 10, partitions=2, start=100)
        await wait_until(lambda: {t for t, _ in c.owned} == {"logs.a", "logs.b"}, 10)
        with trio.move_on_after(5):
            async with trio.open_nursery() as nursery:
                for s in c.streams:
                    nursery.start_soon(drain, s, got)
                await wait_until(lambda: len(got) >= 20)
                nursery.cancel_scope.cancel()
    assert sorted((r.topic, int(r.value)) for r in got) == \
        [("logs.a", i) for i in range(10)] + [("logs.b", i) for i in range(100, 110)]


async def test_the_leader_notices_a_subscribed_topic_that_appears_later(broker):
    got: list = []
    async with trilog.open_consumer_connector("late", **options(broker, topics={"later": 1},
                                                      consumer_timeout_ms=2000)) as c:
        assert c.owned == {} and c.is_leader
        await produce(broker.bootstrap, "later", 10, partitions=3)
        await wait_until(lambda: len(c.owned) == 3, 10)
        await drain(c.streams["later"][0], got, limit=10)
    assert sorted(int(r.value) for r in got) == list(range(10))


# -- with kafka-python's KafkaConsumer in the same group -------------------------------------------


def kafka_python_member(bootstrap, group, topic, stop, out, assigned, client_id):
    """A kafka-python member polling until ``stop``; its records into ``out``, its current
    assignment into ``assigned`` (a set, replaced in place)."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
                             auto_offset_reset="earliest", enable_auto_commit=True,
                             auto_commit_interval_ms=100, session_timeout_ms=2000,
                             heartbeat_interval_ms=100, request_timeout_ms=15000,
                             fetch_max_wait_ms=100, retry_backoff_ms=50,
                             metadata_max_age_ms=500)
    try:
        consumer.subscribe([topic])
        while not stop.is_set():
            # Not too short: kafka-python 3.0.12 can lose a completed rebalance when poll()
            # times out in the middle of one (it then never heartbeats in that generation).
            for _tp, records in consumer.poll(timeout_ms=1000).items():
                out.extend((r.partition, int(r.value)) for r in records)
            assigned.clear()
            assigned.update(tp.partition for tp in consumer.assignment())
    finally:
        consumer.close()


@pytest.mark.parametrize("first", ["trilog", "kafka-python"])
async def test_trilog_and_kafka_python_members_share_a_group(broker, first):
    topic, group = "mixed", f"mixed-{first}"
    await produce(broker.bootstrap, topic, 0, partitions=4)
    theirs: list = []
    their_partitions: set = set()
    stop = threading.Event()
    ours: list = []

    async def run_kafka_python():
        await trio.to_thread.run_sync(kafka_python_member, broker.bootstrap, group, topic,
                                      stop, theirs, their_partitions, "kp")

    async with trio.open_nursery() as nursery:
        try:
            if first == "kafka-python":  # the leader: it assigns, we decode its plan
                nursery.start_soon(run_kafka_python)
                await wait_until(lambda: len(their_partitions) == 4, 20)
            async with trilog.open_consumer_connector(
                    group, **options(broker, topics={topic: 2})) as c:
                if first == "trilog":  # the leader: we assign, kafka-python decodes
                    nursery.start_soon(run_kafka_python)
                await wait_until(lambda: len(c.owned) == 2 and len(their_partitions) == 2
                                 and not {p for _, p in c.owned} & their_partitions, 20)
                assert c.is_leader == (first == "trilog")
                mine = {p for _, p in c.owned}
                await produce(broker.bootstrap, topic, 200, partitions=4)
                async with trio.open_nursery() as readers:
                    for s in c.streams[topic]:
                        readers.start_soon(drain, s, ours)
                    await wait_until(lambda: len(ours) + len(theirs) >= 200, 20)
                    readers.cancel_scope.cancel()
                assert {r.partition for r in ours} == mine
                assert {p for p, _ in theirs} == their_partitions
                assert sorted([int(r.value) for r in ours] + [v for _, v in theirs]) == \
                    list(range(200))
        finally:
            stop.set()


async def run_broker(conf, *, task_status=trio.TASK_STATUS_IGNORED):
    """A broker in its own task: ``(broker, stop)``; ``await stop()`` shuts it down."""
    done = trio.Event()
    with trio.CancelScope() as scope:
        try:
            async with open_broker(conf) as b:

                async def stop():
                    scope.cancel()
                    await done.wait()

                task_status.started((b, stop))
                await trio.sleep_forever()
        finally:
            done.set()


async def test_a_restarted_coordinator_is_found_again_and_the_member_rejoins(tmp_path):
    conf = {"log.dirs": str(tmp_path / "data"), "group.initial.rebalance.delay.ms": 0,
            "group.min.session.timeout.ms": 500, "offsets.topic.num.partitions": 1}
    async with trio.open_nursery() as brokers:
        first, stop_first = await brokers.start(run_broker, {**conf, "port": 0})
        await produce(first.bootstrap, "again", 10, partitions=2)
        async with trilog.open_consumer_connector(
                "again", **options(first, topics={"again": 1})) as c:
            got: list = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain, c.streams["again"][0], got)
                await wait_until(lambda: len(got) == 10)
                await trio.sleep(0.05)  # the drain asks for the next record: 10 processed
                await c.commit_offsets()
                rebalances = c.rebalances
                await stop_first()  # the coordinator goes away, with the group's state
                second, _ = await brokers.start(run_broker, {**conf, "port": first.port})
                await wait_until(lambda: c.rebalances > rebalances and c.owned, 20)
                assert len(c.owned) == 2
                await produce(second.bootstrap, "again", 10, start=10)
                await wait_until(lambda: len(got) >= 20, 20)
                await trio.sleep(0.2)
                nursery.cancel_scope.cancel()
        brokers.cancel_scope.cancel()
    # The offsets committed before the restart were kept: nothing is read twice.
    assert sorted(int(r.value) for r in got) == list(range(20))


async def test_a_stream_is_a_cancellation_point_and_lets_other_tasks_run(broker):
    async with trilog.open_producer(broker.bootstrap) as producer:
        for i in range(21_000):  # more than check_paced reads
            await producer.send("busy", b"%d" % i, partition=0)
    async with trilog.open_consumer_connector(
            "busy-group", **options(broker, topics={"busy": 1})) as c:
        await check_paced(c.streams["busy"][0])


async def test_a_member_holding_a_record_past_max_poll_interval_leaves_and_rejoins(broker):
    """Kafka's max.poll.interval.ms: the stuck member's partitions go to the other member
    (from the last commit), and it comes back when it asks for a record again."""
    await produce(broker.bootstrap, "slow", 40, partitions=2)
    async with trilog.open_simple_consumer(bootstrap_servers=broker.bootstrap) as simple:
        ends = [(await simple.offsets_before("slow", p, time=trilog.LATEST))[0] for p in (0, 1)]
    everything = {(p, o) for p in (0, 1) for o in range(ends[p])}
    opts = options(broker, topics={"slow": 1}, max_poll_interval_ms=1500,
                   auto_commit_interval_ms=100)
    b_seen: list = []
    with trio.fail_after(30):
        async with trilog.open_consumer_connector("poll", **opts) as a, \
                trilog.open_consumer_connector("poll", **opts) as b:
            await wait_until(lambda: a.owned and b.owned)
            a_stream, b_stream = a.streams["slow"][0], b.streams["slow"][0]
            held = await a_stream.__anext__()  # ... and A's application gets stuck on it
            stuck_tp = (held.topic, held.partition)
            async for record in b_stream:  # B takes A's partition over
                b_seen.append(record)
                if {(r.partition, r.offset) for r in b_seen} >= everything:
                    break
            assert not a.owned and stuck_tp in b.owned
            assert (held.partition, held.offset) in {(r.partition, r.offset) for r in b_seen}
            rebalances = a.rebalances
            async with trio.open_nursery() as nursery:  # A asks for its next record
                nursery.start_soon(a_stream.__anext__)
                await wait_until(lambda: a.rebalances > rebalances and a.owned)
                nursery.cancel_scope.cancel()
