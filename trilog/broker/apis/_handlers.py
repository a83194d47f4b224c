"""Request dispatch: one method per API, Kafka's answers and error codes.

``RequestHandler.handle(frame, session)`` decodes a request frame, runs the API's handler and
returns the response as parts for the network layer (``bytes`` and ``FetchSlice`` objects
that go out with ``sendfile``), or ``None`` when no response is due (Produce with acks=0).

Error policy, as Kafka's broker:
- a request that decodes gets a response; per-partition problems are per-partition error
  codes (``UNKNOWN_TOPIC_OR_PARTITION``, ``NOT_LEADER_OR_FOLLOWER``, ``CORRUPT_MESSAGE`` ...);
- ApiVersions of an unsupported version gets the v0 fallback with error 35;
- any other unsupported version, unknown API key or undecodable body closes the connection
  (there is no way to answer in a format the client will parse).

Storage calls are blocking; each request makes at most one hop to a worker thread for all
its partitions.  Whatever goes wrong with one partition there is that partition's error code:
a full or failing disk is ``KAFKA_STORAGE_ERROR`` (logged once a minute per partition, the
next append tries again), a codec this broker cannot read is
``UNSUPPORTED_COMPRESSION_TYPE``, a batch that does not decode is ``CORRUPT_MESSAGE``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

import trio

from trilog._time import now_ms
from trilog._topic import validate_topic_name
from trilog.broker.security._acls import ALLOW_ALL, Access, refused_request
from trilog.broker.security._authorizer import AclOperation, ResourceType
from trilog.broker.cluster._cluster import INTERNAL_TOPICS, Cluster
from trilog.broker.configs._broker_config import BrokerConfig
from trilog.broker._limits import RateLimitedLog
from trilog.broker._metrics import RequestMetrics, api_name, error_counts, error_name
from trilog.broker.network._network import Later, Session, current_session
from trilog.broker.security._sasl import BEFORE_LOGIN
from trilog.broker._producer_state import ProducerStateTable
from trilog.broker.replication._purgatory import FetchPurgatory
from trilog.errors import (
    ApiError,
    ClusterAuthorizationFailedError,
    CorruptMessageError,
    InvalidRequestError,
    InvalidRequiredAcksError,
    KafkaStorageError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    ProtocolError,
    RemoteProtocolError,
    TopicAlreadyExistsError,
    TopicAuthorizationFailedError,
    TopicDeletionDisabledError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    UnsupportedCodecError,
    UnsupportedCompressionTypeError,
    UnsupportedVersionError,
)
from trilog.protocol import (
    API_VERSIONS,
    ApiKey,
    CreateTopicsResponse,
    DeleteTopicsResponse,
    FetchResponse,
    InitProducerIdResponse,
    ListOffsetsResponse,
    MetadataResponse,
    ProduceResponse,
    api_versions_response,
    decode_request,
    encode_api_versions_fallback,
    encode_response_parts,
    peek_request_header,
)
from trilog.records import legacy_to_v2, v2_to_legacy
from trilog.storage import INLINE_APPENDS, LATEST_TIMESTAMP, LogManager, write_atomically
from trilog.storage._log import CHEAP_APPEND_BYTES

if TYPE_CHECKING:
    from trilog.broker.replication._replica_manager import ReplicaManager
    from trilog.broker.security._sasl import SaslAuthenticator


log = logging.getLogger("trilog.broker.requests")

_MAGIC_OFFSET = 16  # where every record format keeps its magic byte


def _legacy(records) -> bool:
    """Is ``records`` an old client's message set (magic 0 or 1), converted to v2 first?"""
    return len(records) > _MAGIC_OFFSET and records[_MAGIC_OFFSET] < 2


#: A full disk fails every append: one log line per partition and minute.
_storage_faults = RateLimitedLog(log, 60.0)


def _code(exc: BaseException) -> int:
    return exc.code if isinstance(exc, ApiError) else UnknownServerError.code


def _partition_error(exc: Exception, what: str, topic: str, partition: int) -> int:
    """The error code of one partition whose ``what`` (append, read...) raised ``exc``;
    call it from the ``except`` block."""
    if isinstance(exc, ApiError):
        return exc.code
    if isinstance(exc, UnsupportedCodecError):
        return UnsupportedCompressionTypeError.code
    if isinstance(exc, OSError):
        _storage_faults.error((topic, partition), "%s of %s-%d failed: %s", what, topic,
                              partition, exc)
        return KafkaStorageError.code
    log.exception("%s of %s-%d failed", what, topic, partition)
    return UnknownServerError.code


class RequestHandler:
    """Turns request frames into responses.  Runs in the trio thread."""

    def __init__(self, config: BrokerConfig, cluster: Cluster, logs: LogManager,
                 purgatory: FetchPurgatory, limiter: trio.CapacityLimiter) -> None:
        self.config = config
        self.cluster = cluster
        self.logs = logs
        self.purgatory = purgatory
        self.limiter = limiter
        self._max_request = config["socket.request.max.bytes"]
        self._handlers: dict[int, Callable[[Any, Any], Any]] = {
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.LIST_OFFSETS: self.list_offsets,
            ApiKey.METADATA: self.metadata,
            ApiKey.API_VERSIONS: self.api_versions,
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
        }
        self._producer_ids = _ProducerIds(config.broker_id, config.log_dirs[0])
        self.producers = ProducerStateTable(load=self._stored_batch_headers)
        self._locks_lock = threading.Lock()
        self._partition_locks: dict[tuple[str, int], threading.Lock] = {}
        self.supported: dict[int, tuple[int, int]] = {
            k: v for k, v in API_VERSIONS.items() if k in self._handlers}
        self._api_versions: Any = None  # the ApiVersions answer, made once
        self.metrics = RequestMetrics()
        #: may the current request's principal do something (ACLs; all yes without them)
        self.access: Access = ALLOW_ALL
        #: SASL logins (SASL listeners; set by ``SaslAuthenticator.register``)
        self.sasl: SaslAuthenticator | None = None
        #: the replica manager in a ZooKeeper cluster (None standalone: every partition here
        #: is led here, and its high watermark is its log end offset)
        self.replicas: ReplicaManager | None = None

    def register(self, api_key: int, handler: Callable[[Any, Any], Any]) -> None:
        """Serve another API (the group coordinator adds its own)."""
        self._handlers[api_key] = handler
        self.supported[api_key] = API_VERSIONS[ApiKey(api_key)]
        self._api_versions = None

    async def handle(self, frame: memoryview, session: Session) -> list[Any] | Later | None:
        """The response's parts (None: no response is due; ``Later``: the request is done,
        its answer comes once a wait is over); counted in ``metrics`` and, at DEBUG, logged
        on ``trilog.broker.requests`` (one line per request, once answered).  ``session``
        is the connection's (who sent the request, on which listener)."""
        started = time.perf_counter()
        request_bytes = len(frame) + 4
        peer = session.peer
        current_session.set(session)
        if not session.authenticated and session.sasl is not None and session.sasl.raw:
            assert self.sasl is not None
            return await self.sasl.raw_token(bytes(frame), session)
        try:
            header, response = await self._respond(frame, session)
        except ProtocolError as exc:  # the connection closes: no answer
            api_key = int.from_bytes(frame[:2], "big", signed=True) if len(frame) >= 2 else -1
            self.metrics.request_refused(api_key)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s refused peer=%s request_bytes=%d: %s", api_name(api_key), peer,
                          request_bytes, exc)
            raise
        if isinstance(response, Later):
            later = response

            async def answer() -> list[Any] | None:
                return self._answer(header, await later.result(), peer, request_bytes,
                                    started)

            return Later(answer)
        return self._answer(header, response, peer, request_bytes, started)

    def _answer(self, header, response, peer: str, request_bytes: int, started: float
                ) -> list[Any] | None:
        """Encode ``response`` (a message, ready parts, or None) and count it."""
        if isinstance(response, list):  # already encoded (the ApiVersions fallback)
            parts, errors = response, {UnsupportedVersionError.code: 1}
        elif response is None:
            parts, errors = None, {}
        else:
            parts = encode_response_parts(response, header.api_version, header.correlation_id)
            errors = error_counts(response)
        seconds = time.perf_counter() - started
        sent = _parts_size(parts)
        self.metrics.request_done(header.api_key, header.api_version, seconds, request_bytes,
                                  sent, errors)
        if log.isEnabledFor(logging.DEBUG):
            _log_request(header.api_key, header.api_version, header.client_id, peer,
                         request_bytes, sent, seconds, errors)
        return parts

    async def _respond(self, frame: memoryview, session: Session) -> tuple[Any, Any]:
        """``(header, response)`` of a request frame: a message, ``Later`` (its message
        comes later), None (no answer is due), or ready parts (the ApiVersions fallback)."""
        if not session.authenticated:
            header = peek_request_header(frame)
            if header.api_key not in BEFORE_LOGIN:
                raise RemoteProtocolError(
                    f"{_api_name(header.api_key)} from {session.peer} before its SASL login "
                    f"on listener {session.listener}")
        try:
            header, request = decode_request(frame, max_length=self._max_request)
        except UnsupportedVersionError:
            header = peek_request_header(frame)
            if header.api_key == ApiKey.API_VERSIONS:
                return header, [encode_api_versions_fallback(header.correlation_id,
                                                             self.supported)]
            raise RemoteProtocolError(
                f"{_api_name(header.api_key)} v{header.api_version} is not supported"
            ) from None
        handler = self._handlers.get(header.api_key)
        if handler is None:
            raise RemoteProtocolError(f"{_api_name(header.api_key)} is not served by this broker")
        if self.access.enabled:
            refusal = refused_request(self.access, header.api_key, header.api_version, request)
            if refusal is not None:
                await trio.lowlevel.checkpoint()
                return header, refusal
        try:
            return header, await handler(request, header)
        except ProtocolError:
            raise
        except ApiError as exc:  # a request-level error a handler did not map
            log.warning("%s from %s failed: %s", _api_name(header.api_key), session.peer, exc)
            raise RemoteProtocolError(f"request failed: {exc}") from exc

    # -- ApiVersions -------------------------------------------------------------------------

    async def api_versions(self, request, header):
        # Every client asks on every connection; the answer changes only with register().
        if self._api_versions is None:
            self._api_versions = api_versions_response(versions=self.supported)
        return self._api_versions

    # -- Metadata ----------------------------------------------------------------------------

    async def metadata(self, request, header):
        R = MetadataResponse
        cluster = self.cluster
        topics_all = cluster.topics()
        access = self.access
        if request.topics is None or (header.api_version == 0 and not request.topics):
            # All topics: those this principal may not describe are left out (Kafka).
            wanted = sorted(t for t in topics_all
                            if access(AclOperation.DESCRIBE, ResourceType.TOPIC, t))
        else:
            wanted = [t.name for t in request.topics]
        auto_create = (
            self.config["auto.create.topics.enable"]
            and (header.api_version < 4 or request.allow_auto_topic_creation)
        )
        live = {b.node_id for b in cluster.brokers()}
        topics = []
        for name in wanted:
            error = 0
            if access.enabled and not access(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                topics.append(R.MetadataResponseTopic(
                    error_code=TopicAuthorizationFailedError.code, name=name, partitions=[]))
                continue
            if name not in topics_all:
                try:
                    validate_topic_name(name)
                    may_create = (access(AclOperation.CREATE, ResourceType.CLUSTER)
                                  or access(AclOperation.CREATE, ResourceType.TOPIC, name))
                    if not auto_create or not may_create or name in INTERNAL_TOPICS:
                        raise UnknownTopicOrPartitionError()
                    await cluster.create_topic(name, -1)
                    error = LeaderNotAvailableError.code  # Kafka's answer: ask again shortly
                except ApiError as exc:
                    if exc.code != TopicAlreadyExistsError.code:  # someone else won the race
                        topics.append(R.MetadataResponseTopic(error_code=exc.code, name=name,
                                                              partitions=[]))
                        continue
            partitions = cluster.partitions(name) or {}
            if partitions and error:
                error = 0 if all(l >= 0 for l in partitions.values()) else error
            topics.append(
                R.MetadataResponseTopic(
                    error_code=error,
                    name=name,
                    is_internal=name in INTERNAL_TOPICS,
                    partitions=[
                        R.MetadataResponseTopic.MetadataResponsePartition(
                            error_code=0 if leader >= 0 else LeaderNotAvailableError.code,
                            partition_index=p,
                            leader_id=leader,
                            replica_nodes=replicas,
                            isr_nodes=isr,
                            offline_replicas=[r for r in replicas if r not in live],
                        )
                        for p, leader in sorted(partitions.items())
                        for replicas, isr in [cluster.replica_info(name, p)]
                    ],
                )
            )
        listener = current_session.get().listener
        return R(
            brokers=[
                R.MetadataResponseBroker(node_id=b.node_id, host=address[0], port=address[1])
                for b in cluster.brokers()
                for address in [b.address(listener)] if address is not None
            ],
            cluster_id=cluster.cluster_id,
            controller_id=cluster.controller_id,
            topics=topics,
        )

    def _check_partition(self, topic: str, partition: int, *, write: bool = False,
                         operation: AclOperation | None = None) -> None:
        """Raise the ApiError a request for this partition gets, if any (``operation``:
        what the request does to the topic, which its principal must be allowed)."""
        if operation is not None and not self.access(operation, ResourceType.TOPIC, topic):
            raise TopicAuthorizationFailedError(f"not authorized to {operation.title} {topic}")
        leader = self.cluster.leader(topic, partition)
        if leader is None:
            validate_topic_name(topic)  # an illegal name is INVALID_TOPIC_EXCEPTION
            raise UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
        if self.replicas is not None:
            leads = self.replicas.is_leader((topic, partition))
        else:
            leads = leader == self.cluster.broker.node_id
        if not leads:
            raise NotLeaderOrFollowerError(f"broker {self.cluster.broker.node_id} does not lead "
                                           f"{topic}-{partition}")
        if write and topic in INTERNAL_TOPICS:
            raise TopicAuthorizationFailedError(f"{topic} is internal")

    # -- Produce -----------------------------------------------------------------------------

    async def produce(self, request, header):
        acks = request.acks
        work: list[tuple[str, int, Any]] = []
        results: dict[tuple[str, int], tuple[int, int, int]] = {}
        for topic in request.topic_data:
            for part in topic.partition_data:
                key = (topic.name, part.index)
                if acks not in (-1, 0, 1):
                    results[key] = (InvalidRequiredAcksError.code, -1, -1)
                    continue
                epoch = None
                try:
                    self._check_partition(topic.name, part.index, write=True,
                                          operation=AclOperation.WRITE)
                    if part.records is None or len(part.records) == 0:
                        raise CorruptMessageError("empty record set")
                    if self.replicas is not None:
                        self.replicas.check_produce(key, acks)
                        epoch = self.replicas.leader_epoch(key)
                except ApiError as exc:
                    results[key] = (exc.code, -1, -1)
                    continue
                work.append((topic.name, part.index, part.records, epoch))
        if work:
            if self._append_inline(work):
                # (No checkpoint of its own: the network yields between requests.)
                appended = INLINE_APPENDS.run(self._append_all, work)
            else:
                appended = await trio.to_thread.run_sync(self._append_all, work,
                                                         limiter=self.limiter)
            for key, outcome in appended.items():
                results[key] = outcome
                if outcome[0] == 0:
                    self.purgatory.data_appended(key, outcome[3])
                    self.metrics.produced(key[0], outcome[3], outcome[4])
                    if self.replicas is not None:
                        self.replicas.appended(key)
            if acks == -1 and self.replicas is not None:
                # The records are appended: the connection's next request need not wait
                # for the in-sync replicas too (the answers still leave in order).
                deadline = trio.current_time() + max(request.timeout_ms, 0) / 1000

                async def replicated() -> Any:
                    await self._wait_replicated(results, deadline)
                    return self._produce_response(results)

                return Later(replicated)
        if acks == 0:
            return None
        return self._produce_response(results)

    @staticmethod
    def _produce_response(results) -> Any:
        R = ProduceResponse
        by_topic: dict[str, list] = {}
        for (name, index), outcome in results.items():
            error, base_offset, log_start = outcome[:3]
            by_topic.setdefault(name, []).append(
                R.TopicProduceResponse.PartitionProduceResponse(
                    index=index, error_code=error, base_offset=base_offset,
                    log_append_time_ms=-1, log_start_offset=log_start,
                )
            )
        return R(
            responses=[R.TopicProduceResponse(name=n, partition_responses=p)
                       for n, p in by_topic.items()],
            throttle_time_ms=0,
        )

    async def _wait_replicated(self, results, deadline: float) -> None:
        """``acks=all``: hold the answer until every in-sync replica has each partition's
        records (its high watermark passed them), or the request's ``deadline``."""
        assert self.replicas is not None
        for key, outcome in list(results.items()):
            if outcome[0] == 0 and len(outcome) > 5:
                code = await self.replicas.wait_replicated(key, outcome[5], deadline)
                if code:
                    results[key] = (code, -1, -1)

    def _stored_batch_headers(self, tp: tuple[str, int]):
        lg = self.logs.get_log(*tp)
        return lg.batch_headers() if lg is not None else ()

    def _partition_lock(self, tp: tuple[str, int]) -> threading.Lock:
        lock = self._partition_locks.get(tp)
        if lock is None:
            with self._locks_lock:
                lock = self._partition_locks.setdefault(tp, threading.Lock())
        return lock

    def _append_inline(self, work) -> bool:
        """May ``work`` be appended on the event loop?  A small append is a page-cache write
        of a few microseconds, and one of a MiB a fraction of a millisecond while writes are
        fast, cheaper than the hop to a worker thread and back (``Log.cheap_append``)."""
        total = sum(len(w[2]) for w in work)
        for topic, partition, records, _epoch in work:
            lg = self.logs.get_log(topic, partition)
            if lg is None or not lg.cheap_append(total):
                return False
            if total > CHEAP_APPEND_BYTES and _legacy(records):
                return False  # converted in Python first: not a quick write
        return True

    def _append_all(self, work):
        """In a worker thread: append each partition's records; never raises."""
        out = {}
        for topic, partition, records, epoch in work:
            try:
                lg = self.logs.get_log(topic, partition)
                if lg is None:
                    raise UnknownTopicOrPartitionError(f"{topic}-{partition} has no log here")
                if _legacy(records):
                    # An old client's message set: the log keeps only v2.
                    records = b"".join(legacy_to_v2(
                        records, max_batch_bytes=self.config["message.max.bytes"]
                    ))
                tp = (topic, partition)
                with self._partition_lock(tp):
                    duplicate_of = self.producers.check(tp, records)
                    if duplicate_of is not None:
                        out[tp] = (0, duplicate_of, lg.log_start_offset, 0, 0,
                                   lg.log_end_offset)
                        continue
                    info = (lg.append(records) if epoch is None
                            else lg.append(records, leader_epoch=epoch))
                    self.producers.record(tp, records, info.first_offset)
                out[tp] = (0, info.first_offset, info.log_start_offset, info.size_in_bytes,
                           info.record_count, info.last_offset + 1)
            except Exception as exc:
                out[(topic, partition)] = (_partition_error(exc, "append", topic, partition),
                                           -1, -1, 0, 0)
        return out

    # -- Fetch -------------------------------------------------------------------------------

    async def fetch(self, request, header):
        version = header.api_version
        wanted = [(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
                  for t in request.topics for p in t.partitions]
        epochs = [p.current_leader_epoch if version >= 9 else -1
                  for t in request.topics for p in t.partitions]
        replica = request.replica_id if self.replicas is not None else -1
        max_bytes = request.max_bytes if version >= 3 else 0x7FFFFFFF
        # Fetch v0-v3 predate RecordBatch v2: their answers are down-converted (in the
        # worker thread, with the read), to magic 0 for v0-v1 and magic 1 for v2-v3.
        convert = None if version >= 4 else (0 if version < 2 else 1)
        tps = [(t, p) for t, p, _, _ in wanted]
        mark = self.purgatory.mark(tps, replica >= 0)
        results = await self._read_all(wanted, max_bytes, convert, replica, epochs)
        total = sum(r[1].length for r in results if r[1] is not None)
        errors = any(r[0] for r in results)
        if request.max_wait_ms > 0 and total < request.min_bytes and not errors and wanted:
            _close_slices(results)
            await self.purgatory.wait(tps, request.min_bytes - total,
                                      request.max_wait_ms / 1000, since=mark,
                                      replica=replica >= 0)
            results = await self._read_all(wanted, max_bytes, convert, replica, None)
        try:
            return self._fetch_response(version, wanted, results)
        except BaseException:
            _close_slices(results)
            raise

    async def _read_all(self, wanted, max_bytes, convert=None, replica: int = -1,
                        epochs=None):
        """Read each wanted partition (in a worker thread).  ``replica`` >= 0: a follower's
        fetch, reading to the log end, whose offsets tell the leader its progress (``epochs``
        given on the first read only); else a consumer's, reading below the high watermark."""
        checked: list[int | None] = []
        replicas = self.replicas
        operation: AclOperation | None = None
        if self.access.enabled:
            # A follower's fetch is the cluster's business; a consumer's reads its topics.
            if replica >= 0 and not self.access(AclOperation.CLUSTER_ACTION,
                                                ResourceType.CLUSTER):
                await trio.lowlevel.checkpoint()
                return [(ClusterAuthorizationFailedError.code, None, None) for _ in wanted]
            operation = AclOperation.READ if replica < 0 else None
        for i, (topic, partition, offset, part_max) in enumerate(wanted):
            try:
                self._check_partition(topic, partition, operation=operation)
                if replicas is not None:
                    epoch = epochs[i] if epochs is not None else -1
                    if replica >= 0:
                        if epochs is not None:
                            replicas.follower_fetched((topic, partition), replica, offset,
                                                      epoch)
                    else:
                        replicas.check_leader_epoch((topic, partition), epoch)
                checked.append(None)
            except ApiError as exc:
                checked.append(exc.code)
        if all(c is not None for c in checked):
            await trio.lowlevel.checkpoint()
            return [(c, None, None) for c in checked]
        if convert is None and self._reads_tail(wanted, checked):
            # Reads in the active segments find index and data pages just written: cheaper
            # here than the hop to a worker thread (the bytes go out by sendfile anyway).
            await trio.lowlevel.checkpoint()
            return self._read_in_thread(wanted, checked, max_bytes, convert, replica >= 0)
        return await trio.to_thread.run_sync(self._read_in_thread, wanted, checked, max_bytes,
                                             convert, replica >= 0,
                                             limiter=self.limiter)

    def _reads_tail(self, wanted, checked) -> bool:
        """Does every partition read start in its log's active segment?"""
        for (topic, partition, offset, _max), error in zip(wanted, checked):
            if error is not None:
                continue
            lg = self.logs.get_log(topic, partition)
            if lg is None or offset < lg.active_segment.base_offset:
                return False
        return True

    def _read_in_thread(self, wanted, checked, max_bytes, convert, to_log_end=False):
        """In a worker thread: ``[(error, slice or None, (hw, log start) or None)]``."""
        out = []
        budget = max_bytes
        for (topic, partition, offset, part_max), error in zip(wanted, checked):
            if error is not None:
                out.append((error, None, None))
                continue
            lg = self.logs.get_log(topic, partition)
            if lg is None:
                out.append((UnknownTopicOrPartitionError.code, None, None))
                continue
            if budget <= 0:
                # The response is full; this partition reports its marks and no data.
                out.append((0, None, (lg.high_watermark, lg.log_start_offset)))
                continue
            try:
                bound = None if to_log_end or not lg.replicated else lg.high_watermark
                out.append(_read_partition(lg, offset, min(part_max, budget), part_max,
                                           convert, bound))
            except OffsetOutOfRangeError as exc:
                out.append((exc.code, None, (exc.log_end_offset, exc.log_start_offset)))
            except Exception as exc:
                out.append((_partition_error(exc, "read", topic, partition), None, None))
                continue
            slc = out[-1][1]
            if slc is not None:
                budget -= slc.length
        return out

    def _fetch_response(self, version, wanted, results):
        R = FetchResponse
        PD = R.FetchableTopicResponse.PartitionData
        by_topic: dict[str, list] = {}
        for (topic, partition, _offset, part_max), result in zip(wanted, results):
            error, slc, marks = result
            hw = ls = -1
            records: Any = b""
            if slc is not None:
                hw, ls = slc.high_watermark, slc.log_start_offset
                if slc.length == 0:
                    slc.close()
                elif isinstance(slc, _Converted):
                    records = slc.data
                else:
                    records = slc
                if slc.length:
                    self.metrics.fetched(topic, slc.length)
            elif marks is not None:
                hw, ls = marks
            by_topic.setdefault(topic, []).append(
                PD(partition_index=partition, error_code=error or 0, high_watermark=hw,
                   last_stable_offset=hw, log_start_offset=ls, aborted_transactions=None,
                   records=records)
            )
        return R(throttle_time_ms=0, error_code=0, session_id=0,
                 responses=[R.FetchableTopicResponse(topic=t, partitions=p)
                            for t, p in by_topic.items()])

    # -- ListOffsets -------------------------------------------------------------------------

    async def list_offsets(self, request, header):
        version = header.api_version
        wanted = [(t.name, p.partition_index, p.timestamp, p.max_num_offsets)
                  for t in request.topics for p in t.partitions]
        checked = []
        for topic, partition, _ts, _n in wanted:
            try:
                self._check_partition(topic, partition, operation=AclOperation.DESCRIBE)
                checked.append(0)
            except ApiError as exc:
                checked.append(exc.code)
        answers = await trio.to_thread.run_sync(self._offsets_in_thread, version, wanted,
                                                checked, limiter=self.limiter)
        R = ListOffsetsResponse
        PR = R.ListOffsetsTopicResponse.ListOffsetsPartitionResponse
        by_topic: dict[str, list] = {}
        for (topic, partition, _ts, _n), (error, old, ts, off) in zip(wanted, answers):
            by_topic.setdefault(topic, []).append(
                PR(partition_index=partition, error_code=error, old_style_offsets=old,
                   timestamp=ts, offset=off)
            )
        return R(throttle_time_ms=0,
                 topics=[R.ListOffsetsTopicResponse(name=t, partitions=p)
                         for t, p in by_topic.items()])

    def _offsets_in_thread(self, version, wanted, checked):
        out = []
        for (topic, partition, ts, max_n), error in zip(wanted, checked):
            if error:
                out.append((error, [], -1, -1))
                continue
            lg = self.logs.get_log(topic, partition)
            if lg is None:
                out.append((UnknownTopicOrPartitionError.code, [], -1, -1))
                continue
            try:
                if version == 0:
                    out.append((0, list(lg.offsets_before(ts, max_n)), -1, -1))
                    continue
                if ts == LATEST_TIMESTAMP and lg.replicated:
                    # A consumer's latest offset is the high watermark (Kafka's READ_UNCOMMITTED).
                    out.append((0, [], -1, lg.high_watermark))
                    continue
                found = lg.offset_for_timestamp(ts)
            except Exception as exc:
                out.append((_partition_error(exc, "offset lookup", topic, partition), [], -1, -1))
                continue
            if found is None:
                out.append((0, [], -1, -1))
            else:
                out.append((0, [], found.timestamp, found.offset))
        return out

    # -- InitProducerId ----------------------------------------------------------------------

    async def init_producer_id(self, request, header):
        """Producer ids for idempotent producers (the default of today's Kafka clients).

        Transactions are not supported (a transactional id gets ``INVALID_REQUEST``).
        Sequence numbers are checked per partition (see ``_producer_state.py``).
        """
        if request.transactional_id is not None:
            return InitProducerIdResponse(
                throttle_time_ms=0, error_code=InvalidRequestError.code,
                producer_id=-1, producer_epoch=-1,
            )
        access = self.access
        if access.enabled and not (
                access(AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER)
                or any(access(AclOperation.WRITE, ResourceType.TOPIC, t)
                       for t in self.cluster.topics())):
            # Kafka: IdempotentWrite on the cluster, or Write on some topic.
            return InitProducerIdResponse(
                throttle_time_ms=0, error_code=ClusterAuthorizationFailedError.code,
                producer_id=-1, producer_epoch=-1)
        try:
            producer_id = await trio.to_thread.run_sync(self._producer_ids.allocate)
        except OSError as exc:
            log.error("cannot record producer ids in %s: %s", self._producer_ids.path, exc)
            return InitProducerIdResponse(
                throttle_time_ms=0, error_code=KafkaStorageError.code,
                producer_id=-1, producer_epoch=-1,
            )
        return InitProducerIdResponse(throttle_time_ms=0, error_code=0,
                                      producer_id=producer_id, producer_epoch=0)

    # -- CreateTopics / DeleteTopics -----------------------------------------------------------

    async def create_topics(self, request, header):
        R = CreateTopicsResponse
        results = []
        for t in request.topics:
            assignment = {a.partition_index: list(a.broker_ids) for a in t.assignments}
            try:
                if not (self.access(AclOperation.CREATE, ResourceType.CLUSTER)
                        or self.access(AclOperation.CREATE, ResourceType.TOPIC, t.name)):
                    raise TopicAuthorizationFailedError(f"not authorized to create {t.name}")
                await self.cluster.create_topic(
                    t.name, t.num_partitions, t.replication_factor, assignment or None,
                    validate_only=getattr(request, "validate_only", False),
                    configs={c.name: c.value for c in t.configs},
                )
                results.append(R.CreatableTopicResult(name=t.name, error_code=0))
            except ApiError as exc:
                results.append(R.CreatableTopicResult(name=t.name, error_code=exc.code,
                                                      error_message=str(exc)))
        return R(throttle_time_ms=0, topics=results)

    async def delete_topics(self, request, header):
        R = DeleteTopicsResponse
        results = []
        for name in request.topic_names:
            try:
                if not self.access(AclOperation.DELETE, ResourceType.TOPIC, name):
                    raise TopicAuthorizationFailedError(f"not authorized to delete {name}")
                if not self.config["delete.topic.enable"]:
                    raise TopicDeletionDisabledError()
                if name in INTERNAL_TOPICS:
                    raise TopicAuthorizationFailedError(f"{name} is internal")
                await self.cluster.delete_topic(name)
                self.producers.forget_topic(name)
                self.metrics.forget_topic(name)
                results.append(R.DeletableTopicResult(name=name, error_code=0))
            except ApiError as exc:
                results.append(R.DeletableTopicResult(name=name, error_code=_code(exc)))
        return R(throttle_time_ms=0, responses=results)


class _ProducerIds:
    """Producer ids unique across brokers and restarts.

    ``ms << 20 | (broker_id % 256) << 12 | counter`` stays below 2**63 until the year 2248
    and allows 4096 ids per broker per millisecond of uptime before it borrows from the
    future (it never repeats: the counter carries into the time bits).  Ids are reserved in
    blocks in ``producer-id.checkpoint`` (first log dir), and a restarted broker starts
    above the reservation even if the clock went back: a reused id could make a new
    producer's first batch look like a duplicate of an old producer's.
    """

    FILE = "producer-id.checkpoint"
    BLOCK = 1000  # ids reserved on disk at a time

    def __init__(self, broker_id: int, directory: str) -> None:
        self.path = self._path = os.path.join(directory, self.FILE)
        last = self._read()
        ms = max(now_ms(), (last >> 20) + 1)
        self._base = (ms << 20) | ((broker_id % 256) << 12)
        self._n = 0
        self._reserved = 0  # ids below this index are covered by the file
        self._lock = threading.Lock()

    def _id(self, n: int) -> int:
        return self._base + (n % 4096) + (n // 4096) * (1 << 20)

    def allocate(self) -> int:
        """The next id; the file covers it before it is handed out (blocking: a thread)."""
        with self._lock:
            n = self._n
            if n >= self._reserved:
                self._reserve(n + self.BLOCK)  # raises OSError: nothing handed out
            self._n = n + 1
            return self._id(n)

    def _reserve(self, until: int) -> None:
        """Cover the ids below index ``until`` on disk (file and rename made durable)."""
        write_atomically(self._path, f"{self._id(until - 1)}\n".encode())
        self._reserved = until

    def _read(self) -> int:
        try:
            with open(self._path) as f:
                return int(f.read().strip())
        except FileNotFoundError:
            return -1
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable %s (%s)", self._path, exc)
            return -1


def _read_partition(lg, offset: int, max_bytes: int, convert_max_bytes: int, convert,
                    max_offset: int | None = None):
    """In a worker thread: one partition's fetch answer ``(0, slice, None)``, the slice
    down-converted to magic ``convert`` when that is not None; ``max_offset`` (a consumer of
    a replicated log: the high watermark) bounds it."""
    # Log.read returns the first batch whole even above the limit (KIP-74), so a consumer is
    # never stuck behind a large batch.
    slc = (lg.read(offset, max(1, max_bytes)) if max_offset is None
           else lg.read(offset, max(1, max_bytes), max_offset))
    if convert is not None and slc.length:
        with slc:
            data = v2_to_legacy(slc.read(), convert, max_bytes=convert_max_bytes)
        slc = _Converted(data, slc.high_watermark, slc.log_start_offset)
    return (0, slc, None)


class _Converted:
    """A down-converted partition answer: bytes in memory, with the slice's marks."""

    __slots__ = ("data", "high_watermark", "log_start_offset")

    def __init__(self, data: bytes, high_watermark: int, log_start_offset: int) -> None:
        self.data = data
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset

    @property
    def length(self) -> int:
        return len(self.data)

    def close(self) -> None:
        pass


def _parts_size(parts: list[Any] | None) -> int:
    # bytes and the FetchSlices sent with sendfile alike have a len()
    return sum(map(len, parts)) if parts else 0


def _log_request(api_key: int, version: int, client_id: str | None, peer: str,
                 request_bytes: int, response_bytes: int, seconds: float,
                 errors: dict[int, int]) -> None:
    """The request log's line (DEBUG on ``trilog.broker.requests``); its fields also ride on
    the record (``extra``) for a structured formatter."""
    error_text = ",".join(f"{error_name(code)}:{n}" for code, n in sorted(errors.items()))
    api = api_name(api_key)
    log.debug("%s v%d client_id=%s peer=%s request_bytes=%d response_bytes=%d time_ms=%.3f "
              "errors=%s", api, version, client_id, peer, request_bytes, response_bytes,
              seconds * 1000, error_text or "none",
              extra={"api": api, "api_version": version, "client_id": client_id, "peer": peer,
                     "request_bytes": request_bytes, "response_bytes": response_bytes,
                     "time_ms": seconds * 1000, "errors": {error_name(c): n
                                                           for c, n in errors.items()}})


def _close_slices(results) -> None:
    for _error, slc, _marks in results:
        if slc is not None:
            slc.close()


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API key {api_key}"
