"""The transaction log: transactional ids' states as records of ``__transaction_state``,
cached in memory (Kafka's ``TransactionStateManager``).

A transactional id lives in partition ``abs(java hashCode(id)) % partitions`` of
``__transaction_state`` (``transaction.state.log.num.partitions``, or the topic's real count
once it exists), led by the id's coordinator.  The records are Kafka's
(``protocol/_transaction_log.py``): the id as the key, its state as the value, a null value
when it expired; the topic is compacted, so the latest record of each id stays.

A partition is **loaded** (read from its log start to its end, later records winning) before
its ids are served; meanwhile their requests get COORDINATOR_LOAD_IN_PROGRESS.  The
**coordinator epoch** is the partition's leader epoch when this broker took it on: markers
carry it, so that a partition leader can refuse the markers of a coordinator that lost the
partition (TRANSACTION_COORDINATOR_FENCED).

Writes go through the replica manager's one append path with ``acks=-1`` (origin
COORDINATOR), one record per transition, and wait for the in-sync replicas
(``transaction.state.log.min.isr``) before the transition completes.  Runs in the trio
thread (not thread-safe); loads go to worker threads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import trio

from trilog.broker.groups._offsets import log_batches, partition_for
from trilog.broker.replication import AppendOrigin, ReplicaManager
from trilog.broker.transactions._metadata import TransactionMetadata, TxnState, TxnTransit
from trilog.errors import (
    NO_ERROR,
    CoordinatorNotAvailableError,
    KafkaStorageError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from trilog.protocol import (
    TransactionLogRecordError,
    TxnLogValue,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)
from trilog.records import CorruptRecordsError, RecordBatchBuilder
from trilog.storage import Log, LogConfig

log = logging.getLogger("trilog.broker.transactions")

TRANSACTION_STATE_TOPIC = "__transaction_state"


def to_value(transit: TxnTransit) -> TxnLogValue:
    """The record of a transition (the last producer id and epoch are not stored, as in
    Kafka's value v0)."""
    return TxnLogValue(producer_id=transit.producer_id, producer_epoch=transit.producer_epoch,
                       timeout_ms=transit.timeout_ms, status=transit.state,
                       partitions=tuple(sorted(transit.partitions)),
                       last_update_ms=transit.update_ms, start_ms=transit.start_ms)


def from_value(value: TxnLogValue) -> TxnTransit:
    return TxnTransit(value.producer_id, -1, value.producer_epoch, -1, value.timeout_ms,
                      TxnState(value.status), frozenset(value.partitions), value.start_ms,
                      value.last_update_ms)


def read_transactions(lg: Log) -> dict[str, TransactionMetadata]:
    """Blocking: replay a partition of the transaction log into ``{id: metadata}``.
    Later records win; a null value (the id expired) deletes; records this broker cannot
    parse are skipped, with a warning."""
    states: dict[str, TransactionMetadata] = {}
    skipped = 0
    for key, value in _records(lg):
        try:
            tid = None if key is None else decode_txn_key(key)
            if tid is None:
                skipped += 1
                continue
            decoded = decode_txn_value(value)
        except (TransactionLogRecordError, ValueError):
            skipped += 1
            continue
        if decoded is None:
            states.pop(tid, None)
        else:
            states[tid] = TransactionMetadata.of(tid, from_value(decoded))
    if skipped:
        log.warning("%s-%d: skipped %d records that are not transaction states of a known "
                    "format", lg.topic, lg.partition, skipped)
    return states


def _records(lg: Log) -> Iterator[tuple[bytes | None, bytes | None]]:
    for batch in log_batches(lg):
        if batch.is_control_batch:
            continue
        try:
            records = batch.records()
        except CorruptRecordsError:
            log.warning("%s-%d: a corrupt batch at offset %d", lg.topic, lg.partition,
                        batch.base_offset)
            continue
        for record in records:
            yield record.key, record.value


@dataclass(eq=False)
class TxnPartition:
    """One partition of the transaction log that this broker coordinates."""

    index: int
    coordinator_epoch: int
    loaded: bool = False
    states: dict[str, TransactionMetadata] = field(default_factory=dict)
    lock: trio.Lock = field(default_factory=trio.Lock)  # appends, in log order


class TransactionStateManager:
    """The transactional ids of the transaction-log partitions this broker leads.

    ``begin_load``/``load`` take a partition on, ``unload`` lets it go; ``get`` finds an
    id's metadata (and the partition's coordinator epoch); ``write`` appends a transition
    and waits for the in-sync replicas.
    """

    def __init__(self, replicas: ReplicaManager, limiter: trio.CapacityLimiter, *,
                 num_partitions: int, write_timeout_ms: int) -> None:
        self.replicas = replicas
        self.logs = replicas.logs
        self.limiter = limiter
        self.default_partitions = num_partitions
        self.write_timeout_s = write_timeout_ms / 1000
        self.partitions: dict[int, TxnPartition] = {}

    @staticmethod
    def topic_config(base: LogConfig, segment_bytes: int) -> LogConfig:
        """The transaction log's settings: compacted, never deleted by time or size."""
        return base.replace(segment_bytes=segment_bytes, retention_ms=-1, retention_bytes=-1,
                            cleanup_policy=frozenset({"compact"}))

    # -- ownership ----------------------------------------------------------------------------

    def owned(self) -> set[int]:
        return set(self.partitions)

    def begin_load(self, partition: int, coordinator_epoch: int) -> TxnPartition:
        """Mark the partition as ours and loading (its ids wait for ``load``)."""
        part = self.partitions.get(partition)
        if part is None or part.coordinator_epoch != coordinator_epoch:
            part = self.partitions[partition] = TxnPartition(partition, coordinator_epoch)
        return part

    async def load(self, part: TxnPartition) -> bool:
        """Read the partition's log; False if it could not be (not ours for now)."""
        lg = self.logs.get_log(TRANSACTION_STATE_TOPIC, part.index)
        started = time.monotonic()
        async with part.lock:
            try:
                states = ({} if lg is None else await trio.to_thread.run_sync(
                    read_transactions, lg, limiter=self.limiter))
            except Exception:
                log.exception("loading %s-%d failed", TRANSACTION_STATE_TOPIC, part.index)
                if self.partitions.get(part.index) is part:
                    del self.partitions[part.index]
                return False
            if self.partitions.get(part.index) is not part:
                return False  # unloaded meanwhile
            part.states = states
            part.loaded = True
        log.info("loaded %d transactional ids from %s-%d (coordinator epoch %d) in %.3f s",
                 len(states), TRANSACTION_STATE_TOPIC, part.index, part.coordinator_epoch,
                 time.monotonic() - started)
        return True

    def unload(self, partition: int) -> None:
        self.partitions.pop(partition, None)

    # -- reads ---------------------------------------------------------------------------------

    def partition_of(self, transactional_id: str, num_partitions: int) -> int:
        return partition_for(transactional_id, num_partitions)

    def part(self, partition: int) -> TxnPartition | None:
        part = self.partitions.get(partition)
        return part if part is not None and part.loaded else None

    def all_loaded(self) -> Iterator[tuple[TxnPartition, TransactionMetadata]]:
        for part in list(self.partitions.values()):
            if part.loaded:
                for meta in list(part.states.values()):
                    yield part, meta

    # -- writes --------------------------------------------------------------------------------

    async def write(self, part: TxnPartition, meta: TransactionMetadata,
                    transit: TxnTransit) -> int:
        """Append ``transit`` (a tombstone when the id goes Dead), wait for the in-sync
        replicas; complete the transition (or abandon it) and return the error code."""
        tid = meta.transactional_id
        value = None if transit.state is TxnState.DEAD else encode_txn_value(to_value(transit))
        builder = RecordBatchBuilder()
        builder.append(transit.update_ms, encode_txn_key(tid), value)
        tp = (TRANSACTION_STATE_TOPIC, part.index)
        try:
            async with part.lock:
                if self.partitions.get(part.index) is not part:
                    code = NotCoordinatorError.code
                else:
                    appended = await self.replicas.append_records(
                        {tp: builder.build()}, acks=-1, origin=AppendOrigin.COORDINATOR)
                    code = appended.results[tp].error
                    if code == NO_ERROR:
                        await appended.wait(trio.current_time() + self.write_timeout_s)
                        code = appended.results[tp].error
        except BaseException:
            meta.abandon()
            raise
        code = _WRITE_ERRORS.get(code, code)
        if code == NO_ERROR and self.partitions.get(part.index) is not part:
            code = NotCoordinatorError.code  # the partition moved while the write waited
        if code != NO_ERROR:
            meta.abandon()
            return code
        meta.complete(transit)
        if transit.state is TxnState.DEAD:
            part.states.pop(tid, None)
        return NO_ERROR


#: What a client hears when its transition's write answered a code of the left (Kafka's
#: ``TransactionStateManager.appendTransactionToLog``): it retries, or finds its
#: coordinator again.
_WRITE_ERRORS = {
    UnknownTopicOrPartitionError.code: NotCoordinatorError.code,
    NotLeaderOrFollowerError.code: NotCoordinatorError.code,
    NotEnoughReplicasError.code: CoordinatorNotAvailableError.code,
    NotEnoughReplicasAfterAppendError.code: CoordinatorNotAvailableError.code,
    RequestTimedOutError.code: CoordinatorNotAvailableError.code,
    KafkaStorageError.code: CoordinatorNotAvailableError.code,
    UnknownServerError.code: CoordinatorNotAvailableError.code,
}
