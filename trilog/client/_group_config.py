"""The settings of a group consumer, checked once: ``open_consumer``'s keyword arguments.

``open_consumer`` builds one ``GroupConfig``; the connectors and their openers read what
they need from it, and the values derived from several settings (the coordination mode,
where offsets go, the client id) are computed here and nowhere else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trilog.client._assignment import TopicFilter
from trilog.client._consumer import EARLIEST, LATEST
from trilog.net import ClientSecurity, SecurityOptions


@dataclass(frozen=True)
class GroupConfig:
    """See ``open_consumer`` for each setting.  Raises ``ValueError`` for a bad one."""

    group_id: str
    zookeeper: str | None
    bootstrap_servers: str | list[str] | None
    topics: dict[str, int] | None
    topic_filter: TopicFilter | None
    num_streams: int
    coordination: str | None
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
    #: TLS and SASL of the consumer's connections (None: PLAINTEXT)
    security: ClientSecurity | None = None

    def __post_init__(self) -> None:
        if self.coordination not in (None, "zookeeper", "broker"):
            raise ValueError("coordination must be 'zookeeper' or 'broker'")
        if self.mode == "broker":
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
        else:
            if self.zookeeper is None:
                raise ValueError("the ZooKeeper consumer connector needs "
                                 "zookeeper='host:port[/chroot]'")
            if self.offsets_storage not in (None, "zookeeper", "kafka"):
                raise ValueError("offsets_storage must be 'zookeeper' or 'kafka'")
        if (self.topics is None) == (self.topic_filter is None):
            raise ValueError("give exactly one of topics and topic_filter")
        if self.auto_offset_reset not in ("smallest", "largest", "earliest", "latest"):
            raise ValueError("auto_offset_reset must be 'smallest' or 'largest'")

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

    @property
    def client_name(self) -> str:
        """The client id the consumer's connections announce."""
        if self.client_id:
            return self.client_id
        if self.mode == "broker" and self.consumer_id:
            return self.consumer_id
        return f"trilog-{self.group_id}"

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
    """``open_consumer``'s keyword arguments but ``topics`` and ``topic_filter``, for the
    overloads that type its ``streams`` by which of those two is given."""

    zookeeper: str | None
    bootstrap_servers: str | list[str] | None
    num_streams: int
    coordination: str | None
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
