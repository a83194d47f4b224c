"""The producer (seeds 001, 002), in its parts:

- ``_config.py``: ``ProducerConfig``, the one declaration of the settings, checked once,
  and ``ProducerOptions``, the same names for type checkers;
- ``_accumulator.py``: ``RecordAccumulator``, records into per-partition batches,
  ``buffer_memory``, linger and batch size, splitting a batch the broker found too large,
  outcomes;
- ``_sender.py``: ``Sender``, the task that groups ready batches by leader into Produce
  requests, keeps the in-flight limits, retries and times out, and turns answers into
  outcomes;
- ``_idempotence.py``: ``Idempotence``, the producer id and epoch and the sequence numbers;
- ``_transactions.py``: ``TransactionManager``, a transactional producer's state (Kafka's
  states), the partitions and offsets it adds to a transaction, its coordinator requests;
- ``_producer.py``: the public ``Producer`` and ``open_producer``, which wire them together;
- ``_batch.py``, ``_delivery.py``, ``_errors.py``, ``_statistics.py``: the batch, the
  ``Delivery`` and ``RecordMetadata`` an application gets, the errors, the counters;
- ``_partitioner.py``: where a record goes (murmur2 for keys, sticky for the rest).

Imports point one way: the producer module imports the parts, the sender the accumulator,
the accumulator the transactions, the transactions the idempotence; none imports back.
"""

from trilog.client.producer._batch import Headers
from trilog.client.producer._config import (
    MAX_RETRIES,
    ProducerConfig,
    ProducerOptions,
    Serializer,
    producer_guarantees,
)
from trilog.client.producer._delivery import Delivery, OnDelivery, RecordMetadata
from trilog.client.producer._errors import (
    AbortableTransactionError,
    BufferFullError,
    DeliveryTimeoutError,
    ProducerClosedError,
    TransactionAbortedError,
    TransactionStateError,
)
from trilog.client.producer._partitioner import (
    DefaultPartitioner,
    Partitioner,
    murmur2,
    partition_for_key,
)
from trilog.client.producer._producer import Producer, open_producer
from trilog.client.producer._transactions import (
    PreparedTransaction,
    TransactionManager,
    TxnState,
    end_transaction,
)

__all__ = [
    "MAX_RETRIES",
    "AbortableTransactionError",
    "BufferFullError",
    "DefaultPartitioner",
    "Delivery",
    "DeliveryTimeoutError",
    "Headers",
    "OnDelivery",
    "Partitioner",
    "PreparedTransaction",
    "Producer",
    "ProducerClosedError",
    "ProducerConfig",
    "ProducerOptions",
    "RecordMetadata",
    "Serializer",
    "TransactionAbortedError",
    "TransactionManager",
    "TransactionStateError",
    "TxnState",
    "murmur2",
    "open_producer",
    "partition_for_key",
    "end_transaction",
    "producer_guarantees",
]
