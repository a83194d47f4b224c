"""The producer's settings, declared once: ``ProducerConfig``.

``open_producer(bootstrap_servers, **options)`` builds one frozen ``ProducerConfig`` from its
keywords before anything connects (``trilog.client._settings``), and every part of the
producer reads its settings from it.  The dataclass is the one list of names, types and
defaults; ``__post_init__`` checks every value once (``ValueError`` naming the setting) and
settles the delivery guarantees: ``acks`` and idempotence as Kafka 3's producer does
(``producer_guarantees``), with ``acks`` in its wire form in ``guarantees.acks``; a
``transactional_id`` (KIP-98) implies both.

``ProducerOptions`` repeats the names and types for type checkers (``Unpack`` in
``open_producer`` and ``trilog.sync.Producer``); it cannot be derived from the dataclass, so
tests/client/test_producer_settings.py keeps the two the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from trilog.client.producer._delivery import OnDelivery
from trilog.client.producer._partitioner import Partitioner
from trilog.net import ClientSecurity, SecurityOptions
from trilog.records import codec_for_name

#: turns what the application sends as a key or value into bytes
Serializer = Callable[[Any], bytes]

#: ``retries``' default: as many as ``delivery_timeout_ms`` allows (Kafka's ``MAX_VALUE``)
MAX_RETRIES = 2_147_483_647


def producer_guarantees(acks: int | str | None, enable_idempotence: bool | None,
                        retries: int = MAX_RETRIES, transactional: bool = False
                        ) -> tuple[int | str, bool, bool]:
    """``(acks, enable_idempotence, idempotence_explicit)`` as Kafka 3's producer settles
    them: both unset means ``acks="all"`` with idempotence; ``enable_idempotence=True``
    alone sets ``acks="all"``; an explicit ``acks`` of 0 or 1, or ``retries=0``, turns the
    default idempotence off, and conflicts with an explicit ``enable_idempotence=True``
    (``ValueError``, as is an ``acks`` other than 0, 1, -1 and ``"all"``).  A
    ``transactional`` producer is idempotent with ``acks="all"``: an explicit setting that
    says otherwise is a ``ValueError``."""
    if acks is not None and acks not in (-1, 0, 1) and acks != "all":
        raise ValueError(f"acks must be 0, 1, -1 or 'all', not {acks!r}")
    strong = acks is None or acks in (-1, "all")
    if transactional:
        if enable_idempotence is False:
            raise ValueError("transactional_id needs idempotence: it conflicts with "
                             "enable_idempotence=False (as in Kafka)")
        if not strong:
            raise ValueError(f"transactional_id needs acks='all', not acks={acks!r} "
                             "(as in Kafka)")
        if retries < 1:
            raise ValueError("transactional_id needs retries >= 1 (as in Kafka)")
        return "all", True, True
    if enable_idempotence is None:
        return ("all" if acks is None else acks), strong and retries >= 1, False
    if enable_idempotence and not strong:
        raise ValueError(f"enable_idempotence=True needs acks='all', not acks={acks!r} "
                         "(as in Kafka)")
    if enable_idempotence and retries < 1:
        raise ValueError("enable_idempotence=True needs retries >= 1 (as in Kafka)")
    return ("all" if acks is None else acks), enable_idempotence, True


class Guarantees(NamedTuple):
    """The delivery guarantees a ``ProducerConfig`` settles on."""

    #: what Produce requests ask for: -1 (every in-sync replica), 1 (the leader) or 0 (none)
    acks: int
    #: whether the producer starts idempotent (it may fall back; see ``explicit``)
    idempotent: bool
    #: ``enable_idempotence`` was given: against a broker without InitProducerId, the
    #: producer fails instead of falling back to no idempotence
    explicit: bool


#: settings that must be above zero, and settings that must not be below it
_POSITIVE = ("buffer_memory", "max_request_size", "delivery_timeout_ms", "request_timeout_ms",
             "max_in_flight_requests_per_connection", "metadata_max_age_ms",
             "transaction_timeout_ms", "bootstrap_timeout_ms")
_NOT_NEGATIVE = ("linger_ms", "batch_size", "retries", "retry_backoff_ms")
_CALLABLE = ("key_serializer", "value_serializer", "partitioner", "on_delivery")


@dataclass(frozen=True)
class ProducerConfig:
    """``open_producer``'s settings: Kafka's producer settings under kafka-python's names,
    with Kafka 3's defaults (see docs/client.md, "Settings").  ``ValueError`` for a bad one."""

    #: where the cluster is, when it is not ``bootstrap_servers``: ``"host:port[/chroot]"``
    zookeeper: str | None = None
    #: 0, 1, -1 or "all"; None: "all", unless ``enable_idempotence=False`` says otherwise
    acks: int | str | None = None
    linger_ms: float = 5
    batch_size: int = 65536
    buffer_memory: int = 32 << 20
    compression_type: str | None = None
    key_serializer: Serializer | None = None
    value_serializer: Serializer | None = None
    partitioner: Partitioner | None = None
    retries: int = MAX_RETRIES
    retry_backoff_ms: int = 100
    delivery_timeout_ms: int = 120_000
    request_timeout_ms: int = 30_000
    #: how long opening tries to reach a bootstrap server (kafka-python's; then
    #: ``NoBrokersAvailableError``)
    bootstrap_timeout_ms: int = 30_000
    max_in_flight_requests_per_connection: int = 5
    max_request_size: int = 1048576
    on_delivery: OnDelivery | None = None
    #: None: on with ``acks="all"`` and ``retries`` >= 1 (Kafka 3's default)
    enable_idempotence: bool | None = None
    client_id: str = "trilog-producer"
    metadata_max_age_ms: int = 300_000
    #: makes the producer transactional (KIP-98): ``init_transactions`` and the rest; one
    #: producer at a time per id (a new one fences the old)
    transactional_id: str | None = None
    #: how long the coordinator lets a transaction stay open before it aborts it
    transaction_timeout_ms: int = 60_000
    #: TLS and SASL of the producer's connections (None: PLAINTEXT)
    security: ClientSecurity | None = None

    def __post_init__(self) -> None:
        if self.transactional_id is not None and (
                not isinstance(self.transactional_id, str) or not self.transactional_id):
            raise ValueError(f"transactional_id must be a non-empty string (or None), not "
                             f"{self.transactional_id!r}")
        for name in _POSITIVE:
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)!r}")
        for name in _NOT_NEGATIVE:
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must not be negative, not {getattr(self, name)!r}")
        for name in _CALLABLE:
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise ValueError(f"{name} must be callable (or None), not "
                                 f"{type(getattr(self, name)).__name__}")
        self.codec  # noqa: B018 - checks compression_type now, before anything connects
        self.guarantees  # noqa: B018 - settles acks and idempotence now

    @cached_property
    def codec(self) -> int:
        """``compression_type``'s codec id (``trilog.records``)."""
        try:
            return codec_for_name(self.compression_type)
        except ValueError as exc:
            raise ValueError(f"compression_type: {exc}") from None

    @cached_property
    def guarantees(self) -> Guarantees:
        """``acks`` and idempotence, settled as Kafka 3's producer settles them; the one
        place ``acks`` is checked and put in its wire form."""
        acks, idempotent, explicit = producer_guarantees(
            self.acks, self.enable_idempotence, self.retries,
            transactional=self.transactional_id is not None)
        return Guarantees(-1 if acks == "all" else int(acks), idempotent, explicit)


class ProducerOptions(SecurityOptions, total=False):
    """``open_producer``'s keyword arguments (``ProducerConfig``'s fields, the security ones
    as ``SecurityOptions``), for ``Unpack`` in the openers that take them."""

    zookeeper: str | None
    acks: int | str | None
    linger_ms: float
    batch_size: int
    buffer_memory: int
    compression_type: str | None
    key_serializer: Serializer | None
    value_serializer: Serializer | None
    partitioner: Partitioner | None
    retries: int
    retry_backoff_ms: int
    delivery_timeout_ms: int
    request_timeout_ms: int
    bootstrap_timeout_ms: int
    max_in_flight_requests_per_connection: int
    max_request_size: int
    on_delivery: OnDelivery | None
    enable_idempotence: bool | None
    client_id: str
    metadata_max_age_ms: int
    transactional_id: str | None
    transaction_timeout_ms: int
