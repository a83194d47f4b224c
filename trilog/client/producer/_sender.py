"""The sender: the producer's task that turns sealed batches into Produce requests and
their answers into outcomes (Kafka's ``Sender``).

Each round (``run``) it fails what passed its delivery deadline, seals what lingered long
enough, closes an idempotence sequence gap first if there is one, then takes the first
ready batch of each partition, groups them by the partition's leader and starts one
Produce request per broker (up to ``max_request_size`` of batches), with at most
``max_in_flight_requests_per_connection`` requests in flight per broker.  Then it sleeps
until something changes (``Wakeup``), the next linger deadline or the next retry.

- One writer task per broker (``_node_writer``) writes its requests in the order they were
  formed, so two requests holding batches of one partition reach the broker in order; a
  task per request awaits its answer, so several are in flight at once.
- Answers: a partition's error that is retriable (``NOT_LEADER_OR_FOLLOWER``, lost
  connections, timeouts, ...) asks for fresh metadata and queues the batch again after
  ``retry_backoff_ms``, until its delivery deadline or ``retries``; ``MESSAGE_TOO_LARGE``
  splits it in two (``RecordAccumulator.split``); ``DUPLICATE_SEQUENCE_NUMBER`` is an
  idempotent retry of a batch the broker has.
- Ordering: with idempotence or ``max_in_flight_requests_per_connection=1`` a partition
  has one batch in flight at a time (the accumulator mutes it), so retries keep the order.
- Partitions without a leader: their topics' metadata is refreshed, at most once per
  ``retry_backoff_ms``, by name (so that the broker may create the topics).
- Transactions: a partition's batches go once the coordinator knows the partition is in
  the transaction (``TransactionManager.send_allowed``), in requests that name the
  transactional id; after a transaction's error, or while it aborts, the batches not taken
  yet fail at the start of the round (``abort_undrained``).

Every task it starts lives in the nursery of ``run``, which the producer owns.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import trio

from trilog.client._client import Client
from trilog.client._metadata import Node
from trilog.client._retry import is_retriable
from trilog.client.producer._accumulator import RecordAccumulator, Wakeup
from trilog.client.producer._batch import ProducerBatch
from trilog.client.producer._config import ProducerConfig
from trilog.client.producer._idempotence import Idempotence
from trilog.client.producer._statistics import ProducerStatistics
from trilog.client.producer._transactions import TransactionManager
from trilog.errors import (
    DuplicateSequenceNumberError,
    MessageTooLargeError,
    NetworkError,
    RecordListTooLargeError,
    RequestTimedOutError,
    TrilogError,
    UnknownServerError,
    error_for_code,
)
from trilog.net import BrokerConnection, PendingResponse
from trilog.protocol import Message, ProduceRequest

log = logging.getLogger("trilog.producer")

#: one Produce request's worth of batches for a broker's writer, and the in-flight slot it holds
_Request = tuple[trio.Semaphore, list[ProducerBatch]]


class Sender:
    """See the module docstring.  ``run`` is the task; it never returns."""

    def __init__(self, client: Client, config: ProducerConfig,
                 accumulator: RecordAccumulator, idempotence: Idempotence,
                 statistics: ProducerStatistics, wakeup: Wakeup,
                 transactions: TransactionManager | None = None) -> None:
        self._client = client
        self._accumulator = accumulator
        self._idempotence = idempotence
        self._transactions = transactions
        self._transactional_id = config.transactional_id
        self._stats = statistics
        self._wakeup = wakeup
        self._acks = config.guarantees.acks
        self._retries = config.retries
        self._retry_backoff_s = config.retry_backoff_ms / 1000
        self._delivery_timeout_s = config.delivery_timeout_ms / 1000
        self._request_timeout_s = config.request_timeout_ms / 1000
        self._max_in_flight = config.max_in_flight_requests_per_connection
        self._max_request_size = config.max_request_size
        self._node_slots: dict[int, trio.Semaphore] = {}
        self._writers: dict[int, trio.MemorySendChannel[_Request]] = {}
        self._refreshing = False

    async def run(self) -> None:
        accumulator = self._accumulator
        async with trio.open_nursery() as nursery:
            while True:
                self._wakeup.clear()
                now = trio.current_time()
                if self._transactions is not None:
                    error = self._transactions.undrained_error()
                    if error is not None:
                        accumulator.abort_undrained(error)
                accumulator.expire(now)
                next_deadline = accumulator.seal_lingering(now)
                if self._idempotence.gap:  # before anything else is sent
                    # ... but not past the next delivery deadline: with the cluster out of
                    # reach, deliveries must still fail on time (DeliveryTimeoutError).
                    first = accumulator.first_deadline()
                    with trio.move_on_after(max(first - now, self._retry_backoff_s)):
                        await self.renew_producer_id()
                    continue
                if self._drain(nursery, now):
                    continue
                timeout = math.inf if next_deadline is None else max(next_deadline - now, 0)
                retry = accumulator.next_retry(now)
                if retry is not None:
                    timeout = min(timeout, retry - now)
                with trio.move_on_after(timeout):
                    await self._wakeup.wait()

    async def renew_producer_id(self) -> None:
        """Close an idempotence sequence gap (``Idempotence.renew``); if the cluster
        refuses a new producer id for good, fail every record and close the producer."""
        try:
            await self._idempotence.renew(self._accumulator.unsent)
        except TrilogError as exc:
            log.error("producer: cannot renew the producer id: %s; closing", exc)
            self._accumulator.fail_all(exc)

    def _drain(self, nursery: trio.Nursery, now: float) -> bool:
        """Start Produce requests for ready batches; True if any was started."""
        accumulator = self._accumulator
        sendable = accumulator.sendable(now)
        transactions = self._transactions
        if transactions is not None:  # a partition goes once it is in the transaction
            sendable = [b for b in sendable if transactions.send_allowed((b.topic, b.partition))]
        by_node, leaderless = self._client.metadata.value.group_by_leader(
            sendable, ProducerBatch.topic_partition)
        if leaderless and not self._refreshing:
            self._refreshing = True
            nursery.start_soon(self._refresh_metadata, sorted({b.topic for b in leaderless}))
        one_in_flight = self._max_in_flight == 1 or self._idempotence.enabled
        started = False
        for node, batches in by_node.items():
            slots = self._node_slots.setdefault(node.node_id,
                                                trio.Semaphore(self._max_in_flight))
            if slots.value == 0:
                continue
            request_batches: list[ProducerBatch] = []
            size = 0
            for batch in batches:
                batch_size = len(batch.sealed_data())
                if request_batches and size + batch_size > self._max_request_size:
                    break
                request_batches.append(batch)
                size += batch_size
            for batch in request_batches:
                accumulator.take(batch, mute=one_in_flight)
            slots.acquire_nowait()
            self._writer_for(nursery, node).send_nowait((slots, request_batches))
            started = True
        return started

    def _writer_for(self, nursery: trio.Nursery, node: Node
                    ) -> trio.MemorySendChannel[_Request]:
        """The queue of the task that writes ``node``'s requests, in order (see _node_writer)."""
        channel = self._writers.get(node.node_id)
        if channel is None:
            channel, receive = trio.open_memory_channel(math.inf)
            self._writers[node.node_id] = channel
            nursery.start_soon(self._node_writer, node, receive, nursery)
        return channel

    async def _refresh_metadata(self, topics: list[str]) -> None:
        """Learn the leaders of ``topics`` (named, so the broker may auto-create them)."""
        try:
            await self._client.refresh_metadata(topics)
        except TrilogError as exc:
            log.debug("metadata refresh failed: %s", exc)
        await trio.sleep(self._retry_backoff_s)  # at most one refresh per backoff
        self._refreshing = False
        self._wakeup.set()

    async def _node_writer(self, node: Node, queue: trio.MemoryReceiveChannel[_Request],
                           nursery: trio.Nursery) -> None:
        """Writes one broker's Produce requests in the order they were formed.

        Only this task writes to the broker, so two requests holding batches of one
        partition reach it in order; their responses are awaited by separate tasks, so
        several requests are in flight at once.  The broker's address is looked up for each
        request: a broker restarted on another port keeps its id and its writer.
        """
        async for slots, batches in queue:
            request = self._produce_request(batches)
            try:
                # Reaching the broker may take backoffs and connect timeouts: the batches'
                # delivery deadline bounds that wait (not the send itself: a frame cut in
                # half would poison the connection).
                conn = None
                node = self._client.metadata.value.brokers.get(node.node_id, node)
                with trio.move_on_at(min(b.deadline for b in batches)):
                    conn = await self._client.connection(node)
                if conn is None:
                    for batch in batches:
                        self._accumulator.complete(batch, error=batch.timeout_error(
                            self._delivery_timeout_s, batch.error))
                    self._finish_request(slots, batches)
                    continue
                sent_at = trio.current_time()
                pending = await conn.send_request(request, expect_response=self._acks != 0)
            except (NetworkError, RequestTimedOutError) as exc:
                self._finish_request(slots, batches, error=exc)
                continue
            if pending is None:  # acks=0: nothing comes back
                for batch in batches:
                    self._accumulator.complete(batch)
                self._finish_request(slots, batches)
                continue
            nursery.start_soon(self._await_response, conn, pending, slots, batches, sent_at)

    def _produce_request(self, batches: list[ProducerBatch]) -> Message:
        by_topic: dict[str, list[Any]] = {}
        stats = self._stats
        for batch in batches:
            by_topic.setdefault(batch.topic, []).append(
                ProduceRequest.TopicProduceData.PartitionProduceData(
                    index=batch.partition, records=batch.data))
            batch.attempts += 1
            stats.batches_sent += 1
            stats.bytes_sent += len(batch.sealed_data())
            if batch.attempts > 1:
                stats.retries += 1
            elif batch.parent is None:  # a split batch's halves carry records counted once
                stats.records_sent += len(batch.builder)
        return ProduceRequest(
            transactional_id=self._transactional_id,
            acks=self._acks, timeout_ms=int(self._request_timeout_s * 1000),
            topic_data=[ProduceRequest.TopicProduceData(name=t, partition_data=p)
                        for t, p in by_topic.items()])

    async def _await_response(self, conn: BrokerConnection, pending: PendingResponse,
                              slots: trio.Semaphore, batches: list[ProducerBatch],
                              sent_at: float) -> None:
        try:
            response = await conn.wait_response(pending, self._request_timeout_s + 5)
        except (NetworkError, RequestTimedOutError) as exc:
            self._finish_request(slots, batches, error=exc)
            return
        latency = trio.current_time() - sent_at
        stats = self._stats
        stats.requests += 1
        stats.latency_sum += latency
        stats.latency_max = max(stats.latency_max, latency)
        results = {(t.name, p.index): p for t in response.responses
                   for p in t.partition_responses}
        stale = False
        for batch in batches:
            result = results.get((batch.topic, batch.partition))
            if result is None:
                self._retry_or_fail(batch, UnknownServerError(
                    f"no answer for {batch.topic}-{batch.partition} in the produce response"))
            elif result.error_code in (0, DuplicateSequenceNumberError.code):
                # DUPLICATE_SEQUENCE_NUMBER: an idempotent retry of a batch already written.
                self._accumulator.complete(
                    batch, result.base_offset,
                    log_append_time=getattr(result, "log_append_time_ms", -1))
            else:
                error = error_for_code(result.error_code)
                error = type(error)(f"{batch.topic}-{batch.partition}: {error}")
                stale = stale or error.retriable
                self._retry_or_fail(batch, error)
        if stale:
            self._client.request_metadata_refresh()
        self._finish_request(slots, batches)

    def _finish_request(self, slots: trio.Semaphore, batches: list[ProducerBatch],
                        error: BaseException | None = None) -> None:
        """A request is over: retry or fail its batches on ``error``, free its slot."""
        if error is not None:
            for batch in batches:
                self._retry_or_fail(batch, error)
            self._client.request_metadata_refresh()
        for batch in batches:
            self._accumulator.unmute((batch.topic, batch.partition))
        slots.release()
        self._wakeup.set()

    def _retry_or_fail(self, batch: ProducerBatch, error: BaseException) -> None:
        retriable = is_retriable(error)
        now = trio.current_time()
        if retriable and now >= batch.deadline:
            self._accumulator.complete(
                batch, error=batch.timeout_error(self._delivery_timeout_s, error))
            return
        if isinstance(error, (MessageTooLargeError, RecordListTooLargeError)) and \
                len(batch.builder) > 1 and now < batch.deadline:
            self._accumulator.split(batch)
            return
        if retriable and batch.attempts <= self._retries:
            batch.error = error  # remembered for the timeout message
            batch.retry_at = now + self._retry_backoff_s
            self._accumulator.requeue(batch)
            return
        self._accumulator.complete(batch, error=error)
