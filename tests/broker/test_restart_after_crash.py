"""A broker restarted at once after a SIGKILL, while its dead process's ZooKeeper session
still holds ``/brokers/ids/<id>`` (trilog/broker/cluster/_registration.py): it deletes the
node its log dirs prove is its previous life's and rejoins; without that record, a node
naming its own endpoints is waited for until the old session expires; a second live broker
with the id is still refused at once (test_zk_broker.py, test_cluster_e2e.py)."""

from __future__ import annotations

import time

import pytest
from kazoo.client import KazooClient
from replication_helpers import create, fully_replicated, produce_all, read_all, wait_for

from trilog.broker.cluster._registration import (
    SESSION_FILE,
    Occupant,
    judge_occupant,
    read_recorded_session,
    record_session,
)

MINE = (("PLAINTEXT", "127.0.0.1", 9092),)
OTHER = (("PLAINTEXT", "127.0.0.1", 9093),)


def test_the_occupant_of_our_id_is_judged():
    def judge(owner, endpoints=OTHER, session=7, recorded=5):
        return judge_occupant(owner, endpoints, session=session, recorded=recorded, ours=MINE)

    assert judge(7) is Occupant.OURS
    assert judge(5) is Occupant.DEAD
    assert judge(5, MINE) is Occupant.DEAD
    assert judge(9, MINE) is Occupant.WAIT
    assert judge(9, MINE, recorded=None) is Occupant.WAIT
    assert judge(9) is Occupant.REFUSE
    assert judge(9, (), recorded=None) is Occupant.REFUSE
    assert judge(9, session=None) is Occupant.REFUSE


def test_the_session_record_round_trips(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert read_recorded_session(dirs) is None
    for d in dirs:
        (tmp_path / d).mkdir()
    record_session(dirs, 0x1234ABCD)
    assert read_recorded_session(dirs) == 0x1234ABCD
    (tmp_path / "a" / SESSION_FILE).write_text("junk")
    assert read_recorded_session(dirs) == 0x1234ABCD  # the next dir's record


def _owner(zookeeper: str, broker_id: int) -> int | None:
    client = KazooClient(zookeeper)
    client.start(timeout=10)
    try:
        stat = client.exists(f"/brokers/ids/{broker_id}")
        return None if stat is None else stat.ephemeralOwner
    finally:
        client.stop()
        client.close()


SESSION_MS = 20_000
SETTINGS = {"zookeeper.session.timeout.ms": SESSION_MS, "replica.lag.time.max.ms": 3000,
            "replica.fetch.wait.max.ms": 100}


@pytest.mark.slow
def test_a_broker_restarted_half_a_second_after_sigkill_rejoins(broker_process, zookeeper):
    brokers = {i: broker_process(broker_id=i, zookeeper=zookeeper, overrides=SETTINGS)
               for i in (1, 2)}
    create(brokers[1], "r", 1, 2, {"min.insync.replicas": "2"})
    wait_for(lambda: fully_replicated(list(brokers.values()), "r", 1, 2), what="two in sync")
    assert produce_all(brokers[1], "r", 0, [b"before"]) in (0, 6)
    old_owner = _owner(zookeeper, 2)
    killed = time.monotonic()
    brokers[2].kill()
    time.sleep(0.5)
    # On another port (port 0): what proves the node is its own is the record in its log dir.
    brokers[2] = broker_process(brokers[2].log_dir, broker_id=2, zookeeper=zookeeper,
                                overrides=SETTINGS)
    # Registered (the ready line) long before the dead process's session could expire.
    assert time.monotonic() - killed < SESSION_MS / 1000
    assert _owner(zookeeper, 2) not in (None, old_owner)
    assert "previous process's, which is gone" in brokers[2].stderr()
    wait_for(lambda: fully_replicated(list(brokers.values()), "r", 1, 2),
             what="the restarted broker back in the ISR")
    leader = next(b for b in brokers.values() if produce_all(b, "r", 0, [b"after"]) == 0)
    assert read_all(leader, "r", 0)[-1] == b"after"


@pytest.mark.slow
def test_without_a_record_a_node_at_our_endpoints_is_waited_for(broker_process, zookeeper,
                                                              tmp_path):
    settings = {"zookeeper.session.timeout.ms": 4000}
    first = broker_process(broker_id=3, zookeeper=zookeeper, overrides=settings)
    port, log_dir = first.port, first.log_dir
    first.kill()
    (log_dir / SESSION_FILE).unlink()
    started = time.monotonic()
    again = broker_process(log_dir, port=port, broker_id=3, zookeeper=zookeeper,
                           overrides=settings)
    # It waited for the old session to expire instead of failing (or deleting the node).
    assert "waiting up to" in again.stderr()
    assert time.monotonic() - started > 1.0
    assert _owner(zookeeper, 3) is not None


@pytest.mark.slow
def test_a_lone_controller_restarted_at_once_controls_again(broker_process, zookeeper):
    """The only broker (the controller) is killed and restarted at once: it deletes its
    previous life's /controller node too (its id, not its session), so it controls and
    leads again long before the old session (20 s) could expire."""
    from replication_helpers import controller_id, metadata

    first = broker_process(broker_id=4, zookeeper=zookeeper, overrides=SETTINGS)
    create(first, "lone", 1, 1)
    wait_for(lambda: produce_all(first, "lone", 0, [b"one"]) == 0, what="a first record")
    killed = time.monotonic()
    first.kill()
    again = broker_process(first.log_dir, broker_id=4, zookeeper=zookeeper, overrides=SETTINGS)
    wait_for(lambda: controller_id(again) == 4 and (m := metadata(again, "lone"))
             and m[0].leader_id == 4, what="the controller and leader again")
    assert produce_all(again, "lone", 0, [b"two"]) == 0
    assert read_all(again, "lone", 0) == [b"one", b"two"]
    assert time.monotonic() - killed < SESSION_MS / 1000
