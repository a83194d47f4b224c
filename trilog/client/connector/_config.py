"""The seeds' consumer connector's settings, declared once: ``GroupConfig``; and what it
reads, given apart: ``ConnectorSubscription``.

``open_consumer_connector(group_id, topics=... | topic_filter=..., **options)`` builds one
``GroupConfig`` from its keywords (``trilog.client._settings.config_from_options``) and one
``ConnectorSubscription`` from the rest, both checked before anything connects; the
connectors and their openers read what they need from them, and the values derived from
several settings (the coordination mode, where offsets go, the client id) are computed here
and nowhere else.  ``ConsumerOptions`` says the same keywords to a type checker (a test
keeps it and ``GroupConfig`` the same).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trilog.client._assignment import TopicFilter
from trilog.client._isolation import isolation_level_id
from trilog.client._simple_consumer import EARLIEST, LATEST
from trilog.client.consumer import ConsumerRebalanceListener
from trilog.net import ClientSecurity, SecurityOptions


@dataclass(frozen=True)
class ConnectorSubscription:
    """What a connector reads: its group, and ``topics`` (``{topic: number of streams}``)
    or a ``topic_filter`` (over ``GroupConfig.num_streams`` streams), exactly one."""

    group_id: str
    topics: dict[str, int] | None = None
    topic_filter: TopicFilter | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.group_id, str) or not self.group_id:
            raise ValueError("group_id must be a non-empty string")
        if (self.topics is None) == (self.topic_filter is None):
            raise ValueError("give exactly one of topics and topic_filter")
        if self.topics is not None and any(n < 1 for n in self.topics.values()):
            raise ValueError("topics maps each topic to its number of streams (at least 1)")


@dataclass(frozen=True)
class GroupConfig:
    """``open_consumer_connector``'s settings (see there for each).  Raises ``ValueError``
    for a bad one."""

    zookeeper: str | None = None
    bootstrap_servers: str | list[str] | None = None
    num_streams: int = 1
    coordination: str | None = None
    #: told when the member's partitions change, as Kafka's consumer tells its listener
    listener: ConsumerRebalanceListener | None = None
    auto_offset_reset: str = "largest"
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    offsets_storage: str | None = None
    dual_commit_enabled: bool = False
    consumer_timeout_ms: int = -1
    rebalance_max_retries: int = 4
    rebalance_backoff_ms: int = 2000
    queued_max_chunks: int = 2
    fetch_max_bytes: int = 1 << 20
    fetch_max_wait_ms: int = 100
    client_id: str | None = None
    consumer_id: str | None = None
    zookeeper_session_timeout_ms: int = 6000
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300_000
    rebalance_timeout_ms: int | None = None
    metadata_max_age_ms: int = 300_000
    retry_backoff_ms: int = 100
    request_timeout_ms: int = 30_000
    #: "read_committed": only committed transactions' records (as ``KafkaConsumer``'s)
    isolation_level: str = "read_uncommitted"
    #: how long opening tries to reach a bootstrap server (kafka-python's; then
    #: ``NoBrokersAvailableError``)
    bootstrap_timeout_ms: int = 30_000
    #: TLS and SASL of the consumer's connections (the security keywords; None: PLAINTEXT)
    security: ClientSecurity | None = None

    def __post_init__(self) -> None:
        isolation_level_id(self.isolation_level)
        if self.coordination not in (None, "zookeeper", "broker"):
            raise ValueError("coordination must be 'zookeeper' or 'broker'")
        if self.mode == "broker":
            self._check_broker_coordination()
        else:
            if self.zookeeper is None:
                raise ValueError("the ZooKeeper consumer connector needs "
                                 "zookeeper='host:port[/chroot]'")
            if self.offsets_storage not in (None, "zookeeper", "kafka"):
                raise ValueError("offsets_storage must be 'zookeeper' or 'kafka'")
        if self.auto_offset_reset not in ("smallest", "largest", "earliest", "latest"):
            raise ValueError("auto_offset_reset must be 'smallest' or 'largest'")
        for name in ("num_streams", "auto_commit_interval_ms", "fetch_max_bytes",
                     "request_timeout_ms", "metadata_max_age_ms",
                     "zookeeper_session_timeout_ms", "bootstrap_timeout_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        for name in ("queued_max_chunks", "fetch_max_wait_ms", "rebalance_max_retries",
                     "rebalance_backoff_ms", "retry_backoff_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")

    def _check_broker_coordination(self) -> None:
        if self.offsets_storage not in (None, "kafka") or self.dual_commit_enabled:
            raise ValueError("a broker-coordinated group keeps its offsets in the broker "
                             "(offsets_storage='kafka')")
        if self.bootstrap_servers is None and self.zookeeper is None:
            raise ValueError("a broker-coordinated group consumer needs "
                             "bootstrap_servers=... (or zookeeper=... to find the brokers)")
        if not 0 < self.heartbeat_interval_ms < self.session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be positive and below "
                             "session_timeout_ms")
        if self.join_timeout_ms <= 0:
            raise ValueError("rebalance_timeout_ms must be positive")
        if self.max_poll_interval_ms <= 0:
            raise ValueError("max_poll_interval_ms must be positive")

    @property
    def mode(self) -> str:
        """``"zookeeper"`` (the default when ``zookeeper`` is given) or ``"broker"``."""
        if self.coordination is not None:
            return self.coordination
        return "zookeeper" if self.zookeeper is not None else "broker"

    @property
    def offsets_in_zookeeper(self) -> bool:
        """Whether commits go to ZooKeeper (the ZooKeeper connector's default, as Kafka 0.8's)."""
        return self.mode == "zookeeper" and (
            self.offsets_storage in (None, "zookeeper") or self.dual_commit_enabled)

    @property
    def offsets_in_broker(self) -> bool:
        """Whether commits go to the group's coordinator (always, with broker coordination)."""
        return self.mode == "broker" or self.offsets_storage == "kafka" or \
            self.dual_commit_enabled

    def client_name(self, group_id: str) -> str:
        """The client id the consumer's connections announce."""
        if self.client_id:
            return self.client_id
        if self.mode == "broker" and self.consumer_id:
            return self.consumer_id
        return f"trilog-{group_id}"

    @property
    def start_offset(self) -> int:
        """Where a partition without a committed offset starts: ``EARLIEST`` or ``LATEST``."""
        return EARLIEST if self.auto_offset_reset in ("smallest", "earliest") else LATEST

    @property
    def consumer_timeout_s(self) -> float:
        """How long a stream waits for a record before its iteration ends."""
        return math.inf if self.consumer_timeout_ms < 0 else self.consumer_timeout_ms / 1000

    @property
    def join_timeout_ms(self) -> int:
        """The JoinGroup rebalance timeout: ``rebalance_timeout_ms``, else
        ``max_poll_interval_ms`` (as Kafka's consumer)."""
        if self.rebalance_timeout_ms is None:
            return self.max_poll_interval_ms
        return self.rebalance_timeout_ms


class ConsumerOptions(SecurityOptions, total=False):
    """``open_consumer_connector``'s keyword arguments: ``GroupConfig``'s fields (its
    ``security`` given as the security keywords), for the type checker (its overloads type
    ``streams`` by which of ``topics`` and ``topic_filter`` is given, apart from these) and
    the facade that passes them on (``trilog.sync.ConsumerConnector``)."""

    zookeeper: str | None
    bootstrap_servers: str | list[str] | None
    num_streams: int
    coordination: str | None
    listener: ConsumerRebalanceListener | None
    auto_offset_reset: str
    enable_auto_commit: bool
    auto_commit_interval_ms: int
    offsets_storage: str | None
    dual_commit_enabled: bool
    consumer_timeout_ms: int
    rebalance_max_retries: int
    rebalance_backoff_ms: int
    queued_max_chunks: int
    fetch_max_bytes: int
    fetch_max_wait_ms: int
    client_id: str | None
    consumer_id: str | None
    zookeeper_session_timeout_ms: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_poll_interval_ms: int
    rebalance_timeout_ms: int | None
    metadata_max_age_ms: int
    retry_backoff_ms: int
    request_timeout_ms: int
    isolation_level: str
    bootstrap_timeout_ms: int
