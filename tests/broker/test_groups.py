"""Group membership: Kafka's state machine (pure, with explicit time), the group APIs over
the wire (in-process brokers, standalone and ZooKeeper mode), and kafka-python's
``KafkaConsumer(group_id=...)`` against a ``trilog broker`` process."""

from __future__ import annotations

import time
from functools import partial

import pytest
import trio
from broker_helpers import (
    connect,
    create_topics_request,
    group_broker_config,
    roundtrip,
    trio_connect,
    trio_roundtrip,
)

from trilog import protocol as p
from trilog.broker import open_broker
from trilog.broker.groups._group import (
    Group,
    GroupState,
    JoinResult,
    Member,
    Reply,
    SyncResult,
    select_protocol,
)
from trilog.broker.groups._offsets import OFFSETS_TOPIC, partition_for

NONE, NOT_AVAILABLE, NOT_COORDINATOR = 0, 15, 16
ILLEGAL_GENERATION, INCONSISTENT_PROTOCOL, INVALID_GROUP_ID = 22, 23, 24
UNKNOWN_MEMBER_ID, INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS = 25, 26, 27
MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID = 79, 82

RANGE = [("range", b"r-meta"), ("roundrobin", b"rr-meta")]


# -- the state machine, with explicit time ------------------------------------------------------


def _join(group: Group, member_id: str = "", now: float = 0.0, *, client: str = "c",
          protocols=RANGE, session: float = 10.0, rebalance: float = 30.0,
          protocol_type: str = "consumer"):
    return group.join(member_id, client_id=client, client_host="/127.0.0.1",
                      session_timeout_s=session, rebalance_timeout_s=rebalance,
                      protocol_type=protocol_type, protocols=protocols, now=now)


def _result(reply) -> JoinResult | SyncResult:
    assert isinstance(reply, Reply) and reply.done, reply
    return reply.value


def _stable_pair(group: Group) -> tuple[str, str]:
    """Two members through one rebalance and a sync: (leader, follower)."""
    a, b = _join(group, client="a"), _join(group, client="b")
    now = 0.0
    while not a.done:
        now += 0.5
        group.poll(now)
    ra, rb = _result(a), _result(b)
    follower = group.sync(rb.member_id, 1, {}, now)
    leader = group.sync(ra.member_id, 1, {ra.member_id: b"A", rb.member_id: b"B"}, now)
    assert _result(leader) == SyncResult(NONE, b"A") and _result(follower) == SyncResult(NONE, b"B")
    assert group.state is GroupState.STABLE
    return ra.member_id, rb.member_id


def test_select_protocol_is_a_vote_among_the_common_ones():
    def member(*names):
        return Member("m", "c", "h", 10, 10, "consumer", [(n, b"") for n in names])

    assert select_protocol([member("range", "rr"), member("rr", "range"), member("rr")]) == "rr"
    assert select_protocol([member("a", "b"), member("b", "a")]) == "a"  # tie: the first's order
    assert select_protocol([member("a"), member("b")]) is None
    assert select_protocol([]) is None


async def test_first_rebalance_waits_the_initial_delay_and_extends_it_for_newcomers():
    group = Group("g", initial_delay_s=3.0)
    a = _join(group, now=0.0, client="a")
    assert group.state is GroupState.PREPARING_REBALANCE and not a.done
    b = _join(group, now=1.0, client="b")
    group.poll(2.9)
    assert not a.done
    group.poll(3.0)  # a newcomer arrived during the delay: wait another delay
    assert not a.done and group.join_deadline == 6.0
    group.poll(6.0)
    ra, rb = _result(a), _result(b)
    assert ra.error == rb.error == NONE
    assert ra.generation == rb.generation == group.generation == 1
    assert ra.member_id.startswith("a-") and rb.member_id.startswith("b-")
    assert ra.leader == rb.leader == ra.member_id  # the first joiner leads
    assert ra.protocol == "range"
    assert ra.members == ((ra.member_id, None, b"r-meta"), (rb.member_id, None, b"r-meta"))
    assert rb.members == ()
    assert group.state is GroupState.COMPLETING_REBALANCE


async def test_the_initial_delay_is_capped_by_the_rebalance_timeout():
    group = Group("g", initial_delay_s=3.0)
    first = _join(group, now=0.0, rebalance=5.0)
    t = 0.0
    while not first.done:
        t += 0.5
        if t < 20:
            _join(group, now=t, rebalance=5.0)  # a steady stream of newcomers
        group.poll(t)
    assert t <= 5.5


async def test_sync_parks_followers_until_the_leader_assigns():
    group = Group("g", initial_delay_s=1.0)
    a, b = _join(group, client="a"), _join(group, client="b")
    group.poll(1.0)
    group.poll(2.0)
    ra, rb = _result(a), _result(b)
    follower = group.sync(rb.member_id, 1, {}, 0.0)
    assert isinstance(follower, Reply) and not follower.done
    assert group.heartbeat(rb.member_id, 1, 0.5) == NONE  # fine while completing
    assert group.sync(ra.member_id, 0, {}, 0.0) == SyncResult(ILLEGAL_GENERATION)
    assert group.sync("stranger", 1, {}, 0.0) == SyncResult(UNKNOWN_MEMBER_ID)
    leader = group.sync(ra.member_id, 1, {rb.member_id: b"B"}, 1.0)
    assert _result(follower) == SyncResult(NONE, b"B")
    assert _result(leader) == SyncResult(NONE, b"")  # missing from the assignment: empty
    assert group.state is GroupState.STABLE
    assert group.sync(rb.member_id, 1, {}, 2.0) == SyncResult(NONE, b"B")  # again, at once


async def test_a_new_member_makes_the_others_rejoin_and_silent_ones_are_dropped():
    group = Group("g", initial_delay_s=1.0)
    leader, follower = _stable_pair(group)
    now = 200.0
    for m in (leader, follower):
        assert group.heartbeat(m, 1, now) == NONE
    c = _join(group, now=now, client="c")
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.heartbeat(leader, 1, now + 1) == REBALANCE_IN_PROGRESS
    assert group.heartbeat(leader, 0, now + 1) == ILLEGAL_GENERATION
    assert group.sync(leader, 1, {}, now + 1) == SyncResult(REBALANCE_IN_PROGRESS)
    a = _join(group, leader, now + 2)
    # The follower keeps heartbeating but never rejoins: it is dropped at the rebalance
    # timeout (30 s), not before.
    for t in range(3, 30, 3):
        assert group.heartbeat(follower, 1, now + t) == REBALANCE_IN_PROGRESS
        group.poll(now + t)
    assert not a.done
    group.poll(now + 30)
    ra, rc = _result(a), _result(c)
    assert ra.generation == rc.generation == 2
    assert ra.leader == leader and [m for m, _, _ in ra.members] == [leader, rc.member_id]
    assert follower not in group.members
    assert group.heartbeat(follower, 2, now + 31) == UNKNOWN_MEMBER_ID


async def test_rebalance_ends_as_soon_as_every_member_rejoined():
    group = Group("g", initial_delay_s=1.0)
    leader, follower = _stable_pair(group)
    assert group.heartbeat(leader, 1, 149.0) == group.heartbeat(follower, 1, 149.0) == NONE
    a = _join(group, leader, 150.0, protocols=[("roundrobin", b"x")])  # new metadata
    assert group.state is GroupState.PREPARING_REBALANCE and not a.done
    b = _join(group, follower, 151.0)
    assert _result(a).generation == _result(b).generation == 2
    assert _result(a).protocol == "roundrobin"  # the only common one


async def test_session_expiry_removes_the_member_and_rebalances():
    group = Group("g", initial_delay_s=1.0)
    leader, follower = _stable_pair(group)
    now = 100.0
    group.heartbeat(leader, 1, now)
    group.heartbeat(follower, 1, now + 5)
    assert group.next_deadline() == now + 10
    assert group.poll(now + 9.9) == []
    assert group.poll(now + 10) == [leader]
    assert group.state is GroupState.PREPARING_REBALANCE
    b = _join(group, follower, now + 11)
    rb = _result(b)  # the only member left rejoined: done at once, and it leads now
    assert (rb.generation, rb.leader) == (2, follower)
    assert group.heartbeat(leader, 1, now + 11) == UNKNOWN_MEMBER_ID


async def test_leaving_and_the_last_one_out_empties_the_group():
    group = Group("g", initial_delay_s=1.0)
    leader, follower = _stable_pair(group)
    assert group.leave("stranger", 5.0) == UNKNOWN_MEMBER_ID
    assert group.leave(leader, 5.0) == NONE
    assert group.state is GroupState.PREPARING_REBALANCE and group.leader_id == follower
    assert group.leave(follower, 6.0) == NONE
    assert group.state is GroupState.EMPTY and group.generation == 2 and not group.members


async def test_inconsistent_protocols_and_unknown_members():
    group = Group("g", initial_delay_s=1.0)
    assert _join(group, protocols=[]).error == INCONSISTENT_PROTOCOL
    assert _join(group, protocol_type="").error == INCONSISTENT_PROTOCOL
    _stable_pair(group)
    assert _join(group, protocol_type="connect").error == INCONSISTENT_PROTOCOL
    assert _join(group, protocols=[("sticky", b"")]).error == INCONSISTENT_PROTOCOL
    assert _join(group, "stranger").error == UNKNOWN_MEMBER_ID
    assert group.state is GroupState.STABLE


async def test_a_stable_follower_rejoining_unchanged_gets_the_current_generation():
    group = Group("g", initial_delay_s=1.0)
    leader, follower = _stable_pair(group)
    again = _join(group, follower, 5.0)
    assert again == JoinResult(NONE, 1, "range", leader, follower, ())
    assert group.state is GroupState.STABLE


def _join_static(group: Group, instance: str, member_id: str = "", now: float = 0.0, **kw):
    return group.join(member_id, client_id="c", client_host="/127.0.0.1",
                      session_timeout_s=kw.get("session", 10.0), rebalance_timeout_s=30.0,
                      protocol_type="consumer", protocols=kw.get("protocols", RANGE), now=now,
                      group_instance_id=instance)


def _stable_static_pair(group: Group) -> tuple[str, str]:
    a, b = _join_static(group, "ia"), _join_static(group, "ib")
    now = 0.0
    while not a.done:
        now += 0.5
        group.poll(now)
    ra, rb = _result(a), _result(b)
    group.sync(rb.member_id, 1, {}, now, "ib")
    group.sync(ra.member_id, 1, {ra.member_id: b"A", rb.member_id: b"B"}, now, "ia")
    assert group.state is GroupState.STABLE
    return ra.member_id, rb.member_id


async def test_a_static_member_that_restarts_gets_its_assignment_without_a_rebalance():
    group = Group("g", initial_delay_s=1.0)
    leader, follower = _stable_static_pair(group)
    assert group.static_members == {"ia": leader, "ib": follower}
    # The follower restarts: a JoinGroup with no member id but its instance.
    again = _join_static(group, "ib", now=5.0)
    assert isinstance(again, JoinResult) and again.error == NONE
    assert again.generation == 1 and again.member_id != follower
    assert group.state is GroupState.STABLE and group.generation == 1
    assert group.sync(again.member_id, 1, {}, 5.0, "ib") == SyncResult(NONE, b"B")
    # The old incarnation is fenced, the leader untouched.
    assert group.heartbeat(follower, 1, 5.0, "ib") == FENCED_INSTANCE_ID
    assert group.sync(follower, 1, {}, 5.0, "ib") == SyncResult(FENCED_INSTANCE_ID)
    assert group.validate_commit(follower, 1, 5.0, "ib") == FENCED_INSTANCE_ID
    assert group.heartbeat(leader, 1, 5.0, "ia") == NONE
    # The leader restarts: it is answered with the old leader id, so it does not assign.
    back = _join_static(group, "ia", now=6.0)
    assert isinstance(back, JoinResult) and back.leader == leader != back.member_id
    assert group.leader_id == back.member_id and group.generation == 1
    assert group.sync(back.member_id, 1, {}, 6.0, "ia") == SyncResult(NONE, b"A")


async def test_a_static_member_leaves_by_its_session_or_by_its_instance_only():
    group = Group("g", initial_delay_s=1.0)
    leader, follower = _stable_static_pair(group)
    group.heartbeat(leader, 1, 9.0, "ia")
    expired = group.poll(12.5)  # the follower's session (10 s) ran out
    assert expired == [follower] and group.static_members == {"ia": leader}
    assert group.state is GroupState.PREPARING_REBALANCE
    group = Group("h", initial_delay_s=1.0)
    leader, follower = _stable_static_pair(group)
    assert group.leave("", 1.0, "nobody") == UNKNOWN_MEMBER_ID
    assert group.leave("someone-else", 1.0, "ib") == FENCED_INSTANCE_ID
    assert group.leave("", 1.0, "ib") == NONE  # by instance alone
    assert set(group.static_members) == {"ia"} and set(group.members) == {leader}


async def test_a_new_dynamic_member_of_join_group_v4_gets_its_member_id_first():
    group = Group("g", initial_delay_s=0.0)
    first = group.join("", client_id="c", client_host="/h", session_timeout_s=10.0,
                       rebalance_timeout_s=30.0, protocol_type="consumer", protocols=RANGE,
                       now=0.0, require_known_member_id=True)
    assert isinstance(first, JoinResult) and first.error == MEMBER_ID_REQUIRED
    assert first.member_id.startswith("c-") and group.members == {}
    joined = _join(group, first.member_id, now=0.1)
    group.poll(0.2)
    assert _result(joined).error == NONE and _result(joined).member_id == first.member_id
    # An id handed out and never used lapses after the session timeout.
    lapsing = group.join("", client_id="d", client_host="/h", session_timeout_s=1.0,
                         rebalance_timeout_s=30.0, protocol_type="consumer", protocols=RANGE,
                         now=1.0, require_known_member_id=True)
    group.poll(2.5)
    assert _join(group, lapsing.member_id, now=3.0) == JoinResult(
        UNKNOWN_MEMBER_ID, member_id=lapsing.member_id)


async def test_commit_validation():
    group = Group("g", initial_delay_s=0.0)  # no delay: the first joiner completes at once
    assert group.validate_commit("", -1, 0.0) == NONE  # simple consumer, empty group
    a = _join(group, client="a")
    group.poll(0.0)
    ra = _result(a)
    assert group.validate_commit(ra.member_id, 1, 0.0) == REBALANCE_IN_PROGRESS  # completing
    group.sync(ra.member_id, 1, {}, 0.0)
    assert group.validate_commit(ra.member_id, 1, 0.0) == NONE
    assert group.validate_commit(ra.member_id, 0, 0.0) == ILLEGAL_GENERATION
    assert group.validate_commit("", -1, 0.0) == UNKNOWN_MEMBER_ID  # the group is managed
    assert group.validate_commit("stranger", 1, 0.0) == UNKNOWN_MEMBER_ID


async def test_shutdown_answers_parked_requests():
    group = Group("g", initial_delay_s=60.0)
    a = _join(group)
    group.shutdown()
    assert _result(a).error == NOT_COORDINATOR
    assert group.state is GroupState.DEAD


# -- over the wire ---------------------------------------------------------------------------


def join_request(group: str, member_id: str = "", *, session_ms: int = 10000,
                 rebalance_ms: int = 20000, protocols=RANGE, protocol_type: str = "consumer"):
    R = p.JoinGroupRequest
    return R(group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
             member_id=member_id, protocol_type=protocol_type,
             protocols=[R.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols])


def sync_request(group: str, generation: int, member_id: str, assignments: dict[str, bytes]):
    R = p.SyncGroupRequest
    return R(group_id=group, generation_id=generation, member_id=member_id,
             assignments=[R.SyncGroupRequestAssignment(member_id=m, assignment=a)
                          for m, a in assignments.items()])


_config = partial(group_broker_config, offsets_partitions=4)


async def _coordinator(stream, group: str):
    """FindCoordinator until it answers, then wait for the coordinator to load the group
    (on ``stream``'s broker: the coordinator when standalone)."""
    with trio.fail_after(10):
        while True:
            response = await trio_roundtrip(stream, p.FindCoordinatorRequest(key=group), 0)
            if response.error_code == NONE:
                break
            await trio.sleep(0.01)
        beat = p.HeartbeatRequest(group_id=group, generation_id=-1, member_id="")
        while (await trio_roundtrip(stream, beat, 0)).error_code == 14:
            await trio.sleep(0.01)
    return response


@pytest.mark.parametrize("version", [0, 1, 2, 3])
async def test_one_member_over_the_wire(tmp_path, version):
    async with open_broker(_config(tmp_path)) as broker:
        stream = await trio_connect(broker.port)
        await _coordinator(stream, "g")
        minor = min(version, 2)
        joined = await trio_roundtrip(stream, join_request("g"), version)
        assert joined.error_code == NONE and joined.generation_id == 1
        me = joined.member_id
        assert me.startswith("e2e-") and joined.leader == me and joined.protocol_name == "range"
        assert [(m.member_id, bytes(m.metadata)) for m in joined.members] == [(me, b"r-meta")]
        synced = await trio_roundtrip(stream, sync_request("g", 1, me, {me: b"mine"}), minor)
        assert (synced.error_code, bytes(synced.assignment)) == (NONE, b"mine")
        beat = p.HeartbeatRequest(group_id="g", generation_id=1, member_id=me)
        assert (await trio_roundtrip(stream, beat, minor)).error_code == NONE
        described = await trio_roundtrip(stream, p.DescribeGroupsRequest(groups=["g", "none"]),
                                         minor)
        g, none = described.groups
        assert (g.error_code, g.group_id, g.group_state, g.protocol_type, g.protocol_data) == (
            0, "g", "Stable", "consumer", "range")
        (member,) = g.members
        assert (member.member_id, member.client_id, member.client_host) == (
            me, "e2e", "/127.0.0.1")
        assert (bytes(member.member_metadata), bytes(member.member_assignment)) == (
            b"r-meta", b"mine")
        assert (none.error_code, none.group_state, none.members) == (0, "Dead", [])
        listed = await trio_roundtrip(stream, p.ListGroupsRequest(), minor)
        assert listed.error_code == 0
        assert [(x.group_id, x.protocol_type) for x in listed.groups] == [("g", "consumer")]
        left = await trio_roundtrip(stream, p.LeaveGroupRequest(group_id="g", member_id=me),
                                    minor)
        assert left.error_code == NONE
        (g,) = (await trio_roundtrip(stream, p.DescribeGroupsRequest(groups=["g"]), 0)).groups
        assert (g.group_state, g.members) == ("Empty", [])
        assert (await trio_roundtrip(stream, beat, 0)).error_code == UNKNOWN_MEMBER_ID
        await stream.aclose()


async def test_a_static_member_over_the_wire_and_describe_groups_v4(tmp_path):
    async with open_broker(_config(tmp_path)) as broker:
        stream = await trio_connect(broker.port)
        await _coordinator(stream, "s")
        join = join_request("s")
        join.group_instance_id = "pod-1"
        joined = await trio_roundtrip(stream, join, 5)
        assert joined.error_code == NONE and joined.member_id.startswith("pod-1-")
        assert [(m.member_id, m.group_instance_id) for m in joined.members] == [
            (joined.member_id, "pod-1")]
        sync = sync_request("s", 1, joined.member_id, {joined.member_id: b"mine"})
        sync.group_instance_id = "pod-1"
        assert (await trio_roundtrip(stream, sync, 3)).error_code == NONE
        # A dynamic member of v4 is first handed its member id.
        first = await trio_roundtrip(stream, join_request("d"), 4)
        assert first.error_code == MEMBER_ID_REQUIRED and first.member_id
        described = await trio_roundtrip(stream, p.DescribeGroupsRequest(
            groups=["s"], include_authorized_operations=True), 4)
        (g,) = described.groups
        assert [(m.member_id, m.group_instance_id) for m in g.members] == [
            (joined.member_id, "pod-1")]
        # No authorizer: Read, Delete and Describe (1 << 3, 6 and 8) on the group.
        assert g.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)
        plain = await trio_roundtrip(stream, p.DescribeGroupsRequest(groups=["s"]), 4)
        assert plain.groups[0].authorized_operations == p.AUTHORIZED_OPERATIONS_OMITTED
        # LeaveGroup v3 by instance.
        leave = p.LeaveGroupRequest(group_id="s", members=[
            p.LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id="pod-1")])
        left = await trio_roundtrip(stream, leave, 3)
        assert (left.error_code, [(m.group_instance_id, m.error_code) for m in left.members]) \
            == (NONE, [("pod-1", NONE)])
        await stream.aclose()


async def test_join_group_v0_uses_the_session_timeout_to_rebalance(tmp_path):
    async with open_broker(_config(tmp_path, **{"group.min.session.timeout.ms": 100})) as broker:
        s1, s2 = await trio_connect(broker.port), await trio_connect(broker.port)
        await _coordinator(s1, "g")
        first = await trio_roundtrip(s1, join_request("g", session_ms=1000, rebalance_ms=-1), 0)
        await trio_roundtrip(s1, sync_request("g", 1, first.member_id, {}), 0)
        group = broker.coordinator.groups["g"]
        assert group.members[first.member_id].rebalance_timeout_s == 1.0
        # A second member joins; the first never rejoins (nor heartbeats): after its 1 s
        # the second goes on alone.
        t0 = trio.current_time()
        second = await trio_roundtrip(s2, join_request("g", session_ms=30000), 0)
        assert second.error_code == NONE and second.generation_id == 2
        assert second.leader == second.member_id and len(second.members) == 1
        assert 0.8 < trio.current_time() - t0 < 3
        await s1.aclose()
        await s2.aclose()


async def test_join_errors_and_member_commits_over_the_wire(tmp_path):
    async with open_broker(_config(tmp_path)) as broker:
        stream = await trio_connect(broker.port)
        await trio_roundtrip(stream, create_topics_request({"t": 1}), 2)
        await _coordinator(stream, "g")
        assert (await trio_roundtrip(stream, join_request(""), 1)).error_code == INVALID_GROUP_ID
        too_short = join_request("g", session_ms=1000)
        assert (await trio_roundtrip(stream, too_short, 1)).error_code == INVALID_SESSION_TIMEOUT
        too_long = join_request("g", session_ms=1_800_001)
        assert (await trio_roundtrip(stream, too_long, 1)).error_code == INVALID_SESSION_TIMEOUT
        ghost = join_request("g", member_id="ghost-1")
        assert (await trio_roundtrip(stream, ghost, 1)).error_code == UNKNOWN_MEMBER_ID
        beat = p.HeartbeatRequest(group_id="g", generation_id=1, member_id="ghost-1")
        assert (await trio_roundtrip(stream, beat, 1)).error_code == UNKNOWN_MEMBER_ID
        joined = await trio_roundtrip(stream, join_request("g"), 2)
        me = joined.member_id
        other = join_request("g", protocol_type="connect")
        assert (await trio_roundtrip(stream, other, 2)).error_code == INCONSISTENT_PROTOCOL
        await trio_roundtrip(stream, sync_request("g", 1, me, {}), 1)

        def commit(generation: int, member_id: str):
            R = p.OffsetCommitRequest
            T = R.OffsetCommitRequestTopic
            return R(group_id="g", generation_id_or_member_epoch=generation, member_id=member_id,
                     retention_time_ms=-1, topics=[T(name="t", partitions=[
                         T.OffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                                        committed_metadata="")])])

        async def commit_error(generation: int, member_id: str) -> int:
            response = await trio_roundtrip(stream, commit(generation, member_id), 2)
            return response.topics[0].partitions[0].error_code

        assert await commit_error(-1, "") == UNKNOWN_MEMBER_ID  # the group is managed
        assert await commit_error(1, "ghost") == UNKNOWN_MEMBER_ID
        assert await commit_error(7, me) == ILLEGAL_GENERATION
        assert await commit_error(1, me) == NONE
        await stream.aclose()


async def test_shutdown_answers_a_parked_join_group(tmp_path):
    cfg = _config(tmp_path, **{"group.initial.rebalance.delay.ms": 60_000,
                               "shutdown.timeout.ms": 30_000})
    async with trio.open_nursery() as nursery:
        async with open_broker(cfg) as broker:
            stream = await trio_connect(broker.port)
            await _coordinator(stream, "g")
            answers = []

            async def join():
                answers.append(await trio_roundtrip(stream, join_request("g"), 1))

            nursery.start_soon(join)
            with trio.fail_after(5):
                while not broker.coordinator.groups.get("g"):
                    await trio.sleep(0.01)
            t0 = trio.current_time()
        assert trio.current_time() - t0 < 5  # not the 30 s drain timeout
    (answer,) = answers
    assert answer.error_code == NOT_COORDINATOR
    await stream.aclose()


async def test_zookeeper_mode_spreads_coordinators_over_brokers(tmp_path, zookeeper):
    def cfg(broker_id: int) -> dict:
        return _config(tmp_path, **{"broker.id": broker_id, "zookeeper.connect": zookeeper,
                                    "log.dirs": str(tmp_path / f"data-{broker_id}")})

    async with open_broker(cfg(1)) as b1, open_broker(cfg(2)) as b2:
        brokers = {1: b1, 2: b2}
        s1 = await trio_connect(b1.port)
        await trio_roundtrip(s1, create_topics_request({"t": 1}), 2)
        groups = [f"group-{c}" for c in "abcdefgh"]
        found = {}
        with trio.fail_after(15):
            for g in groups:
                response = await _coordinator(s1, g)
                found[g] = response.node_id
                assert response.port == brokers[response.node_id].port
        parts = b1.cluster.partitions(OFFSETS_TOPIC)
        assert sorted(parts) == [0, 1, 2, 3] and set(parts.values()) == {1, 2}
        assert found == {g: parts[partition_for(g, 4)] for g in groups}
        for g, node in found.items():
            right = await trio_connect(brokers[node].port)
            wrong = await trio_connect(brokers[3 - node].port)
            beat = p.HeartbeatRequest(group_id=g, generation_id=1, member_id="m")
            assert (await trio_roundtrip(wrong, beat, 1)).error_code == NOT_COORDINATOR
            with trio.fail_after(10):
                while (code := (await trio_roundtrip(right, beat, 1)).error_code) == 14:
                    await trio.sleep(0.02)  # the coordinator is still loading
            assert code == UNKNOWN_MEMBER_ID
            fetch = p.OffsetFetchRequest(group_id=g, topics=None)
            assert (await trio_roundtrip(wrong, fetch, 2)).error_code == NOT_COORDINATOR
            await right.aclose()
            await wrong.aclose()
        await s1.aclose()


# -- kafka-python's KafkaConsumer(group_id=...) ---------------------------------------------------


TOPIC = "events"
PARTITIONS = 4


def _consumer(bootstrap: str, **kw):
    from kafka import KafkaConsumer

    settings = {"bootstrap_servers": bootstrap, "group_id": "readers",
                "auto_offset_reset": "earliest", "enable_auto_commit": False,
                "session_timeout_ms": 6000, "heartbeat_interval_ms": 200,
                "request_timeout_ms": 15000, "fetch_max_wait_ms": 100,
                "retry_backoff_ms": 50, "consumer_timeout_ms": 100}
    settings.update(kw)
    consumer = KafkaConsumer(**settings)
    consumer.subscribe([TOPIC])
    return consumer


def _produce(bootstrap: str, per_partition: int, start: int = 0) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap)  # defaults: idempotent, acks=all
    try:
        for i in range(start, start + per_partition):
            for partition in range(PARTITIONS):
                producer.send(TOPIC, b"%d-%d" % (partition, i), partition=partition)
        producer.flush(timeout=30)
    finally:
        producer.close(timeout=10)


def _poll_until(consumers, done, timeout: float = 30.0, received=None):
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, [c.assignment() for c in consumers]
        for c in consumers:
            for tp, records in c.poll(timeout_ms=50).items():
                if received is not None:
                    received.setdefault(c, []).extend((tp.partition, r.value) for r in records)


def _partitions(consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


@pytest.fixture
def kafka_broker(broker_process):
    overrides = {"group.initial.rebalance.delay.ms": 100, "offsets.topic.num.partitions": 5}
    broker = broker_process(overrides=overrides)
    with connect(broker.bootstrap) as sock:
        response = roundtrip(sock, create_topics_request({TOPIC: PARTITIONS}), 2)
        assert response.topics[0].error_code == 0
    broker.overrides = overrides
    return broker


def test_kafka_python_consumers_split_commit_leave_and_resume(kafka_broker):
    from kafka import TopicPartition

    bootstrap = kafka_broker.bootstrap
    c1 = _consumer(bootstrap, client_id="one")
    c2 = _consumer(bootstrap, client_id="two", enable_auto_commit=True,
                   auto_commit_interval_ms=100)
    try:
        # Both members, two partitions each, every partition to exactly one of them.
        _poll_until([c1, c2], lambda: len(_partitions(c1)) == len(_partitions(c2)) == 2)
        assert _partitions(c1) | _partitions(c2) == set(range(PARTITIONS))

        _produce(bootstrap, 25)
        received: dict = {}
        _poll_until([c1, c2], lambda: sum(map(len, received.values())) >= 100,
                    received=received)
        for c in (c1, c2):
            got = received[c]
            assert {partition for partition, _ in got} == _partitions(c)
            assert len(got) == len(set(got)) == 50  # nothing twice
        c1.commit()  # manual; c2 commits automatically
        tps = [TopicPartition(TOPIC, i) for i in range(PARTITIONS)]
        _poll_until([c1, c2], lambda: all(c1.committed(tp) == 25 for tp in tps))

        # The group as DescribeGroups shows it.
        with connect(bootstrap) as sock:
            (g,) = roundtrip(sock, p.DescribeGroupsRequest(groups=["readers"]), 1).groups
        assert (g.group_state, g.protocol_type) == ("Stable", "consumer")
        assert sorted(m.client_id for m in g.members) == ["one", "two"]

        # c1 leaves (LeaveGroup): c2 takes every partition.
        c1.close()
        _poll_until([c2], lambda: _partitions(c2) == set(range(PARTITIONS)))
    finally:
        c1.close()
        c2.close()  # commits what it consumed, then leaves

    # A consumer of the group starts where the group left off: only the new records.
    _produce(bootstrap, 5, start=25)
    c3 = _consumer(bootstrap)
    try:
        received = {}
        _poll_until([c3], lambda: sum(map(len, received.values())) >= 20, received=received)
        _poll_until([c3], lambda: True, received=received)
        assert sorted(received[c3]) == sorted(
            (partition, b"%d-%d" % (partition, i)) for partition in range(PARTITIONS)
            for i in range(25, 30))
        c3.commit()
    finally:
        c3.close()


def test_kafka_python_offsets_survive_a_broker_restart(kafka_broker, broker_process):
    bootstrap = kafka_broker.bootstrap
    _produce(bootstrap, 10)
    c1 = _consumer(bootstrap)
    try:
        received: dict = {}
        _poll_until([c1], lambda: sum(map(len, received.values())) >= 40, received=received)
        c1.commit()
    finally:
        c1.close()
    assert kafka_broker.stop() == 0

    broker = broker_process(kafka_broker.log_dir, overrides=kafka_broker.overrides)
    _produce(broker.bootstrap, 3, start=10)
    c2 = _consumer(broker.bootstrap)
    try:
        received = {}
        _poll_until([c2], lambda: sum(map(len, received.values())) >= 12, received=received)
        _poll_until([c2], lambda: True, received=received)
        assert sorted(received[c2]) == sorted(
            (partition, b"%d-%d" % (partition, i)) for partition in range(PARTITIONS)
            for i in range(10, 13))
    finally:
        c2.close()
