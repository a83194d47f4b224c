"""Kafka's consumer's settings, declared once: ``ConsumerConfig``.

``open_consumer(*topics, **options)`` builds one ``ConsumerConfig`` from its keywords
(``trilog.client._settings.config_from_options``) and every part of the consumer reads
what it needs from it.  The names, meanings and defaults are kafka-python's and aiokafka's.
``KafkaConsumerOptions`` says the same to a type checker (a ``TypedDict`` cannot be derived
from a dataclass for it; a test keeps the two the same).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trilog.client._assignment import check_assignors
from trilog.client._isolation import isolation_level_id
from trilog.client._simple_consumer import EARLIEST, LATEST, Deserializer
from trilog.client.consumer._structs import ConsumerRebalanceListener
from trilog.net import ClientSecurity, SecurityOptions

#: ListOffsets' time for a partition without a committed offset, by ``auto_offset_reset``
#: (None: raise ``NoOffsetForPartitionError``)
RESET_TIMES: dict[str, int | None] = {
    "earliest": EARLIEST, "smallest": EARLIEST, "latest": LATEST, "largest": LATEST,
    "none": None}


@dataclass(frozen=True)
class ConsumerConfig:
    """``open_consumer``'s settings, kafka-python's names and defaults; ``ValueError`` for
    a bad one.  See docs/consumer.md for each.

    ``partition_assignment_strategy`` is taken as a name, names, or kafka-python's assignor
    classes, and kept as protocol names.
    """

    bootstrap_servers: str | list[str] = "127.0.0.1:9092"
    group_id: str | None = None
    #: subscribe to the topics matching this regular expression (instead of ``*topics``)
    pattern: str | None = None
    listener: ConsumerRebalanceListener | None = None
    client_id: str = "trilog-consumer"
    key_deserializer: Deserializer | None = None
    value_deserializer: Deserializer | None = None
    auto_offset_reset: str = "latest"
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    fetch_min_bytes: int = 1
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 52_428_800
    max_partition_fetch_bytes: int = 1_048_576
    max_poll_records: int = 500
    max_poll_interval_ms: int = 300_000
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3000
    partition_assignment_strategy: tuple[str, ...] = ("range", "roundrobin")
    group_instance_id: str | None = None
    isolation_level: str = "read_uncommitted"
    consumer_timeout_ms: float = float("inf")
    request_timeout_ms: int = 30_000
    #: how long opening tries to reach a bootstrap server (kafka-python's; then
    #: ``NoBrokersAvailableError``)
    bootstrap_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    metadata_max_age_ms: int = 300_000
    exclude_internal_topics: bool = True
    #: TLS and SASL of the consumer's connections (the security keywords; None: PLAINTEXT)
    security: ClientSecurity | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "partition_assignment_strategy",
                           assignor_names(self.partition_assignment_strategy))
        if self.auto_offset_reset not in RESET_TIMES:
            raise ValueError("auto_offset_reset must be 'earliest', 'latest' or 'none' "
                             f"(or 'smallest'/'largest'), not {self.auto_offset_reset!r}")
        self.isolation  # noqa: B018 - checks isolation_level now, before anything connects
        if self.group_instance_id is not None and (
                not self.group_instance_id or self.group_id is None):
            raise ValueError("group_instance_id (static membership) must be a non-empty "
                             "string, with a group_id")
        if not 0 < self.heartbeat_interval_ms < self.session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be positive and below "
                             "session_timeout_ms")
        for name in ("max_poll_records", "max_poll_interval_ms", "auto_commit_interval_ms",
                     "max_partition_fetch_bytes", "fetch_max_bytes", "request_timeout_ms",
                     "metadata_max_age_ms", "bootstrap_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        for name in ("fetch_max_wait_ms", "fetch_min_bytes", "retry_backoff_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        if self.consumer_timeout_ms < 0:
            raise ValueError("consumer_timeout_ms must not be negative")
        if self.group_id is not None and not self.group_id:
            raise ValueError("group_id must not be empty (None: no group)")
        check_assignors(self.partition_assignment_strategy)

    @property
    def isolation(self) -> int:
        """``isolation_level``'s id on the wire (``trilog.client._isolation``)."""
        return isolation_level_id(self.isolation_level)

    @property
    def reset_time(self) -> int | None:
        """ListOffsets' time for a partition without a committed offset; None: raise."""
        return RESET_TIMES[self.auto_offset_reset]


def assignor_names(strategy: Any) -> tuple[str, ...]:
    """``partition_assignment_strategy`` as protocol names: a name, or a sequence of names
    or of assignor classes with a ``name`` (kafka-python's ``RoundRobinPartitionAssignor``)."""
    items = [strategy] if isinstance(strategy, str) or hasattr(strategy, "name") else \
        list(strategy)
    return tuple(item if isinstance(item, str) else str(getattr(item, "name", item))
                 for item in items)


class KafkaConsumerOptions(SecurityOptions, total=False):
    """``open_consumer``'s keyword arguments: ``ConsumerConfig``'s fields (its ``security``
    given as the security keywords), for the type checker and the facades that pass them on
    (``trilog.sync.Consumer(*topics, **options)``)."""

    bootstrap_servers: str | list[str]
    group_id: str | None
    pattern: str | None
    listener: ConsumerRebalanceListener | None
    client_id: str
    key_deserializer: Deserializer | None
    value_deserializer: Deserializer | None
    auto_offset_reset: str
    enable_auto_commit: bool
    auto_commit_interval_ms: int
    fetch_min_bytes: int
    fetch_max_wait_ms: int
    fetch_max_bytes: int
    max_partition_fetch_bytes: int
    max_poll_records: int
    max_poll_interval_ms: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    partition_assignment_strategy: Any
    group_instance_id: str | None
    isolation_level: str
    consumer_timeout_ms: float
    request_timeout_ms: int
    bootstrap_timeout_ms: int
    retry_backoff_ms: int
    metadata_max_age_ms: int
    exclude_internal_topics: bool
