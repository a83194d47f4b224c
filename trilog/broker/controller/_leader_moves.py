"""Leadership moves asked of the controller: a broker's ControlledShutdown (Kafka's
doControlledShutdown), ElectLeaders (processReplicaLeaderElection) and the leader-imbalance
check (checkAndTriggerAutoLeaderRebalance).

Each runs as one event of the term's loop, so it decides on a view nothing else changes
meanwhile, and its requests leave when it is done.  A broker in a controlled shutdown
stays in the view's ``shutting_down`` until it leaves ``/brokers/ids``: no election makes it
a leader or puts it back in an ISR meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import trio

from trilog._topic import PartitionKey
from trilog.broker.controller._decisions import imbalanced_brokers
from trilog.broker.controller._requests import RequestBatch
from trilog.broker.controller._state_machine import PartitionStateMachine
from trilog.broker.controller._view import ClusterView
from trilog.errors import (
    NO_ERROR,
    BrokerNotAvailableError,
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    PreferredLeaderNotAvailableError,
    UnknownTopicOrPartitionError,
)

log = logging.getLogger("trilog.broker.controller")

#: ElectLeaders' election_type
PREFERRED, UNCLEAN = 0, 1


class LeaderMoves:
    """The moves asked of the term that owns ``view`` and ``machine``; ``send`` queues an
    event's requests; ``imbalance_percent`` is ``leader.imbalance.per.broker.percentage``."""

    def __init__(self, view: ClusterView, machine: PartitionStateMachine,
                 send: Callable[[RequestBatch], None], imbalance_percent: int) -> None:
        self.view = view
        self.machine = machine
        self.send = send
        self.imbalance_percent = imbalance_percent

    async def controlled_shutdown(self, broker_id: int
                                  ) -> tuple[int, list[PartitionKey]]:
        """Leadership and ISR membership move away from ``broker_id``; returns the error
        code and the partitions it still leads (no other replica can lead them now)."""
        view = self.view
        if broker_id not in view.live:
            await trio.lowlevel.checkpoint()
            return BrokerNotAvailableError.code, []
        view.shutting_down.add(broker_id)
        log.info("broker %d is shutting down", broker_id)
        mine = view.replicated_by(broker_id)
        changed = await self.machine.elect_for_shutdown(mine)
        batch = RequestBatch()
        for tp in changed:
            batch.add_leader_and_isr(view.recipients(tp), tp)
        remaining = [tp for tp in mine if tp in view.states
                     and view.states[tp].leader == broker_id]
        for tp in mine:
            if tp not in remaining:
                batch.add_stop_replica([broker_id], tp, delete=False)
        batch.update_metadata = True
        self.send(batch)
        return NO_ERROR, remaining

    async def elect_leaders(self, kind: int, asked: Sequence[PartitionKey] | None
                            ) -> dict[PartitionKey, tuple[int, str | None]]:
        """ElectLeaders' per-partition answers (``kind``: PREFERRED or UNCLEAN; ``asked``
        None: every partition, answered only where an election was needed)."""
        view = self.view
        tps = list(view.partitions()) if asked is None else list(dict.fromkeys(asked))
        results: dict[PartitionKey, tuple[int, str | None]] = {}
        electable = []
        live = view.eligible()
        for tp in tps:
            state = view.states.get(tp)
            replicas = view.replicas(tp)
            if not replicas or state is None:
                results[tp] = (UnknownTopicOrPartitionError.code, None)
            elif kind == PREFERRED and state.leader == replicas[0]:
                results[tp] = (ElectionNotNeededError.code, None)
            elif kind == UNCLEAN and state.leader in live:
                results[tp] = (ElectionNotNeededError.code, None)
            else:
                electable.append(tp)
        if kind == PREFERRED:
            written = set(await self.machine.elect_preferred(electable))
        else:
            written = set(await self.machine.elect_unclean(electable))
        batch = RequestBatch()
        for tp in electable:
            if tp in written:
                results[tp] = (NO_ERROR, None)
                batch.add_leader_and_isr(view.recipients(tp), tp)
            elif kind == PREFERRED:
                results[tp] = (PreferredLeaderNotAvailableError.code,
                               f"preferred replica {view.replicas(tp)[0]} is not live or "
                               "not in the ISR")
            else:
                results[tp] = (EligibleLeadersNotAvailableError.code,
                               "no live replica can lead")
        if written:
            self.send(batch)
        if asked is None:
            # Kafka's answer to "every partition": only those that needed an election.
            results = {tp: r for tp, r in results.items()
                       if r[0] != ElectionNotNeededError.code}
        return results

    async def rebalance(self) -> None:
        """Preferred replicas lead again on the brokers whose share of partitions they
        prefer but do not lead passed ``imbalance_percent``."""
        view = self.view
        assignments = {tp: view.replicas(tp) for tp in view.partitions()}
        imbalanced = imbalanced_brokers(assignments, view.leaders(), self.imbalance_percent)
        live = view.eligible()
        tps = [tp for broker, tps in sorted(imbalanced.items()) if broker in live for tp in tps]
        if not tps:
            await trio.lowlevel.checkpoint()
            return
        log.info("leader imbalance: electing preferred leaders for %d partitions", len(tps))
        written = await self.machine.elect_preferred(tps)
        if written:
            batch = RequestBatch()
            for tp in written:
                batch.add_leader_and_isr(view.recipients(tp), tp)
            self.send(batch)
