"""Fetch (1): records from the log as file slices, sent with ``sendfile``; long polls.

A consumer's fetch (``replica_id`` -1) needs Read on each topic and reads below the high
watermark; a follower's (``replica_id`` = its broker id) needs ClusterAction and reads to the
log end, and its fetch offsets tell the leader its progress (``ReplicaManager.
follower_fetched``).  Each partition must be led here, at the leader epoch the request
names (Fetch v9+).

A response holds at most ``MAX_OPEN_SLICES`` open slices (a descriptor each); the partitions
past them are answered from memory, so that a fetch of a thousand partitions does not take
a thousand descriptors.  Reads take one hop to a worker thread for all partitions (none when every read starts in
its log's active segment, whose pages were just written).  Fetch v0-v3 predate RecordBatch
v2: their answers are down-converted in that thread, to magic 0 for v0-v1 and magic 1 for
v2-v3.  With fewer than ``min_bytes`` the request parks in the fetch purgatory until enough
arrives or ``max_wait_ms`` passes, then reads again.  Whatever goes wrong with one partition
is that partition's error code (``replication.partition_error``).

A consumer's fetch with ``isolation_level`` 1 (READ_COMMITTED, v4+) reads below the last
stable offset (no record of a transaction still open) and gets the aborted transactions its
records hold (``aborted_transactions``: producer id and first offset), which the consumer
skips; every answer carries the partition's ``last_stable_offset``.

A consumer with a ``consumer_byte_rate`` quota gets at most its quota over the quota
windows less one in a fetch (Kafka's cap: a larger answer would be throttled and sent
empty every time); the throttle itself is the quotas' request hook's (``quotas/``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import trio

from trilog._topic import PartitionKey
from trilog.broker._limits import MAX_OPEN_SLICES
from trilog.broker._metrics import RequestMetrics
from trilog.broker.network import ApiHandler, current_session
from trilog.broker.quotas import CONSUMER_BYTE_RATE, QuotaManager, parked, user_of
from trilog.broker.replication import FetchPurgatory, ReplicaManager, partition_error
from trilog.broker.security import Access, AclOperation, ResourceType
from trilog.errors import (
    ApiError,
    ClusterAuthorizationFailedError,
    OffsetOutOfRangeError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from trilog.protocol import ApiKey, FetchResponse, RequestHeader
from trilog.records import v2_to_legacy
from trilog.storage import FetchSlice, Log, LogManager

#: ``isolation_level`` 1: READ_COMMITTED (Fetch v4+).
READ_COMMITTED = 1


class _Wanted(NamedTuple):
    """One partition a fetch asks for."""

    topic: str
    partition: int
    offset: int
    max_bytes: int


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


class _Read(NamedTuple):
    """One partition's read: its error code, the slice read (None: nothing), and when there
    is no slice, the marks to answer with (high watermark, log start offset); for a
    read_committed fetch the last stable offset and the aborted transactions in the read."""

    error: int
    data: FetchSlice | _Converted | None = None
    marks: tuple[int, int] | None = None
    last_stable_offset: int = -1
    aborted: list[Any] | None = None


class FetchApi:
    """Serves Fetch.  Runs in the trio thread; reads go to worker threads."""

    def __init__(self, replicas: ReplicaManager, purgatory: FetchPurgatory, access: Access,
                 metrics: RequestMetrics, limiter: trio.CapacityLimiter,
                 quotas: QuotaManager | None = None) -> None:
        #: the client quotas: a consumer's fetch is capped at what its byte rate allows
        self.quotas = quotas
        self.replicas = replicas
        self.logs: LogManager = replicas.logs
        self.purgatory = purgatory
        self.access = access
        self.metrics = metrics
        self.limiter = limiter

    def apis(self) -> Mapping[int, ApiHandler]:
        return {ApiKey.FETCH: self.fetch}

    async def fetch(self, request: Any, header: RequestHeader) -> Any:
        version = header.api_version
        wanted = [_Wanted(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
                  for t in request.topics for p in t.partitions]
        epochs = [p.current_leader_epoch if version >= 9 else -1
                  for t in request.topics for p in t.partitions]
        replica = request.replica_id
        max_bytes = request.max_bytes if version >= 3 else 0x7FFFFFFF
        if replica < 0 and self.quotas is not None and self.quotas.active:
            max_bytes = self._quota_cap(max_bytes, header.client_id or "")
        convert = None if version >= 4 else (0 if version < 2 else 1)
        committed = version >= 4 and request.isolation_level == READ_COMMITTED and replica < 0
        tps = [(w.topic, w.partition) for w in wanted]
        mark = self.purgatory.mark(tps, replica >= 0)
        results = await self._read_all(wanted, max_bytes, convert, replica, epochs, committed)
        total = sum(r.data.length for r in results if r.data is not None)
        errors = any(r.error for r in results)
        min_bytes = min(request.min_bytes, max_bytes)  # (a quota's cap bounds it too)
        if request.max_wait_ms > 0 and total < min_bytes and not errors and wanted:
            _close(results)
            parked_at = trio.current_time()
            await self.purgatory.wait(tps, min_bytes - total,
                                      request.max_wait_ms / 1000, since=mark,
                                      replica=replica >= 0)
            # A parked fetch uses no handler time (the request quota leaves it out).
            parked.set(trio.current_time() - parked_at)
            results = await self._read_all(wanted, max_bytes, convert, replica, None,
                                           committed)
        try:
            return self._response(wanted, results)
        except BaseException:
            _close(results)
            raise

    def _quota_cap(self, max_bytes: int, client_id: str) -> int:
        """``max_bytes`` capped at what the consumer's ``consumer_byte_rate`` allows in one
        go (Kafka's; a first batch larger than that is still sent whole, KIP-74)."""
        assert self.quotas is not None
        user = user_of(current_session.get().principal)
        cap = self.quotas.max_in_window(CONSUMER_BYTE_RATE, user, client_id)
        return max_bytes if cap is None else min(max_bytes, int(cap))

    def _checked(self, wanted: Sequence[_Wanted], replica: int,
                 epochs: list[int] | None) -> list[int | None]:
        """Each partition's error code, or None when it may be read.  ``epochs`` (the first
        read only) are checked, and a follower's offsets tell the leader its progress."""
        access = self.access
        if (replica >= 0 and access.enabled
                and not access(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)):
            # A follower's fetch is the cluster's business; a consumer's reads its topics.
            return [ClusterAuthorizationFailedError.code] * len(wanted)
        checked: list[int | None] = []
        read_acl = access.enabled and replica < 0
        for i, w in enumerate(wanted):
            tp = (w.topic, w.partition)
            try:
                if read_acl and not access(AclOperation.READ, ResourceType.TOPIC, w.topic):
                    raise TopicAuthorizationFailedError(f"not authorized to read {w.topic}")
                part = self.replicas.leader_partition(tp)
                epoch = epochs[i] if epochs is not None else -1
                if replica < 0:
                    part.check_leader_epoch(epoch)
                elif epochs is not None:
                    self.replicas.follower_fetched(tp, replica, w.offset, epoch)
                checked.append(None)
            except ApiError as exc:
                checked.append(exc.code)
        return checked

    async def _read_all(self, wanted: list[_Wanted], max_bytes: int, convert: int | None,
                        replica: int, epochs: list[int] | None, committed: bool
                        ) -> list[_Read]:
        """Read each wanted partition (see the module docstring)."""
        checked = self._checked(wanted, replica, epochs)
        if all(c is not None for c in checked):
            await trio.lowlevel.checkpoint()
            return [_Read(c) for c in checked if c is not None]
        if convert is None and self._reads_tail(wanted, checked):
            # Reads in the active segments find index and data pages just written: cheaper
            # here than the hop to a worker thread (the bytes go out by sendfile anyway).
            await trio.lowlevel.checkpoint()
            return self._read_in_thread(wanted, checked, max_bytes, convert, replica >= 0,
                                        committed)
        return await trio.to_thread.run_sync(self._read_in_thread, wanted, checked, max_bytes,
                                             convert, replica >= 0, committed,
                                             limiter=self.limiter)

    def _reads_tail(self, wanted: list[_Wanted], checked: list[int | None]) -> bool:
        """Does every partition read start in its log's active segment?"""
        for w, error in zip(wanted, checked):
            if error is not None:
                continue
            lg = self.logs.get_log(w.topic, w.partition)
            if lg is None or w.offset < lg.active_segment.base_offset:
                return False
        return True

    def _read_in_thread(self, wanted: list[_Wanted], checked: list[int | None],
                        max_bytes: int, convert: int | None, to_log_end: bool,
                        committed: bool = False) -> list[_Read]:
        """Blocking (a worker thread, or inline for tail reads): every partition's read;
        ``committed`` (read_committed) reads below the last stable offset."""
        out = []
        budget = max_bytes
        slices = 0  # open FetchSlices in ``out`` (MAX_OPEN_SLICES)
        for w, error in zip(wanted, checked):
            if error is not None:
                out.append(_Read(error))
                continue
            lg = self.logs.get_log(w.topic, w.partition)
            if lg is None:
                out.append(_Read(UnknownTopicOrPartitionError.code))
                continue
            if budget <= 0:
                # The response is full; this partition reports its marks and no data.
                out.append(_Read(0, None, (lg.high_watermark, lg.log_start_offset)))
                continue
            try:
                lso = lg.last_stable_offset
                bound = (lso if committed else None if to_log_end or not lg.replicated
                         else lg.high_watermark)
                read = _read_partition(lg, w.offset, min(w.max_bytes, budget), w.max_bytes,
                                       convert, bound)
                aborted = (lg.aborted_transactions(read.first_offset, lso)
                           if committed and isinstance(read, FetchSlice) and read.length
                           else None)
            except OffsetOutOfRangeError as exc:
                marks = (_mark(exc.log_end_offset), _mark(exc.log_start_offset))
                out.append(_Read(exc.code, None, marks))
                continue
            except Exception as exc:
                out.append(_Read(partition_error(exc, "read", w.topic, w.partition)))
                continue
            if isinstance(read, FetchSlice) and read.length:
                slices += 1
                if slices > MAX_OPEN_SLICES:
                    read = _in_memory(read)
            out.append(_Read(0, read, None, lso, aborted))
            budget -= read.length
        return out

    def _response(self, wanted: list[_Wanted], results: list[_Read]) -> Any:
        R = FetchResponse
        PD = R.FetchableTopicResponse.PartitionData
        by_topic: dict[str, list] = {}
        for w, (error, slc, marks, lso, aborted) in zip(wanted, results):
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
                    self.metrics.fetched(w.topic, slc.length)
            elif marks is not None:
                hw, ls = marks
            by_topic.setdefault(w.topic, []).append(
                PD(partition_index=w.partition, error_code=error, high_watermark=hw,
                   last_stable_offset=lso if lso >= 0 else hw, log_start_offset=ls,
                   aborted_transactions=None if aborted is None else [
                       PD.AbortedTransaction(producer_id=a.producer_id,
                                             first_offset=a.first_offset) for a in aborted],
                   records=records)
            )
        return R(throttle_time_ms=0, error_code=0, session_id=0,
                 responses=[R.FetchableTopicResponse(topic=t, partitions=p)
                            for t, p in by_topic.items()])


def _read_partition(lg: Log, offset: int, max_bytes: int, convert_max_bytes: int,
                    convert: int | None, max_offset: int | None) -> FetchSlice | _Converted:
    """Blocking: one partition's slice, down-converted to magic ``convert`` when that is not
    None; ``max_offset`` (a consumer of a replicated log: the high watermark) bounds it."""
    # Log.read returns the first batch whole even above the limit (KIP-74), so a consumer is
    # never stuck behind a large batch.
    slc = lg.read(offset, max(1, max_bytes), max_offset)
    if convert is not None and slc.length:
        with slc:
            data = v2_to_legacy(slc.read(), convert, max_bytes=convert_max_bytes)
        return _Converted(data, slc.high_watermark, slc.log_start_offset)
    return slc


def _in_memory(slc: FetchSlice) -> _Converted:
    """Blocking: the slice's bytes, its descriptor closed (past ``MAX_OPEN_SLICES``)."""
    with slc:
        return _Converted(slc.read(), slc.high_watermark, slc.log_start_offset)


def _close(results: list[_Read]) -> None:
    for read in results:
        if read.data is not None:
            read.data.close()


def _mark(offset: int | None) -> int:
    return -1 if offset is None else offset
