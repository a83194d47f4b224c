"""One behaviour on REBALANCE_IN_PROGRESS for both group members trilog has, Kafka's
consumer and the seeds' broker-coordinated connector (they share one coordinator): the
heartbeats go on while the member revokes and rejoins, so a revoke that takes longer than
the session timeout does not cost the member its membership.

Were the heartbeats to stop when the coordinator answers REBALANCE_IN_PROGRESS (as the
connector's own member machine did), the broker would expire the member in the middle of
its revoke: the group would go on without it (a generation more) and it would join again
as a new member, under a new member id.
"""

from __future__ import annotations

import pytest
import trio
from group_helpers import produce

import trilog
from trilog.broker import open_broker
from trilog.client import BrokerConsumerConnector, ConsumerRebalanceListener

SESSION_MS = 2000


@pytest.fixture
async def broker(tmp_path):
    async with open_broker({"port": 0, "log.dirs": str(tmp_path / "data"), "num.partitions": 2,
                            "group.initial.rebalance.delay.ms": 0,
                            "group.min.session.timeout.ms": 500,
                            "offsets.topic.num.partitions": 1}) as b:
        yield b


class SlowToRevoke(ConsumerRebalanceListener):
    """Its first revoke takes longer than the session timeout (an application flushing
    state, say); records the calls."""

    def __init__(self):
        self.calls = []

    async def on_partitions_revoked(self, revoked):
        self.calls.append("revoked")
        if self.calls.count("revoked") == 1:
            await trio.sleep(1.5 * SESSION_MS / 1000)

    async def on_partitions_assigned(self, assigned):
        self.calls.append("assigned")

    async def on_partitions_lost(self, lost):
        self.calls.append("lost")


def open_member(kind, broker, listener=None):
    opts = dict(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                heartbeat_interval_ms=100, session_timeout_ms=SESSION_MS, listener=listener)
    if kind == "consumer":
        return trilog.open_consumer("slow", group_id="g", **opts)
    return trilog.open_consumer_connector("g", topics={"slow": 1}, **opts)


def member_id(member):
    if isinstance(member, BrokerConsumerConnector):
        return member.member_id
    return member._coordinator.membership.member_id


def generation(member):
    if isinstance(member, BrokerConsumerConnector):
        return member.generation_id
    return member._coordinator.membership.generation_id


def owned(member):
    if isinstance(member, BrokerConsumerConnector):
        return len(member.owned)
    return len(member.assignment())


@pytest.mark.parametrize("kind", ["consumer", "connector"])
async def test_a_member_heartbeats_through_a_revoke_longer_than_its_session(broker, kind):
    await produce(broker.bootstrap, "slow", 0, partitions=2)
    slow = SlowToRevoke()
    async with open_member(kind, broker, slow) as a:
        assert owned(a) == 2
        me, alone = member_id(a), generation(a)
        revoke_started = trio.current_time()
        async with open_member(kind, broker) as b:  # a rebalance: a revokes, slowly
            with trio.fail_after(20):
                while not (owned(a) == owned(b) == 1 and generation(a) == generation(b)):
                    await trio.sleep(0.02)
            assert trio.current_time() - revoke_started >= SESSION_MS / 1000
            # The group kept the member through its revoke: the same member, and one
            # rebalance (not an expiry, then a join as a new member).
            assert member_id(a) == me
            assert generation(a) == alone + 1
            assert slow.calls == ["assigned", "revoked", "assigned"]
