"""The producer's counters: plain numbers, kept where the work happens (the sender counts
what it sends and what is answered, the accumulator the records that failed)."""

from __future__ import annotations

from typing import Any


class ProducerStatistics:
    """Counters since the producer opened; ``snapshot`` names them as ``statistics()`` does."""

    __slots__ = ("batches_sent", "bytes_sent", "latency_max", "latency_sum", "record_errors",
                 "records_sent", "requests", "retries")

    def __init__(self) -> None:
        self.records_sent = 0
        self.bytes_sent = 0
        self.batches_sent = 0
        self.retries = 0
        self.record_errors = 0
        self.requests = 0  # answered Produce requests (their latency is known)
        self.latency_sum = 0.0
        self.latency_max = 0.0

    def snapshot(self, buffer_total: int, buffer_used: int) -> dict[str, Any]:
        """The counters in the vocabulary of Kafka's producer metrics (see
        ``Producer.statistics``), with the memory figures given."""
        return {
            "records_sent": self.records_sent,
            "bytes_sent": self.bytes_sent,
            "batches_sent": self.batches_sent,
            "batch_size_avg": self.bytes_sent / self.batches_sent if self.batches_sent else 0.0,
            "requests": self.requests,
            "request_latency_avg_ms":
                1000 * self.latency_sum / self.requests if self.requests else 0.0,
            "request_latency_max_ms": 1000 * self.latency_max,
            "buffer_total_bytes": buffer_total,
            "buffer_available_bytes": buffer_total - buffer_used,
            "record_errors": self.record_errors,
            "retries": self.retries,
        }
