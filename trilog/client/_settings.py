"""An opener's keywords into its client's config: one settings table per client.

A client declares its settings once, as a frozen dataclass (``ProducerConfig``,
``AdminConfig``, ...) whose ``__post_init__`` checks them.  Its opener takes them as
``**options`` (typed for type checkers by a TypedDict that a test keeps equal to the
dataclass) and calls ``config_from_options``: the security keywords (``SecurityOptions``)
become the config's one ``security`` field, an unknown keyword is a ``TypeError`` naming the
opener, a bad value the dataclass's ``ValueError``; all before anything connects.

kafka-python's keywords that change nothing in trilog (``KAFKA_PYTHON_NO_EFFECT``) are
accepted with an ``IgnoredSettingWarning`` that says why, so that a program moved from
kafka-python runs as it is; the ones trilog cannot honour (``KAFKA_PYTHON_REFUSED``) are a
``TypeError`` that says why.
"""

from __future__ import annotations

import dataclasses
import sys
import warnings
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any, TypeVar, cast

from trilog.net import SecurityOptions, client_security

_C = TypeVar("_C")

#: the keywords that describe the connections' security, gathered into one ``ClientSecurity``
SECURITY_KEYWORDS = frozenset(SecurityOptions.__annotations__)

_VERSIONS = "trilog asks each broker which API versions it speaks"
_SOCKETS = "trilog leaves socket options to the operating system (and sets TCP_NODELAY)"
_METRICS = "trilog's clients count in statistics() instead"
_BACKOFF = "trilog reconnects with a backoff of its own (50 ms, doubling to 1 s)"

#: kafka-python's keyword -> why it changes nothing in trilog's clients
KAFKA_PYTHON_NO_EFFECT: dict[str, str] = {
    "api_version": _VERSIONS,
    "api_version_auto_timeout_ms": f"{_VERSIONS}; bootstrap_timeout_ms bounds reaching the "
                                   "cluster",
    "max_block_ms": "a send waits for room and for metadata within delivery_timeout_ms",
    "connections_max_idle_ms": "a client keeps one connection per broker while it is open",
    "reconnect_backoff_ms": _BACKOFF,
    "reconnect_backoff_max_ms": _BACKOFF,
    "send_buffer_bytes": _SOCKETS,
    "receive_buffer_bytes": _SOCKETS,
    "socket_options": _SOCKETS,
    "client_dns_lookup": "trilog connects to each address as it is given",
    "metrics_enabled": _METRICS,
    "metrics_num_samples": _METRICS,
    "metrics_sample_window_ms": _METRICS,
    "metric_reporters": _METRICS,
    "metric_group_prefix": _METRICS,
    "selector": "trilog's clients run on trio",
    "check_crcs": "trilog checks the CRC of every batch it reads",
}

#: kafka-python's keyword -> why trilog's clients cannot do what it asks
KAFKA_PYTHON_REFUSED: dict[str, str] = {
    "sasl_kerberos_service_name": "trilog logs in with PLAIN or SCRAM, not GSSAPI (Kerberos)",
    "sasl_kerberos_domain_name": "trilog logs in with PLAIN or SCRAM, not GSSAPI (Kerberos)",
    "sasl_kerberos_name": "trilog logs in with PLAIN or SCRAM, not GSSAPI (Kerberos)",
    "sasl_oauth_token_provider": "trilog logs in with PLAIN or SCRAM, not OAUTHBEARER",
    "ssl_crlfile": "pass an ssl_context that checks revocation (ssl.VERIFY_CRL_CHECK_LEAF)",
    "ssl_ciphers": "pass an ssl_context with the ciphers (SSLContext.set_ciphers)",
    "transactional_id": "trilog's producer has no transactions yet",
}


#: the name the caller used when an opener is called for a facade (``trilog.sync.Producer``
#: calls ``open_producer``): messages about the keywords name that one
called_as: ContextVar[str | None] = ContextVar("called_as", default=None)


class IgnoredSettingWarning(UserWarning):
    """A kafka-python setting was given that changes nothing in trilog (the message says
    why); ``warnings.simplefilter("ignore", IgnoredSettingWarning)`` silences it."""


def config_from_options(config: Callable[..., _C], options: Mapping[str, Any],
                        opener: str) -> _C:
    """``config(**settings, security=...)`` from an opener's ``**options`` (``config`` is a
    dataclass with a ``security`` field)."""
    opener = called_as.get() or opener
    settings = dict(options)
    security = {name: settings.pop(name) for name in SECURITY_KEYWORDS & settings.keys()}
    known = {f.name for f in dataclasses.fields(config)} - {"security"}  # type: ignore[arg-type]
    for name in sorted(settings.keys() - known):
        if name in KAFKA_PYTHON_NO_EFFECT:
            warnings.warn(f"{opener}(): {name}={settings.pop(name)!r} has no effect: "
                          f"{KAFKA_PYTHON_NO_EFFECT[name]}", IgnoredSettingWarning,
                          stacklevel=_callers_level())
        elif name in KAFKA_PYTHON_REFUSED:
            raise TypeError(f"{opener}() does not take kafka-python's {name}: "
                            f"{KAFKA_PYTHON_REFUSED[name]}")
        else:
            raise TypeError(f"{opener}() got an unexpected keyword argument {name!r}")
    return config(**settings, security=client_security(cast(SecurityOptions, security)))


def _callers_level() -> int:
    """``stacklevel`` of the first frame outside trilog: the user's call of an opener or
    of a ``trilog.sync`` facade."""
    level, frame = 1, sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("trilog"):
        frame, level = frame.f_back, level + 1
    return level
