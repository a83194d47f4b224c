"""One Kafka connection, shared by the client and by broker-to-broker traffic.

``open_connection(host, port, ...)`` connects, negotiates API versions, logs in (TLS and
SASL as ``ClientSecurity`` says) and pipelines requests matched by correlation id.  Both
``trilog.client`` and ``trilog.broker`` (the controller's channel, the replica fetchers,
a controlled shutdown) stand on it; it imports only ``trilog.protocol`` and the errors,
so neither of them needs the other.

Modules: ``_connection`` (``BrokerConnection``, ``open_connection``), ``_security``
(``ClientSecurity``: kafka-python's option names, the TLS context, JAAS text), ``_sasl``
(the client side of a SASL login: PLAIN and SCRAM).
"""

from trilog.net._connection import (
    DEFAULT_MAX_RESPONSE_BYTES,
    BrokerConnection,
    PendingResponse,
    open_connection,
)
from trilog.net._sasl import authenticate
from trilog.net._security import (
    ClientSecurity,
    SecurityConfigError,
    SecurityOptions,
    client_security,
    client_ssl_context,
    parse_jaas_config,
)

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "BrokerConnection",
    "ClientSecurity",
    "PendingResponse",
    "SecurityConfigError",
    "SecurityOptions",
    "authenticate",
    "client_security",
    "client_ssl_context",
    "open_connection",
    "parse_jaas_config",
]
