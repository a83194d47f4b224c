"""trilog: Kafka's commit-log design in Python on Trio.

    async with trilog.open_producer(bootstrap_servers="127.0.0.1:9092") as producer:
        await producer.send_and_wait("events", value=b"hello")
    async with trilog.open_consumer("events", group_id="app",
                                    bootstrap_servers="127.0.0.1:9092") as consumer:
        async for record in consumer:
            ...

``open_consumer_connector(group_id, topics={topic: streams}, ...)`` is the seeds' consumer
connector, with streams.

The names below load on first use (PEP 562): ``import trilog`` costs nothing, so the
``trilog`` command answers ``--version`` at once and a tool loads only what it runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> the module it comes from
_PUBLIC = {
    **dict.fromkeys(
        ["Blacklist", "ClientSecurity", "Consumer", "ConsumerRebalanceFailedError",
         "ConsumerRebalanceListener", "OffsetAndMetadata", "TopicPartition", "MessageStream",
         "Whitelist", "open_consumer", "open_consumer_connector", "EARLIEST", "LATEST",
         "BufferFullError", "ConsumerRecord", "Delivery", "DeliveryTimeoutError",
         "FetchedRecords", "ProducerClosedError", "RecordMetadata", "open_admin",
         "open_producer", "open_simple_consumer"], "trilog.client"),
    **dict.fromkeys(["ApiError", "ProtocolError", "TrilogError"], "trilog.errors"),
}

if TYPE_CHECKING:
    from trilog.client import (
        EARLIEST,
        LATEST,
        Blacklist,
        BufferFullError,
        ClientSecurity,
        Consumer,
        ConsumerRebalanceFailedError,
        ConsumerRebalanceListener,
        ConsumerRecord,
        Delivery,
        DeliveryTimeoutError,
        FetchedRecords,
        MessageStream,
        OffsetAndMetadata,
        ProducerClosedError,
        RecordMetadata,
        TopicPartition,
        Whitelist,
        open_admin,
        open_consumer,
        open_consumer_connector,
        open_producer,
        open_simple_consumer,
    )
    from trilog.errors import ApiError, ProtocolError, TrilogError


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # the next lookup does not come here
        return value
    # ``trilog.errors``, ``trilog.client``, ...: as before, when importing trilog loaded them
    if not name.startswith("__"):
        try:
            return importlib.import_module(f"trilog.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"trilog.{name}":
                raise
    raise AttributeError(f"module 'trilog' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


__all__ = [
    "Blacklist",
    "ClientSecurity",
    "Consumer",
    "ConsumerRebalanceFailedError",
    "ConsumerRebalanceListener",
    "OffsetAndMetadata",
    "TopicPartition",
    "MessageStream",
    "Whitelist",
    "open_consumer",
    "open_consumer_connector",
    "EARLIEST",
    "LATEST",
    "ApiError",
    "BufferFullError",
    "ConsumerRecord",
    "Delivery",
    "DeliveryTimeoutError",
    "FetchedRecords",
    "ProducerClosedError",
    "ProtocolError",
    "RecordMetadata",
    "TrilogError",
    "__version__",
    "open_admin",
    "open_producer",
    "open_simple_consumer",
]
