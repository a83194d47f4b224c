"""The simple consumer (seed 001, "Low-level API"): fetch, multifetch, offsets_before, iterate.

Like the seed's ``SimpleConsumer`` it names topic, partition and offset itself and keeps no
state in the cluster.  A fetch goes to the partition's leader; ``multifetch`` sends one
request per broker for all the partitions that broker leads.  Records come back as
``FetchedRecords``: the fetched bytes, decoded lazily when iterated; a partial trailing batch
(normal at the end of a fetch) is dropped, and records before the asked offset (the rest of a
batch the offset falls inside) are skipped.  A record larger than ``max_bytes`` still comes
back: the broker sends the first batch whole.

A partition that does not exist (yet) is handled as Kafka's clients do.  The one-shot calls
(``fetch``, ``multifetch``, ``offsets_before``) raise ``UnknownTopicOrPartitionError`` and
create nothing, like the seed's ``SimpleConsumer.fetch``.  Following a partition (``iterate``,
``fetch_when_available``) waits for it as a Kafka consumer waits for an assigned partition:
its Metadata request creates the topic when the broker auto-creates topics
(``allow_auto_create_topics``, Kafka's ``allow.auto.create.topics``), and it asks again,
backing off, until the partition has a leader.  An illegal topic name raises at once.

``statistics()`` gives plain counters of the fetches (records and bytes fetched, latency,
lag per partition from the high watermarks the answers carry); ``FetchStatistics`` keeps
them for the group consumer too.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from itertools import chain
from typing import Any, NamedTuple, Unpack

import trio

from trilog._concurrency import YieldPacer, unwrap_exception_group
from trilog.client._client import Client, open_client
from trilog.client._isolation import (
    READ_UNCOMMITTED,
    AbortedTransaction,
    aborted_batches,
    isolation_level_id,
)
from trilog.client._metadata import Node
from trilog.client._retry import Backoff, is_retriable
from trilog.client._settings import config_from_options
from trilog.errors import (
    ApiError,
    LeaderNotAvailableError,
    NetworkError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    ProtocolError,
    RequestTimedOutError,
    TrilogError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    error_for_code,
)
from trilog.net import BrokerConnection, ClientSecurity, SecurityOptions
from trilog.protocol import ApiKey, FetchRequest, ListOffsetsRequest, Message
from trilog.records import CONTROL_MASK, Header, MemoryRecords, Record, RecordBatch

log = logging.getLogger("trilog.consumer")

#: ``offsets_before`` times: the first offset / the next offset to be written.
EARLIEST = -2
LATEST = -1

#: fetches and ListOffsets that answer retriably: six attempts within about 1.5 s
_RETRY = Backoff(first_s=0.05, max_s=1.0, max_attempts=6)
#: how long ``wait_for_partition`` waits between Metadata requests
_PARTITION_WAIT = Backoff(first_s=0.05, max_s=1.0)
#: the answers that mean "not there yet" to a consumer following a partition
_NOT_THERE_YET = (UnknownTopicOrPartitionError, LeaderNotAvailableError)


#: ``(topic, partition, offset, max_bytes)``: one partition of a fetch
FetchWanted = tuple[str, int, int, int]
#: turns a record's key or value bytes into what the application reads
Deserializer = Callable[[bytes], Any]


class ConsumerRecord(NamedTuple):
    """One record.  ``key`` and ``value`` are the record's bytes (None when absent); a simple
    consumer opened with a deserializer puts what that returns in their place."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    timestamp_type: int = 0


_new_tuple = tuple.__new__


class FetchedRecords:
    """The records one fetch returned for one partition, decoded when iterated.

    ``next_offset`` is where the following fetch should start and ``record_count`` how many
    records from ``offset`` on it holds for the application (both from batch headers,
    without decoding; control batches hold none), ``records_end`` the offset after the
    batch of its last record (``offset`` when it holds none); ``high_watermark`` is the
    partition's end when the broker answered, ``last_stable_offset`` (-1: not told) the end
    a read_committed consumer reads to.

    ``aborted``: a read_committed fetch's aborted transactions (``_isolation``): the batches
    of those transactions are skipped as if the cleaner had emptied them; ``next_offset``
    moves past them as past the control batches.
    """

    __slots__ = (
        "_cached",
        "_data",
        "_key_deserializer",
        "_skipped",
        "_value_deserializer",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "next_offset",
        "offset",
        "partition",
        "record_count",
        "records_end",
        "topic",
    )

    def __init__(self, topic: str, partition: int, offset: int,
                 data: bytes | memoryview | None, high_watermark: int, log_start_offset: int,
                 key_deserializer: Deserializer | None = None,
                 value_deserializer: Deserializer | None = None, *,
                 aborted: Sequence[AbortedTransaction] | None = None,
                 last_stable_offset: int = -1) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.high_watermark = high_watermark
        self.last_stable_offset = last_stable_offset
        self.log_start_offset = log_start_offset
        self._data = data if data is not None else b""
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer
        self._cached: list[ConsumerRecord] | None = None
        # Per batch, and only when the broker listed aborted transactions: the common
        # answer (none, or read_uncommitted) pays one test per batch below.
        skipped = self._skipped = aborted_batches(self._data, aborted) if aborted else None
        next_offset = records_end = offset
        count = 0
        for batch in MemoryRecords(self._data).batches():
            end = batch.next_offset
            if end > offset and not (skipped and batch.position in skipped):
                if type(batch) is RecordBatch:
                    if batch.attributes & CONTROL_MASK:
                        end = 0  # a transaction marker: nothing for the application
                    elif batch.base_offset >= offset:
                        count += batch.record_count  # exact, also for a compacted batch
                    else:  # the part of a batch from the asked offset
                        count += end - offset
                else:  # a legacy message set
                    count += end - max(batch.base_offset, offset)
                records_end = max(records_end, end)
            next_offset = max(next_offset, batch.next_offset)
        self.next_offset = next_offset
        self.record_count = count
        self.records_end = records_end

    @property
    def size_in_bytes(self) -> int:
        return len(self._data)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        if self._cached is not None:
            return iter(self._cached)
        # Each batch is decoded whole into a list; chain walks the lists without a Python
        # frame per record.
        return chain.from_iterable(self._decoded_batches())

    def _decoded_batches(self) -> Iterator[Iterable[ConsumerRecord]]:
        topic, partition, start = self.topic, self.partition, self.offset
        kd, vd = self._key_deserializer, self._value_deserializer
        prefix = (topic, partition)
        plain = kd is None and vd is None
        skipped = self._skipped
        for batch in MemoryRecords(self._data).batches():
            if batch.next_offset <= start:
                continue  # wholly before the asked offset: not even decoded
            if skipped and batch.position in skipped:
                continue  # a batch of an aborted transaction (read_committed)
            if plain and type(batch) is RecordBatch and batch.base_offset >= start:
                # The common case: v2 records become ConsumerRecords in the decoder itself.
                yield batch.decode(topic_partition=prefix, record_cls=ConsumerRecord)
            elif plain:
                yield [_new_tuple(ConsumerRecord, prefix + rec) for rec in batch
                       if rec.offset >= start]
            else:  # user code: deserialized one record at a time, as iterated
                yield (self._deserialized(rec) for rec in batch if rec.offset >= start)

    def _deserialized(self, rec: Record) -> ConsumerRecord:
        kd, vd, key, value = self._key_deserializer, self._value_deserializer, rec.key, rec.value
        return ConsumerRecord(self.topic, self.partition, rec.offset, rec.timestamp,
                              kd(key) if kd is not None and key is not None else key,
                              vd(value) if vd is not None and value is not None else value,
                              rec.headers, rec.timestamp_type)

    def records(self) -> list[ConsumerRecord]:
        """Every record, decoded once (and kept: ``len`` and later iterations reuse it)."""
        if self._cached is None:
            self._cached = list(chain.from_iterable(self._decoded_batches()))
        return self._cached

    def __len__(self) -> int:
        return len(self.records())

    def __repr__(self) -> str:
        return (f"FetchedRecords({self.topic}-{self.partition}, offset={self.offset}, "
                f"next_offset={self.next_offset}, bytes={len(self._data)})")


class FetchStatistics:
    """A consumer's fetch counters (plain numbers; the trio thread).  ``fetch_from_node``
    adds each answered Fetch request; ``as_dict`` gives the ``statistics()`` vocabulary."""

    __slots__ = ("bytes", "fetches", "lag", "latency_max", "latency_sum", "records")

    def __init__(self) -> None:
        self.fetches = 0
        self.records = 0
        self.bytes = 0
        self.latency_sum = 0.0
        self.latency_max = 0.0
        #: (topic, partition) -> high watermark less the next offset, as of its last fetch
        self.lag: dict[tuple[str, int], int] = {}

    def fetched(self, seconds: float, results: Iterable[FetchedRecords | ApiError],
                read_committed: bool = False) -> None:
        """Count an answered fetch; ``read_committed``: lag up to the last stable offset
        (what such a consumer can read), else up to the high watermark."""
        self.fetches += 1
        self.latency_sum += seconds
        self.latency_max = max(self.latency_max, seconds)
        for result in results:
            if isinstance(result, FetchedRecords):
                self.records += result.record_count
                self.bytes += result.size_in_bytes
                end = result.high_watermark
                if read_committed and result.last_stable_offset >= 0:
                    end = result.last_stable_offset
                if end >= 0:
                    self.lag[(result.topic, result.partition)] = max(
                        end - result.next_offset, 0)

    def as_dict(self, partitions: Iterable[tuple[str, int]] | None = None) -> dict[str, Any]:
        """The counters; ``lag`` is ``{topic: {partition: lag}}`` (of ``partitions`` only,
        when given)."""
        lags = self.lag if partitions is None else {
            tp: self.lag[tp] for tp in partitions if tp in self.lag}
        by_topic: dict[str, dict[int, int]] = {}
        for (topic, partition), n in sorted(lags.items()):
            by_topic.setdefault(topic, {})[partition] = n
        return {
            "records_consumed": self.records,
            "bytes_consumed": self.bytes,
            "fetches": self.fetches,
            "fetch_latency_avg_ms": 1000 * self.latency_sum / self.fetches if self.fetches
            else 0.0,
            "fetch_latency_max_ms": 1000 * self.latency_max,
            "lag": by_topic,
            "lag_max": max(lags.values(), default=0),
        }


@dataclass(frozen=True)
class SimpleConsumerConfig:
    """``open_simple_consumer``'s settings (see there), declared once; ``ValueError`` for a
    bad one.

    ``fetch_max_wait_ms``/``fetch_min_bytes``: a long poll's (``iterate``,
    ``fetch_when_available``); ``max_partition_fetch_bytes``: a fetch's default size per
    partition; ``allow_auto_create_topics``: following a topic that does not exist may
    create it (when the broker auto-creates topics), as Kafka's ``allow.auto.create.topics``;
    ``isolation_level``: ``"read_committed"`` reads only the records of committed
    transactions, and "latest" offsets are the last stable offsets (Kafka's
    ``isolation.level``; see ``trilog.client._isolation``).
    """

    zookeeper: str | None = None
    client_id: str = "trilog-consumer"
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    max_partition_fetch_bytes: int = 1 << 20
    allow_auto_create_topics: bool = True
    request_timeout_ms: int = 30_000
    #: how long opening tries to reach a bootstrap server (kafka-python's; then
    #: ``NoBrokersAvailableError``)
    bootstrap_timeout_ms: int = 30_000
    key_deserializer: Deserializer | None = None
    value_deserializer: Deserializer | None = None
    metadata_max_age_ms: int = 300_000
    isolation_level: str = "read_uncommitted"
    #: TLS and SASL of the consumer's connections (the security keywords; None: PLAINTEXT)
    security: ClientSecurity | None = None

    def __post_init__(self) -> None:
        self.isolation  # noqa: B018 - checks isolation_level now, before anything connects
        for name in ("max_partition_fetch_bytes", "request_timeout_ms", "bootstrap_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        for name in ("fetch_max_wait_ms", "fetch_min_bytes", "metadata_max_age_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")

    @property
    def isolation(self) -> int:
        """``isolation_level``'s id on the wire (``READ_UNCOMMITTED``/``READ_COMMITTED``)."""
        return isolation_level_id(self.isolation_level)


class SimpleConsumer:
    """See the module docstring.  Create with ``open_simple_consumer``; ``config`` holds
    its settings."""

    def __init__(self, client: Client, nursery: trio.Nursery,
                 config: SimpleConsumerConfig) -> None:
        self._client = client
        self._nursery = nursery
        self.config = config
        self._stats = FetchStatistics()

    def statistics(self) -> dict[str, Any]:
        """Counters since the consumer opened (see docs/client.md, "Statistics"):
        ``records_consumed`` and ``bytes_consumed`` (what fetches returned from the offsets
        asked, counted from batch headers when each fetch returns), ``fetches`` (Fetch
        requests answered), ``fetch_latency_avg_ms``/``fetch_latency_max_ms`` (a long poll's
        wait included), ``lag`` (``{topic: {partition: high watermark - next offset}}`` as of
        each partition's last fetch) and ``lag_max``."""
        return self._stats.as_dict()

    async def partitions_for(self, topic: str) -> tuple[int, ...]:
        return await self._client.partitions_for(topic)

    async def list_topics(self) -> list[str]:
        """Every topic of the cluster (internal ones included), from fresh metadata."""
        return sorted((await self._client.refresh_metadata()).partitions)

    # -- fetch ---------------------------------------------------------------------------------

    async def fetch(self, topic: str, partition: int = 0, offset: int = 0,
                    max_bytes: int | None = None, *, max_wait_ms: int = 0,
                    min_bytes: int = 0) -> FetchedRecords:
        """One partition's records from ``offset`` (no waiting unless ``max_wait_ms``)."""
        (result,) = await self.multifetch([(topic, partition, offset,
                                            max_bytes or self.config.max_partition_fetch_bytes)],
                                          max_wait_ms=max_wait_ms, min_bytes=min_bytes)
        return result

    async def multifetch(self, requests: Sequence[tuple[str, int, int, int]], *,
                         max_wait_ms: int = 0, min_bytes: int = 0) -> list[FetchedRecords]:
        """Fetch many ``(topic, partition, offset, max_bytes)`` at once: one request per
        leader broker.  Results come back in the order asked.  Raises the first partition's
        error (``OffsetOutOfRangeError`` carries the valid range)."""
        results: dict[int, FetchedRecords] = {}
        todo = list(range(len(requests)))
        errors: list[BaseException] = []
        tries = _RETRY.attempts()
        async for _ in tries:
            by_node = await self._leaders_of(requests, todo)
            retry: list[int] = []
            errors = []

            async def one_node(node: Node, indexes: list[int]) -> None:
                try:
                    got = await fetch_from_node(
                        self._client, node, [requests[i] for i in indexes],
                        max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                        key_deserializer=self.config.key_deserializer,
                        value_deserializer=self.config.value_deserializer,
                        statistics=self._stats, isolation_level=self.config.isolation)
                except (NetworkError, RequestTimedOutError, ProtocolError):
                    retry.extend(indexes)
                    return
                for i, outcome in zip(indexes, got):
                    if isinstance(outcome, FetchedRecords):
                        results[i] = outcome
                    else:
                        errors.append(outcome)
                        if is_retriable(outcome):
                            retry.append(i)

            with unwrap_exception_group():
                async with trio.open_nursery() as nursery:
                    for node, indexes in by_node.items():
                        nursery.start_soon(one_node, node, indexes)
            fatal = [e for e in errors if not is_retriable(e)]
            if fatal:
                raise fatal[0]
            if not retry:
                return [results[i] for i in range(len(requests))]
            todo = sorted(retry)
            if not tries.last:
                self._client.request_metadata_refresh()
        raise errors[0] if errors else NetworkError("fetch failed after retries")

    async def _leaders_of(self, requests: Sequence[tuple[str, int, int, int]],
                          todo: list[int]) -> dict[Node, list[int]]:
        """The indexes ``todo`` of ``requests`` by leader, refreshing metadata once for
        partitions without one; ``UnknownTopicOrPartitionError`` if that does not help."""
        def topic_partition(i: int) -> tuple[str, int]:
            return requests[i][0], requests[i][1]

        by_node, missing = self._client.metadata.value.group_by_leader(todo, topic_partition)
        if missing:
            for topic in {requests[i][0] for i in todo}:
                await self._client.partitions_for(topic)
            by_node, missing = self._client.metadata.value.group_by_leader(todo, topic_partition)
            if missing:
                topic, partition = topic_partition(missing[0])
                raise UnknownTopicOrPartitionError(
                    f"{topic}-{partition} does not exist or has no leader")
        return by_node

    # -- following a partition ---------------------------------------------------------------

    async def wait_for_partition(self, topic: str, partition: int = 0) -> None:
        """Wait until ``topic`` has ``partition`` with a leader, as a Kafka consumer does for
        an assigned partition (see the module docstring).  Returns at once when the
        metadata at hand already shows a leader.  Raises for an answer other than
        UNKNOWN_TOPIC_OR_PARTITION / LEADER_NOT_AVAILABLE (an illegal topic name: at once).
        """
        if self._client.metadata.value.leader_for(topic, partition) is not None:
            await trio.lowlevel.checkpoint()
            return
        told = False
        async for _ in _PARTITION_WAIT.attempts():
            meta = await self._client.refresh_metadata(
                [topic], allow_auto_create=self.config.allow_auto_create_topics)
            if meta.leader_for(topic, partition) is not None:
                return
            code = meta.topic_errors.get(topic)
            if code is not None and code not in (UnknownTopicOrPartitionError.code,
                                                 LeaderNotAvailableError.code):
                error = error_for_code(code)
                raise type(error)(f"topic {topic!r}: {error}")
            if not told:  # the wait may be long (a topic nobody has created): say so once
                told = True
                log.info("%s-%d does not exist yet or has no leader; waiting for it",
                         topic, partition)

    async def fetch_when_available(self, topic: str, partition: int, offset: int,
                                   max_bytes: int | None = None) -> FetchedRecords:
        """One long poll (``fetch_max_wait_ms``, ``fetch_min_bytes``) of a partition being
        followed: ``fetch``, except that a partition that does not exist yet, or has no
        leader for now, is waited for (``wait_for_partition``) instead of raised.
        ``iterate`` and the blocking facade's ``iterate`` are loops of it."""
        while True:
            await self.wait_for_partition(topic, partition)
            try:
                return await self.fetch(topic, partition, offset, max_bytes,
                                        max_wait_ms=self.config.fetch_max_wait_ms,
                                        min_bytes=self.config.fetch_min_bytes)
            except _NOT_THERE_YET:
                # The metadata showed a leader, the broker says otherwise (the topic was
                # deleted, the leader moved): forget the stale picture and wait again.
                await self._client.refresh_metadata([topic])

    # -- offsets ---------------------------------------------------------------------------------

    async def offsets_before(self, topic: str, partition: int = 0, time: int = LATEST,
                             max_offsets: int = 1) -> list[int]:
        """Offsets by time, as the seed's ``getOffsetsBefore``.

        ``time`` is ``EARLIEST``, ``LATEST`` or a timestamp in ms.  With ``max_offsets=1``:
        ``[the first offset whose record timestamp is >= time]`` (ListOffsets v1+; ``[]``
        if no record is that recent).  With more: the segment start offsets before ``time``,
        newest first (ListOffsets v0, Kafka 0.8's answer).
        """
        return await list_offsets(self._client, topic, partition, time, max_offsets,
                                  isolation_level=self.config.isolation)

    # -- iterate -----------------------------------------------------------------------------------

    def iterate(self, topic: str, partition: int = 0, offset: int = 0, *,
                max_bytes: int | None = None) -> PartitionIterator:
        """Follow a partition from ``offset``: long-poll fetches (``fetch_max_wait_ms``,
        ``fetch_min_bytes``), the next one in flight while the caller works on the current
        records.  Ends only when the caller stops iterating (or on an error).  A partition
        that does not exist yet is waited for (see the module docstring).

        ``async for record in consumer.iterate(...)``; leaving the loop (``break``, an
        exception) stops the prefetch task at once.  ``async with consumer.iterate(...) as
        records`` makes that explicit.
        """
        return PartitionIterator(self, topic, partition, offset,
                                 max_bytes or self.config.max_partition_fetch_bytes)


async def fetch_from_node(client: Client, node: Node, wanted: Sequence[FetchWanted], *,
                          max_wait_ms: int, min_bytes: int,
                          key_deserializer: Deserializer | None = None,
                          value_deserializer: Deserializer | None = None,
                          statistics: FetchStatistics | None = None,
                          max_bytes: int | None = None,
                          isolation_level: int = READ_UNCOMMITTED,
                          ) -> list[FetchedRecords | ApiError]:
    """One Fetch request to ``node`` for each ``(topic, partition, offset, max_bytes)`` of
    ``wanted``, no retries: in order, each partition's records or its error.  Raises
    ``NetworkError``, ``RequestTimedOutError`` or ``ProtocolError`` when the request itself
    fails.  ``max_bytes`` caps the whole answer (Kafka's ``fetch.max.bytes``; the broker
    still returns a first batch larger than that).  ``isolation_level`` ``READ_COMMITTED``
    reads up to the last stable offset and skips aborted transactions (Fetch v4+: an older
    broker is an ``UnsupportedVersionError``).  ``multifetch`` and the group consumer's
    fetchers are built on it; an answered request is counted in ``statistics``."""
    R = FetchRequest
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, offset, max_bytes in wanted:
        by_topic.setdefault(topic, []).append(
            R.FetchTopic.FetchPartition(partition=partition, fetch_offset=offset,
                                        partition_max_bytes=max_bytes))
    request = R(max_wait_ms=max_wait_ms, min_bytes=min_bytes,
                max_bytes=max(min(sum(w[3] for w in wanted),
                                  max_bytes if max_bytes is not None else 1 << 62), 1),
                isolation_level=isolation_level,
                topics=[R.FetchTopic(topic=t, partitions=p) for t, p in by_topic.items()])
    conn = await client.connection(node)
    version = None
    if isolation_level:
        version = _version_from(conn, ApiKey.FETCH, R, 4, "read_committed")
    started = trio.current_time()
    response = await conn.request(request, version=version,
                                  timeout_s=client.request_timeout_s + max_wait_ms / 1000)
    seconds = trio.current_time() - started
    answers = {(t.topic, p.partition_index): p for t in response.responses for p in t.partitions}
    out: list[FetchedRecords | ApiError] = []
    for topic, partition, offset, _max in wanted:
        p = answers.get((topic, partition))
        if p is None:
            out.append(UnknownTopicOrPartitionError(f"no answer for {topic}-{partition}"))
        elif p.error_code == OffsetOutOfRangeError.code:
            start = p.log_start_offset if p.log_start_offset >= 0 else None
            out.append(OffsetOutOfRangeError(
                f"offset {offset} of {topic}-{partition} is out of range"
                + (f" {start}..{p.high_watermark}" if start is not None else
                   f" (end {p.high_watermark})"),
                log_start_offset=start, log_end_offset=p.high_watermark))
        elif p.error_code:
            err = error_for_code(p.error_code)
            out.append(type(err)(f"{topic}-{partition}: {err}"))
        elif isolation_level:
            out.append(FetchedRecords(
                topic, partition, offset, p.records, p.high_watermark, p.log_start_offset,
                key_deserializer, value_deserializer,
                aborted=[(a.producer_id, a.first_offset)
                         for a in p.aborted_transactions or ()],
                last_stable_offset=p.last_stable_offset))
        else:
            out.append(FetchedRecords(topic, partition, offset, p.records, p.high_watermark,
                                      p.log_start_offset, key_deserializer, value_deserializer))
    if statistics is not None:
        statistics.fetched(seconds, out, bool(isolation_level))
    return out


def _version_from(conn: BrokerConnection, api_key: ApiKey, message: type[Message],
                  lowest: int, why: str) -> int:
    """The highest version of ``api_key`` both sides speak, at least ``lowest`` (the first
    that can carry what ``why`` needs); ``UnsupportedVersionError`` saying so otherwise."""
    try:
        return conn.version_for(api_key, (lowest, message.MAX_VERSION))
    except UnsupportedVersionError as exc:
        raise UnsupportedVersionError(
            f"{why} needs {api_key.name} v{lowest}+: {exc}") from None


async def list_offsets(client: Client, topic: str, partition: int, time: int,
                       max_offsets: int = 1, *, isolation_level: int = READ_UNCOMMITTED
                       ) -> list[int]:
    """``SimpleConsumer.offsets_before`` (see there) on ``client``: ListOffsets to the
    partition's leader, retried while it answers retriably.  ``isolation_level``
    ``READ_COMMITTED``: LATEST is the last stable offset (ListOffsets v2+)."""
    if max_offsets > 1:
        if isolation_level:
            raise ValueError("offsets before a time (max_offsets > 1, ListOffsets v0) "
                             "cannot be read with isolation_level='read_committed'")
        p = await _list_offsets(client, topic, partition, time, max_offsets, version=0)
        return list(p.old_style_offsets)
    p = await _list_offsets(client, topic, partition, time, isolation_level=isolation_level)
    return [p.offset] if p.offset >= 0 else []


async def offset_at(client: Client, topic: str, partition: int, time: int, *,
                    isolation_level: int = READ_UNCOMMITTED) -> int:
    """The one offset ListOffsets gives for ``time`` (EARLIEST, LATEST or ms); 0 when the
    partition answers none."""
    offsets = await list_offsets(client, topic, partition, time,
                                 isolation_level=isolation_level)
    return offsets[0] if offsets else 0


async def offset_for_time(client: Client, topic: str, partition: int, time: int, *,
                          isolation_level: int = READ_UNCOMMITTED) -> tuple[int, int] | None:
    """The first offset of ``topic``-``partition`` whose timestamp is at least ``time``
    (ms), with that timestamp; None when no record is that recent."""
    p = await _list_offsets(client, topic, partition, time, isolation_level=isolation_level)
    return (p.offset, p.timestamp) if p.offset >= 0 else None


async def _list_offsets(client: Client, topic: str, partition: int, time: int,
                        max_offsets: int = 1, version: int | None = None, *,
                        isolation_level: int = READ_UNCOMMITTED) -> Any:
    """One partition's ListOffsets answer from its leader, retried while retriable."""
    R = ListOffsetsRequest
    request = R(replica_id=-1, isolation_level=isolation_level, topics=[R.ListOffsetsTopic(
        name=topic, partitions=[R.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=partition, timestamp=time, max_num_offsets=max_offsets)])])
    tries = _RETRY.attempts()
    async for _ in tries:
        node = client.metadata.value.leader_for(topic, partition)
        if node is None:
            await client.partitions_for(topic)
            node = client.metadata.value.leader_for(topic, partition)
            if node is None:
                raise UnknownTopicOrPartitionError(f"{topic}-{partition} has no leader")
        conn = await client.connection(node)
        if isolation_level:
            version = _version_from(conn, ApiKey.LIST_OFFSETS, R, 2, "read_committed")
        try:
            response = await conn.request(request, version=version)
        except (NetworkError, RequestTimedOutError):
            if tries.last:
                raise
            continue
        p = response.topics[0].partitions[0]
        if p.error_code:
            err = error_for_code(p.error_code)
            if err.retriable and not tries.last:
                client.request_metadata_refresh()
                continue
            raise type(err)(f"{topic}-{partition}: {err}")
        return p
    raise NotLeaderOrFollowerError(f"{topic}-{partition}: no leader answered")


class PartitionIterator:
    """The async iterator ``SimpleConsumer.iterate`` returns (see there).

    Not an async generator on purpose: its prefetch task lives in the consumer's nursery,
    and an abandoned iterator must stop that task when it is dropped, not whenever the
    garbage collector finalizes a suspended generator.
    """

    def __init__(self, consumer: SimpleConsumer, topic: str, partition: int, offset: int,
                 max_bytes: int) -> None:
        self._consumer = consumer
        self._args = (topic, partition, offset, max_bytes)
        self._send, self._receive = trio.open_memory_channel[FetchedRecords | TrilogError](1)
        self._scope = trio.CancelScope()
        self._records: Iterator[ConsumerRecord] = iter(())
        self._started = False
        self._pacer = YieldPacer()

    def __aiter__(self) -> PartitionIterator:
        return self

    async def __anext__(self) -> ConsumerRecord:
        if not self._started:
            self._started = True
            # The task gets what it needs, not the iterator: a dropped iterator must be
            # collectable, so that __del__ can stop the task.
            self._consumer._nursery.start_soon(_prefetch, self._consumer, self._scope,
                                               self._send, *self._args)
        while True:
            record = next(self._records, None)
            if record is not None:
                await trio.lowlevel.checkpoint_if_cancelled()
                if self._pacer.due():  # a full yield at most once a millisecond
                    await trio.lowlevel.cancel_shielded_checkpoint()
                return record
            try:
                item = await self._receive.receive()
            except trio.EndOfChannel:
                raise StopAsyncIteration from None
            if isinstance(item, BaseException):
                self.close()
                raise item
            self._records = iter(item)

    def close(self) -> None:
        """Stop prefetching (idempotent; also happens when the iterator is dropped)."""
        self._scope.cancel()

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> PartitionIterator:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        try:
            self._scope.cancel()
        except Exception:  # noqa: BLE001 - nothing to do at interpreter shutdown
            pass


async def _prefetch(consumer: SimpleConsumer, scope: trio.CancelScope,
                    send: trio.MemorySendChannel[FetchedRecords | TrilogError], topic: str,
                    partition: int, position: int,
                    max_bytes: int) -> None:
    """``PartitionIterator``'s task: the next fetch is in flight while records are used."""
    with scope:
        async with send:
            while True:
                try:
                    fetched = await consumer.fetch_when_available(topic, partition, position,
                                                                  max_bytes)
                except TrilogError as exc:
                    await send.send(exc)
                    return
                if fetched.size_in_bytes:
                    await send.send(fetched)
                position = fetched.next_offset


class SimpleConsumerOptions(SecurityOptions, total=False):
    """``open_simple_consumer``'s keyword arguments: ``SimpleConsumerConfig``'s fields (its
    ``security`` given as the security keywords), for the type checker and the facade that
    passes them on (``trilog.sync.SimpleConsumer(..., **options)``)."""

    zookeeper: str | None
    client_id: str
    fetch_max_wait_ms: int
    fetch_min_bytes: int
    max_partition_fetch_bytes: int
    allow_auto_create_topics: bool
    request_timeout_ms: int
    bootstrap_timeout_ms: int
    key_deserializer: Callable[[bytes], Any] | None
    value_deserializer: Callable[[bytes], Any] | None
    metadata_max_age_ms: int
    isolation_level: str


def open_simple_consumer(bootstrap_servers: str | list[str] | None = None,
                         **options: Unpack[SimpleConsumerOptions]
                         ) -> AbstractAsyncContextManager[SimpleConsumer]:
    """A simple consumer for the body of the ``async with`` (see the module docstring), on
    the brokers at ``bootstrap_servers`` (or found through ``zookeeper=``).  The keywords
    are ``SimpleConsumerConfig``'s, checked before anything connects (``TypeError`` for an
    unknown one, ``ValueError`` for a bad value).  ``security_protocol``, ``ssl_*``,
    ``sasl_*``: TLS and SASL, as ``open_producer``.
    """
    config = config_from_options(SimpleConsumerConfig, options, "open_simple_consumer")
    return _opened(bootstrap_servers, config)


@asynccontextmanager
async def _opened(bootstrap_servers: str | list[str] | None, config: SimpleConsumerConfig
                  ) -> AsyncIterator[SimpleConsumer]:
    with unwrap_exception_group():
        # The client's own requests never create topics: only wait_for_partition's may.
        async with open_client(bootstrap_servers, zookeeper=config.zookeeper,
                               client_id=config.client_id,
                               request_timeout_ms=config.request_timeout_ms,
                               bootstrap_timeout_ms=config.bootstrap_timeout_ms,
                               metadata_max_age_ms=config.metadata_max_age_ms,
                               allow_auto_create_topics=False,
                               security=config.security) as client:
            async with trio.open_nursery() as nursery:
                consumer = SimpleConsumer(client, nursery, config)
                try:
                    yield consumer
                finally:
                    nursery.cancel_scope.cancel()
