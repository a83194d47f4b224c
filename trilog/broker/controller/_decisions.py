"""The controller's decisions about leaders and in-sync replicas, as pure functions.

Kafka's ``PartitionLeaderElectionAlgorithms`` and the ISR rules of its ``Partition``: they
take a partition's assignment (replicas in preference order), its current ``PartitionState``
and the live brokers, and return the state to write, or None when no leader can be chosen.
The controller (``_controller.py``) writes what they return with ZooKeeper's conditional
version and tells the brokers; here nothing does I/O, so every rule is tested on its own.

Rules:

- **Offline partition** (its leader died, or a new partition): the first replica in
  assignment order that is live and in the ISR; the ISR keeps only live members.  With no
  such replica the partition stays offline (-1), unless unclean election is enabled for its
  topic: then the first live replica leads, alone in the ISR (records it lacks are lost:
  Kafka's documented trade).
- **Controlled shutdown**: leadership moves to the first replica in assignment order that
  is live, in the ISR and not shutting down; the stopping brokers leave the ISR.
- **Preferred replica**: the first replica of the assignment leads, if live and in the ISR.
- **Reassignment**: the first replica of the new assignment that is live and in the ISR.

A state with a new leader bumps the leader epoch (KIP-101: followers truncate by epochs; a
broker refuses a LeaderAndIsr with an older epoch).  Where only followers leave the ISR
(stopping here, dead in ``PartitionStateMachine.remove_from_isr``) the leader keeps its epoch,
as Kafka's KRaft controller does (KAFKA-15021; its ZooKeeper controller bumped it): the
brokers take the newer state by ZooKeeper's version, as they order the leader's own ISR
changes (``shrink_isr``, ``expand_isr``), and consumers are spared a position check
(OffsetForLeaderEpoch) on every partition the broker followed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from trilog.zk import PartitionState

NO_LEADER = -1


def _first(replicas: Sequence[int], allowed: Collection[int]) -> int | None:
    return next((r for r in replicas if r in allowed), None)


def _next(state: PartitionState, leader: int, isr: Iterable[int],
          controller_epoch: int) -> PartitionState:
    return PartitionState(leader, state.leader_epoch + 1, tuple(isr), controller_epoch)


def without_followers(state: PartitionState, leaving: Collection[int],
                      controller_epoch: int) -> PartitionState:
    """``leaving`` followers out of the ISR; the leader and its epoch stay (KAFKA-15021)."""
    return PartitionState(state.leader, state.leader_epoch,
                          tuple(r for r in state.isr if r not in leaving), controller_epoch)


def elect_offline(replicas: Sequence[int], state: PartitionState | None,
                  live: Collection[int], controller_epoch: int,
                  unclean: bool = False) -> PartitionState:
    """The state of a partition without a live leader (or new, when ``state`` is None).

    A new partition's ISR is its live replicas.  The result's leader is ``NO_LEADER`` when
    no replica may lead: the partition is offline and its state says so (the ISR keeps its
    last members, so that the first of them to return leads again)."""
    if state is None:
        isr = [r for r in replicas if r in live]
        return PartitionState(isr[0] if isr else NO_LEADER, 0, tuple(isr), controller_epoch)
    live_isr = [r for r in state.isr if r in live]
    clean = _first(replicas, live_isr)
    if clean is not None:
        return _next(state, clean, live_isr, controller_epoch)
    if unclean:
        any_live = _first(replicas, live)
        if any_live is not None:
            return _next(state, any_live, [any_live], controller_epoch)
    if state.leader == NO_LEADER:
        return state  # already offline: nothing to write
    # Offline: keep the last ISR (its members are the ones that hold every acknowledged
    # record), with no leader.
    return _next(state, NO_LEADER, state.isr, controller_epoch)


def elect_for_shutdown(replicas: Sequence[int], state: PartitionState,
                       live: Collection[int], shutting_down: Collection[int],
                       controller_epoch: int) -> PartitionState | None:
    """Move leadership and ISR membership away from ``shutting_down`` brokers (Kafka's
    ``ControlledShutdownLeaderElection``).  None: no other replica can lead now (the
    shutdown goes ahead and the partition is offline until a replica returns, as Kafka).
    Where only followers leave, the leader keeps its epoch (KAFKA-15021, as for dead
    followers: ``PartitionStateMachine.remove_from_isr``); the stopping broker is told to
    stop fetching (StopReplica), so it does not join the ISR again."""
    isr = [r for r in state.isr if r not in shutting_down]
    if state.leader not in shutting_down:
        if len(isr) == len(state.isr):
            return state
        return without_followers(state, shutting_down, controller_epoch)
    leader = _first(replicas, [r for r in isr if r in live])
    if leader is None:
        return None
    return _next(state, leader, isr, controller_epoch)


def elect_preferred(replicas: Sequence[int], state: PartitionState, live: Collection[int],
                    controller_epoch: int) -> PartitionState | None:
    """The preferred replica (the first assigned) leads, if it can; None when it already
    does or cannot (not live, not in the ISR: Kafka's PREFERRED_LEADER_NOT_AVAILABLE)."""
    preferred = replicas[0] if replicas else None
    if preferred is None or state.leader == preferred:
        return None
    if preferred not in live or preferred not in state.isr:
        return None
    return _next(state, preferred, state.isr, controller_epoch)


def elect_for_reassignment(target: Sequence[int], state: PartitionState,
                           live: Collection[int], controller_epoch: int) -> PartitionState | None:
    """A leader from the new replica list ``target`` once it is in the ISR; None when the
    current leader is in ``target`` already (no change) or none of ``target`` can lead."""
    if state.leader in target and state.leader in live:
        return None
    leader = _first(target, [r for r in state.isr if r in live])
    if leader is None:
        return None
    return _next(state, leader, state.isr, controller_epoch)


def shrink_isr(state: PartitionState, lagging: Collection[int],
               controller_epoch: int) -> PartitionState:
    """The leader drops followers that have not caught up for ``replica.lag.time.max.ms``
    (never itself)."""
    isr = [r for r in state.isr if r == state.leader or r not in lagging]
    if len(isr) == len(state.isr):
        return state
    return PartitionState(state.leader, state.leader_epoch, tuple(isr), controller_epoch)


def expand_isr(state: PartitionState, caught_up: int, replicas: Sequence[int],
               controller_epoch: int) -> PartitionState:
    """A follower that reached the high watermark rejoins the ISR (kept in assignment
    order, so that the first live ISR member in that order is also its first member)."""
    if caught_up in state.isr or caught_up not in replicas:
        return state
    members = set(state.isr) | {caught_up}
    isr = tuple(r for r in replicas if r in members)
    return PartitionState(state.leader, state.leader_epoch, isr, controller_epoch)


def imbalanced_brokers(assignments: Mapping[tuple[str, int], Sequence[int]],
                       leaders: Mapping[tuple[str, int], int],
                       threshold_percent: int) -> dict[int, list[tuple[str, int]]]:
    """Kafka's ``checkAndTriggerAutoLeaderRebalance``: for each broker, the partitions it
    is the preferred leader of but does not lead, when their share of the partitions it is
    preferred for exceeds ``leader.imbalance.per.broker.percentage``."""
    preferred_of: dict[int, list[tuple[str, int]]] = {}
    for tp, replicas in assignments.items():
        if replicas:
            preferred_of.setdefault(replicas[0], []).append(tp)
    out: dict[int, list[tuple[str, int]]] = {}
    for broker, tps in preferred_of.items():
        not_led = [tp for tp in tps if leaders.get(tp, NO_LEADER) != broker]
        if not_led and len(not_led) * 100 > threshold_percent * len(tps):
            out[broker] = sorted(not_led)
    return out
