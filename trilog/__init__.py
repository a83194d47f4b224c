"""trilog: Kafka's commit-log design in Python on Trio.

    async with trilog.open_producer(bootstrap_servers="127.0.0.1:9092") as producer:
        await producer.send_and_wait("events", value=b"hello")
    async with trilog.open_consumer("events", group_id="app",
                                    bootstrap_servers="127.0.0.1:9092") as consumer:
        async for record in consumer:
            ...

``open_consumer_connector(group_id, topics={topic: streams}, ...)`` is the seeds' consumer
connector, with streams.
"""

from trilog.client import (
    Blacklist,
    ClientSecurity,
    Consumer,
    ConsumerRebalanceFailedError,
    ConsumerRebalanceListener,
    OffsetAndMetadata,
    TopicPartition,
    MessageStream,
    Whitelist,
    open_consumer,
    open_consumer_connector,
    EARLIEST,
    LATEST,
    BufferFullError,
    ConsumerRecord,
    Delivery,
    DeliveryTimeoutError,
    FetchedRecords,
    ProducerClosedError,
    RecordMetadata,
    open_admin,
    open_producer,
    open_simple_consumer,
)
from trilog.errors import ApiError, ProtocolError, TrilogError

__version__ = "0.1.0"

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
