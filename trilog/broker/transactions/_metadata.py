"""A transactional id's state at its coordinator, and the transitions between its states
(Kafka's ``TransactionMetadata``, transaction protocol version 0: the producer epoch changes
only at InitProducerId and when the coordinator fences a producer).

States, and what moves a transactional id between them::

    Empty ──AddPartitions/AddOffsets──> Ongoing ──EndTxn(commit)──> PrepareCommit ──markers──> CompleteCommit
      ^                                    │    ──EndTxn(abort)───> PrepareAbort ───markers──> CompleteAbort
      │                                    │                            ^
      └──InitProducerId (epoch + 1)────────┼── (from Empty/Complete*)   │
                                           └──InitProducerId / timeout──┘ (a fence: the epoch + 1,
                                                                          then abort)

A transition is *prepared* (``prepare_*``: a ``TxnTransit``, the record to write to
``__transaction_state``; the metadata marks it ``pending``), written, then *completed*
(``complete``) once the write is acknowledged by the in-sync replicas, or ``abandon``-ed if the
write failed.  While a transition is pending, the client's next request is answered
CONCURRENT_TRANSACTIONS (it retries).  Each ``prepare_*`` checks that the move is legal
(``LEGAL_PREVIOUS``) and raises ``IllegalTransition`` otherwise: the request handlers check
the client's view first, so that is a bug, not a client error.

Pure: no I/O, no trio; tested without a server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from trilog._topic import PartitionKey
from trilog.protocol import TxnStatus

#: No producer id / epoch (Kafka's ``RecordBatch.NO_PRODUCER_ID`` / ``NO_PRODUCER_EPOCH``).
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: The last epoch a client may use: the coordinator keeps one above it to fence with.
MAX_CLIENT_EPOCH = 0x7FFF - 1


#: Kafka's ``TransactionState``: the byte ids ``__transaction_state`` stores
#: (``protocol.TxnStatus``), named (``state_name``) as DescribeTransactions shows them.
TxnState = TxnStatus

S = TxnState

#: The states each state may be reached from (Kafka's ``validPreviousStates``).
LEGAL_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

#: States in which a transactional id may expire (``transactional.id.expiration.ms``).
EXPIRABLE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
#: States in which a transaction is open (its partitions may hold records of it).
OPEN = frozenset({S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT})


class IllegalTransition(Exception):
    """A transition the state machine does not allow (a coordinator bug, not a client's)."""


class TxnTransit(NamedTuple):
    """A transactional id's state as one record of ``__transaction_state`` holds it: what a
    transition writes, and what loading the log reads back."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[PartitionKey]
    start_ms: int  # when the open transaction began; -1 when none
    update_ms: int


def epoch_exhausted(epoch: int) -> bool:
    """Kafka's ``isEpochExhausted``: the epoch is the last a client may use."""
    return epoch >= MAX_CLIENT_EPOCH


@dataclass(eq=False)
class TransactionMetadata:
    """One transactional id at its coordinator.  Not thread-safe (the trio thread only)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 60_000
    state: TxnState = S.EMPTY
    partitions: set[PartitionKey] = field(default_factory=set)
    start_ms: int = -1
    update_ms: int = -1
    #: the state a written-but-not-yet-acknowledged transition goes to (None: none)
    pending: TxnState | None = None
    #: the pending transition is a fence's abort (``prepare_fenced_abort``)
    fencing: bool = False
    #: a fence whose write failed: the next fence reuses its epoch (Kafka's
    #: ``hasFailedEpochFence``; the bumped epoch was never given to a client)
    failed_fence: bool = False

    @classmethod
    def of(cls, transactional_id: str, transit: TxnTransit) -> TransactionMetadata:
        """The metadata a loaded record describes."""
        return cls(transactional_id, transit.producer_id, transit.producer_epoch,
                   transit.last_producer_id, transit.last_producer_epoch, transit.timeout_ms,
                   transit.state, set(transit.partitions), transit.start_ms, transit.update_ms)

    def current(self) -> TxnTransit:
        return TxnTransit(self.producer_id, self.last_producer_id, self.producer_epoch,
                          self.last_producer_epoch, self.timeout_ms, self.state,
                          frozenset(self.partitions), self.start_ms, self.update_ms)

    @property
    def epoch_exhausted(self) -> bool:
        return epoch_exhausted(self.producer_epoch)

    # -- prepared transitions -------------------------------------------------------------

    def _prepare(self, state: TxnState, *, producer_id: int | None = None,
                 epoch: int | None = None, last_epoch: int | None = None,
                 timeout_ms: int | None = None, partitions: frozenset[PartitionKey] | None
                 = None, start_ms: int | None = None, now_ms: int) -> TxnTransit:
        if self.pending is not None:
            raise IllegalTransition(f"{self.transactional_id}: a transition to "
                                    f"{self.pending.state_name} is pending")
        if self.state not in LEGAL_PREVIOUS[state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.state_name} -> "
                                    f"{state.state_name} is not a legal transition")
        pid = self.producer_id if producer_id is None else producer_id
        transit = TxnTransit(
            pid, self.producer_id if pid != self.producer_id else self.last_producer_id,
            self.producer_epoch if epoch is None else epoch,
            self.last_producer_epoch if last_epoch is None else last_epoch,
            self.timeout_ms if timeout_ms is None else timeout_ms, state,
            frozenset(self.partitions) if partitions is None else partitions,
            self.start_ms if start_ms is None else start_ms, now_ms)
        if state is not S.DEAD and transit.producer_epoch < 0:
            raise IllegalTransition(f"{self.transactional_id}: epoch {transit.producer_epoch}")
        self.pending = state
        return transit

    def prepare_increment_epoch(self, timeout_ms: int, now_ms: int) -> TxnTransit:
        """InitProducerId with no open transaction: the next epoch (0 for a new id), no
        partitions.  The caller rotates the producer id first if the epoch is exhausted."""
        if self.epoch_exhausted:
            raise IllegalTransition(f"{self.transactional_id}: epochs of producer "
                                    f"{self.producer_id} are exhausted")
        return self._prepare(S.EMPTY, epoch=self.producer_epoch + 1,
                             last_epoch=NO_PRODUCER_EPOCH, timeout_ms=timeout_ms,
                             partitions=frozenset(), start_ms=-1, now_ms=now_ms)

    def prepare_rotate_producer_id(self, producer_id: int, timeout_ms: int,
                                   now_ms: int) -> TxnTransit:
        """InitProducerId when the epochs of the current producer id are exhausted: a new
        producer id at epoch 0."""
        if self.state in OPEN:
            raise IllegalTransition(f"{self.transactional_id}: rotating the producer id of "
                                    "an open transaction")
        return self._prepare(S.EMPTY, producer_id=producer_id, epoch=0,
                             last_epoch=NO_PRODUCER_EPOCH, timeout_ms=timeout_ms,
                             partitions=frozenset(), start_ms=-1, now_ms=now_ms)

    def prepare_fenced_abort(self, now_ms: int) -> TxnTransit:
        """An open transaction's producer is fenced (a new producer's InitProducerId, or the
        transaction timed out): the epoch + 1 and PrepareAbort with it (Kafka's
        ``PrepareEpochFence``, which is never written itself).  The bumped epoch is taken in
        memory now: no client ever gets it, so if the write fails the next fence reuses it."""
        if self.pending is not None or self.state is not S.ONGOING:
            raise IllegalTransition(f"{self.transactional_id}: fencing from "
                                    f"{self.state.state_name}")
        if not self.failed_fence:
            if self.producer_epoch >= 0x7FFF:
                raise IllegalTransition(f"{self.transactional_id}: the epoch overflows")
            self.producer_epoch += 1
        self.last_producer_epoch = NO_PRODUCER_EPOCH
        self.fencing = True
        return self._prepare(S.PREPARE_ABORT, now_ms=now_ms)

    def prepare_add_partitions(self, partitions: frozenset[PartitionKey],
                               now_ms: int) -> TxnTransit:
        """AddPartitionsToTxn / AddOffsetsToTxn: the transaction is open with them; it
        begins now if none was open."""
        starts = self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
        return self._prepare(S.ONGOING, partitions=frozenset(self.partitions) | partitions,
                             start_ms=now_ms if starts else self.start_ms, now_ms=now_ms)

    def prepare_end(self, commit: bool, now_ms: int) -> TxnTransit:
        """EndTxn: PrepareCommit / PrepareAbort."""
        return self._prepare(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, now_ms=now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        """Every marker is written: CompleteCommit / CompleteAbort, no partitions."""
        if self.state is S.PREPARE_COMMIT:
            state = S.COMPLETE_COMMIT
        elif self.state is S.PREPARE_ABORT:
            state = S.COMPLETE_ABORT
        else:
            raise IllegalTransition(f"{self.transactional_id}: completing from "
                                    f"{self.state.state_name}")
        return self._prepare(state, last_epoch=self.producer_epoch, partitions=frozenset(),
                             now_ms=now_ms)

    def prepare_dead(self) -> TxnTransit:
        """``transactional.id.expiration.ms`` passed: the id goes (a tombstone is written)."""
        return self._prepare(S.DEAD, partitions=frozenset(), now_ms=self.update_ms)

    # -- after the write ------------------------------------------------------------------

    def complete(self, transit: TxnTransit) -> None:
        """The write of ``transit`` was acknowledged: it is the state now."""
        if self.pending is not transit.state:
            raise IllegalTransition(f"{self.transactional_id}: completing "
                                    f"{transit.state.state_name}, pending "
                                    f"{self.pending.state_name if self.pending else None}")
        (self.producer_id, self.last_producer_id, self.producer_epoch,
         self.last_producer_epoch, self.timeout_ms, self.state, partitions, self.start_ms,
         self.update_ms) = transit
        self.partitions = set(partitions)
        self.pending = None
        self.fencing = self.failed_fence = False

    def abandon(self) -> None:
        """The write of the pending transition failed: nothing changed, except that a
        fence's epoch stays taken (``prepare_fenced_abort``)."""
        if self.fencing:
            self.failed_fence = True
        self.pending = None
        self.fencing = False
