"""What a consumer reads and where it stands: ``SubscriptionState`` and ``PartitionState``.

The subscription (topics, or a matcher over topic names), how the partitions came (a group
assigned them, or ``assign`` named them: ``manual``), the assigned partitions each with its
``PartitionState`` (position, fetch offset, paused, fetched records waiting), and the offsets
the application *processed* and the group *committed*.  Kafka's consumer and the seeds'
connectors keep one each; the coordinator changes the assignment, the fetcher fills the
partitions, the consumer around them hands records out.

Invariants: a ``PartitionState`` belongs to the assignment as long as
``assignment[tp] is state`` (a partition given up and assigned again gets a fresh state, so
a fetch answered for the old one is recognised and dropped); ``processed`` and
``committed`` only name assigned partitions; ``assignment``, ``processed`` and ``committed``
are the same dict objects for the life of the state (the consumers' per-record paths hold
them).  Plain data touched from trio tasks
only; the two events tell the fetcher what changed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import trio

from trilog.client.consumer._structs import (
    ConsumerRebalanceListener,
    IllegalStateError,
    TopicPartition,
)

if TYPE_CHECKING:
    from trilog.client._simple_consumer import ConsumerRecord, FetchedRecords

#: picks the subscribed topics out of the cluster's topic names
TopicSelector = Callable[[Iterable[str]], Iterable[str]]


class PartitionState:
    """One assigned partition.  ``position``: the next offset to hand out (None until
    known); ``fetch_offset``: the next to fetch; ``epoch`` counts seeks, so that a fetch
    answered after one is dropped.  ``buffered``: fetched answers not handed out yet (Kafka's
    consumer keeps at most one fetch ahead), ``current``: the one being handed out, whose
    records end at ``current_records_end`` and which ends at ``current_end`` (beyond its last
    record: transaction markers, aborted batches, compacted gaps).
    ``revoking``: being given up, nothing more is handed out."""

    __slots__ = ("buffered", "current", "current_end", "current_records_end", "epoch",
                 "fetch_offset", "highwater", "paused", "position", "revoking", "tp")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.position: int | None = None
        self.fetch_offset = -1
        self.paused = False
        self.revoking = False
        self.buffered: deque[FetchedRecords] = deque()
        self.current: Iterator[ConsumerRecord] | None = None
        self.current_end = -1
        self.current_records_end = -1
        self.highwater: int | None = None
        self.epoch = 0

    def seek(self, offset: int) -> None:
        self.position = self.fetch_offset = offset
        self.buffered.clear()
        self.current = None
        self.epoch += 1

    def settled_position(self) -> int | None:
        """``position``, or past the end of the fetch being handed out once every record
        of it has been: the next record comes from beyond its markers and skipped batches
        (Kafka's consumer moves its position past them as it reads)."""
        position = self.position
        if self.current is not None and position is not None and \
                self.current_records_end <= position < self.current_end:
            return self.current_end
        return position

    @property
    def deliverable(self) -> bool:
        return not (self.paused or self.revoking)

    @property
    def fetchable(self) -> bool:
        return self.position is not None and not self.paused and not self.buffered


class SubscriptionState:
    """See the module docstring.  ``regroup`` is set when the assignment changed (the
    fetcher regroups the partitions by leader), ``wakeup`` when a partition may have become
    fetchable; whoever waits on one replaces it."""

    def __init__(self) -> None:
        self.topics: tuple[str, ...] = ()
        self._selector: TopicSelector | None = None
        #: the topics the member last joined its group with (a pattern's, as it matched)
        self.joined_topics: tuple[str, ...] = ()
        self.listener = ConsumerRebalanceListener()
        #: partitions named by ``assign``, not given by a group
        self.manual = False
        self.assignment: dict[TopicPartition, PartitionState] = {}
        #: the next offset to commit for each partition: what the application finished
        self.processed: dict[TopicPartition, int] = {}
        self.committed: dict[TopicPartition, int] = {}
        self.regroup = trio.Event()
        self.wakeup = trio.Event()

    # -- the subscription --------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] = (), selector: TopicSelector | None = None
                  ) -> None:
        """Subscribe to ``topics``, or to what ``selector`` picks (a pattern); replaces an
        earlier subscription."""
        self.topics = tuple(sorted(set(topics)))
        self._selector = selector

    def unsubscribe(self) -> None:
        self.topics, self._selector = (), None

    def topics_in(self, cluster_topics: Iterable[str]) -> tuple[str, ...]:
        """The subscribed topics, given the cluster's: a pattern's matches, or the topics."""
        if self._selector is None:
            return self.topics
        return tuple(sorted(self._selector(cluster_topics)))

    def subscription(self) -> set[str]:
        """The topics subscribed to (for a pattern: those it matched at the last join)."""
        return set(self.topics if self._selector is None else self.joined_topics)

    # -- the assignment ----------------------------------------------------------------------

    def assign(self, tps: Iterable[TopicPartition]) -> None:
        """Own exactly ``tps``: states kept for the partitions kept, fresh ones (position
        unknown) for the others; the fetcher regroups."""
        wanted = {TopicPartition(*tp) for tp in tps}
        for tp, st in self.assignment.items():
            if tp not in wanted:
                st.current = None  # dropped: nothing more is read from it
        states = {tp: self.assignment.get(tp) or PartitionState(tp) for tp in sorted(wanted)}
        self.assignment.clear()
        self.assignment.update(states)
        for st in self.assignment.values():
            st.revoking = False
        for offsets in (self.processed, self.committed):
            for tp in [tp for tp in offsets if tp not in wanted]:
                del offsets[tp]
        self.regroup.set()

    def state(self, tp: TopicPartition | tuple[str, int]) -> PartitionState:
        """The state of an assigned partition; ``IllegalStateError`` for another."""
        st = self.assignment.get(TopicPartition(*tp))
        if st is None:
            raise IllegalStateError(f"{tp[0]}-{tp[1]} is not assigned to this consumer")
        return st

    def owns(self, st: PartitionState) -> bool:
        """Whether ``st`` is still its partition's state (not given up or replaced)."""
        return self.assignment.get(st.tp) is st

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self.assignment.items() if st.paused}

    def mark_revoking(self, tps: Iterable[TopicPartition]) -> None:
        """Nothing more is handed out from ``tps``: they are being given up."""
        for tp in tps:
            st = self.assignment.get(tp)
            if st is not None:
                st.revoking = True

    def wake_fetcher(self) -> None:
        """A partition may be fetchable now (sought, resumed, or its fetch was read)."""
        self.wakeup.set()
        self.wakeup = trio.Event()
