"""Request dispatch: a frame in, its API's handler run, the response's parts out.

``RequestDispatcher.handle(frame, session)`` decodes a request frame, runs the API's handler
and returns the response as parts for the network layer (``bytes`` and file slices that go
out with ``sendfile``), ``Later`` (the answer comes once a wait is over), or ``None`` when
no response is due (Produce with acks=0).  Every request is counted (``RequestMetrics``)
and, at DEBUG, logged on ``trilog.broker.requests`` once answered.

The broker's parts serve APIs through ``ApiService``: each says which API keys it answers
with which handler (``apis()``), and the broker hands them all to the dispatcher when it
assembles itself; no part imports the dispatcher.  Two gates come in the same way: the
login a SASL listener requires (only ``before_login`` APIs until it is done, and SaslHandshake
v0's raw tokens), and the ACL check that refuses a whole request (``gate``).

Error policy, as Kafka's broker:
- a request that decodes gets a response; per-partition problems are per-partition error
  codes (the handlers' business);
- ApiVersions of an unsupported version gets the v0 fallback with error 35;
- any other unsupported version, unknown API key or undecodable body closes the connection
  (there is no way to answer in a format the client will parse), as does an ``ApiError`` a
  handler did not map to its answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

import trio

from trilog.broker._metrics import RequestMetrics, api_name, error_counts, error_name
from trilog.broker.network._network import Later, ResponseParts, Session, current_session
from trilog.errors import ApiError, ProtocolError, RemoteProtocolError, UnsupportedVersionError
from trilog.protocol import (
    API_VERSIONS,
    ApiKey,
    RequestHeader,
    api_versions_response,
    decode_request,
    encode_api_versions_fallback,
    encode_response_parts,
    peek_request_header,
)

log = logging.getLogger("trilog.broker.requests")

#: An API's handler: ``await handler(request, header)`` is its response (a message, ``Later``,
#: or None for no answer).
ApiHandler = Callable[[Any, RequestHeader], Awaitable[Any]]


class ApiService(Protocol):
    """A part of the broker that answers some APIs."""

    def apis(self) -> Mapping[int, ApiHandler]: ...


#: ``gate(api_key, version, request)``: the answer to a request its principal may not make
#: at all, or None (the ACLs' whole-request check, ``security.refused_request``).
RequestGate = Callable[[int, int, Any], Any]
#: ``raw_login(token, session)``: the answer parts of a SASL token sent bare (SaslHandshake v0).
RawLogin = Callable[[bytes, Session], Awaitable[ResponseParts]]
#: ``throttle(header, request, response, session, request_bytes, seconds)``: the response
#: to send, once the request is counted against its client's quotas (the quotas'
#: ``RequestQuotas``: it sets the throttle time in the response and mutes the session).
RequestThrottle = Callable[[RequestHeader, Any, Any, Session, int, float], Any]


class RequestDispatcher:
    """Turns request frames into responses.  Runs in the trio thread."""

    def __init__(self, services: Iterable[ApiService], *, max_request_bytes: int,
                 metrics: RequestMetrics | None = None, gate: RequestGate | None = None,
                 before_login: frozenset[int] = frozenset(),
                 raw_login: RawLogin | None = None,
                 throttle: RequestThrottle | None = None) -> None:
        handlers: dict[int, ApiHandler] = {ApiKey.API_VERSIONS: self.api_versions}
        for service in services:
            for key, handler in service.apis().items():
                if key in handlers:
                    raise ValueError(f"{_api(key)} is served twice")
                handlers[key] = handler
        self._handlers = handlers
        self.supported: dict[int, tuple[int, int]] = {
            k: API_VERSIONS[ApiKey(k)] for k in handlers}
        # Every client asks on every connection; the answer never changes.
        self._api_versions = api_versions_response(versions=self.supported)
        self._max_request = max_request_bytes
        self.metrics = metrics or RequestMetrics()
        self._gate = gate
        self._before_login = before_login
        self._raw_login = raw_login
        self._throttle = throttle

    async def handle(self, frame: memoryview, session: Session) -> ResponseParts | Later | None:
        """The response's parts (None: no response is due; ``Later``: the request is done,
        its answer comes once a wait is over).  ``session`` is the connection's (who sent
        the request, on which listener)."""
        started = time.perf_counter()
        request_bytes = len(frame) + 4
        peer = session.peer
        current_session.set(session)
        if (not session.authenticated and session.sasl is not None and session.sasl.raw
                and self._raw_login is not None):
            return await self._raw_login(bytes(frame), session)
        try:
            header, response = await self._respond(frame, session, started)
        except ProtocolError as exc:  # the connection closes: no answer
            api_key = int.from_bytes(frame[:2], "big", signed=True) if len(frame) >= 2 else -1
            self.metrics.request_refused(api_key)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s refused peer=%s request_bytes=%d: %s", api_name(api_key), peer,
                          request_bytes, exc)
            raise
        if isinstance(response, Later):
            later = response

            async def answer() -> ResponseParts | None:
                return self._answer(header, await later.result(), peer, request_bytes,
                                    started)

            return Later(answer)
        return self._answer(header, response, peer, request_bytes, started)

    def _answer(self, header: RequestHeader, response: Any, peer: str, request_bytes: int,
                started: float) -> ResponseParts | None:
        """Encode ``response`` (a message, ready parts, or None) and count it."""
        if isinstance(response, list):  # already encoded (the ApiVersions fallback)
            parts, errors = response, {UnsupportedVersionError.code: 1}
        elif response is None:
            parts, errors = None, {}
        else:
            parts = encode_response_parts(response, header.api_version, header.correlation_id)
            errors = error_counts(response)
        seconds = time.perf_counter() - started
        sent = sum(map(len, parts)) if parts else 0  # bytes and file slices have a len()
        self.metrics.request_done(header.api_key, header.api_version, seconds, request_bytes,
                                  sent, errors)
        if log.isEnabledFor(logging.DEBUG):
            _log_request(header.api_key, header.api_version, header.client_id, peer,
                         request_bytes, sent, seconds, errors)
        return parts

    async def _respond(self, frame: memoryview, session: Session,
                       started: float) -> tuple[RequestHeader, Any]:
        """``(header, response)`` of a request frame: a message, ``Later`` (its message
        comes later), None (no answer is due), or ready parts (the ApiVersions fallback)."""
        if not session.authenticated:
            header = peek_request_header(frame)
            if header.api_key not in self._before_login:
                raise RemoteProtocolError(
                    f"{_api(header.api_key)} from {session.peer} before its SASL login "
                    f"on listener {session.listener}")
        try:
            header, request = decode_request(frame, max_length=self._max_request)
        except UnsupportedVersionError:
            header = peek_request_header(frame)
            if header.api_key == ApiKey.API_VERSIONS:
                return header, [encode_api_versions_fallback(header.correlation_id,
                                                             self.supported)]
            raise RemoteProtocolError(
                f"{_api(header.api_key)} v{header.api_version} is not supported"
            ) from None
        handler = self._handlers.get(header.api_key)
        if handler is None:
            raise RemoteProtocolError(f"{_api(header.api_key)} is not served by this broker")
        if self._gate is not None:
            refusal = self._gate(header.api_key, header.api_version, request)
            if refusal is not None:
                await trio.lowlevel.checkpoint()
                return header, refusal
        try:
            response = await handler(request, header)
        except ProtocolError:
            raise
        except ApiError as exc:  # a request-level error a handler did not map
            log.warning("%s from %s failed: %s", _api(header.api_key), session.peer, exc)
            raise RemoteProtocolError(f"request failed: {exc}") from exc
        if self._throttle is not None:
            response = self._throttle(header, request, response, session, len(frame) + 4,
                                      time.perf_counter() - started)
        return header, response

    async def api_versions(self, request: Any, header: RequestHeader) -> Any:
        # No checkpoint: the answer is made once, and the connection yields between requests.
        return self._api_versions


def _log_request(api_key: int, version: int, client_id: str | None, peer: str,
                 request_bytes: int, response_bytes: int, seconds: float,
                 errors: dict[int, int]) -> None:
    """The request log's line (DEBUG on ``trilog.broker.requests``); its fields also ride on
    the record (``extra``) for a structured formatter."""
    error_text = ",".join(f"{error_name(code)}:{n}" for code, n in sorted(errors.items()))
    api = api_name(api_key)
    log.debug("%s v%d client_id=%s peer=%s request_bytes=%d response_bytes=%d time_ms=%.3f "
              "errors=%s", api, version, client_id, peer, request_bytes, response_bytes,
              seconds * 1000, error_text or "none",
              extra={"api": api, "api_version": version, "client_id": client_id, "peer": peer,
                     "request_bytes": request_bytes, "response_bytes": response_bytes,
                     "time_ms": seconds * 1000, "errors": {error_name(c): n
                                                           for c, n in errors.items()}})


def _api(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"API key {api_key}"
