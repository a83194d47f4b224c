"""The transaction coordinator: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
DescribeTransactions and ListTransactions (Kafka's ``TransactionCoordinator``, KIP-98 and
KIP-664; transaction protocol version 0).

A transactional id's coordinator is the leader of its partition of ``__transaction_state``
(``_state.py``); the topic is created on the first FindCoordinator for a transactional id.
The life of a transaction, as the coordinator sees it:

1. **InitProducerId** with the id: a new id gets a producer id; each call gives the next
   epoch, which fences every producer of an older one.  If a transaction of the old epoch is
   open it is aborted first (the epoch bumped, PrepareAbort, markers) and the caller told
   CONCURRENT_TRANSACTIONS: it asks again and gets the epoch after.
2. **AddPartitionsToTxn** / **AddOffsetsToTxn** (the group's ``__consumer_offsets``
   partition): the transaction is Ongoing with those partitions, written to the log before
   the answer, so a producer writes to a partition only once the coordinator knows it.
3. **EndTxn**: PrepareCommit / PrepareAbort is written and the client answered; then the
   markers go to every partition (``_markers.py``) and CompleteCommit / CompleteAbort is
   written.  Until then the id's next request is answered CONCURRENT_TRANSACTIONS.

A transaction open longer than its ``transaction.timeout.ms`` is aborted by the coordinator
(its producer fenced, as by a new InitProducerId); an id unused for
``transactional.id.expiration.ms`` is forgotten (a tombstone).  A broker that takes on a
partition of the log finishes the transactions it finds prepared there (their markers).

Errors as Kafka's: a producer id that is not the id's INVALID_PRODUCER_ID_MAPPING, an older
epoch PRODUCER_FENCED (INVALID_PRODUCER_EPOCH for the versions before KIP-588's code),
an EndTxn that does not fit the state INVALID_TXN_STATE.  Runs in the trio thread.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import trio

from trilog import _time
from trilog._topic import PartitionKey
from trilog.broker.transactions._producer_ids import ProducerIds
from trilog.broker.cluster import Cluster
from trilog.broker.configs import BrokerConfig
from trilog.broker.groups import OFFSETS_TOPIC, partition_for
from trilog.broker.network import ApiHandler
from trilog.broker.replication import ReplicaManager
from trilog.broker.security import Access, AclOperation, ResourceType
from trilog.broker.transactions._markers import (
    Marker,
    MarkersAbandoned,
    MarkersFenced,
    TransactionMarkers,
)
from trilog.broker.transactions._metadata import (
    EXPIRABLE,
    IllegalTransition,
    TransactionMetadata,
    TxnState,
)
from trilog.broker.transactions._state import (
    TRANSACTION_STATE_TOPIC,
    TransactionStateManager,
    TxnPartition,
)
from trilog.errors import (
    NO_ERROR,
    ApiError,
    ClusterAuthorizationFailedError,
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    GroupAuthorizationFailedError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaStorageError,
    NotCoordinatorError,
    OperationNotAttemptedError,
    ProducerFencedError,
    TopicAuthorizationFailedError,
    TopicAlreadyExistsError,
    TransactionalIdAuthorizationFailedError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from trilog.net import ClientSecurity
from trilog.protocol import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    ApiKey,
    DescribeTransactionsResponse,
    EndTxnResponse,
    InitProducerIdResponse,
    ListTransactionsResponse,
    RequestHeader,
)

log = logging.getLogger("trilog.broker.transactions")

#: How often the partition watcher looks at the cluster view when nothing woke it.
WATCH_INTERVAL_S = 0.5
#: The pause before a Complete* write that failed is tried again.
COMPLETE_RETRY_S = 0.5
#: The first version of each API that knows PRODUCER_FENCED (KIP-588); older ones get
#: INVALID_PRODUCER_EPOCH, which their clients handle the same way.
_FENCED_FROM: dict[int, int] = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 2,
                ApiKey.ADD_OFFSETS_TO_TXN: 2, ApiKey.END_TXN: 2}


def _for_version(code: int, header: RequestHeader) -> int:
    if code == ProducerFencedError.code and header.api_version < _FENCED_FROM.get(
            header.api_key, 0):
        return InvalidProducerEpochError.code
    return code


class TransactionCoordinator:
    """Serves the transaction APIs of the ids whose transaction-log partition this broker
    leads.  Its ``apis()`` go to the request dispatcher, ``run()`` in the broker's nursery."""

    def __init__(self, config: BrokerConfig, cluster: Cluster, replicas: ReplicaManager,
                 access: Access, limiter: trio.CapacityLimiter, ids: ProducerIds,
                 write_markers: Marker, security: ClientSecurity | None) -> None:
        self.config = config
        self.cluster = cluster
        self.replicas = replicas
        self.access = access
        self.ids = ids
        self.limiter = limiter
        replicas.logs.update_topic_config(
            TRANSACTION_STATE_TOPIC, TransactionStateManager.topic_config(
                replicas.logs.default_config, config["transaction.state.log.segment.bytes"]))
        self.state = TransactionStateManager(
            replicas, limiter, num_partitions=config["transaction.state.log.num.partitions"],
            write_timeout_ms=config["request.timeout.ms"])
        self.markers = TransactionMarkers(cluster, write_markers, security=security,
                                          timeout_ms=config["request.timeout.ms"])
        self.max_timeout_ms = config["transaction.max.timeout.ms"]
        self._active = True
        self._nursery: trio.Nursery | None = None
        self._create_lock = trio.Lock()
        self._watch_wakeup = trio.Event()

    def apis(self) -> Mapping[int, ApiHandler]:
        return {ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
                ApiKey.ADD_PARTITIONS_TO_TXN: self.add_partitions_to_txn,
                ApiKey.ADD_OFFSETS_TO_TXN: self.add_offsets_to_txn,
                ApiKey.END_TXN: self.end_txn,
                ApiKey.DESCRIBE_TRANSACTIONS: self.describe_transactions,
                ApiKey.LIST_TRANSACTIONS: self.list_transactions}

    # -- background work ----------------------------------------------------------------------

    async def run(self, shutdown_requested: trio.Event | None = None) -> None:
        """The coordinator's tasks: the partition watcher, the markers' connections, the
        timeout and expiry sweeps, and each transaction's markers being written."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self.markers.run)
            nursery.start_soon(self._watch_partitions)
            nursery.start_soon(self._every, self.config[
                "transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                self.abort_timed_out)
            nursery.start_soon(self._every, self.config[
                "transaction.remove.expired.transaction.cleanup.interval.ms"],
                self.expire_ids)
            if shutdown_requested is not None:
                await shutdown_requested.wait()
                self._active = False
                nursery.cancel_scope.cancel()

    async def _every(self, interval_ms: int, job: Any) -> None:
        while True:
            await trio.sleep(interval_ms / 1000)
            await job()

    def _num_partitions(self) -> int:
        parts = self.cluster.partitions(TRANSACTION_STATE_TOPIC)
        return len(parts) if parts else self.config["transaction.state.log.num.partitions"]

    async def _watch_partitions(self) -> None:
        me = self.cluster.broker.node_id
        while True:
            self._watch_wakeup = trio.Event()
            parts = self.cluster.partitions(TRANSACTION_STATE_TOPIC) or {}
            for p, leader in parts.items():
                tp = (TRANSACTION_STATE_TOPIC, p)
                if leader != me or tp not in self.replicas.logs:
                    continue
                partition = self.replicas.partition(tp)
                epoch = max(0, partition.leader_epoch) if partition is not None else 0
                owned = self.state.partitions.get(p)
                if owned is None or owned.coordinator_epoch != epoch:
                    part = self.state.begin_load(p, epoch)
                    assert self._nursery is not None
                    self._nursery.start_soon(self._load, part)
            for p in self.state.owned() - {p for p, leader in parts.items() if leader == me}:
                self.state.unload(p)
                log.info("no longer coordinating the transactions of %s-%d",
                         TRANSACTION_STATE_TOPIC, p)
            with trio.move_on_after(WATCH_INTERVAL_S):
                await self._watch_wakeup.wait()

    async def _load(self, part: TxnPartition) -> None:
        if not await self.state.load(part):
            return
        for meta in list(part.states.values()):  # prepared before the last coordinator went
            if meta.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self._complete_soon(part, meta)

    async def abort_timed_out(self, now_ms: int | None = None) -> int:
        """Abort (fencing their producers) the transactions open longer than their timeout;
        return how many were begun."""
        now = _time.now_ms() if now_ms is None else now_ms
        begun = 0
        for part, meta in list(self.state.all_loaded()):
            if (meta.state is TxnState.ONGOING and meta.pending is None
                    and meta.start_ms + meta.timeout_ms < now):
                log.info("aborting the transaction of %s (producer %d epoch %d): open longer "
                         "than its timeout of %d ms", meta.transactional_id, meta.producer_id,
                         meta.producer_epoch, meta.timeout_ms)
                await self._end(part, meta, commit=False, fence=True)
                begun += 1
        await trio.lowlevel.checkpoint()
        return begun

    async def expire_ids(self, now_ms: int | None = None) -> int:
        """Forget the ids with no open transaction unused for
        ``transactional.id.expiration.ms``; return how many."""
        now = _time.now_ms() if now_ms is None else now_ms
        expiration = self.config["transactional.id.expiration.ms"]
        gone = 0
        for part, meta in list(self.state.all_loaded()):
            if (meta.state in EXPIRABLE and meta.pending is None
                    and meta.update_ms + expiration <= now):
                if await self.state.write(part, meta, meta.prepare_dead()) == NO_ERROR:
                    gone += 1
        await trio.lowlevel.checkpoint()
        return gone

    # -- where transactional ids live -----------------------------------------------------------

    async def coordinator_for(self, transactional_id: str) -> int:
        """FindCoordinator (key type 1): the node id of ``transactional_id``'s coordinator
        (the transaction log is created first if need be); ``ApiError`` if there is none."""
        if not self._active:
            raise CoordinatorNotAvailableError("the broker is shutting down")
        if not transactional_id:
            raise InvalidRequestError("an empty transactional id")
        if not self.cluster.partitions(TRANSACTION_STATE_TOPIC):
            await self._create_topic()
        else:
            await trio.lowlevel.checkpoint()
        parts = self.cluster.partitions(TRANSACTION_STATE_TOPIC)
        if not parts:
            raise CoordinatorNotAvailableError(f"{TRANSACTION_STATE_TOPIC} does not exist yet")
        leader = parts.get(partition_for(transactional_id, len(parts)), -1)
        if leader < 0:
            raise CoordinatorNotAvailableError("the transactional id's partition has no leader")
        return leader

    async def _create_topic(self) -> None:
        async with self._create_lock:
            if self.cluster.partitions(TRANSACTION_STATE_TOPIC):
                return
            config = self.config
            # Kafka's rule: the configured factor, or all the live brokers when fewer; the
            # minimum in-sync replicas never above the factor (a single broker can serve).
            factor = min(config["transaction.state.log.replication.factor"],
                         max(1, len(self.cluster.brokers())))
            min_isr = min(config["transaction.state.log.min.isr"], factor)
            try:
                await self.cluster.create_topic(
                    TRANSACTION_STATE_TOPIC, config["transaction.state.log.num.partitions"],
                    factor, configs={"cleanup.policy": "compact",
                                     "min.insync.replicas": str(min_isr),
                                     "unclean.leader.election.enable": "false",
                                     "segment.bytes": str(
                                         config["transaction.state.log.segment.bytes"])})
            except TopicAlreadyExistsError:
                pass
            except ApiError as exc:
                log.warning("cannot create %s yet: %s", TRANSACTION_STATE_TOPIC, exc)
        self._watch_wakeup.set()

    def _find(self, transactional_id: str) -> tuple[TxnPartition, TransactionMetadata | None]:
        """The id's partition (raises NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS /
        COORDINATOR_NOT_AVAILABLE when this broker cannot serve it now) and metadata."""
        if not self._active:
            raise CoordinatorNotAvailableError("the broker is shutting down")
        parts = self.cluster.partitions(TRANSACTION_STATE_TOPIC)
        if not parts:
            raise NotCoordinatorError(f"{TRANSACTION_STATE_TOPIC} does not exist")
        p = partition_for(transactional_id, len(parts))
        if parts.get(p, -1) != self.cluster.broker.node_id:
            raise NotCoordinatorError(f"not the coordinator of {transactional_id}")
        owned = self.state.partitions.get(p)
        if owned is None or not owned.loaded:
            raise CoordinatorLoadInProgressError(f"loading {TRANSACTION_STATE_TOPIC}-{p}")
        return owned, owned.states.get(transactional_id)

    def _authorize(self, transactional_id: str) -> None:
        if not self.access(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            raise TransactionalIdAuthorizationFailedError(
                f"not authorized to write as transactional id {transactional_id}")

    def _check_producer(self, meta: TransactionMetadata | None, producer_id: int,
                        producer_epoch: int) -> TransactionMetadata:
        if meta is None or meta.producer_id != producer_id:
            raise InvalidProducerIdMappingError(
                f"producer {producer_id} is not the producer of this transactional id")
        if meta.producer_epoch != producer_epoch:
            raise ProducerFencedError(f"producer {producer_id} epoch {producer_epoch} was "
                                      f"fenced by epoch {meta.producer_epoch}")
        if meta.pending is not None or meta.state in (TxnState.PREPARE_COMMIT,
                                                      TxnState.PREPARE_ABORT):
            raise ConcurrentTransactionsError("the previous transaction is still completing")
        return meta

    # -- InitProducerId -------------------------------------------------------------------------

    async def init_producer_id(self, request: Any, header: RequestHeader) -> Any:
        R = InitProducerIdResponse
        tid = request.transactional_id
        try:
            if tid is None:
                producer_id = await self._idempotent_producer_id()
                return R(throttle_time_ms=0, error_code=NO_ERROR, producer_id=producer_id,
                         producer_epoch=0)
            meta = await self._init_transactional(tid, request.transaction_timeout_ms)
            return R(throttle_time_ms=0, error_code=NO_ERROR, producer_id=meta[0],
                     producer_epoch=meta[1])
        except ApiError as exc:
            return R(throttle_time_ms=0, error_code=_for_version(exc.code, header),
                     producer_id=-1, producer_epoch=-1)

    async def _allocate_producer_id(self) -> int:
        try:
            return await trio.to_thread.run_sync(self.ids.allocate)
        except OSError as exc:
            log.error("cannot record producer ids in %s: %s", self.ids.path, exc)
            raise KafkaStorageError("cannot record producer ids") from None

    async def _idempotent_producer_id(self) -> int:
        access = self.access
        if access.enabled and not (
                access(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)
                or any(access(AclOperation.WRITE, ResourceType.TOPIC, t)
                       for t in self.cluster.topics())):
            raise ClusterAuthorizationFailedError("not authorized to write idempotently")
        return await self._allocate_producer_id()

    async def _init_transactional(self, tid: str, timeout_ms: int) -> tuple[int, int]:
        if not tid:
            raise InvalidRequestError("an empty transactional id")
        self._authorize(tid)
        if not 0 < timeout_ms <= self.max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms {timeout_ms} is not in 1..{self.max_timeout_ms} "
                "(transaction.max.timeout.ms)")
        part, meta = self._find(tid)
        if meta is None:
            producer_id = await self._allocate_producer_id()
            part, meta = self._find(tid)  # (the partition may have moved meanwhile)
            if meta is None:
                meta = part.states[tid] = TransactionMetadata(
                    tid, producer_id, timeout_ms=timeout_ms, update_ms=_time.now_ms())
        if meta.pending is not None or meta.state in (TxnState.PREPARE_COMMIT,
                                                      TxnState.PREPARE_ABORT):
            raise ConcurrentTransactionsError("the previous transaction is still completing")
        if meta.state is TxnState.ONGOING:
            # Fence the open transaction's producer and abort it; the caller comes back.
            code = await self._end(part, meta, commit=False, fence=True)
            raise error_for_code(code if code != NO_ERROR
                                 else ConcurrentTransactionsError.code)
        now = _time.now_ms()
        if meta.epoch_exhausted:
            transit = meta.prepare_rotate_producer_id(await self._allocate_producer_id(),
                                                      timeout_ms, now)
        else:
            transit = meta.prepare_increment_epoch(timeout_ms, now)
        code = await self.state.write(part, meta, transit)
        if code != NO_ERROR:
            raise error_for_code(code)
        log.info("initialized transactional id %s: producer %d epoch %d", tid,
                 meta.producer_id, meta.producer_epoch)
        return meta.producer_id, meta.producer_epoch

    # -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------

    async def add_partitions_to_txn(self, request: Any, header: RequestHeader) -> Any:
        R = AddPartitionsToTxnResponse
        wanted = [(t.name, p) for t in request.topics for p in t.partitions]
        codes = await self._add_partitions_codes(request, wanted)
        by_topic: dict[str, list[Any]] = {}
        for (topic, p), code in zip(wanted, codes):
            by_topic.setdefault(topic, []).append(
                R.AddPartitionsToTxnTopicResult.AddPartitionsToTxnPartitionResult(
                    partition_index=p, partition_error_code=_for_version(code, header)))
        return R(throttle_time_ms=0, results=[
            R.AddPartitionsToTxnTopicResult(name=t, results=rs) for t, rs in by_topic.items()])

    async def _add_partitions_codes(self, request: Any, wanted: list[PartitionKey]
                                    ) -> list[int]:
        """Each partition's answer: all the same, except when some topics may not be
        written or do not exist (those say why, the others OPERATION_NOT_ATTEMPTED)."""
        tid = request.transactional_id
        try:
            self._authorize(tid)
        except ApiError as exc:
            await trio.lowlevel.checkpoint()
            return [exc.code] * len(wanted)
        refused = {t for t, _p in wanted
                   if not self.access(AclOperation.WRITE, ResourceType.TOPIC, t)}
        unknown = {(t, p) for t, p in wanted
                   if t not in refused and self.cluster.leader(t, p) is None}
        if refused or unknown:
            await trio.lowlevel.checkpoint()
            return [TopicAuthorizationFailedError.code if t in refused
                    else UnknownTopicOrPartitionError.code if (t, p) in unknown
                    else OperationNotAttemptedError.code for t, p in wanted]
        code = await self._add(tid, request.producer_id, request.producer_epoch,
                               frozenset(wanted))
        return [code] * len(wanted)

    async def add_offsets_to_txn(self, request: Any, header: RequestHeader) -> Any:
        R = AddOffsetsToTxnResponse
        tid, group = request.transactional_id, request.group_id
        try:
            self._authorize(tid)
            if not self.access(AclOperation.READ, ResourceType.GROUP, group):
                raise GroupAuthorizationFailedError(f"not authorized to read group {group}")
            parts = self.cluster.partitions(OFFSETS_TOPIC)
            n = len(parts) if parts else self.config["offsets.topic.num.partitions"]
            code = await self._add(tid, request.producer_id, request.producer_epoch,
                                   frozenset({(OFFSETS_TOPIC, partition_for(group, n))}))
        except ApiError as exc:
            await trio.lowlevel.checkpoint()
            code = exc.code
        return R(throttle_time_ms=0, error_code=_for_version(code, header))

    async def _add(self, tid: str, producer_id: int, producer_epoch: int,
                   partitions: frozenset[PartitionKey]) -> int:
        try:
            part, meta = self._find(tid)
            meta = self._check_producer(meta, producer_id, producer_epoch)
        except ApiError as exc:
            await trio.lowlevel.checkpoint()
            return exc.code
        if meta.state is TxnState.ONGOING and partitions <= meta.partitions:
            await trio.lowlevel.checkpoint()
            return NO_ERROR  # (Kafka's shortcut: nothing new to write)
        return await self.state.write(part, meta,
                                      meta.prepare_add_partitions(partitions, _time.now_ms()))

    # -- EndTxn --------------------------------------------------------------------------------

    async def end_txn(self, request: Any, header: RequestHeader) -> Any:
        R = EndTxnResponse
        tid, commit = request.transactional_id, bool(request.committed)
        try:
            self._authorize(tid)
            part, meta = self._find(tid)
            if meta is None or meta.producer_id != request.producer_id:
                raise InvalidProducerIdMappingError(
                    f"producer {request.producer_id} is not the producer of {tid}")
            if meta.producer_epoch != request.producer_epoch:
                raise ProducerFencedError(f"epoch {request.producer_epoch} was fenced by "
                                          f"epoch {meta.producer_epoch}")
            code = self._end_state_error(meta, commit)
            if code is None:
                code = await self._end(part, meta, commit=commit)
            else:
                await trio.lowlevel.checkpoint()
        except ApiError as exc:
            await trio.lowlevel.checkpoint()
            code = exc.code
        return R(throttle_time_ms=0, error_code=_for_version(code, header))

    @staticmethod
    def _end_state_error(meta: TransactionMetadata, commit: bool) -> int | None:
        """The answer to EndTxn in a state where nothing is to be written (None: write)."""
        if meta.pending is not None:
            return ConcurrentTransactionsError.code
        state = meta.state
        if state is TxnState.ONGOING:
            return None
        if state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
            return NO_ERROR  # a retry of an EndTxn that went through
        if state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            return ConcurrentTransactionsError.code
        return InvalidTxnStateError.code

    async def _end(self, part: TxnPartition, meta: TransactionMetadata, *, commit: bool,
                   fence: bool = False) -> int:
        """Write PrepareCommit / PrepareAbort (with a fence: the epoch bumped first), then
        complete the transaction in the background; the error code of the write."""
        now = _time.now_ms()
        try:
            transit = (meta.prepare_fenced_abort(now) if fence
                       else meta.prepare_end(commit, now))
        except IllegalTransition as exc:
            log.error("%s", exc)
            return ConcurrentTransactionsError.code
        code = await self.state.write(part, meta, transit)
        if code == NO_ERROR:
            self._complete_soon(part, meta)
        return code

    def _complete_soon(self, part: TxnPartition, meta: TransactionMetadata) -> None:
        if self._nursery is None:
            log.warning("%s: markers not sent (the coordinator is not running)",
                        meta.transactional_id)
            return
        self._nursery.start_soon(self._complete, part, meta)

    async def _complete(self, part: TxnPartition, meta: TransactionMetadata) -> None:
        """Write the markers, then CompleteCommit / CompleteAbort (again until written or
        the partition is no longer ours)."""
        commit = meta.state is TxnState.PREPARE_COMMIT
        still_mine = lambda: self.state.partitions.get(part.index) is part  # noqa: E731
        try:
            await self.markers.write_markers(meta.producer_id, meta.producer_epoch, commit,
                                             part.coordinator_epoch,
                                             frozenset(meta.partitions), still_mine)
        except (MarkersAbandoned, MarkersFenced) as exc:
            log.info("%s: %s", meta.transactional_id, exc)
            return
        while still_mine():
            if meta.pending is not None:
                await trio.sleep(COMPLETE_RETRY_S)
                continue
            code = await self.state.write(part, meta, meta.prepare_complete(_time.now_ms()))
            if code == NO_ERROR:
                log.debug("%s: transaction of producer %d epoch %d %s", meta.transactional_id,
                          meta.producer_id, meta.producer_epoch,
                          "committed" if commit else "aborted")
                return
            await trio.sleep(COMPLETE_RETRY_S)

    # -- DescribeTransactions / ListTransactions -------------------------------------------------

    async def describe_transactions(self, request: Any, header: RequestHeader) -> Any:
        await trio.lowlevel.checkpoint()
        return DescribeTransactionsResponse(
            throttle_time_ms=0,
            transaction_states=[self._describe(tid) for tid in request.transactional_ids])

    def _describe(self, tid: str) -> Any:
        S = DescribeTransactionsResponse.TransactionState

        def failed(code: int) -> Any:
            return S(transactional_id=tid, error_code=code, transaction_state="",
                     transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                     producer_epoch=-1, topics=[])

        if not self.access(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            return failed(TransactionalIdAuthorizationFailedError.code)
        try:
            _part, meta = self._find(tid)
        except ApiError as exc:
            return failed(exc.code)
        if meta is None or meta.state is TxnState.DEAD:
            return failed(TransactionalIdNotFoundError.code)
        topics: dict[str, list[int]] = {}
        for topic, p in sorted(meta.partitions):
            if self.access(AclOperation.DESCRIBE, ResourceType.TOPIC, topic):
                topics.setdefault(topic, []).append(p)
        return S(transactional_id=tid, error_code=NO_ERROR,
                 transaction_state=meta.state.state_name,
                 transaction_timeout_ms=meta.timeout_ms,
                 transaction_start_time_ms=meta.start_ms, producer_id=meta.producer_id,
                 producer_epoch=meta.producer_epoch,
                 topics=[S.TopicData(topic=t, partitions=ps) for t, ps in topics.items()])

    async def list_transactions(self, request: Any, header: RequestHeader) -> Any:
        R = ListTransactionsResponse
        await trio.lowlevel.checkpoint()
        wanted_states = set(request.state_filters or ())
        unknown = sorted(s for s in wanted_states if TxnState.from_state_name(s) is None)
        producers = set(request.producer_id_filters or ())
        min_duration = getattr(request, "duration_filter", -1)
        now = _time.now_ms()
        if not self._active:
            return R(throttle_time_ms=0, error_code=CoordinatorNotAvailableError.code,
                     unknown_state_filters=unknown, transaction_states=[])
        if self.state.partitions and not all(p.loaded for p in self.state.partitions.values()):
            return R(throttle_time_ms=0, error_code=CoordinatorLoadInProgressError.code,
                     unknown_state_filters=unknown, transaction_states=[])
        out = []
        for _part, meta in self.state.all_loaded():
            name = meta.state.state_name
            if meta.state is TxnState.DEAD or (wanted_states and name not in wanted_states):
                continue
            if producers and meta.producer_id not in producers:
                continue
            if min_duration >= 0 and (meta.start_ms < 0 or now - meta.start_ms < min_duration):
                continue
            if not self.access(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                               meta.transactional_id):
                continue
            out.append(R.TransactionState(transactional_id=meta.transactional_id,
                                          producer_id=meta.producer_id,
                                          transaction_state=name))
        return R(throttle_time_ms=0, error_code=NO_ERROR, unknown_state_filters=unknown,
                 transaction_states=out)
