"""Kafka's consumer model (``trilog.open_consumer(*topics, group_id=...)``): subscribe, poll,
seek, pause, commit, rebalance listeners, on a real in-process broker; the assignors pure."""

from __future__ import annotations

import time

import pytest
import trio
from group_helpers import produce
from wait_helpers import wait_until

import trilog
from trilog import TopicPartition as TP
from trilog.broker import open_broker
from trilog.client import (
    ConsumerRebalanceListener,
    IllegalStateError,
    NoOffsetForPartitionError,
    OffsetAndMetadata,
)
from trilog.client._assignment import (
    ASSIGNORS,
    assign_round_robin,
    assign_sticky,
    cooperative_plan,
)
from trilog.client import open_client
from trilog.client._coordinator import Coordinator
from trilog.protocol import OffsetFetchRequest

# -- pure: the assignors ------------------------------------------------------------------------


def test_round_robin_deals_sorted_partitions_in_turn_over_sorted_members():
    plan = assign_round_robin({"m2": ["a", "b"], "m1": ["a", "b"]}, {"a": [0, 1, 2], "b": [0, 1]})
    # a-0 a-1 a-2 b-0 b-1 dealt m1 m2 m1 m2 m1
    assert plan == {"m1": {"a": [0, 2], "b": [1]}, "m2": {"a": [1], "b": [0]}}


def test_round_robin_skips_members_not_subscribed_to_a_topic():
    # Kafka's own example (RoundRobinAssignor's documentation).
    plan = assign_round_robin({"C0": ["t0"], "C1": ["t0", "t1"], "C2": ["t0", "t1", "t2"]},
                              {"t0": [0], "t1": [0, 1], "t2": [0, 1, 2]})
    assert plan == {"C0": {"t0": [0]}, "C1": {"t1": [0]}, "C2": {"t1": [1], "t2": [0, 1, 2]}}
    assert assign_round_robin({"m": ["gone"]}, {}) == {"m": {}}


def test_the_assignors_hand_out_every_partition_exactly_once():
    subs = {f"m{i}": ["a", "b", "c"] for i in range(5)}
    parts = {"a": range(7), "b": range(3), "c": range(12)}
    for name, assignor in ASSIGNORS.items():
        plan = assignor(subs, parts, {})
        every = sorted((t, p) for m in plan.values() for t, ps in m.items() for p in ps)
        assert every == sorted((t, p) for t, ps in parts.items() for p in ps), name
        assert set(plan) == set(subs), name


def test_sticky_keeps_what_members_own_and_balances():
    parts = {"t": range(6)}
    subs = {m: ["t"] for m in ("a", "b")}
    first = assign_sticky(subs, parts, {})
    assert sorted(len(a["t"]) for a in first.values()) == [3, 3]
    owned = {m: [("t", p) for p in a["t"]] for m, a in first.items()}
    # A third member: each of the two gives up exactly one, keeping the rest.
    subs["c"] = ["t"]
    second = assign_sticky(subs, parts, owned)
    assert sorted(len(a.get("t", [])) for a in second.values()) == [2, 2, 2]
    for m in ("a", "b"):
        assert set(second[m]["t"]) <= set(first[m]["t"])
    # The same plan again with nothing new: nothing moves.
    owned2 = {m: [("t", p) for p in a.get("t", [])] for m, a in second.items()}
    assert assign_sticky(subs, parts, owned2) == second
    # A partition two members claim stays with one; gone partitions and topics are dropped.
    claimed = assign_sticky({"a": ["t"], "b": ["t"]}, {"t": range(2)},
                            {"a": [("t", 0), ("t", 9), ("gone", 0)], "b": [("t", 0)]})
    assert claimed == {"a": {"t": [0]}, "b": {"t": [1]}}


def test_cooperative_plans_leave_moving_partitions_out_for_one_round():
    owned = {"a": [("t", 0), ("t", 1), ("t", 2)], "b": [("t", 3), ("t", 4), ("t", 5)]}
    plan = assign_sticky({m: ["t"] for m in "abc"}, {"t": range(6)}, owned)
    first_round = cooperative_plan(plan, owned)
    assert first_round["c"] == {"t": []}  # its two partitions are still a's and b's
    assert {m: len(first_round[m]["t"]) for m in "ab"} == {"a": 2, "b": 2}
    # Next round: a and b gave them up.
    owned = {m: [("t", p) for p in first_round[m].get("t", [])] for m in "abc"}
    second = cooperative_plan(
        assign_sticky({m: ["t"] for m in "abc"}, {"t": range(6)}, owned), owned)
    assert sorted(len(second[m]["t"]) for m in "abc") == [2, 2, 2]


# -- a real broker --------------------------------------------------------------------------------


@pytest.fixture
async def broker(tmp_path):
    async with open_broker({"port": 0, "log.dirs": str(tmp_path / "data"), "num.partitions": 4,
                            "group.initial.rebalance.delay.ms": 0,
                            "group.min.session.timeout.ms": 500,
                            "offsets.topic.num.partitions": 1}) as b:
        yield b


def options(broker, **kw):
    opts = dict(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                heartbeat_interval_ms=100, session_timeout_ms=2000, retry_backoff_ms=50)
    opts.update(kw)
    return opts


async def take(consumer, n, timeout=10):
    out = []
    with trio.fail_after(timeout):
        async for record in consumer:
            out.append(record)
            if len(out) == n:
                return out
    return out


class Recorder(ConsumerRebalanceListener):
    """Records the listener's calls as ``(name, sorted partitions)``."""

    def __init__(self):
        self.calls = []

    async def on_partitions_revoked(self, revoked):
        self.calls.append(("revoked", sorted(revoked)))

    async def on_partitions_assigned(self, assigned):
        self.calls.append(("assigned", sorted(assigned)))

    async def on_partitions_lost(self, lost):
        self.calls.append(("lost", sorted(lost)))


async def test_subscribe_read_everything_commit_and_resume_where_committed(broker):
    await produce(broker.bootstrap, "orders", 100, partitions=4)
    async with trilog.open_consumer("orders", group_id="billing", enable_auto_commit=False,
                                    **options(broker)) as consumer:
        assert consumer.assignment() == {TP("orders", p) for p in range(4)}
        assert consumer.subscription() == {"orders"}
        records = await take(consumer, 60)
        await consumer.commit()  # what it returned so far
        positions = {tp: await consumer.position(tp) for tp in consumer.assignment()}
        assert sum(positions.values()) == 60
        assert {tp: await consumer.committed(tp) for tp in positions} == positions
    async with trilog.open_consumer("orders", group_id="billing", **options(broker)) as again:
        rest = await take(again, 40)
    values = sorted(int(r.value) for r in records + rest)
    assert values == list(range(100))


async def test_records_carry_kafka_python_fields_and_deserialized_values(broker):
    await produce(broker.bootstrap, "typed", 3, partitions=1)
    async with trilog.open_consumer(
            ["typed"], group_id="g", value_deserializer=lambda v: int(v) * 10,
            key_deserializer=bytes.decode, **options(broker)) as consumer:
        records = await take(consumer, 3)
    assert [(r.topic, r.partition, r.offset, r.key, r.value) for r in records] == \
        [("typed", 0, 0, "0", 0), ("typed", 0, 1, "1", 10), ("typed", 0, 2, "2", 20)]
    assert all(r.timestamp > 0 and r.headers == () for r in records)


async def test_getmany_returns_at_most_max_records_by_partition(broker):
    await produce(broker.bootstrap, "many", 50, partitions=2)
    async with trilog.open_consumer("many", group_id="g", **options(broker)) as consumer:
        got = []
        with trio.fail_after(10):
            while len(got) < 50:
                batch = await consumer.getmany(timeout_ms=1000, max_records=7)
                assert sum(len(rs) for rs in batch.values()) <= 7
                for tp, rs in batch.items():
                    assert all(r.partition == tp.partition for r in rs)
                    assert [r.offset for r in rs] == list(range(rs[0].offset, rs[-1].offset + 1))
                    got.extend(rs)
        assert sorted(int(r.value) for r in got) == list(range(50))
        assert await consumer.getmany(timeout_ms=100) == {}


async def test_seek_to_an_offset_to_the_beginning_and_to_a_time(broker):
    await produce(broker.bootstrap, "seek", 10, partitions=1)
    await trio.sleep(0.01)  # the first ten are stamped strictly before ``middle``
    middle = int(time.time() * 1000)
    await trio.sleep(0.01)
    await produce(broker.bootstrap, "seek", 10, partitions=1, start=10)
    tp = TP("seek", 0)
    async with trilog.open_consumer("seek", group_id="g", **options(broker)) as consumer:
        assert [int(r.value) for r in await take(consumer, 20)] == list(range(20))
        consumer.seek(tp, 15)
        assert await consumer.position(tp) == 15
        assert [r.offset for r in await take(consumer, 5)] == [15, 16, 17, 18, 19]
        await consumer.seek_to_beginning(tp)
        assert (await take(consumer, 1))[0].offset == 0
        found = await consumer.offsets_for_times({tp: middle})
        assert found[tp].offset == 10 and found[tp].timestamp >= middle
        consumer.seek(tp, found[tp].offset)
        assert (await take(consumer, 1))[0].offset == 10
        assert await consumer.offsets_for_times({tp: middle + 3_600_000}) == {tp: None}
        assert await consumer.beginning_offsets([tp]) == {tp: 0}
        assert await consumer.end_offsets([tp]) == {tp: 20}
        await consumer.seek_to_end()
        assert await consumer.position(tp) == 20
        assert consumer.highwater(tp) == 20


async def test_pause_stops_only_the_paused_partitions_and_resume_restarts_them(broker):
    await produce(broker.bootstrap, "pp", 0, partitions=2)
    a, b = TP("pp", 0), TP("pp", 1)
    async with trilog.open_consumer("pp", group_id="g", **options(broker)) as consumer, \
            trilog.open_producer(broker.bootstrap) as producer:
        consumer.pause(a)
        assert consumer.paused() == {a}
        for i in range(10):
            await producer.send("pp", b"%d" % i, partition=i % 2)
        await producer.flush()
        first = await take(consumer, 5)
        assert {r.partition for r in first} == {1}
        assert await consumer.getmany(timeout_ms=300) == {}  # a's records wait
        consumer.resume(a)
        rest = await take(consumer, 5)
        assert {r.partition for r in rest} == {0}
        assert consumer.paused() == set()
        with pytest.raises(IllegalStateError):
            consumer.pause(TP("pp", 7))
    assert b in {TP(r.topic, r.partition) for r in first}


async def test_auto_commit_commits_only_what_the_application_finished(broker):
    await produce(broker.bootstrap, "auto", 10, partitions=1)
    tp = TP("auto", 0)
    async with trilog.open_consumer("auto", group_id="g", auto_commit_interval_ms=50,
                                    **options(broker)) as consumer:
        held = await take(consumer, 3)  # the third is still being processed
        await trio.sleep(0.3)
        assert await consumer.committed(tp) == held[-1].offset  # 2: offsets 0 and 1 done
    # Closing commits the processed offsets only: the third record comes again.
    async with trilog.open_consumer("auto", group_id="g", **options(broker)) as consumer:
        assert (await take(consumer, 1))[0].offset == 2


async def test_a_cancelled_consumer_commits_only_what_it_returned_and_finished(broker):
    await produce(broker.bootstrap, "cancel", 10, partitions=1)
    with trio.move_on_after(3):
        async with trilog.open_consumer("cancel", group_id="g", **options(broker)) as consumer:
            async for record in consumer:
                if record.offset == 4:
                    await trio.sleep_forever()  # cancelled in the middle of offset 4
    async with trilog.open_consumer("cancel", group_id="g", **options(broker)) as consumer:
        assert await consumer.committed(TP("cancel", 0)) == 4
        assert (await take(consumer, 1))[0].offset == 4


async def test_commit_with_explicit_offsets_and_metadata(broker):
    await produce(broker.bootstrap, "explicit", 5, partitions=1)
    tp = TP("explicit", 0)

    async def stored():
        async with open_client(broker.bootstrap) as client:
            response = await Coordinator(client, "g").request(
                OffsetFetchRequest(group_id="g", topics=None))
        return [(t.name, p.partition_index, p.committed_offset, p.metadata)
                for t in response.topics for p in t.partitions]

    async with trilog.open_consumer("explicit", group_id="g", enable_auto_commit=False,
                                    **options(broker)) as consumer:
        await consumer.commit({tp: OffsetAndMetadata(3, "note")})
        assert await consumer.committed(tp) == 3
        assert await stored() == [("explicit", 0, 3, "note")]
        await consumer.commit({("explicit", 0): 4})
        assert await consumer.committed(tp) == 4
        assert await stored() == [("explicit", 0, 4, "")]


async def test_members_split_partitions_and_the_listener_sees_kafkas_order(broker):
    await produce(broker.bootstrap, "split", 40, partitions=4)
    one, two = Recorder(), Recorder()
    async with trilog.open_consumer("split", group_id="g", listener=one,
                                    **options(broker)) as first:
        assert one.calls == [("assigned", [TP("split", p) for p in range(4)])]
        async with trilog.open_consumer("split", group_id="g", listener=two,
                                        **options(broker)) as second:
            await wait_until(lambda: len(first.assignment()) == 2 and
                             len(second.assignment()) == 2)
            assert first.assignment() | second.assignment() == {TP("split", p)
                                                                 for p in range(4)}
            # Eager: everything revoked, then the new share.
            assert one.calls[1:] == [("revoked", [TP("split", p) for p in range(4)]),
                                     ("assigned", sorted(first.assignment()))]
            assert two.calls == [("assigned", sorted(second.assignment()))]
            got = []
            with trio.fail_after(10):
                while len(got) < 40:
                    for member in (first, second):
                        for tp, records in (await member.getmany(timeout_ms=50)).items():
                            assert tp in member.assignment()
                            got.extend(records)
            assert sorted(int(r.value) for r in got) == list(range(40))
        # The second left: revoked on its way out, and the first gets everything back.
        assert two.calls[-1] == ("revoked", sorted(two.calls[0][1]))
        await wait_until(lambda: len(first.assignment()) == 4)
        assert one.calls[-1] == ("assigned", [TP("split", p) for p in range(4)])


async def test_a_member_whose_session_expires_is_told_its_partitions_are_lost(broker):
    await produce(broker.bootstrap, "lost", 0, partitions=2)
    recorder = Recorder()
    async with trilog.open_consumer("lost", group_id="g", listener=recorder,
                                    **options(broker)) as silent, \
            trilog.open_consumer("lost", group_id="g", **options(broker)) as other:
        await wait_until(lambda: len(silent.assignment()) == 1 and len(other.assignment()) == 1)
        mine = sorted(silent.assignment())
        before = len(recorder.calls)
        # Heartbeats 4 s apart: the group (2 s sessions) goes on without this member, whose
        # next heartbeat hears UNKNOWN_MEMBER_ID.
        silent._coordinator.membership._heartbeat_s = 4
        await wait_until(lambda: len(other.assignment()) == 2)
        await wait_until(lambda: len(recorder.calls) > before)
        silent._coordinator.membership._heartbeat_s = 0.1
        assert recorder.calls[before] == ("lost", mine)  # not "revoked": nothing committed
        await wait_until(lambda: recorder.calls[-1][0] == "assigned" and
                         len(recorder.calls) > before + 1)


async def test_a_listener_that_raises_stops_the_consumer_with_its_error(broker):
    await produce(broker.bootstrap, "raises", 5, partitions=1)

    class Broken(ConsumerRebalanceListener):
        async def on_partitions_assigned(self, assigned):
            raise RuntimeError("listener broke")

    with pytest.raises(RuntimeError, match="listener broke"):
        async with trilog.open_consumer("raises", group_id="g", listener=Broken(),
                                        **options(broker)) as consumer:
            await take(consumer, 5)


async def test_manual_assignment_without_a_group(broker):
    await produce(broker.bootstrap, "manual", 20, partitions=2)
    async with trilog.open_consumer(**options(broker)) as consumer:
        assert consumer.assignment() == set()
        consumer.assign([TP("manual", 1)])
        records = await take(consumer, 10)
        assert {r.partition for r in records} == {1}
        with pytest.raises(IllegalStateError, match="group_id"):
            await consumer.commit()
        with pytest.raises(IllegalStateError, match="mutually exclusive"):
            consumer.subscribe(["manual"])
        consumer.unsubscribe()
        assert consumer.assignment() == set()
        consumer.subscribe(["manual"])  # no group: every partition
        await wait_until(lambda: len(consumer.assignment()) == 2)
        assert len(await take(consumer, 20)) == 20


async def test_a_pattern_subscription_follows_new_topics(broker):
    await produce(broker.bootstrap, "logs.a", 1, partitions=1)
    await produce(broker.bootstrap, "other", 1, partitions=1)
    async with trilog.open_consumer(pattern=r"logs\..*", group_id="g", metadata_max_age_ms=200,
                                    **options(broker)) as consumer:
        assert consumer.subscription() == {"logs.a"}
        await produce(broker.bootstrap, "logs.b", 1, partitions=1)
        await wait_until(lambda: consumer.subscription() == {"logs.a", "logs.b"})
        await wait_until(lambda: TP("logs.b", 0) in consumer.assignment())
        assert sorted(r.topic for r in await take(consumer, 2)) == ["logs.a", "logs.b"]


async def test_no_committed_offset_with_reset_none_is_a_clear_error(broker):
    await produce(broker.bootstrap, "none", 1, partitions=1)
    with pytest.raises(NoOffsetForPartitionError, match="auto_offset_reset='none'"):
        async with trilog.open_consumer("none", group_id="fresh",
                                        **options(broker, auto_offset_reset="none")) as consumer:
            await take(consumer, 1)


def test_bad_settings_are_clear_errors():
    async def open_with(**kw):
        async with trilog.open_consumer("t", **kw):
            pass

    for kw, match in [
        ({"auto_offset_reset": "oldest"}, "auto_offset_reset"),
        # (read_committed was refused here before transactions; a bad name still is)
        ({"isolation_level": "read_commited"}, "isolation_level"),
        ({"partition_assignment_strategy": ["magic"]}, "magic"),
        ({"heartbeat_interval_ms": 5000, "session_timeout_ms": 3000}, "heartbeat"),
        ({"max_poll_records": 0}, "max_poll_records"),
    ]:
        with pytest.raises(ValueError, match=match):
            trio.run(lambda: open_with(**kw))
    with pytest.raises(TypeError):
        trio.run(lambda: open_with(enable_auto_commits=True))


async def test_kafka_python_assignor_classes_name_the_strategy(broker):
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    await produce(broker.bootstrap, "rr", 0, partitions=2)
    async with trilog.open_consumer(
            "rr", group_id="g", partition_assignment_strategy=[RoundRobinPartitionAssignor],
            **options(broker)) as consumer:
        assert consumer._coordinator.membership.protocol == "roundrobin"


# -- mixed groups: trilog, kafka-python and librdkafka members ----------------------------------


def kafka_python_member(bootstrap, group, topics, strategy, stop, out, assigned):
    """A kafka-python member polling until ``stop``: its records into ``out``, its current
    assignment into ``assigned`` (replaced in place)."""
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    consumer = KafkaConsumer(*topics, bootstrap_servers=bootstrap, group_id=group,
                             partition_assignment_strategy=[assignor[strategy]],
                             auto_offset_reset="earliest", session_timeout_ms=6000,
                             heartbeat_interval_ms=100, fetch_max_wait_ms=100,
                             retry_backoff_ms=50, request_timeout_ms=15000)
    try:
        while not stop.is_set():
            for records in consumer.poll(timeout_ms=1000).values():
                out.extend((r.topic, r.partition, int(r.value)) for r in records)
            assigned.clear()
            assigned.update((tp.topic, tp.partition) for tp in consumer.assignment())
    finally:
        consumer.close()


def librdkafka_member(bootstrap, group, topics, strategy, stop, out, assigned):
    """The same with confluent-kafka (librdkafka)."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "partition.assignment.strategy": strategy,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 100, "fetch.wait.max.ms": 100})

    def on_assign(_consumer, partitions):
        assigned.clear()
        assigned.update((p.topic, p.partition) for p in partitions)

    consumer.subscribe(list(topics), on_assign=on_assign,
                       on_revoke=lambda _consumer, _partitions: assigned.clear())
    try:
        while not stop.is_set():
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                out.append((message.topic(), message.partition(), int(message.value())))
    finally:
        consumer.close()


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
async def test_trilog_kafka_python_and_librdkafka_members_share_a_group(broker, strategy):
    import threading

    topics = ("mixa", "mixb")
    for topic in topics:
        await produce(broker.bootstrap, topic, 0, partitions=2)
    group = f"mixed-{strategy}"
    every = {(t, p) for t in topics for p in range(2)}
    stop = threading.Event()
    members = [kafka_python_member, librdkafka_member]
    outs: list[list] = [[], []]
    assigned: list[set] = [set(), set()]
    ours: list = []
    async with trilog.open_consumer(
            *topics, group_id=group, partition_assignment_strategy=[strategy],
            **options(broker, session_timeout_ms=6000)) as consumer, \
            trilog.client.open_group_admin(broker.bootstrap) as admin:
        # The other members stop (and leave) before this one does: its leaving would give
        # them its partitions to read again from the last commit.
        async with trio.open_nursery() as nursery:
            try:
                for member, out, mine in zip(members, outs, assigned):
                    nursery.start_soon(trio.to_thread.run_sync, member, broker.bootstrap,
                                       group, topics, strategy, stop, out, mine)

                async def settled():
                    description = await admin.describe_group(group)
                    owned = [set(consumer.assignment()), *assigned]
                    if description.state != "Stable" or len(description.members) != 3 or \
                            sorted(tp for o in owned for tp in o) != sorted(every):
                        return None
                    return description

                with trio.fail_after(60):
                    while (description := await settled()) is None:
                        await trio.sleep(0.1)
                assert description.protocol == strategy
                # The group's plan is the assignor's, whoever led it.
                plan = ASSIGNORS[strategy]({m.member_id: topics for m in description.members},
                                           {t: range(2) for t in topics}, {})
                assert {m.member_id: sorted(m.assignment) for m in description.members} == \
                    {m: sorted((t, p) for t, ps in a.items() for p in ps)
                     for m, a in plan.items()}
                me = consumer._coordinator.membership.member_id
                assert consumer.assignment() == {TP(t, p) for t, ps in plan[me].items()
                                                 for p in ps}
                async with trilog.open_producer(broker.bootstrap) as producer:
                    for i in range(40):
                        await producer.send(topics[i % 2], b"%d" % i, partition=i // 2 % 2)
                with trio.fail_after(30):
                    while len(ours) + len(outs[0]) + len(outs[1]) < 40:
                        for records in (await consumer.getmany(timeout_ms=100)).values():
                            ours.extend((r.topic, r.partition, int(r.value)) for r in records)
            finally:
                stop.set()
    got = ours + outs[0] + outs[1]
    # Every record was read; some maybe twice: the members leaving one by one at the end
    # rebalance the others, who read again from the last commit (at least once).
    assert {v for _, _, v in got} == set(range(40))
    assert {(t, p) for t, p, _ in ours} <= {(t, p) for t, ps in plan[me].items() for p in ps}


# -- static membership (KIP-345) ------------------------------------------------------------------


async def test_a_static_member_restarted_within_its_session_keeps_its_partitions(broker):
    await produce(broker.bootstrap, "static", 0, partitions=4)
    opts = options(broker, session_timeout_ms=6000)
    async with trilog.open_consumer("static", group_id="g", group_instance_id="one",
                                    **opts) as one:
        async with trilog.open_consumer("static", group_id="g", group_instance_id="two",
                                        **opts) as two:
            await wait_until(lambda: len(one.assignment()) == 2 and len(two.assignment()) == 2)
            theirs = two.assignment()
        # "two" stopped without leaving (static members never send LeaveGroup): the group
        # keeps its partitions for it until its session (6 s) runs out.
        generation, rebalances = one._coordinator.membership.generation_id, one.rebalances
        async with trilog.open_consumer("static", group_id="g", group_instance_id="two",
                                        **opts) as again:
            assert again.assignment() == theirs
            assert again._coordinator.membership.generation_id == generation
            await trio.sleep(0.5)  # heartbeats go on: no rebalance comes
            assert one.rebalances == rebalances
            assert one._coordinator.membership.generation_id == generation
            async with trilog.client.open_group_admin(broker.bootstrap) as admin:
                described = await admin.describe_group("g")
            assert described.state == "Stable" and len(described.members) == 2
            assert {m.group_instance_id for m in described.members} == {"one", "two"}


async def test_a_second_process_with_the_same_instance_fences_the_first(broker):
    from trilog.errors import FencedInstanceIdError

    await produce(broker.bootstrap, "fenced", 1, partitions=1)
    opts = options(broker, session_timeout_ms=6000)
    with pytest.raises(FencedInstanceIdError, match="group_instance_id 'dup'"):
        async with trilog.open_consumer("fenced", group_id="g", group_instance_id="dup",
                                        **opts) as first:
            async with trilog.open_consumer("fenced", group_id="g", group_instance_id="dup",
                                            **opts) as second:
                assert second.assignment() == {TP("fenced", 0)}
                with trio.fail_after(10):
                    while True:  # the first hears it is fenced at its next heartbeat
                        await first.getmany(timeout_ms=100)


# -- cooperative rebalancing (KIP-429) ------------------------------------------------------------


class SlowToRevoke(ConsumerRebalanceListener):
    """Cleans up for a second before giving partitions up (as an application that flushes
    state): the pause it causes shows which partitions a rebalance stops."""

    async def on_partitions_revoked(self, revoked):
        if revoked:
            await trio.sleep(1.0)


def longest_pause(times: list[float], start: float, end: float) -> float:
    """The longest stretch of [start, end] without a delivery, given delivery times."""
    inside = [t for t in times if start <= t <= end]
    edges = [start, *inside, end]
    return max(b - a for a, b in zip(edges, edges[1:]))


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
async def test_while_a_third_member_joins_only_the_moving_partitions_pause(broker, strategy):
    topic, partitions = "coop", 12
    await produce(broker.bootstrap, topic, 0, partitions=partitions)
    opts = options(broker, partition_assignment_strategy=[strategy], session_timeout_ms=6000,
                   fetch_max_wait_ms=20)
    delivered: dict[int, list[float]] = {p: [] for p in range(partitions)}

    async def keep_producing(producer):
        while True:
            for p in range(partitions):
                await producer.send(topic, b"x", partition=p)
            await trio.sleep(0.02)

    async def keep_reading(consumer):
        while True:
            for tp, _records in (await consumer.getmany(timeout_ms=20)).items():
                delivered[tp.partition].append(trio.current_time())

    async with trilog.open_producer(broker.bootstrap, linger_ms=1) as producer, \
            trio.open_nursery() as nursery:
        nursery.start_soon(keep_producing, producer)
        async with trilog.open_consumer(topic, group_id="g", listener=SlowToRevoke(),
                                        **opts) as a, \
                trilog.open_consumer(topic, group_id="g", listener=SlowToRevoke(),
                                     **opts) as b:
            await wait_until(lambda: len(a.assignment()) == len(b.assignment()) == 6)
            nursery.start_soon(keep_reading, a)
            nursery.start_soon(keep_reading, b)
            await trio.sleep(0.5)
            before = {tp.partition: "a" for tp in a.assignment()} | \
                {tp.partition: "b" for tp in b.assignment()}
            start = trio.current_time()
            async with trilog.open_consumer(topic, group_id="g", **opts) as c:
                nursery.start_soon(keep_reading, c)
                await wait_until(lambda: [len(m.assignment()) for m in (a, b, c)] == [4, 4, 4])
                await trio.sleep(0.5)
                end = trio.current_time()
                after = {tp.partition: name for name, m in (("a", a), ("b", b), ("c", c))
                         for tp in m.assignment()}
                nursery.cancel_scope.cancel()
    stayed = [p for p in range(partitions) if before[p] == after[p]]
    moved = [p for p in range(partitions) if before[p] != after[p]]
    pauses = {p: longest_pause(delivered[p], start, end) for p in range(partitions)}
    if strategy == "cooperative-sticky":
        # Sticky: only the four that c needs move.  The partitions that stay never stop;
        # those that move wait for their owner's cleanup (1 s) and the second round.
        assert len(moved) == 4 and len(stayed) == 8
        assert all(pauses[p] < 0.5 for p in stayed), pauses
        assert all(pauses[p] >= 0.9 for p in moved), pauses
    else:
        # Eager: every partition is revoked, and waits for the slowest cleanup.
        assert all(pauses[p] >= 0.9 for p in range(partitions)), pauses


@pytest.mark.slow
async def test_trilog_and_librdkafka_share_a_cooperative_sticky_group(broker):
    import threading

    await produce(broker.bootstrap, "coop-mixed", 0, partitions=4)
    stop = threading.Event()
    theirs: list = []
    their_partitions: set = set()
    every = {TP("coop-mixed", p) for p in range(4)}
    async with trilog.open_consumer(
            "coop-mixed", group_id="coop", partition_assignment_strategy=["cooperative-sticky"],
            **options(broker, session_timeout_ms=6000)) as consumer:
        assert consumer.assignment() == every
        async with trio.open_nursery() as nursery:
            try:
                # librdkafka's cooperative protocol: incremental assign and unassign.
                def member():
                    from confluent_kafka import Consumer

                    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "coop",
                                  "partition.assignment.strategy": "cooperative-sticky",
                                  "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                                  "heartbeat.interval.ms": 100, "fetch.wait.max.ms": 100})

                    def on_assign(_c, ps):
                        their_partitions.update((p.topic, p.partition) for p in ps)

                    def on_revoke(_c, ps):
                        their_partitions.difference_update((p.topic, p.partition) for p in ps)

                    c.subscribe(["coop-mixed"], on_assign=on_assign, on_revoke=on_revoke)
                    try:
                        while not stop.is_set():
                            m = c.poll(0.1)
                            if m is not None and not m.error():
                                theirs.append(m.partition())
                    finally:
                        c.close()

                nursery.start_soon(trio.to_thread.run_sync, member)
                await wait_until(lambda: len(consumer.assignment()) == 2 and
                                 len(their_partitions) == 2, timeout=30)
                assert {TP(*tp) for tp in their_partitions} | consumer.assignment() == every
                assert consumer._coordinator.membership.protocol == "cooperative-sticky"
                mine = consumer.assignment()
                async with trilog.open_producer(broker.bootstrap) as producer:
                    for i in range(40):
                        await producer.send("coop-mixed", b"%d" % i, partition=i % 4)
                ours = []
                with trio.fail_after(20):
                    while len(ours) + len(theirs) < 40:
                        for tp, records in (await consumer.getmany(timeout_ms=100)).items():
                            assert tp in mine
                            ours.extend(records)
            finally:
                stop.set()
        # librdkafka left: its two partitions come to us, ours never left.
        await wait_until(lambda: consumer.assignment() == every, timeout=20)
    assert len(ours) + len(theirs) == 40


MEMBER_SCRIPT = """
import sys, trio, trilog
async def main(bootstrap):
    async with trilog.open_consumer("killed", group_id="g", bootstrap_servers=bootstrap,
                                    session_timeout_ms=2000, heartbeat_interval_ms=100,
                                    auto_offset_reset="earliest") as consumer:
        print(sorted(p for _, p in consumer.assignment()), flush=True)
        await trio.sleep_forever()
trio.run(main, sys.argv[1])
"""


@pytest.mark.slow
async def test_the_listener_hears_a_join_and_a_sigkilled_member_in_kafkas_order(broker):
    import json
    import signal
    import subprocess
    import sys

    await produce(broker.bootstrap, "killed", 0, partitions=4)
    recorder = Recorder()
    every = [TP("killed", p) for p in range(4)]
    async with trilog.open_consumer("killed", group_id="g", listener=recorder,
                                    **options(broker)) as consumer:
        assert recorder.calls == [("assigned", every)]
        other = await trio.lowlevel.open_process(
            [sys.executable, "-c", MEMBER_SCRIPT, broker.bootstrap], stdout=subprocess.PIPE)
        try:
            with trio.fail_after(30):
                theirs = (await other.stdout.receive_some()).decode().strip()
            await wait_until(lambda: len(consumer.assignment()) == 2)
            mine = sorted(consumer.assignment())
            assert sorted([p for _, p in mine] + json.loads(theirs)) == [0, 1, 2, 3]
            killed_at = trio.current_time()
            other.send_signal(signal.SIGKILL)
            await other.wait()
            # No LeaveGroup: the group notices when the member's session (2 s) runs out.
            await wait_until(lambda: len(consumer.assignment()) == 4, timeout=20)
            assert trio.current_time() - killed_at >= 1.5
        finally:
            if other.returncode is None:
                other.kill()
                await other.wait()
    assert recorder.calls == [
        ("assigned", every),
        ("revoked", every), ("assigned", mine),   # the other one joined
        ("revoked", mine), ("assigned", every),   # ... and was killed
        ("revoked", every),                        # closing
    ]


# -- found in review ------------------------------------------------------------------------------


async def test_a_member_closing_cleanly_hands_its_partitions_over_at_once(broker):
    await produce(broker.bootstrap, "handover", 0, partitions=2)
    opts = options(broker, session_timeout_ms=6000)
    async with trilog.open_consumer("handover", group_id="g", **opts) as stays:
        async with trilog.open_consumer("handover", group_id="g", **opts):
            await wait_until(lambda: len(stays.assignment()) == 1)
        # LeaveGroup (v3: the member in a list): a rebalance now, not a session (6 s) later.
        closed_at = trio.current_time()
        await wait_until(lambda: len(stays.assignment()) == 2, timeout=5)
        assert trio.current_time() - closed_at < 3


async def test_a_slow_revoke_listener_keeps_its_session(broker):
    await produce(broker.bootstrap, "slow", 0, partitions=2)

    class Slow(Recorder):
        async def on_partitions_revoked(self, revoked):
            await super().on_partitions_revoked(revoked)
            await trio.sleep(3)  # longer than the session (2 s): heartbeats must go on

    slow = Slow()
    async with trilog.open_consumer("slow", group_id="g", listener=slow,
                                    **options(broker)) as a:
        async with trilog.open_consumer("slow", group_id="g", **options(broker)):
            await wait_until(lambda: len(a.assignment()) == 1, timeout=20)
    assert [name for name, _ in slow.calls[:3]] == ["assigned", "revoked", "assigned"]
    assert "lost" not in [name for name, _ in slow.calls]


async def test_an_explicit_commit_is_not_taken_back_by_auto_commit(broker):
    await produce(broker.bootstrap, "explicit-auto", 20, partitions=1)
    tp = TP("explicit-auto", 0)
    async with trilog.open_consumer("explicit-auto", group_id="g", auto_commit_interval_ms=50,
                                    **options(broker)) as consumer:
        with trio.fail_after(10):
            while not await consumer.getmany(timeout_ms=500, max_records=2):
                pass
        await consumer.commit({tp: 15})
        await trio.sleep(0.3)  # auto-commits run
        assert await consumer.committed(tp) == 15
    async with trilog.open_consumer("explicit-auto", group_id="g", **options(broker)) as again:
        assert await again.committed(tp) == 15  # closing did not take it back either


async def test_unsubscribe_then_subscribe_revokes_and_commits(broker):
    await produce(broker.bootstrap, "resub", 10, partitions=1)
    recorder = Recorder()
    tp = TP("resub", 0)
    async with trilog.open_consumer("resub", group_id="g", listener=recorder,
                                    **options(broker)) as consumer:
        await take(consumer, 6)
        await consumer.getmany(timeout_ms=0)  # the sixth is processed now
        consumer.unsubscribe()
        consumer.subscribe(["resub"], listener=recorder)
        await wait_until(lambda: len(recorder.calls) >= 3)
        assert [name for name, _ in recorder.calls[:3]] == ["assigned", "revoked", "assigned"]
        assert await consumer.committed(tp) == 6
        assert (await take(consumer, 1))[0].offset == 6


async def test_without_a_group_new_topics_do_not_reset_the_others(broker):
    await produce(broker.bootstrap, "nogroup.a", 5, partitions=1)
    async with trilog.open_consumer(pattern=r"nogroup\..*", metadata_max_age_ms=200,
                                    **options(broker)) as consumer:
        first = await take(consumer, 5)
        assert [r.offset for r in first] == [0, 1, 2, 3, 4]
        await produce(broker.bootstrap, "nogroup.b", 3, partitions=1)
        await wait_until(lambda: TP("nogroup.b", 0) in consumer.assignment())
        later = await take(consumer, 3)
        # Only the new topic's records: nogroup.a kept its position.
        assert {r.topic for r in later} == {"nogroup.b"}
        assert await consumer.getmany(timeout_ms=300) == {}


async def test_bad_calls_are_clear_errors(broker):
    await produce(broker.bootstrap, "calls", 1, partitions=1)
    tp = TP("calls", 0)
    async with trilog.open_consumer("calls", group_id="g", **options(broker)) as consumer:
        with pytest.raises(ValueError, match="not both or neither"):
            consumer.subscribe(["calls"], pattern="c.*")
        with pytest.raises(ValueError, match="not both or neither"):
            consumer.subscribe()
        with pytest.raises(ValueError, match="negative"):
            consumer.seek(tp, -1)
        with pytest.raises(ValueError, match="negative"):
            await consumer.offsets_for_times({tp: -5})
        with pytest.raises(IllegalStateError, match="not assigned"):
            consumer.seek(TP("calls", 9), 0)
        with pytest.raises(IllegalStateError, match="not assigned"):
            await consumer.position(TP("other", 0))
