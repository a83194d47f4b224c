"""The broker's network: listeners, connections, frames, ``sendfile``, and request dispatch.

``Network`` accepts and serves connections (one task each, Kafka's muted channel: a
connection's next request is read once its last is answered); ``RequestDispatcher`` turns a
frame into its API handler's response.  Every other part of the broker that answers requests
is an ``ApiService`` (``apis()``: API key -> handler) handed to the dispatcher; none imports
it.  ``_listeners`` parses Kafka's listener settings, makes the server's TLS context and maps
a TLS client's certificate to its principal.  This is the lowest part of the broker: it
imports none of the others.
"""

from trilog.broker.network._dispatch import (
    ApiHandler,
    ApiService,
    RawLogin,
    RequestDispatcher,
    RequestGate,
    RequestThrottle,
)
from trilog.broker.network._listeners import (
    ANONYMOUS,
    PROTOCOLS,
    SECURITY_PROTOCOL_IDS,
    Listener,
    ListenerError,
    PrincipalRules,
    inter_broker_listener,
    inter_broker_security,
    parse_listeners,
    parse_protocol_map,
    server_ssl_context,
    tls_principal,
)
from trilog.broker.network._network import (
    BoundListener,
    ConnectionBudget,
    ConnectionLimits,
    FileSlice,
    Later,
    Network,
    ResponseParts,
    Session,
    Settings,
    current_session,
)

__all__ = [
    "ANONYMOUS",
    "PROTOCOLS",
    "SECURITY_PROTOCOL_IDS",
    "ApiHandler",
    "ApiService",
    "BoundListener",
    "ConnectionBudget",
    "ConnectionLimits",
    "FileSlice",
    "Later",
    "Listener",
    "ListenerError",
    "Network",
    "PrincipalRules",
    "RawLogin",
    "RequestDispatcher",
    "RequestGate",
    "RequestThrottle",
    "ResponseParts",
    "Session",
    "Settings",
    "current_session",
    "inter_broker_listener",
    "inter_broker_security",
    "parse_listeners",
    "parse_protocol_map",
    "server_ssl_context",
    "tls_principal",
]
