"""Quotas at the request: each answered request counted against its client's quotas, and
the throttle that follows (Kafka's ``KafkaApis`` quota calls, KIP-219).

``RequestQuotas`` is the request dispatcher's ``throttle`` hook.  For a request from
(user, client id), the user being the principal's name (``ANONYMOUS`` without a login):

- Produce: its size counts against ``producer_byte_rate``;
- a consumer's Fetch: its answer's record bytes against ``consumer_byte_rate``; a throttled
  fetch is answered at once and empty (its bytes taken back: the client asks again after
  the throttle), as Kafka's;
- every request but the inter-broker ones and the login: its handler time, less the time it
  sat parked in the fetch purgatory (``parked``), against ``request_percentage``
  (Kafka counts a request handler thread's time; trilog's handlers share the event loop, so
  a handler's time is its wall time while it was not parked).

The largest throttle time goes in the answer's ``throttle_time_ms`` (answers without the
field, such as Produce v0's, go as they are) and the connection reads nothing more for that
long after the answer (``Session.throttled_until``: the network's mute).  No quota set of a
type costs that type nothing but a dictionary look-up.
"""

from __future__ import annotations

import contextvars
from typing import Any

import trio

from trilog.broker.network import Later, Session
from trilog.broker.quotas._entity import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
)
from trilog.broker.quotas._manager import QuotaManager
from trilog.protocol import ApiKey, FetchResponse, RequestHeader

#: Seconds the request being handled spent parked (a long poll waiting for data); the
#: fetch API sets it, the request quota leaves it out.  Per task: each connection's.
parked: contextvars.ContextVar[float] = contextvars.ContextVar("trilog_parked", default=0.0)

#: Requests no client quota applies to: brokers' and the controller's among themselves,
#: and the login (Kafka exempts cluster actions; a client must be able to log in).
EXEMPT = frozenset({
    ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA,
    ApiKey.CONTROLLED_SHUTDOWN, ApiKey.WRITE_TXN_MARKERS, ApiKey.API_VERSIONS,
    ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE,
})


def user_of(principal: str) -> str:
    """The quota user of a principal (``User:alice`` -> ``alice``)."""
    return principal[5:] if principal.startswith("User:") else principal


class RequestQuotas:
    """The dispatcher's throttle hook over a ``QuotaManager`` (see the module docstring).
    Runs in the trio thread."""

    def __init__(self, manager: QuotaManager) -> None:
        self.manager = manager

    def __call__(self, header: RequestHeader, request: Any, response: Any, session: Session,
                 request_bytes: int, seconds: float) -> Any:
        manager = self.manager
        if not manager.active:  # (a parked time left meanwhile is one long poll's at most)
            return response
        waited = parked.get()
        if waited:
            parked.set(0.0)
        api = header.api_key
        if api in EXEMPT:
            return response
        follower = api == ApiKey.FETCH and request.replica_id >= 0
        fetch_quota = (api == ApiKey.FETCH and not follower
                       and manager.enabled(CONSUMER_BYTE_RATE))
        if not (manager.enabled(REQUEST_PERCENTAGE) and not follower or fetch_quota
                or api == ApiKey.PRODUCE and manager.enabled(PRODUCER_BYTE_RATE)):
            return response
        user, client = user_of(session.principal), header.client_id or ""
        now_ms = trio.current_time() * 1000
        throttles: list[tuple[int, str]] = []
        if manager.enabled(REQUEST_PERCENTAGE) and not follower:
            busy = max(seconds - waited, 0.0)
            throttles.append((manager.record(REQUEST_PERCENTAGE, user, client, busy * 100,
                                             now_ms), REQUEST_PERCENTAGE))
        if api == ApiKey.PRODUCE:
            throttles.append((manager.record(PRODUCER_BYTE_RATE, user, client, request_bytes,
                                             now_ms), PRODUCER_BYTE_RATE))
        elif fetch_quota:
            size = _fetched_bytes(response)
            throttles.append((manager.record(CONSUMER_BYTE_RATE, user, client, size, now_ms),
                              CONSUMER_BYTE_RATE))
            if max(throttles)[0] > 0:
                manager.unrecord(CONSUMER_BYTE_RATE, user, client, size, now_ms)
                response = _empty_fetch(response)
        throttle_ms, key = max(throttles)
        if throttle_ms <= 0:
            return response
        manager.throttled(key, user, client, throttle_ms)
        session.throttled_until = max(session.throttled_until,
                                      trio.current_time() + throttle_ms / 1000)
        return _with_throttle(response, throttle_ms)


def _with_throttle(response: Any, throttle_ms: int) -> Any:
    """``response`` with ``throttle_ms`` in its ``throttle_time_ms`` (a ``Later``'s once
    it is ready)."""
    if isinstance(response, Later):
        later = response

        async def throttled() -> Any:
            return _with_throttle(await later.result(), throttle_ms)

        return Later(throttled)
    if response is not None and hasattr(response, "throttle_time_ms"):
        response.throttle_time_ms = throttle_ms
    return response


def _fetched_bytes(response: Any) -> int:
    total = 0
    for topic in response.responses:
        for part in topic.partitions:
            records = part.records
            if records is None:
                continue
            total += (len(records) if isinstance(records, (bytes, bytearray, memoryview))
                      else records.length)
    return total


def _empty_fetch(response: Any) -> Any:
    """A throttled consumer's answer: no partitions (the slices read are let go)."""
    for topic in response.responses:
        for part in topic.partitions:
            close = getattr(part.records, "close", None)
            if close is not None:
                close()
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[])
