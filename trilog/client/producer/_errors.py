"""The producer's own errors (the broker's come from ``trilog.errors``).

A transactional producer also raises the broker's errors that end it for good, as Kafka's:
``ProducerFencedError`` (another producer with the same transactional id took over),
``TransactionalIdAuthorizationFailedError``, ``ClusterAuthorizationFailedError``.
"""

from __future__ import annotations

from trilog.errors import TrilogError


class BufferFullError(TrilogError):
    """``send_nowait`` found ``buffer_memory`` full."""


class DeliveryTimeoutError(TrilogError):
    """A record was not acknowledged within ``delivery_timeout_ms``."""


class ProducerClosedError(TrilogError):
    """The producer was closed or cancelled before the record was acknowledged."""


class TransactionStateError(TrilogError):
    """The transactional API was used where it cannot be (Kafka's ``IllegalStateException``):
    a producer without ``transactional_id``, a send outside a transaction, a commit without
    one begun, a second ``init_transactions``.  Nothing changed: fix the call."""


class AbortableTransactionError(TrilogError):
    """The transaction cannot commit: something in it failed (a record, its offsets, adding
    a partition; the failure is the ``__cause__``).  ``abort_transaction()``, then begin
    again: the producer is fine."""


class TransactionAbortedError(TrilogError):
    """A record's outcome: its transaction was aborted (or failed) before it was sent."""
