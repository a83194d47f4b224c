"""Idempotence: the producer id and epoch, and each partition's sequence numbers (the part
of Kafka's ``TransactionManager`` an idempotent producer needs; ``_transactions`` is the
rest, and sets the id and epoch of a transactional producer here with ``start``).

- ``init_producer_id`` asks the cluster (``InitProducerId``) for a producer id and epoch;
- ``stamp`` gives a batch, as it is sealed, the id, the epoch and its partition's next
  sequence number; the broker writes a resent batch once (it answers
  ``DUPLICATE_SEQUENCE_NUMBER``, or the first offset, for a batch it has);
- a batch that fails for good under the current id leaves a gap in its partition's
  sequences (``batch_failed``), for which the broker would refuse every later batch of the
  partition; ``renew`` then starts afresh under a new producer id, as Kafka's producer does
  (by bumping its epoch), and stamps again every sealed batch not sent yet.  (A
  transactional producer aborts instead: ``rewind`` gives back the numbers of batches
  dropped unsent, and a new epoch settles the others.)

Invariants: under one producer id, the batches of a partition carry consecutive sequence
numbers in the order they were sealed (wrapping at int32's end, as the broker's do); a
batch sent once keeps its id and sequence for every retry, so that the broker recognises
it; ``gap`` holds until a renewal works.  ``enabled`` turns false only before the first
batch, when a broker without InitProducerId makes the producer fall back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import trio

from trilog.client._client import Client
from trilog.client._retry import Backoff, is_retriable
from trilog.client.producer._batch import ProducerBatch
from trilog.client.producer._config import ProducerConfig
from trilog.errors import NetworkError, RequestTimedOutError, TrilogError, error_for_code
from trilog.protocol import InitProducerIdRequest
from trilog.records._v2 import restamp_producer

log = logging.getLogger("trilog.producer")

_SEQUENCE_MOD = 1 << 31  # sequence numbers wrap at int32's end, as the broker's do


class Idempotence:
    """See the module docstring.  Use from the producer's trio run."""

    def __init__(self, client: Client, config: ProducerConfig) -> None:
        self._client = client
        self._request_timeout_s = config.request_timeout_ms / 1000
        self._retry_backoff_s = config.retry_backoff_ms / 1000
        #: whether batches are stamped (Kafka 3's default; see ``ProducerConfig.guarantees``)
        self.enabled = config.guarantees.idempotent
        self.producer_id = -1
        self.producer_epoch = -1
        #: a failed batch left a gap: a new producer id must close it before anything is sent
        self.gap = False
        self._next_sequence: dict[tuple[str, int], int] = {}

    async def init_producer_id(self) -> None:
        """Get a producer id and epoch from the cluster (``InitProducerId``), retrying
        retriable errors for up to ``request_timeout_ms``."""
        deadline = trio.current_time() + self._request_timeout_s
        async for _ in Backoff(self._retry_backoff_s, self._retry_backoff_s).attempts():
            try:
                conn = await self._client.any_connection()
                response = await conn.request(InitProducerIdRequest(
                    transactional_id=None, transaction_timeout_ms=60_000))
                if not response.error_code:
                    self.producer_id = response.producer_id
                    self.producer_epoch = response.producer_epoch
                    return
                error = error_for_code(response.error_code)
                if not error.retriable:
                    raise type(error)(f"InitProducerId: {error}")
            except (NetworkError, RequestTimedOutError) as exc:
                error = exc
            if trio.current_time() >= deadline:
                raise error

    def start(self, producer_id: int, producer_epoch: int) -> None:
        """A producer id and epoch got elsewhere (a transactional id's): sequences from 0."""
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self._next_sequence = {}
        self.gap = False

    def rewind(self, batches: list[ProducerBatch]) -> bool:
        """The sealed batches of one partition, in the order they were sealed, leave
        without being sent: the partition's next batch takes the first one's sequence
        number.  False (nothing done) if one of them was sent: the broker may have it."""
        if any(batch.attempts for batch in batches):
            return False
        first = batches[0].builder
        if first.producer_id == self.producer_id and \
                first.producer_epoch == self.producer_epoch and first.base_sequence >= 0:
            self._next_sequence[(batches[0].topic, batches[0].partition)] = \
                first.base_sequence
        return True

    def stamp(self, batch: ProducerBatch) -> None:
        """Give a batch being sealed the producer id, epoch and its first sequence number."""
        tp = (batch.topic, batch.partition)
        builder = batch.builder
        builder.producer_id, builder.producer_epoch = self.producer_id, self.producer_epoch
        builder.base_sequence = self._next_sequence.get(tp, 0)
        self._next_sequence[tp] = (builder.base_sequence + len(builder)) % _SEQUENCE_MOD

    def batch_failed(self, batch: ProducerBatch) -> bool:
        """A batch failed for good: True if that left a gap (its sequence numbers, under the
        current producer id, were never written)."""
        if self.enabled and batch.builder.producer_id == self.producer_id:
            self.gap = True
            return True
        return False

    async def renew(self, unsent: Callable[[], Iterable[ProducerBatch]]) -> None:
        """Close the gap: a new producer id, sequences afresh, and the sealed batches not
        sent yet (``unsent()``, asked once the new id is known) stamped again.  A retriable
        failure waits ``retry_backoff_ms`` and leaves the gap for the next try; any other
        is raised (fatal, as in Kafka: nothing more can be sent in order)."""
        try:
            await self.init_producer_id()
        except TrilogError as exc:
            if is_retriable(exc):
                log.warning("producer: could not renew the producer id (%s); retrying", exc)
                await trio.sleep(self._retry_backoff_s)
                return
            self.gap = False
            raise
        self.gap = False
        log.info("producer: a failed batch left a sequence gap; new producer id %d",
                 self.producer_id)
        self._next_sequence = {}
        for batch in unsent():
            if batch.attempts:
                # Sent before (the broker may have it): a retry must be recognized as one,
                # so it keeps its id and sequences.
                continue
            tp = (batch.topic, batch.partition)
            sequence = self._next_sequence.get(tp, 0)
            batch.data = restamp_producer(batch.sealed_data(), self.producer_id,
                                          self.producer_epoch, sequence)
            batch.builder.producer_id = self.producer_id
            self._next_sequence[tp] = (sequence + len(batch.builder)) % _SEQUENCE_MOD
