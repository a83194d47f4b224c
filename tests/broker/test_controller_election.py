"""The controller election through ``/controller`` and ``/controller_epoch``, against a real
ZooKeeper: brokers are ``ControllerElection`` objects with sessions of their own."""

from __future__ import annotations

import trio

from trilog.broker.controller._election import ControllerElection
from trilog.zk import CONTROLLER, CONTROLLER_EPOCH, decode_controller, open_zookeeper


async def wait_for(elections, predicate, timeout=20):
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.02)


async def test_one_controller_and_a_new_one_with_a_higher_epoch_when_it_dies(zookeeper):
    async with trio.open_nursery() as nursery:
        sessions, elections, scopes = [], [], []
        for broker_id in (1, 2, 3):
            zk_scope = trio.CancelScope()
            sessions.append(zk_scope)

            async def member(broker_id=broker_id, scope=zk_scope, task_status=trio.TASK_STATUS_IGNORED):
                with scope:
                    async with open_zookeeper(zookeeper, session_timeout_ms=4000) as zk:
                        election = ControllerElection(zk, broker_id)
                        task_status.started(election)
                        await election.run()

            elections.append(await nursery.start(member))
        await wait_for(elections, lambda: sum(e.is_controller for e in elections) == 1
                       and len({e.current.value for e in elections}) == 1)
        first = next(e for e in elections if e.is_controller)
        controller, epoch = first.current.value
        assert controller == first.broker_id
        async with open_zookeeper(zookeeper) as zk:
            assert decode_controller(await zk.get(CONTROLLER)) == controller
            assert int(await zk.get(CONTROLLER_EPOCH)) == epoch == 1
        # The controller's session ends (its process died): another takes over, fenced by
        # a higher epoch, and every survivor agrees.
        sessions[elections.index(first)].cancel()
        survivors = [e for e in elections if e is not first]
        await wait_for(survivors, lambda: sum(e.is_controller for e in survivors) == 1
                       and len({e.current.value for e in survivors}) == 1)
        second = next(e for e in survivors if e.is_controller)
        assert second.current.value == (second.broker_id, epoch + 1)
        # A controlled shutdown resigns: the last one takes over and the resigner stays out.
        await second.resign()
        (last,) = [e for e in survivors if e is not second]
        await wait_for(survivors, lambda: last.is_controller
                       and second.current.value == (last.broker_id, epoch + 2))
        assert not second.is_controller
        nursery.cancel_scope.cancel()
