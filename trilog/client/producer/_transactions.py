"""Transactions (KIP-98, KIP-447): the part of Kafka's ``TransactionManager`` beyond
idempotence, for a producer with a ``transactional_id``.

The states, Kafka's (``TxnState``; ``TRANSITIONS`` says which move is allowed)::

    UNINITIALIZED --init_transactions--> INITIALIZING --> READY
    READY --begin_transaction--> IN_TRANSACTION
    IN_TRANSACTION --commit_transaction--> COMMITTING --> READY
    IN_TRANSACTION, ABORTABLE_ERROR --abort_transaction--> ABORTING --> READY
                                                          (--> INITIALIZING: a new epoch)
    IN_TRANSACTION --prepare_transaction--> PREPARED (--commit/abort_transaction--> READY)
    IN_TRANSACTION, COMMITTING, PREPARED, INITIALIZING --a failure--> ABORTABLE_ERROR
    any --fenced, not authorized--> FATAL_ERROR, for good

- ``init_transactions`` finds the id's transaction coordinator (FindCoordinator key type
  1) and asks it for the producer id and epoch (InitProducerId with the id), which fences
  every producer of the id before it and aborts a transaction it left open.
- Each partition a transaction writes to is added before its first batch is sent: a new
  batch (``maybe_add_partition``, once per batch, never per record) names its partition,
  ``run`` sends every partition named since the last request in one AddPartitionsToTxn, and
  the sender sends a partition's batches only once it is in the transaction
  (``send_allowed``).
- ``send_offsets`` adds the group's offsets partition (AddOffsetsToTxn), then commits the
  offsets to the group's coordinator as part of the transaction (TxnOffsetCommit; v3 names
  the member and generation, which the coordinator checks, KIP-447).
- ``end_transaction`` sends EndTxn once every batch is done (the producer flushes first); a
  transaction that added nothing ends without a request.
- Two phases (KIP-939's names; Flink's Kafka sink works so): ``prepare`` is the first half
  of a commit (every batch sent and acknowledged) that stops there and hands out the ids
  (``PreparedTransaction``).  The transaction stays open in the coordinator: closing the
  producer does not abort it, and anyone with the ids may end it with the module's
  ``end_transaction(client, prepared, commit=...)``, without the producer (until the
  coordinator aborts it after ``transaction_timeout_ms``, or a new producer of the id
  fences it with ``init_transactions``).

Errors, as Kafka's: PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, TRANSACTIONAL_ID_AUTHORIZATION_
FAILED, CLUSTER_AUTHORIZATION_FAILED, INVALID_TXN_STATE and an unsupported broker are
*fatal*: every later call raises the same error.  Any other failure inside a transaction
(a record that could not be written, offsets refused) is *abortable*: commit raises
``AbortableTransactionError`` and ``abort_transaction`` works; the batches not sent yet fail
with ``TransactionAbortedError``.  Retriable answers (CONCURRENT_TRANSACTIONS,
COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, lost connections) are retried, each call for
up to ``request_timeout_ms``; a call that gave up (or was cancelled) may be made again and
goes on from where it stopped.

Sequence numbers: batches that leave without being sent give theirs back
(``Idempotence.rewind``); after any other failed batch the next abort also bumps the epoch
(InitProducerId with the producer id and epoch, KIP-360), so that every partition's
sequences start again at 0.

Invariants: requests to the coordinators go one at a time (``_lock``), in the order the
application made its calls; outside IN_TRANSACTION, COMMITTING and PREPARED no batch is open (a
commit seals them as it starts, an abort or an error fails them), so the check of a new
batch is the only check sends need.  Use from the producer's trio run.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import trio

from trilog._topic import PartitionKey
from trilog.client._client import Client
from trilog.client._coordinator import TRANSACTION, Coordinator
from trilog.client._retry import Backoff
from trilog.client.consumer._structs import ConsumerGroupMetadata, OffsetAndMetadata
from trilog.client.producer._batch import ProducerBatch
from trilog.client.producer._config import ProducerConfig
from trilog.client.producer._errors import (
    AbortableTransactionError,
    TransactionAbortedError,
    TransactionStateError,
)
from trilog.client.producer._idempotence import Idempotence
from trilog.errors import (
    ApiError,
    ClusterAuthorizationFailedError,
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    NetworkError,
    NotCoordinatorError,
    OperationNotAttemptedError,
    ProducerFencedError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    TrilogError,
    UnknownMemberIdError,
    UnsupportedForMessageFormatError,
    UnsupportedVersionError,
    error_for_code,
)
from trilog.protocol import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    Message,
    TxnOffsetCommitRequest,
)

log = logging.getLogger("trilog.producer")


class TxnState(enum.Enum):
    """Kafka's ``TransactionManager.State``."""

    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING = "COMMITTING"
    #: prepared (two phases): left open for whoever holds its ids to end (not Kafka's name
    #: until KIP-939's PREPARED_TRANSACTION)
    PREPARED = "PREPARED"
    ABORTING = "ABORTING"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TxnState
#: target -> the states it may be reached from (Kafka's ``isTransitionValid``; FATAL_ERROR
#: from anywhere).  A call cut short may be made again: INITIALIZING, COMMITTING, PREPARED and
#: ABORTING may be entered again from themselves.
TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    S.UNINITIALIZED: frozenset(),
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.INITIALIZING, S.ABORTING}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING, S.ABORTING}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING: frozenset({S.IN_TRANSACTION, S.COMMITTING, S.PREPARED}),
    S.PREPARED: frozenset({S.IN_TRANSACTION, S.PREPARED}),
    S.ABORTING: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR, S.ABORTING, S.PREPARED}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING, S.PREPARED,
                                  S.ABORTABLE_ERROR, S.INITIALIZING}),
    S.FATAL_ERROR: frozenset(TxnState),
}

#: the answers that end a transactional producer for good (INVALID_PRODUCER_EPOCH from an
#: older coordinator, or from a partition leader, means the same as PRODUCER_FENCED)
_FENCED = (ProducerFencedError, InvalidProducerEpochError)
FATAL_ERRORS: tuple[type[TrilogError], ...] = (
    *_FENCED, TransactionalIdAuthorizationFailedError, ClusterAuthorizationFailedError,
    InvalidTxnStateError, UnsupportedVersionError, UnsupportedForMessageFormatError)
#: answers after which the coordinator must be found again
_MOVED = (NotCoordinatorError, CoordinatorNotAvailableError, NetworkError, RequestTimedOutError)
#: what the commit of a transaction's offsets refuses when the group moved on (KIP-447)
_GROUP_MOVED = (IllegalGenerationError, UnknownMemberIdError, FencedInstanceIdError)


@dataclass(frozen=True)
class PreparedTransaction:
    """A prepared transaction (``Producer.prepare_transaction``): what ``end_transaction``
    needs to end it without the producer.  ``empty``: it added nothing, and ends without a
    request.  Plain data: picklable, for another process to end it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    empty: bool = False


def is_transition_valid(source: TxnState, target: TxnState) -> bool:
    return source in TRANSITIONS[target]


class TransactionManager:
    """See the module docstring.  ``state`` is the ``TxnState``; ``partitions`` those in the
    current transaction; ``wakeup`` wakes the sender (partitions added, an error)."""

    def __init__(self, client: Client, config: ProducerConfig, idempotence: Idempotence,
                 wakeup: Callable[[], None]) -> None:
        assert config.transactional_id is not None
        self.transactional_id = config.transactional_id
        self._client = client
        self._idempotence = idempotence
        self._wakeup = wakeup
        self._timeout_ms = config.transaction_timeout_ms
        self._request_timeout_s = config.request_timeout_ms / 1000
        self._backoff = Backoff(first_s=min(0.02, config.retry_backoff_ms / 1000),
                                max_s=max(config.retry_backoff_ms / 1000, 0.02))
        self.state = TxnState.UNINITIALIZED
        self._error: BaseException | None = None
        #: in the transaction (their batches may go), being added, to add next
        self.partitions: set[PartitionKey] = set()
        self._pending: set[PartitionKey] = set()
        self._new: set[PartitionKey] = set()
        #: something was added (partitions, offsets): EndTxn is needed
        self._started = False
        #: a batch failed after it was stamped: a new epoch must restart the sequences
        self._bump = False
        self._coordinator = Coordinator(client, self.transactional_id, key_type=TRANSACTION)
        self._group_coordinators: dict[str, Coordinator] = {}
        self._lock = trio.Lock()
        self._wanted = trio.Event()

    # -- the state machine (no I/O) ------------------------------------------------------------

    def _transition(self, target: TxnState, error: BaseException | None = None) -> None:
        if not is_transition_valid(self.state, target):
            raise TransactionStateError(
                f"transactional id {self.transactional_id!r}: cannot go from "
                f"{self.state.name} to {target.name}")
        log.debug("transactional id %s: %s -> %s", self.transactional_id, self.state.name,
                  target.name)
        self.state = target
        if target in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR):
            self._error = error
        else:
            self._error = None

    def check(self) -> None:
        """Raise the error of an error state: the fatal error again (a fresh copy of it),
        or ``AbortableTransactionError`` from what made the transaction abortable."""
        error = self._error
        if self.state is TxnState.FATAL_ERROR and error is not None:
            raise type(error)(str(error)) from None
        if self.state is TxnState.ABORTABLE_ERROR:
            raise AbortableTransactionError(
                f"transactional id {self.transactional_id!r}: the transaction cannot commit "
                f"({error}); abort_transaction() and begin again") from error

    def fatal_error(self, error: BaseException) -> None:
        """End the producer's transactional life: every later call raises ``error``."""
        if self.state is TxnState.FATAL_ERROR:
            return
        if isinstance(error, _FENCED):
            error = self._fenced(error)
        log.error("transactional id %s: %s", self.transactional_id, error)
        self._transition(TxnState.FATAL_ERROR, error)
        self._new.clear()
        self._wakeup()

    def abortable_error(self, error: BaseException) -> None:
        """The transaction cannot commit any more (an abort under way stays one)."""
        if self.state in (TxnState.ABORTING, TxnState.FATAL_ERROR, TxnState.ABORTABLE_ERROR):
            return
        if self.state is TxnState.READY:  # nothing to abort: only the next transaction
            return
        log.info("transactional id %s: the transaction must be aborted: %s",
                 self.transactional_id, error)
        self._transition(TxnState.ABORTABLE_ERROR, error)
        self._new.clear()
        self._wakeup()

    def failed(self, error: BaseException) -> None:
        """``error`` ended a request or a batch: fatal or abortable, as Kafka decides."""
        if isinstance(error, FATAL_ERRORS):
            self.fatal_error(error)
        else:
            self.abortable_error(error)

    def _fenced(self, error: BaseException) -> ProducerFencedError:
        return ProducerFencedError(
            f"transactional id {self.transactional_id!r}: this producer (producer id "
            f"{self._idempotence.producer_id}, epoch {self._idempotence.producer_epoch}) was "
            "fenced: another producer with the same transactional id took over (it called "
            f"init_transactions() after this one); close this producer ({error})")

    @property
    def ongoing(self) -> bool:
        """A transaction is open: begun and not ended (failed ones included), and not
        prepared (a prepared one is left for whoever holds its ids to end)."""
        return self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING,
                              TxnState.ABORTING, TxnState.ABORTABLE_ERROR)

    def begin(self) -> None:
        """``begin_transaction``: local state only."""
        self.check()
        if self.state is not TxnState.READY:
            raise TransactionStateError(self._not_now("begin_transaction()"))
        self._transition(TxnState.IN_TRANSACTION)

    def begin_commit(self) -> None:
        """The first step of ``commit_transaction`` (the producer flushes next)."""
        self.check()
        if self.state not in (TxnState.IN_TRANSACTION, TxnState.COMMITTING,
                              TxnState.PREPARED):
            raise TransactionStateError(self._not_now("commit_transaction()"))
        self._transition(TxnState.COMMITTING)

    def begin_prepare(self) -> None:
        """The first step of ``prepare_transaction`` (the producer flushes next): no send
        joins the transaction from now on."""
        self.check()
        if self.state not in (TxnState.IN_TRANSACTION, TxnState.PREPARED):
            raise TransactionStateError(self._not_now("prepare_transaction()"))
        self._transition(TxnState.PREPARED)

    def prepared(self) -> PreparedTransaction:
        """The last step of ``prepare_transaction``, once every batch is done: the ids
        that end the transaction, or the error that failed one of its batches."""
        self.check()
        if self.state is not TxnState.PREPARED:
            raise TransactionStateError(self._not_now("prepare_transaction()"))
        idem = self._idempotence
        return PreparedTransaction(self.transactional_id, idem.producer_id,
                                   idem.producer_epoch, empty=not self._started)

    def begin_abort(self) -> None:
        """The first step of ``abort_transaction`` (the producer fails what was not sent
        and waits for what was).  An abort whose new epoch was not had yet goes on."""
        if self.state is TxnState.FATAL_ERROR:
            self.check()
        if self.state is TxnState.INITIALIZING and self._bump:
            return
        if self.state not in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR,
                              TxnState.ABORTING, TxnState.PREPARED):
            raise TransactionStateError(self._not_now("abort_transaction()"))
        self._transition(TxnState.ABORTING)
        self._new.clear()

    def _not_now(self, call: str) -> str:
        why = {
            TxnState.UNINITIALIZED: "call init_transactions() first",
            TxnState.INITIALIZING: "init_transactions() has not finished: call it again",
            TxnState.READY: "no transaction has begun: call begin_transaction() first",
            TxnState.IN_TRANSACTION: "a transaction is in progress: commit or abort it first",
            TxnState.COMMITTING: "the transaction is being committed: call "
                                 "commit_transaction() again to finish",
            TxnState.ABORTING: "the transaction is being aborted: call abort_transaction() "
                               "again to finish",
            TxnState.PREPARED: "the transaction is prepared: end it (commit or abort) first",
        }.get(self.state, self.state.name)
        return f"transactional id {self.transactional_id!r}: {call}: {why}"

    def check_in_transaction(self, call: str) -> None:
        """Raise unless a transaction is in progress: ``TransactionStateError`` saying what
        to call first, or the error of an error state."""
        if self.state is not TxnState.IN_TRANSACTION:
            self.check()
            raise TransactionStateError(self._not_now(call))

    def maybe_add_partition(self, tp: PartitionKey) -> None:
        """A batch opens for ``tp``: it joins the transaction (``run`` adds it before any
        batch of it is sent).  Raises for a send outside a transaction, or after an error
        (``TransactionStateError``, or the error)."""
        if self.state is not TxnState.IN_TRANSACTION:
            self.check_in_transaction(f"send() to {tp[0]}-{tp[1]}")
        if tp in self.partitions or tp in self._pending or tp in self._new:
            return
        self._new.add(tp)
        self._wanted.set()

    def send_allowed(self, tp: PartitionKey) -> bool:
        """Whether the sender may send ``tp``'s batches: the coordinator knows it is in the
        transaction."""
        return tp in self.partitions and self.state is not TxnState.FATAL_ERROR

    def undrained_error(self) -> BaseException | None:
        """What the batches not sent yet fail with now (None: they may go): after an error,
        or while aborting."""
        state = self.state
        if state is TxnState.FATAL_ERROR and self._error is not None:
            return type(self._error)(str(self._error))
        if state in (TxnState.ABORTABLE_ERROR, TxnState.ABORTING):
            return TransactionAbortedError(
                f"transactional id {self.transactional_id!r}: the transaction was aborted "
                "before this record was sent" + (f" ({self._error})" if self._error else ""))
        return None

    def batch_failed(self, batch: ProducerBatch) -> None:
        """A batch of the transaction failed (its ``error``)."""
        error = batch.error
        if isinstance(error, TransactionAbortedError):
            if batch.attempts:  # sent before: the broker may have its sequence numbers
                self._bump = True
            return
        if batch.data is not None or batch.attempts:
            self._bump = True  # its sequence numbers were taken and not all written
        assert error is not None
        self.failed(error)

    def unsent_dropped(self, batches: list[ProducerBatch]) -> None:
        """The sealed batches of one partition, in order, leave without being sent (an
        abort): their sequence numbers are given back, or a new epoch will settle them."""
        if batches and not self._idempotence.rewind(batches):
            self._bump = True

    def _complete(self) -> None:
        self.partitions.clear()
        self._pending.clear()
        self._new.clear()
        self._started = False

    # -- requests ------------------------------------------------------------------------------

    async def init_transactions(self) -> None:
        """``init_transactions``: the producer id and epoch of the transactional id."""
        self.check()
        if self.state not in (TxnState.UNINITIALIZED, TxnState.INITIALIZING):
            raise TransactionStateError(
                f"transactional id {self.transactional_id!r}: init_transactions() was "
                "already called (once per producer)")
        self._transition(TxnState.INITIALIZING)
        async with self._lock:
            await self._init_producer_id(bump=self._bump)
        self._transition(TxnState.READY)

    async def _init_producer_id(self, *, bump: bool) -> None:
        """InitProducerId with the transactional id (``bump``: with the producer id and
        epoch, for the next epoch of the same producer); the state stays INITIALIZING when
        it gives up in time (a call again goes on), any other failure is fatal."""
        idem = self._idempotence
        request = InitProducerIdRequest(
            transactional_id=self.transactional_id, transaction_timeout_ms=self._timeout_ms,
            producer_id=idem.producer_id if bump else -1,
            producer_epoch=idem.producer_epoch if bump else -1)
        try:
            response = await self._call(self._coordinator, request, "InitProducerId")
            if response.error_code:
                raise error_for_code(response.error_code)
        except ApiError as exc:
            if exc.retriable:
                raise
            self.fatal_error(_named(exc, "InitProducerId"))
            self.check()
            raise
        idem.start(response.producer_id, response.producer_epoch)
        self._bump = False
        log.info("transactional id %s: producer id %d, epoch %d", self.transactional_id,
                 response.producer_id, response.producer_epoch)

    async def run(self) -> None:
        """The producer's task: add the partitions new batches name, one request at a time
        (all those named meanwhile go in the next)."""
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            async with self._lock:
                await self._add_partitions()

    async def _add_partitions(self) -> None:
        attempt = 0
        while self._new or self._pending:
            if self.state not in (TxnState.IN_TRANSACTION, TxnState.COMMITTING,
                                  TxnState.PREPARED):
                self._pending.clear()
                self._new.clear()
                await trio.lowlevel.checkpoint()
                return
            self._pending |= self._new
            self._new.clear()
            idem = self._idempotence
            R = AddPartitionsToTxnRequest
            request = R(transactional_id=self.transactional_id, producer_id=idem.producer_id,
                        producer_epoch=idem.producer_epoch, topics=[
                            R.AddPartitionsToTxnTopic(name=t, partitions=sorted(ps))
                            for t, ps in _by_topic(self._pending).items()])
            try:
                conn = await self._coordinator.connection()
                response = await conn.request(request)
            except ApiError as exc:
                if not exc.retriable:
                    self._pending.clear()
                    self.failed(_named(exc, "AddPartitionsToTxn"))
                    return
                self._coordinator.reset()
            else:
                if self._partitions_added(response):
                    return
            attempt += 1
            await trio.sleep(self._backoff.delay(attempt))

    def _partitions_added(self, response: Any) -> bool:
        """AddPartitionsToTxn's answer: True when it is final (added, or failed)."""
        codes = {(t.name, p.partition_index): p.partition_error_code
                 for t in response.results for p in t.results}
        errors = {tp: error_for_code(code) for tp, code in codes.items() if code}
        for error in errors.values():
            if isinstance(error, (NotCoordinatorError, CoordinatorNotAvailableError)):
                self._coordinator.reset()
                return False
            if error.retriable:
                return False  # CONCURRENT_TRANSACTIONS (the last one still ending), loading
        if errors:
            denied = sorted({t for (t, _p), e in errors.items()
                             if isinstance(e, TopicAuthorizationFailedError)})
            fatal = [e for e in errors.values() if isinstance(e, FATAL_ERRORS)]
            if fatal:
                self.failed(_named(fatal[0], "AddPartitionsToTxn"))
            elif denied:
                self.failed(TopicAuthorizationFailedError(
                    f"AddPartitionsToTxn: not authorized to write to {', '.join(denied)}"))
            else:
                shown = {f"{t}-{p}": e.name for (t, p), e in sorted(errors.items())
                         if not isinstance(e, OperationNotAttemptedError)}
                first = next(e for e in errors.values()
                             if not isinstance(e, OperationNotAttemptedError))
                self.failed(type(first)(f"AddPartitionsToTxn: could not add {shown}"))
            self._pending.clear()
            return True
        self.partitions |= self._pending
        log.debug("transactional id %s: added %s", self.transactional_id, sorted(self._pending))
        self._pending.clear()
        self._started = True
        self._wakeup()
        return True

    async def send_offsets(self, offsets: Mapping[Any, OffsetAndMetadata | int],
                           group: ConsumerGroupMetadata | str) -> None:
        """``send_offsets_to_transaction``: commit ``offsets`` (each the next offset to
        read) for the group as part of the transaction."""
        metadata = as_group_metadata(group)
        committed = {(tp[0], tp[1]): (o, "") if isinstance(o, int) else (o.offset, o.metadata)
                     for tp, o in offsets.items()}
        self.check_in_transaction("send_offsets_to_transaction()")
        async with self._lock:
            try:
                await self._add_offsets(metadata.group_id)
                self._started = True
                await self._commit_offsets(committed, metadata)
            except ApiError as exc:
                if exc.retriable:  # gave up in time: the call may be made again
                    raise
                self.failed(exc)
                self.check()
                raise

    async def _add_offsets(self, group_id: str) -> None:
        idem = self._idempotence
        response = await self._call(self._coordinator, AddOffsetsToTxnRequest(
            transactional_id=self.transactional_id, producer_id=idem.producer_id,
            producer_epoch=idem.producer_epoch, group_id=group_id), "AddOffsetsToTxn")
        if response.error_code:
            raise _named(error_for_code(response.error_code),
                         f"AddOffsetsToTxn (group {group_id!r})")

    async def _commit_offsets(self, offsets: dict[PartitionKey, tuple[int, str]],
                              group: ConsumerGroupMetadata) -> None:
        coordinator = self._group_coordinators.get(group.group_id)
        if coordinator is None:
            coordinator = self._group_coordinators[group.group_id] = Coordinator(
                self._client, group.group_id)
        R = TxnOffsetCommitRequest
        P = R.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition
        idem = self._idempotence
        left = dict(offsets)
        deadline = trio.current_time() + self._request_timeout_s
        attempt = 0
        while left:
            request = R(
                transactional_id=self.transactional_id, group_id=group.group_id,
                producer_id=idem.producer_id, producer_epoch=idem.producer_epoch,
                generation_id=group.generation_id, member_id=group.member_id,
                group_instance_id=group.group_instance_id,
                topics=[R.TxnOffsetCommitRequestTopic(name=t, partitions=[
                    P(partition_index=p, committed_offset=o, committed_metadata=m)
                    for p, (o, m) in sorted(ps.items())])
                    for t, ps in _by_topic(left).items()])
            # Each partition's answer is its own: those committed are not sent again.
            response = await self._call(coordinator, request, "TxnOffsetCommit",
                                        codes=lambda _response: ())
            retry: ApiError | None = None
            for t in response.topics:
                for p in t.partitions:
                    if not p.error_code:
                        left.pop((t.name, p.partition_index), None)
                        continue
                    error = error_for_code(p.error_code)
                    if error.retriable:
                        retry = error
                        if isinstance(error, _MOVED):
                            coordinator.reset()
                    elif isinstance(error, _GROUP_MOVED):
                        raise type(error)(
                            f"TxnOffsetCommit: group {group.group_id!r} moved on without "
                            f"member {group.member_id!r} of generation "
                            f"{group.generation_id} ({error}): its offsets cannot go in "
                            "this transaction")
                    else:
                        raise _named(error, f"TxnOffsetCommit of {t.name}-{p.partition_index}")
            if left:
                if trio.current_time() >= deadline:
                    raise _named(retry or RequestTimedOutError(f"no answer for {sorted(left)}"),
                                 f"TxnOffsetCommit: gave up after "
                                 f"{self._request_timeout_s:.0f} s")
                attempt += 1
                await trio.sleep(self._backoff.delay(attempt))

    async def end_transaction(self, commit: bool) -> None:
        """EndTxn (once every batch is done: the producer flushed), and a new epoch after an
        abort that needs one; READY then."""
        if commit:
            self.check()  # a batch failed while flushing: only an abort can end it
        elif self.state is TxnState.FATAL_ERROR:
            self.check()
        async with self._lock:
            if self.state is not TxnState.INITIALIZING:  # else: only its new epoch is left
                if self._started:
                    await self._end_txn(commit)
                self._complete()
                if self._bump and not commit:
                    self._transition(TxnState.INITIALIZING)
            if self.state is TxnState.INITIALIZING:
                await self._init_producer_id(bump=True)
        self._transition(TxnState.READY)

    async def _end_txn(self, commit: bool) -> None:
        idem = self._idempotence
        what = "EndTxn (commit)" if commit else "EndTxn (abort)"
        try:
            response = await self._call(self._coordinator, EndTxnRequest(
                transactional_id=self.transactional_id, producer_id=idem.producer_id,
                producer_epoch=idem.producer_epoch, committed=commit), what)
            if response.error_code:
                raise error_for_code(response.error_code)
        except ApiError as exc:
            if exc.retriable:  # gave up in time: commit (or abort) again goes on
                raise
            self.failed(_named(exc, what))
            self.check()
            raise

    async def _call(self, coordinator: Coordinator, request: Message, what: str, *,
                    codes: Callable[[Any], Iterable[int]] | None = None) -> Any:
        """Send ``request`` to ``coordinator`` until its answer holds no retriable error
        (``codes``: its error codes; default its ``error_code``), backing off, for up to
        ``request_timeout_ms``: a lost connection, a timeout, NOT_COORDINATOR and
        COORDINATOR_NOT_AVAILABLE find the coordinator again first.  Returns the answer;
        raises a lookup's error that is not retriable, or the last retriable one in time."""
        deadline = trio.current_time() + self._request_timeout_s
        codes = codes or (lambda response: (response.error_code,))
        attempt = 0
        while True:
            try:
                conn = await coordinator.connection()
                response = await conn.request(request)
            except ApiError as exc:
                if not exc.retriable:
                    raise
                error: ApiError = exc
                coordinator.reset()
            else:
                retriable = [e for e in map(error_for_code, filter(None, codes(response)))
                             if e.retriable]
                if not retriable:
                    return response
                error = retriable[0]
                if isinstance(error, _MOVED):
                    coordinator.reset()
            if trio.current_time() >= deadline:
                raise _named(error, f"{what}: gave up after {self._request_timeout_s:.0f} s")
            attempt += 1
            delay = self._backoff.delay(attempt)
            if isinstance(error, ConcurrentTransactionsError):
                delay = min(delay, 0.05)  # the last transaction's markers: soon written
            await trio.sleep(delay)


async def end_transaction(client: Client, prepared: PreparedTransaction, *, commit: bool,
                          timeout_s: float = 30.0) -> None:
    """End a prepared transaction (commit, or abort) by its ids, without its producer: the
    second phase of a two-phase commit, in another process than the one that prepared it.

    FindCoordinator (key type 1), then EndTxn with the producer id and epoch; CONCURRENT_
    TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR and lost connections are
    retried for up to ``timeout_s``.  Ending it again the same way is no error (the
    coordinator answers a repeat so).  Raises ``ProducerFencedError`` when a newer producer
    of the id (``init_transactions``) or the coordinator's timeout aborted it first, and
    ``InvalidTxnStateError`` when it already ended the other way."""
    if prepared.empty:
        await trio.lowlevel.checkpoint()
        return
    what = (f"EndTxn ({'commit' if commit else 'abort'}) of transactional id "
            f"{prepared.transactional_id!r}")
    coordinator = Coordinator(client, prepared.transactional_id, key_type=TRANSACTION)
    request = EndTxnRequest(transactional_id=prepared.transactional_id,
                            producer_id=prepared.producer_id,
                            producer_epoch=prepared.producer_epoch, committed=commit)
    backoff = Backoff(first_s=0.02, max_s=1.0)
    deadline = trio.current_time() + timeout_s
    attempt = 0
    while True:
        try:
            conn = await coordinator.connection()
            response = await conn.request(request)
            if response.error_code:
                raise error_for_code(response.error_code)
            return
        except ApiError as exc:
            if not exc.retriable:
                raise _named(exc, what) from None
            if isinstance(exc, _MOVED):
                coordinator.reset()
            if trio.current_time() >= deadline:
                raise _named(exc, f"{what}: gave up after {timeout_s:.0f} s") from None
        attempt += 1
        await trio.sleep(backoff.delay(attempt))


def as_group_metadata(group: Any) -> ConsumerGroupMetadata:
    """A group id, or a consumer's group metadata (trilog's, or any object with the same
    fields, as kafka-python's ``ConsumerGroupMetadata``)."""
    if isinstance(group, str):
        metadata = ConsumerGroupMetadata(group)
    else:
        try:
            metadata = ConsumerGroupMetadata(group.group_id, group.generation_id,
                                             group.member_id, group.group_instance_id)
        except AttributeError:
            raise TypeError("group_metadata must be a consumer's group_metadata() or a group "
                            f"id, not {type(group).__name__}") from None
    if not isinstance(metadata.group_id, str) or not metadata.group_id:
        raise ValueError("send_offsets_to_transaction needs a group: the consumer has no "
                         "group_id")
    return metadata


def _named(error: BaseException, what: str) -> Any:
    """``error`` again, its message saying which request it answered."""
    return type(error)(f"{what}: {error}")


def _by_topic(tps: Iterable[PartitionKey] | Mapping[PartitionKey, Any]) -> dict[str, Any]:
    """Partitions (or a mapping of them) grouped by topic, as the requests nest them."""
    out: dict[str, Any] = {}
    if isinstance(tps, Mapping):
        for (topic, partition), value in sorted(tps.items()):
            out.setdefault(topic, {})[partition] = value
    else:
        for topic, partition in sorted(tps):
            out.setdefault(topic, []).append(partition)
    return out
