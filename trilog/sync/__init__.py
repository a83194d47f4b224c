"""Blocking facades over the trio client, for scripts and Spark executors.

    with trilog.sync.Producer("127.0.0.1:9092") as producer:
        producer.send("events", b"hello").get(timeout=10)
    with trilog.sync.Consumer("events", group_id="app",
                              bootstrap_servers="127.0.0.1:9092") as consumer:
        for record in consumer: ...

Each facade runs its client in one trio loop in a background thread shared by every facade
of the process; methods are thread-safe and block the caller.  A facade created before
``fork()`` refuses to work in the child (``ForkedFacadeError``); create one in the child.
``end_transactions`` commits (or aborts) transactions a ``Producer.prepare_transaction``
left open, by their ids.  Every facade takes the client's security keywords
(``security_protocol``, ``ssl_cafile``, ``sasl_mechanism``, ...; or a ready
``ClientSecurity`` as ``security=``).
"""

from trilog.client import ClientSecurity, SecurityConfigError
from trilog.sync._facades import (
    Consumer,
    ConsumerConnector,
    Producer,
    SimpleConsumer,
    SyncDelivery,
    SyncMessageStream,
    end_transactions,
)
from trilog.sync._portal import FacadeClosedError, ForkedFacadeError

__all__ = [
    "ClientSecurity",
    "Consumer",
    "ConsumerConnector",
    "FacadeClosedError",
    "ForkedFacadeError",
    "Producer",
    "SecurityConfigError",
    "SimpleConsumer",
    "SyncDelivery",
    "SyncMessageStream",
    "end_transactions",
]
