"""Where the brokers are: a bootstrap list, or the registrations under ZooKeeper's
``/brokers/ids`` (seed 002).  Every client-side module that starts from either uses these.

``reach_cluster`` is every opener's first contact with the cluster (kafka-python's
bootstrap): the bootstrap servers are tried in turn, round after round, until one answers
or ``bootstrap_timeout_ms`` has passed; then ``NoBrokersAvailableError`` names each server
and why it did not answer.  An opener never hangs on a wrong address.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import trio

from trilog.client._retry import Backoff
from trilog.errors import (
    BrokerUnreachableError,
    NetworkError,
    NoBrokersAvailableError,
    ProtocolError,
    TrilogError,
)
from trilog.net import ClientSecurity

if TYPE_CHECKING:  # trilog.zk imports kazoo: only a client that uses ZooKeeper pays for it
    from trilog.zk import ZooKeeper

_T = TypeVar("_T")

#: kafka-python's ``bootstrap_timeout_ms``: how long an opener tries to reach the cluster
DEFAULT_BOOTSTRAP_TIMEOUT_MS = 30_000
#: the wait between two rounds over the bootstrap servers
_ROUNDS = Backoff(first_s=0.05, max_s=1.0, jitter=0.2)


@dataclass(frozen=True)
class BrokerAddress:
    node_id: int
    host: str
    port: int


def parse_bootstrap(servers: str | list[str]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9093"`` (or a list) -> ``[("h1", 9092), ("h2", 9093)]``."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


async def reach_cluster(servers: list[tuple[str, int]],
                        attempt: Callable[[tuple[str, int], float], Awaitable[_T]], *,
                        timeout_ms: float, security: ClientSecurity | None = None,
                        rounds: Backoff = _ROUNDS) -> _T:
    """``attempt(server, deadline)`` on each bootstrap server in turn, in rounds
    (``rounds`` apart), until one returns, for at most ``timeout_ms``: its result, or
    ``NoBrokersAvailableError`` naming each server and its last failure.

    A server that cannot be reached (refused, unreachable, timed out: a broker may be
    starting) is tried again in the next round.  A round in which every server was reached
    and turned the client away (closed the connection before answering, answered with
    something that is not Kafka's protocol: a TLS or SASL listener, another program) ends
    the attempts at once, as an authentication error does: trying again would not help.
    ``attempt`` gives up by the trio time ``deadline`` (``trio.TooSlowError``); it is not
    run under a cancel scope of ours, so it may enter a context that outlives it (the
    admin's connection).  ``security`` tailors the hint of the error."""
    deadline = trio.current_time() + timeout_ms / 1000
    failures: dict[tuple[str, int], TrilogError] = {}
    failed_rounds = 0
    while trio.current_time() < deadline:
        turned_away = True  # so far in this round, by every server
        for server in servers:
            if trio.current_time() >= deadline:
                turned_away = False
                break
            try:
                return await attempt(server, deadline)
            except (NetworkError, ProtocolError) as exc:
                failures[server] = exc
                turned_away = turned_away and not isinstance(exc, BrokerUnreachableError)
            except trio.TooSlowError:  # cut by the deadline: the last real failure says more
                failures.setdefault(server, BrokerUnreachableError(
                    f"{server[0]}:{server[1]} did not answer in {timeout_ms / 1000:g} s"))
                turned_away = False
        if turned_away:
            raise NoBrokersAvailableError(_no_answer(servers, failures, None, security))
        failed_rounds += 1
        await trio.sleep_until(min(deadline,
                                   trio.current_time() + rounds.delay(failed_rounds)))
    raise NoBrokersAvailableError(_no_answer(servers, failures, timeout_ms, security))


def _no_answer(servers: list[tuple[str, int]], failures: dict[tuple[str, int], TrilogError],
               timeout_ms: float | None, security: ClientSecurity | None) -> str:
    where = ", ".join(f"{h}:{p}" for h, p in servers)
    reasons = "; ".join(str(failures[s]) if s in failures else f"{s[0]}:{s[1]} did not answer"
                        for s in servers)
    text = (f"no broker answered at {where}: {reasons}" if timeout_ms is None else
            f"no broker answered at {where} within {timeout_ms / 1000:g} s "
            f"(bootstrap_timeout_ms): {reasons}")
    if any(isinstance(f, NetworkError) and not isinstance(f, BrokerUnreachableError)
           for f in failures.values()):  # reached, then the connection was closed
        text += "; " + _closed_hint(security)
    elif any(isinstance(f, ProtocolError) for f in failures.values()):
        text += "; is that a Kafka broker's port?"
    return text


def _closed_hint(security: ClientSecurity | None) -> str:
    """Why a broker closes a new connection before answering, most of the time."""
    if security is None or not (security.tls or security.sasl):
        # What a plaintext client meets at a TLS or SASL listener.
        return ("a broker that closes the connection before answering may be a TLS or SASL "
                "listener: connect with its security_protocol (SSL, SASL_PLAINTEXT, "
                "SASL_SSL) and the ssl_*/sasl_* settings")
    return (f"a broker that closes the connection before answering may be a listener of "
            f"another protocol than security_protocol={security.protocol}, or a TLS listener "
            "that requires a client certificate (ssl_certfile, ssl_keyfile)")


async def registered_brokers(zk: ZooKeeper, ids: Iterable[str] | None = None
                             ) -> list[BrokerAddress]:
    """The brokers registered in ZooKeeper, by node id: the children ``ids`` of
    ``/brokers/ids`` (read now when not given).  A registration that is gone or malformed
    by the time it is read is left out."""
    from trilog.zk import BROKER_IDS, BrokerRegistration, NoNodeError, broker_path

    if ids is None:
        try:
            ids = await zk.get_children(BROKER_IDS)
        except NoNodeError:
            return []
    out = []
    for child in ids:
        if not child.isdigit():
            continue
        try:
            reg = BrokerRegistration.decode(int(child), await zk.get(broker_path(int(child))))
        except (NoNodeError, TrilogError):
            continue
        out.append(BrokerAddress(reg.broker_id, reg.host, reg.port))
    return sorted(out, key=lambda b: b.node_id)
