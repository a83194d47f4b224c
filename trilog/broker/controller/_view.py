"""The cluster as the controller knows it (Kafka's ControllerContext): plain data and
pure queries, no I/O.

A term reads this view from ZooKeeper when it starts and keeps it in step with what it
learns (watches) and writes (states, assignments) after that.  Only the term's event loop
changes it, one event at a time, so a decision never sees it change under its feet.

What it holds:

- ``live``: the registered brokers (``/brokers/ids``) by id, less the fenced;
- ``fenced``: registered brokers whose process was found gone (their listener refuses
  connections: ``_liveness.py``), by the registration of that dead life; they count as
  left until that registration is replaced or vanishes, or a probe reaches them again;
- ``still_listed``: the fenced brokers Metadata answers still list (a moment after their
  leadership moved: ``_term.py``'s ``FENCED_LISTED_S``);
- ``shutting_down``: the live brokers in a controlled shutdown, which elections avoid until
  they leave;
- ``assignments``: each topic's replicas by partition (``/brokers/topics/<topic>``), in
  preference order;
- ``states``: each partition's ``PartitionState`` (``.../partitions/<n>/state``), and
  ``versions``: the znode version it was read or written at (Kafka's zkVersion), which
  the next write of that state must name.

Invariants: ``shutting_down`` is a subset of ``live``; ``live`` and ``fenced`` share no id;
``still_listed`` is a subset of ``fenced``; a partition has a state only while
its topic is known; a version without a state is a node that exists but could not be read
(it is overwritten conditionally); every query returns partitions in sorted order, so
that the requests the term makes do not depend on dict order.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator

from trilog._topic import PartitionKey
from trilog.zk import BrokerRegistration, PartitionState


class ClusterView:
    """Live brokers, assignments and partition states, with the queries decisions ask."""

    def __init__(self) -> None:
        #: live brokers by id (from /brokers/ids)
        self.live: dict[int, BrokerRegistration] = {}
        #: registered brokers found dead (by the registration of their dead life)
        self.fenced: dict[int, BrokerRegistration] = {}
        #: fenced brokers still listed in Metadata answers (offline, leading nothing)
        self.still_listed: set[int] = set()
        #: brokers in a controlled shutdown: elections avoid them until they leave
        self.shutting_down: set[int] = set()
        #: topic -> partition -> replicas, in preference order
        self.assignments: dict[str, dict[int, list[int]]] = {}
        self.states: dict[PartitionKey, PartitionState] = {}
        #: the znode version of each state read or written (for conditional writes)
        self.versions: dict[PartitionKey, int] = {}

    # -- queries ----------------------------------------------------------------------------

    def partitions(self) -> Iterator[PartitionKey]:
        """Every assigned partition, sorted."""
        for topic, parts in sorted(self.assignments.items()):
            for partition in sorted(parts):
                yield topic, partition

    def has_partition(self, tp: PartitionKey) -> bool:
        return tp[1] in self.assignments.get(tp[0], {})

    def replicas(self, tp: PartitionKey) -> list[int]:
        """``tp``'s replicas in preference order ([] for an unknown partition)."""
        return self.assignments.get(tp[0], {}).get(tp[1], [])

    def version(self, tp: PartitionKey) -> int:
        """The version of ``tp``'s state node, as brokers are told it (0 when unknown)."""
        return self.versions.get(tp, 0)

    def listed(self) -> dict[int, BrokerRegistration]:
        """The brokers Metadata answers list, by id: the live ones and the fenced ones
        still listed."""
        return {**self.live, **{b: self.fenced[b] for b in self.still_listed}}

    def eligible(self) -> set[int]:
        """The brokers that may lead or join an ISR now: live and not shutting down."""
        return set(self.live) - self.shutting_down

    def recipients(self, tp: PartitionKey) -> list[int]:
        """The brokers a partition's LeaderAndIsr goes to: its live replicas that are not
        shutting down."""
        eligible = self.eligible()
        return [r for r in self.replicas(tp) if r in eligible]

    def offline_replicas(self, tp: PartitionKey) -> list[int]:
        return [r for r in self.replicas(tp) if r not in self.live]

    def led_by(self, brokers: Collection[int]) -> list[PartitionKey]:
        """The partitions whose leader is one of ``brokers``."""
        return [tp for tp, s in sorted(self.states.items()) if s.leader in brokers]

    def followed_by(self, brokers: Collection[int]) -> list[PartitionKey]:
        """The partitions with one of ``brokers`` in the ISR but none of them leading."""
        return [tp for tp, s in sorted(self.states.items())
                if s.leader not in brokers and set(s.isr) & set(brokers)]

    def without_eligible_leader(self) -> list[PartitionKey]:
        """The partitions with no state yet or a leader that may not lead now."""
        eligible = self.eligible()
        return [tp for tp in self.partitions()
                if tp not in self.states or self.states[tp].leader not in eligible]

    def replicated_by(self, broker: int) -> list[PartitionKey]:
        """The partitions with a state of which ``broker`` is a replica."""
        return [tp for tp in self.partitions()
                if broker in self.replicas(tp) and tp in self.states]

    def leaders(self) -> dict[PartitionKey, int]:
        return {tp: s.leader for tp, s in self.states.items()}

    # -- changes ----------------------------------------------------------------------------

    def set_state(self, tp: PartitionKey, state: PartitionState, version: int) -> None:
        self.states[tp] = state
        self.versions[tp] = version

    def forget_state(self, tp: PartitionKey) -> None:
        self.states.pop(tp, None)
        self.versions.pop(tp, None)

    def remove_brokers(self, removed: Collection[int]) -> None:
        """``removed`` left (or restarted, and are not back yet): they stop shutting down."""
        for broker in removed:
            self.live.pop(broker, None)
        self.shutting_down -= set(removed)

    def remove_topic(self, topic: str) -> dict[int, list[int]]:
        """Forget ``topic`` and its partitions' states; returns its last assignment."""
        assignment = self.assignments.pop(topic, {})
        for partition in assignment:
            self.forget_state((topic, partition))
        return assignment
