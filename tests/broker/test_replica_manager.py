"""The replica manager's controlled shutdown against a stand-in controller (no ZooKeeper):
when some partitions cannot move (no other live replica), the ones that did are given up
here at once, so that an ``acks=all`` produce waiting for their followers answers now
instead of when the broker's drain times out."""

from __future__ import annotations

import contextlib
import functools
import types

import trio
import trio.testing
from broker_helpers import serve_kafka

from trilog.broker.configs import BrokerConfig
from trilog.broker.replication import (
    ControlledShutdown,
    FetchPurgatory,
    Partition,
    ReplicaManager,
)
from trilog.errors import NotLeaderOrFollowerError
from trilog.records import build_batch
from trilog.storage import LogManager

MOVED, STUCK, SLOW = ("rf3", 0), ("rf1", 0), ("rf3", 1)


async def _controller(stream: trio.SocketStream, left=(STUCK,)) -> None:
    """Answers ControlledShutdown with ``left`` still on the broker."""
    from trilog.protocol import ApiKey, ControlledShutdownResponse as R

    async def answer(header, _request):
        assert header.api_key == ApiKey.CONTROLLED_SHUTDOWN
        return R(error_code=0, remaining_partitions=[
            R.RemainingPartition(topic_name=t, partition_index=p) for t, p in left])

    await serve_kafka(stream, answer)


@contextlib.asynccontextmanager
async def _shutting_down(tmp_path, left, overrides=None):
    """Broker 1's replica manager leading MOVED, STUCK (no other in-sync replica) and SLOW,
    a stand-in controller answering its ControlledShutdown with ``left``, and an acks=all
    produce to MOVED waiting for its in-sync replicas: ``(manager, answers, stepped_down)``."""
    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(functools.partial(
            trio.serve_tcp, functools.partial(_controller, left=left), 0, host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        stepped_down: list = []
        cluster = types.SimpleNamespace(
            controller_id=2,
            brokers=lambda: [types.SimpleNamespace(node_id=i, host="127.0.0.1", port=port)
                             for i in (1, 2, 3)],
            # STUCK's other replicas are live but out of sync: they may not lead it.
            replica_info=lambda t, p: ([1, 2, 3], [1]) if (t, p) == STUCK
            else ([1, 2, 3], [1, 2, 3]),
            step_down=stepped_down.append,
            leader=lambda t, p: 1,
            min_insync_replicas=lambda topic: 1)
        config = BrokerConfig.from_dict({"broker.id": 1, "log.dirs": str(tmp_path / "data"),
                                         **(overrides or {})})
        logs = LogManager(str(tmp_path / "data"), replicated=True)
        try:
            replica_manager = ReplicaManager(1, logs, FetchPurgatory(), trio.CapacityLimiter(2),
                                             cluster, message_max_bytes=1 << 20)
            shutdown = ControlledShutdown(
                replica_manager, cluster,  # type: ignore[arg-type]
                max_retries=config["controlled.shutdown.max.retries"],
                retry_backoff_ms=config["controlled.shutdown.retry.backoff.ms"],
                timeout_ms=config["controller.socket.timeout.ms"], security=None)
            manager = types.SimpleNamespace(controlled_shutdown=shutdown.run,
                                            is_leader=replica_manager.is_leader,
                                            wait_replicated=replica_manager.wait_replicated)
            for tp, replicas in ((MOVED, (1, 2, 3)), (STUCK, (1,)), (SLOW, (1, 2, 3))):
                logs.get_or_create_log(*tp)
                replica_manager.partitions[tp] = Partition(*tp, replicas=replicas, leader=1,
                                                           leader_epoch=0, isr=replicas)
            # A record the followers never took (they went over to the new leader).
            end = logs.get_log(*MOVED).append(build_batch([(0, None, b"v")])).last_offset + 1
            answers: list[int] = []

            async def produce_acks_all() -> None:
                deadline = trio.current_time() + 30
                answers.append(await manager.wait_replicated(MOVED, end, deadline))

            nursery.start_soon(produce_acks_all)
            await trio.testing.wait_all_tasks_blocked()
            assert not answers  # waiting for its in-sync replicas
            yield manager, answers, stepped_down
        finally:
            nursery.cancel_scope.cancel()
            logs.close()


async def test_a_shutdown_that_leaves_partitions_gives_up_the_ones_that_moved(tmp_path):
    async with _shutting_down(tmp_path, left=[STUCK]) as (manager, answers, stepped_down):
        with trio.fail_after(10):
            assert await manager.controlled_shutdown() is False
            await trio.testing.wait_all_tasks_blocked()
        assert answers == [NotLeaderOrFollowerError.code]  # at once, not after 30 s
        assert not manager.is_leader(MOVED) and not manager.is_leader(SLOW)
        assert manager.is_leader(STUCK)  # no one else can lead it
        assert stepped_down == [{STUCK}]


async def test_partitions_that_moved_are_given_up_before_retrying_for_the_others(tmp_path):
    """The controller has not moved SLOW yet (it could): the broker retries after its
    backoff, but gives MOVED up at once."""
    overrides = {"controlled.shutdown.retry.backoff.ms": 60_000}
    async with _shutting_down(tmp_path, [SLOW], overrides) as (manager, answers, stepped_down):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.controlled_shutdown)
            with trio.fail_after(10):
                while not answers:
                    await trio.sleep(0.01)
            assert answers == [NotLeaderOrFollowerError.code]  # during the backoff
            assert manager.is_leader(SLOW) and not manager.is_leader(MOVED)
            assert stepped_down == [{SLOW}]
            nursery.cancel_scope.cancel()
