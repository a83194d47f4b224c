"""The transactional producer's state machine (``TransactionManager``) without a broker:
the transitions, what each call refuses in each state, fatal and abortable errors, and the
coordinator requests against a stand-in coordinator with canned answers."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from trilog.client import ConsumerGroupMetadata, OffsetAndMetadata
from trilog.client.producer import (
    AbortableTransactionError,
    ProducerConfig,
    TransactionAbortedError,
    TransactionManager,
    TransactionStateError,
    TxnState,
)
from trilog.client.producer._batch import ProducerBatch
from trilog.client.producer._idempotence import Idempotence
from trilog.client.producer import PreparedTransaction, end_transaction
from trilog.client.producer._transactions import TRANSITIONS, is_transition_valid
from trilog.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    IllegalGenerationError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    NetworkError,
    NotCoordinatorError,
    OperationNotAttemptedError,
    ProducerFencedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from trilog.protocol import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    InitProducerIdResponse,
    TxnOffsetCommitResponse,
)
from trilog.records import RecordBatchBuilder

S = TxnState


class StandIn:
    """A coordinator and its connection: answers each request type from a list (an
    exception in it is raised), and keeps the requests."""

    def __init__(self, **answers: list[Any]) -> None:
        self.answers = answers
        self.requests: list[Any] = []
        self.resets = 0

    async def connection(self) -> StandIn:
        await trio.lowlevel.checkpoint()
        return self

    def reset(self) -> None:
        self.resets += 1

    async def request(self, request: Any, **_kw: Any) -> Any:
        await trio.lowlevel.checkpoint()
        self.requests.append(request)
        name = type(request).__name__.removesuffix("Request")
        answer = self.answers[name].pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def sent(self, name: str) -> list[Any]:
        return [r for r in self.requests if type(r).__name__ == name + "Request"]


def init_ok(producer_id: int = 42, epoch: int = 3, code: int = 0) -> Any:
    return InitProducerIdResponse(throttle_time_ms=0, error_code=code,
                                  producer_id=producer_id, producer_epoch=epoch)


def added(tps: list[tuple[str, int]], code: int = 0, codes: dict | None = None) -> Any:
    R = AddPartitionsToTxnResponse
    by_topic: dict[str, list] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(R.AddPartitionsToTxnTopicResult.
                                          AddPartitionsToTxnPartitionResult(
                                              partition_index=p,
                                              partition_error_code=(codes or {}).get(
                                                  (t, p), code)))
    return R(throttle_time_ms=0, results=[R.AddPartitionsToTxnTopicResult(name=t, results=rs)
                                          for t, rs in by_topic.items()])


def ended(code: int = 0) -> Any:
    return EndTxnResponse(throttle_time_ms=0, error_code=code)


def manager(coordinator: StandIn | None = None, **config: Any
            ) -> tuple[TransactionManager, list[int]]:
    cfg = ProducerConfig(transactional_id="tx-1", request_timeout_ms=2000,
                         retry_backoff_ms=10, **config)
    wakeups: list[int] = []
    txn = TransactionManager(None, cfg, Idempotence(None, cfg),  # type: ignore[arg-type]
                             lambda: wakeups.append(1))
    if coordinator is not None:
        txn._coordinator = coordinator  # type: ignore[assignment]
    return txn, wakeups


def batch(tp: tuple[str, int] = ("t", 0), *, sealed: bool = True, attempts: int = 0,
          error: BaseException | None = None) -> ProducerBatch:
    b = ProducerBatch(tp[0], tp[1], RecordBatchBuilder(), 0.0, 60.0)
    b.builder.append(None, None, b"v")
    if sealed:
        b.data = b"sealed"
    b.attempts = attempts
    b.error = error
    return b


async def ready(txn: TransactionManager) -> None:
    await txn.init_transactions()
    assert txn.state is S.READY


# -- the transitions (pure) -------------------------------------------------------------------


def test_the_transitions_are_kafkas():
    assert is_transition_valid(S.UNINITIALIZED, S.INITIALIZING)
    assert is_transition_valid(S.INITIALIZING, S.READY)
    assert is_transition_valid(S.READY, S.IN_TRANSACTION)
    assert is_transition_valid(S.IN_TRANSACTION, S.COMMITTING)
    assert is_transition_valid(S.COMMITTING, S.READY)
    assert is_transition_valid(S.ABORTABLE_ERROR, S.ABORTING)
    assert is_transition_valid(S.ABORTING, S.INITIALIZING)  # an abort's new epoch
    assert is_transition_valid(S.COMMITTING, S.ABORTABLE_ERROR)
    assert all(is_transition_valid(s, S.FATAL_ERROR) for s in S)
    assert not any(is_transition_valid(S.FATAL_ERROR, s) for s in S if s is not S.FATAL_ERROR)
    assert not is_transition_valid(S.READY, S.COMMITTING)
    assert not is_transition_valid(S.ABORTABLE_ERROR, S.COMMITTING)
    assert not is_transition_valid(S.UNINITIALIZED, S.IN_TRANSACTION)
    assert set(TRANSITIONS) == set(S)
    # two phases: prepared, then ended by its owner (or by anyone with its ids)
    assert is_transition_valid(S.IN_TRANSACTION, S.PREPARED)
    assert is_transition_valid(S.PREPARED, S.COMMITTING)
    assert is_transition_valid(S.PREPARED, S.ABORTING)
    assert not is_transition_valid(S.READY, S.PREPARED)
    assert not is_transition_valid(S.PREPARED, S.IN_TRANSACTION)


def test_calls_out_of_order_say_what_to_call():
    txn, _ = manager()
    with pytest.raises(TransactionStateError, match=r"init_transactions\(\) first"):
        txn.begin()
    with pytest.raises(TransactionStateError, match=r"init_transactions\(\) first"):
        txn.maybe_add_partition(("t", 0))
    with pytest.raises(TransactionStateError, match="init_transactions"):
        txn.begin_commit()
    txn.state = S.READY
    with pytest.raises(TransactionStateError, match=r"begin_transaction\(\) first"):
        txn.maybe_add_partition(("t", 0))
    with pytest.raises(TransactionStateError, match=r"begin_transaction\(\) first"):
        txn.begin_abort()
    txn.begin()
    with pytest.raises(TransactionStateError, match="already|in progress"):
        txn.begin()
    assert txn.state is S.IN_TRANSACTION  # a refused call changes nothing


def test_partitions_join_once_and_go_once_added():
    txn, _ = manager()
    txn.state = S.IN_TRANSACTION
    txn.maybe_add_partition(("t", 0))
    txn.maybe_add_partition(("t", 0))
    txn.maybe_add_partition(("t", 1))
    assert txn._new == {("t", 0), ("t", 1)}
    assert not txn.send_allowed(("t", 0))
    txn.partitions.add(("t", 0))
    assert txn.send_allowed(("t", 0))


def test_a_fatal_error_is_raised_again_by_every_later_call():
    txn, wakeups = manager()
    txn.state = S.IN_TRANSACTION
    txn.failed(ProducerFencedError("PRODUCER_FENCED"))
    assert txn.state is S.FATAL_ERROR and wakeups
    raised = []
    for call in (txn.begin, txn.begin_commit, txn.begin_abort,
                 lambda: txn.maybe_add_partition(("t", 0))):
        with pytest.raises(ProducerFencedError, match="another producer with the same "
                                                      "transactional id took over") as info:
            call()
        raised.append(info.value)
    assert len({id(e) for e in raised}) == len(raised)  # a fresh error each time
    assert isinstance(txn.undrained_error(), ProducerFencedError)
    assert not txn.send_allowed(("t", 0))
    # an old coordinator's INVALID_PRODUCER_EPOCH is the same fence
    other, _ = manager()
    other.state = S.IN_TRANSACTION
    other.failed(InvalidProducerEpochError("INVALID_PRODUCER_EPOCH"))
    with pytest.raises(ProducerFencedError):
        other.begin_commit()
    third, _ = manager()
    third.failed(TransactionalIdAuthorizationFailedError("no"))
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        third.begin()


def test_an_abortable_error_refuses_the_commit_and_allows_the_abort():
    txn, _ = manager()
    txn.state = S.IN_TRANSACTION
    cause = UnknownTopicOrPartitionError("t-9: gone")
    txn.batch_failed(batch(error=cause, attempts=1))
    assert txn.state is S.ABORTABLE_ERROR
    with pytest.raises(AbortableTransactionError, match="abort_transaction") as info:
        txn.begin_commit()
    assert info.value.__cause__ is cause
    with pytest.raises(AbortableTransactionError):
        txn.maybe_add_partition(("t", 1))
    assert isinstance(txn.undrained_error(), TransactionAbortedError)
    txn.begin_abort()
    assert txn.state is S.ABORTING
    assert txn._bump  # the failed batch's sequence numbers: a new epoch after the abort


def test_batches_dropped_unsent_give_their_sequences_back():
    txn, _ = manager()
    txn._idempotence.start(7, 0)
    first, second = batch(("t", 0)), batch(("t", 0))
    for b in (first, second):
        txn._idempotence.stamp(b)
    assert txn._idempotence._next_sequence[("t", 0)] == 2
    txn.state = S.ABORTING
    txn.unsent_dropped([first, second])
    assert txn._idempotence._next_sequence[("t", 0)] == 0
    first.error = TransactionAbortedError("aborted")
    txn.batch_failed(first)
    assert not txn._bump and txn.state is S.ABORTING
    retried = batch(("t", 1), attempts=1, error=TransactionAbortedError("aborted"))
    txn.unsent_dropped([retried])
    assert txn._bump  # it was sent once: only a new epoch settles its sequence numbers


# -- requests against a stand-in coordinator --------------------------------------------------


async def test_init_retries_what_the_coordinator_asks_to_retry(autojump_clock):
    coordinator = StandIn(InitProducerId=[
        NetworkError("lost"), init_ok(code=ConcurrentTransactionsError.code),
        init_ok(code=CoordinatorLoadInProgressError.code),
        init_ok(code=NotCoordinatorError.code), init_ok(42, 3)])
    txn, _ = manager(coordinator, transaction_timeout_ms=30_000)
    await ready(txn)
    assert (txn._idempotence.producer_id, txn._idempotence.producer_epoch) == (42, 3)
    first = coordinator.sent("InitProducerId")[0]
    assert (first.transactional_id, first.transaction_timeout_ms) == ("tx-1", 30_000)
    assert (first.producer_id, first.producer_epoch) == (-1, -1)
    assert coordinator.resets == 2  # the lost connection, NOT_COORDINATOR
    with pytest.raises(TransactionStateError, match="already"):
        await txn.init_transactions()


async def test_init_that_gives_up_may_be_called_again(autojump_clock):
    coordinator = StandIn(InitProducerId=[init_ok(code=ConcurrentTransactionsError.code)] * 500
                          + [init_ok()])
    txn, _ = manager(coordinator)
    with pytest.raises(ConcurrentTransactionsError, match="gave up"):
        await txn.init_transactions()
    assert txn.state is S.INITIALIZING
    coordinator.answers["InitProducerId"] = [init_ok()]
    await ready(txn)


async def test_init_fenced_is_fatal(autojump_clock):
    coordinator = StandIn(InitProducerId=[init_ok(code=ProducerFencedError.code)])
    txn, _ = manager(coordinator)
    with pytest.raises(ProducerFencedError, match="took over"):
        await txn.init_transactions()
    with pytest.raises(ProducerFencedError):
        txn.begin()


async def test_partitions_named_meanwhile_go_in_one_request(autojump_clock):
    coordinator = StandIn(InitProducerId=[init_ok()], AddPartitionsToTxn=[
        added([("a", 0), ("b", 2)], code=ConcurrentTransactionsError.code),
        added([("a", 0), ("a", 1), ("b", 2)])])
    txn, wakeups = manager(coordinator)
    await ready(txn)
    txn.begin()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(txn.run)
        txn.maybe_add_partition(("a", 0))
        txn.maybe_add_partition(("b", 2))
        await trio.sleep(0.001)  # the first request is out (and answered: retry)
        txn.maybe_add_partition(("a", 1))  # joins the retry
        while len(txn.partitions) < 3:
            await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    sent = coordinator.sent("AddPartitionsToTxn")
    assert [(t.name, list(t.partitions)) for t in sent[-1].topics] == [("a", [0, 1]), ("b", [2])]
    assert (sent[0].producer_id, sent[0].producer_epoch) == (42, 3)
    assert wakeups and txn._started


async def test_a_topic_not_allowed_makes_the_transaction_abortable(autojump_clock):
    coordinator = StandIn(InitProducerId=[init_ok()], AddPartitionsToTxn=[
        added([("ok", 0), ("secret", 0)], codes={
            ("ok", 0): OperationNotAttemptedError.code,
            ("secret", 0): TopicAuthorizationFailedError.code})])
    txn, _ = manager(coordinator)
    await ready(txn)
    txn.begin()
    txn.maybe_add_partition(("ok", 0))
    txn.maybe_add_partition(("secret", 0))
    await txn._add_partitions()
    assert txn.state is S.ABORTABLE_ERROR
    with pytest.raises(AbortableTransactionError, match="secret"):
        txn.begin_commit()


async def test_a_transaction_that_added_nothing_ends_without_a_request(autojump_clock):
    coordinator = StandIn(InitProducerId=[init_ok()])
    txn, _ = manager(coordinator)
    await ready(txn)
    txn.begin()
    txn.begin_commit()
    await txn.end_transaction(commit=True)
    assert txn.state is S.READY
    assert not coordinator.sent("EndTxn")


async def test_commit_and_abort_send_end_txn(autojump_clock):
    coordinator = StandIn(InitProducerId=[init_ok()],
                          AddPartitionsToTxn=[added([("t", 0)]), added([("t", 0)])],
                          EndTxn=[ended(ConcurrentTransactionsError.code), ended(), ended()])
    txn, _ = manager(coordinator)
    await ready(txn)
    for commit in (True, False):
        txn.begin()
        txn.maybe_add_partition(("t", 0))
        await txn._add_partitions()
        if commit:
            txn.begin_commit()
        else:
            txn.begin_abort()
        await txn.end_transaction(commit=commit)
        assert txn.state is S.READY and not txn.partitions
    assert [r.committed for r in coordinator.sent("EndTxn")] == [True, True, False]


async def test_a_prepared_transaction_is_left_open_with_its_ids(autojump_clock):
    coordinator = StandIn(InitProducerId=[init_ok(42, 3)],
                          AddPartitionsToTxn=[added([("t", 0)])])
    txn, _ = manager(coordinator)
    await ready(txn)
    txn.begin()
    txn.maybe_add_partition(("t", 0))
    await txn._add_partitions()
    txn.begin_prepare()
    assert txn.prepared() == PreparedTransaction("tx-1", 42, 3)
    assert txn.state is S.PREPARED and not txn.ongoing  # closing does not abort it
    with pytest.raises(TransactionStateError, match="prepared"):
        txn.begin()
    with pytest.raises(TransactionStateError, match="prepared"):
        txn.maybe_add_partition(("t", 1))
    assert not coordinator.sent("EndTxn")


async def test_a_prepared_transaction_that_added_nothing_is_empty(autojump_clock):
    txn, _ = manager(StandIn(InitProducerId=[init_ok()]))
    await ready(txn)
    txn.begin()
    txn.begin_prepare()
    assert txn.prepared().empty
    await end_transaction(None, txn.prepared(), commit=True)  # type: ignore[arg-type]


async def test_end_transaction_by_its_ids_retries_then_raises(autojump_clock, monkeypatch):
    coordinator = StandIn(EndTxn=[NetworkError("lost"), ended(NotCoordinatorError.code),
                                  ended(ConcurrentTransactionsError.code), ended(),
                                  ended(InvalidTxnStateError.code)])
    monkeypatch.setattr("trilog.client.producer._transactions.Coordinator",
                        lambda *_a, **_kw: coordinator)
    prepared = PreparedTransaction("tx-9", 7, 2)
    await end_transaction(None, prepared, commit=True)  # type: ignore[arg-type]
    assert coordinator.resets == 2  # the lost connection and NOT_COORDINATOR
    sent = coordinator.sent("EndTxn")
    assert [(r.transactional_id, r.producer_id, r.producer_epoch, r.committed)
            for r in sent] == [("tx-9", 7, 2, True)] * 4
    with pytest.raises(InvalidTxnStateError, match="tx-9"):
        await end_transaction(None, prepared, commit=False)  # type: ignore[arg-type]


async def test_end_transaction_gives_up_after_its_timeout(autojump_clock, monkeypatch):
    coordinator = StandIn(EndTxn=[ended(ConcurrentTransactionsError.code)] * 1000)
    monkeypatch.setattr("trilog.client.producer._transactions.Coordinator",
                        lambda *_a, **_kw: coordinator)
    with pytest.raises(ConcurrentTransactionsError, match="gave up after 5 s"):
        await end_transaction(None, PreparedTransaction("tx-9", 7, 2),  # type: ignore[arg-type]
                              commit=True, timeout_s=5)


async def test_end_txn_fenced_is_fatal(autojump_clock):
    coordinator = StandIn(InitProducerId=[init_ok()], AddPartitionsToTxn=[added([("t", 0)])],
                          EndTxn=[ended(ProducerFencedError.code)])
    txn, _ = manager(coordinator)
    await ready(txn)
    txn.begin()
    txn.maybe_add_partition(("t", 0))
    await txn._add_partitions()
    txn.begin_commit()
    with pytest.raises(ProducerFencedError, match="another producer"):
        await txn.end_transaction(commit=True)
    for call in (txn.begin, txn.begin_abort):
        with pytest.raises(ProducerFencedError):
            call()


async def test_an_abort_after_a_failed_batch_bumps_the_epoch(autojump_clock):
    coordinator = StandIn(InitProducerId=[init_ok(42, 3), init_ok(42, 4)],
                          AddPartitionsToTxn=[added([("t", 0)])], EndTxn=[ended()])
    txn, _ = manager(coordinator)
    await ready(txn)
    txn.begin()
    txn.maybe_add_partition(("t", 0))
    await txn._add_partitions()
    txn.batch_failed(batch(error=UnknownTopicOrPartitionError("x"), attempts=1))
    txn.begin_abort()
    await txn.end_transaction(commit=False)
    assert txn.state is S.READY
    bump = coordinator.sent("InitProducerId")[-1]
    assert (bump.producer_id, bump.producer_epoch) == (42, 3)  # KIP-360: ours, for the next
    assert txn._idempotence.producer_epoch == 4
    assert not txn._bump


async def test_offsets_go_to_the_group_coordinator_with_the_member(autojump_clock):
    R = TxnOffsetCommitResponse
    group_coordinator = StandIn(TxnOffsetCommit=[R(throttle_time_ms=0, topics=[
        R.TxnOffsetCommitResponseTopic(name="in", partitions=[
            R.TxnOffsetCommitResponseTopic.TxnOffsetCommitResponsePartition(
                partition_index=0, error_code=0),
            R.TxnOffsetCommitResponseTopic.TxnOffsetCommitResponsePartition(
                partition_index=1, error_code=CoordinatorLoadInProgressError.code)])]),
        R(throttle_time_ms=0, topics=[R.TxnOffsetCommitResponseTopic(name="in", partitions=[
            R.TxnOffsetCommitResponseTopic.TxnOffsetCommitResponsePartition(
                partition_index=1, error_code=0)])])])
    coordinator = StandIn(InitProducerId=[init_ok()],
                          AddOffsetsToTxn=[AddOffsetsToTxnResponse(throttle_time_ms=0,
                                                                   error_code=0)])
    txn, _ = manager(coordinator)
    txn._group_coordinators["readers"] = group_coordinator  # type: ignore[assignment]
    await ready(txn)
    txn.begin()
    member = ConsumerGroupMetadata("readers", 5, "member-1", "instance-a")
    await txn.send_offsets({("in", 0): 10, ("in", 1): OffsetAndMetadata(20, "note")}, member)
    (add,) = coordinator.sent("AddOffsetsToTxn")
    assert add.group_id == "readers"
    first, second = group_coordinator.sent("TxnOffsetCommit")
    assert (first.generation_id, first.member_id, first.group_instance_id) == \
        (5, "member-1", "instance-a")
    assert [(p.partition_index, p.committed_offset, p.committed_metadata)
            for p in first.topics[0].partitions] == [(0, 10, ""), (1, 20, "note")]
    assert [p.partition_index for p in second.topics[0].partitions] == [1]  # only the rest
    assert txn._started


async def test_offsets_of_a_member_the_group_moved_on_from_are_abortable(autojump_clock):
    R = TxnOffsetCommitResponse
    group_coordinator = StandIn(TxnOffsetCommit=[R(throttle_time_ms=0, topics=[
        R.TxnOffsetCommitResponseTopic(name="in", partitions=[
            R.TxnOffsetCommitResponseTopic.TxnOffsetCommitResponsePartition(
                partition_index=0, error_code=IllegalGenerationError.code)])])])
    coordinator = StandIn(InitProducerId=[init_ok()],
                          AddOffsetsToTxn=[AddOffsetsToTxnResponse(throttle_time_ms=0,
                                                                   error_code=0)])
    txn, _ = manager(coordinator)
    txn._group_coordinators["readers"] = group_coordinator  # type: ignore[assignment]
    await ready(txn)
    txn.begin()
    with pytest.raises(AbortableTransactionError, match="moved on") as info:
        await txn.send_offsets({("in", 0): 10}, ConsumerGroupMetadata("readers", 1, "m"))
    assert isinstance(info.value.__cause__, IllegalGenerationError)
    assert txn.state is S.ABORTABLE_ERROR
    txn.begin_abort()


async def test_offsets_outside_a_transaction_are_refused():
    txn, _ = manager(StandIn())
    txn.state = S.READY
    with pytest.raises(TransactionStateError, match="begin_transaction"):
        await txn.send_offsets({("in", 0): 1}, "readers")


def test_group_metadata_may_be_kafka_pythons_or_a_group_id():
    from kafka.structs import ConsumerGroupMetadata as KafkaPythonMetadata

    from trilog.client.producer._transactions import as_group_metadata

    theirs = KafkaPythonMetadata("g", 4, "m-1", None, None)
    assert as_group_metadata(theirs) == ConsumerGroupMetadata("g", 4, "m-1", None)
    assert as_group_metadata("g") == ConsumerGroupMetadata("g", -1, "", None)
    with pytest.raises(ValueError, match="group"):
        as_group_metadata(KafkaPythonMetadata(None, -1, "", None, None))
    with pytest.raises(TypeError, match="group_metadata"):
        as_group_metadata(42)
