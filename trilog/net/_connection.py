"""One connection to one broker: pipelined requests matched by correlation id.

``async with open_connection(host, port) as conn:`` connects (with a timeout), negotiates
API versions (ApiVersions, with Kafka's fallback when the broker does not know our
ApiVersions version) and runs a reader task in its own nursery.  ``await conn.request(req)``
sends one request at the highest version both sides support and waits for its response;
many tasks may call it at once, and their requests share the connection.

A lost connection fails every waiting request with ``NetworkError`` (retriable); a request
that outlives its timeout fails with ``RequestTimedOutError`` and closes the connection, as
Kafka's clients do (a late response would otherwise be matched to nothing).  The timeouts are
checked by one task per connection every ``TIMEOUT_CHECK_S`` while requests wait (as Kafka's
``NetworkClient`` checks them in its poll loop), so a request costs no timer of its own; a request's bytes are
written straight to the socket when it has room, and the reader receives without trio's
socket wrapper: a request and its answer cost one trip through the scheduler each way.

An answer with a ``throttle_time_ms`` (a client quota, KIP-219) holds back the connection's
next requests for that long: the broker reads nothing from the connection meanwhile.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import socket
from contextlib import asynccontextmanager
from collections.abc import AsyncIterator
from typing import Any

import trio

from trilog._concurrency import unwrap_exception_group
from trilog.net._sasl import authenticate
from trilog.net._security import ClientSecurity
from trilog.errors import (
    AuthenticationError,
    BrokerUnreachableError,
    NetworkError,
    ProtocolError,
    RemoteProtocolError,
    RequestTimedOutError,
    UnsupportedVersionError,
    raise_for_code,
)
from trilog.protocol import (
    ApiKey,
    ApiVersionsRequest,
    FrameSplitter,
    Message,
    decode_response,
    encode_request,
    read_correlation_id,
)

log = logging.getLogger("trilog.client")

DEFAULT_MAX_RESPONSE_BYTES = 256 * 1024 * 1024
#: How often a connection looks for requests past their timeout (so they fail at most this
#: late).
TIMEOUT_CHECK_S = 0.05
#: What one read of a TLS connection takes at most.
RECEIVE_BYTES = 256 * 1024
#: Requests a connection makes before it serves its user (the version check, a login).
_OPENING_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE,
                           ApiKey.SASL_AUTHENTICATE})


class PendingResponse:
    """A request written by ``send_request``: ``wait_response`` gives its response."""

    __slots__ = ("api_key", "version", "event", "response", "error", "correlation_id",
                 "deadline", "timeout_s")

    def __init__(self, api_key: int, version: int) -> None:
        self.correlation_id = -1
        self.deadline = math.inf  # trio time; set while someone waits for the response
        self.timeout_s = 0.0
        self.api_key = api_key
        self.version = version
        self.event = trio.Event()
        self.response: Message | None = None
        self.error: BaseException | None = None


class BrokerConnection:
    """A connection to one broker.  Safe to use from many tasks at once."""

    def __init__(self, stream: trio.SocketStream | trio.SSLStream, host: str, port: int, *,
                 client_id: str, request_timeout_s: float, max_response_bytes: int,
                 security: ClientSecurity | None = None) -> None:
        self.host = host
        #: how the connection was secured (connections it leads to are secured alike)
        self.security = security
        self.port = port
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self._stream = stream
        #: TLS: bytes go through the stream (no shortcuts to the socket's descriptor)
        self._tls = isinstance(stream, trio.SSLStream)
        self._socket = (stream.transport_stream if isinstance(stream, trio.SSLStream)
                        else stream).socket
        self._max_response_bytes = max_response_bytes
        self._pending: dict[int, PendingResponse] = {}
        self._correlation = itertools.count(1)
        self._send_lock = trio.Lock()
        self._closed_error: BaseException | None = None
        self._cancel_scope = trio.CancelScope()
        self._closed_event = trio.Event()
        #: set to wake ``_watch_timeouts`` when it found nothing to watch (None: it is busy)
        self._watch_wanted: trio.Event | None = None
        #: api key -> (min, max) the broker supports; filled by ``negotiate``.
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._answered = False  # the broker answered a request
        self._served = False  # ... and one beyond ApiVersions and the login
        #: a quota throttled the last answer: send nothing before this (trio time; 0: free)
        self.throttled_until = 0.0

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port})"

    @property
    def closed(self) -> bool:
        return self._closed_error is not None

    # -- versions --------------------------------------------------------------------------

    def version_for(self, api_key: int, ours: tuple[int, int]) -> int:
        """The highest version of ``api_key`` both we (``ours``) and the broker support."""
        theirs = self.api_versions.get(api_key)
        if theirs is None:
            raise UnsupportedVersionError(
                f"broker {self.host}:{self.port} does not support {ApiKey(api_key).name}"
            )
        low, high = max(ours[0], theirs[0]), min(ours[1], theirs[1])
        if low > high:
            raise UnsupportedVersionError(
                f"no common version of {ApiKey(api_key).name}: we speak {ours[0]}-{ours[1]}, "
                f"broker {self.host}:{self.port} speaks {theirs[0]}-{theirs[1]}"
            )
        return high

    async def negotiate(self) -> None:
        for version in (2, 0):
            response = await self.request(ApiVersionsRequest(), version=version)
            if response.error_code == UnsupportedVersionError.code and version:
                continue  # the fallback answer (v0) lists what the broker speaks
            raise_for_code(response.error_code, "ApiVersions failed")
            break
        self.api_versions = {
            k.api_key: (k.min_version, k.max_version) for k in response.api_keys
        }

    # -- requests ----------------------------------------------------------------------------

    async def request(self, request: Message, *, version: int | None = None,
                      timeout_s: float | None = None, expect_response: bool = True) -> Any:
        """Send ``request`` and return its response (``None`` if ``expect_response`` is
        false, as for Produce with acks=0).  ``version`` defaults to the highest common one."""
        pending = await self.send_request(request, version=version,
                                          expect_response=expect_response)
        if pending is None:
            return None
        return await self.wait_response(pending, timeout_s)

    async def send_request(self, request: Message, *, version: int | None = None,
                           expect_response: bool = True) -> PendingResponse | None:
        """Write ``request`` now; ``wait_response`` on the result gives its response.

        Requests written by one task leave in the order it wrote them (a producer relies on
        this to keep a partition's batches in order with several requests in flight).
        """
        if self._closed_error is not None:
            raise NetworkError(f"connection to {self.host}:{self.port} is closed") \
                from self._closed_error
        if self.throttled_until:
            await self._wait_throttled()
        api_key = request.API_KEY
        if version is None:
            version = self.version_for(api_key, (request.MIN_VERSION, request.MAX_VERSION))
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        frame = encode_request(request, version, correlation_id, self.client_id)
        pending = None
        if expect_response:
            pending = PendingResponse(api_key, version)
            pending.correlation_id = correlation_id
            self._pending[correlation_id] = pending
        lock = self._send_lock
        if lock.locked():
            await lock.acquire()
        else:
            lock.acquire_nowait()
        try:
            if self._tls:
                await self._stream.send_all(frame)
            else:
                try:
                    sent = os.write(self._socket.fileno(), frame)
                except BlockingIOError:
                    sent = 0
                if sent < len(frame):
                    await self._stream.send_all(memoryview(frame)[sent:])
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            closed = self._fail(
                NetworkError(f"lost connection to {self.host}:{self.port}: {exc}"))
            if pending is None:
                raise closed from exc
        finally:
            lock.release()
        return pending

    async def _wait_throttled(self) -> None:
        """KIP-219: after an answer with a throttle time, send nothing until it is over (the
        broker reads nothing from this connection meanwhile; a request sent now would wait
        there, its timeout running)."""
        until = self.throttled_until
        if until <= trio.current_time():
            self.throttled_until = 0.0
            return
        await trio.sleep_until(until)

    async def wait_response(self, pending: PendingResponse, timeout_s: float | None = None
                            ) -> Any:
        """The response to a request written by ``send_request``."""
        timeout = self.request_timeout_s if timeout_s is None else timeout_s
        try:
            if not pending.event.is_set():
                pending.timeout_s = timeout
                pending.deadline = trio.current_time() + timeout  # see _watch_timeouts
                if self._watch_wanted is not None:
                    self._watch_wanted.set()
                await pending.event.wait()
            else:
                await trio.lowlevel.checkpoint()
        finally:
            pending.deadline = math.inf
            # A caller cancelled before the answer leaves its entry behind: the reader
            # drops the late response instead of failing on an unknown correlation id.
            if pending.event.is_set():
                self._pending.pop(pending.correlation_id, None)
        if pending.error is not None:
            raise pending.error
        return pending.response

    # -- the reader task ---------------------------------------------------------------------

    async def _watch_timeouts(self) -> None:
        """Fail the connection once a response is later than its request's timeout."""
        while True:
            await trio.sleep(TIMEOUT_CHECK_S)
            now = trio.current_time()
            watched = False
            for pending in self._pending.values():
                if pending.deadline <= now:
                    self._fail(RequestTimedOutError(
                        f"{ApiKey(pending.api_key).name} to {self.host}:{self.port} "
                        f"timed out after {pending.timeout_s:.1f} s"))
                    return
                watched = watched or pending.deadline < math.inf
            if not watched:  # an idle connection costs no wake-ups
                self._watch_wanted = trio.Event()
                await self._watch_wanted.wait()
                self._watch_wanted = None

    async def _run(self) -> None:
        """The connection's tasks: the reader and the timeout watch, until ``_fail``."""
        with self._cancel_scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_timeouts)
                await self._reader()

    async def _reader(self) -> None:
        splitter = FrameSplitter(max_frame_size=self._max_response_bytes)
        try:
            if self._tls:
                await self._read_tls(splitter)
                return
            sock = self._socket
            fd = sock.fileno()
            waited = False
            while True:
                # Large responses (fetches) are received in place: see FrameSplitter.
                target = splitter.read_buffer()
                try:
                    received = os.readv(fd, [target])
                except BlockingIOError:
                    del target
                    await trio.lowlevel.wait_readable(sock)
                    if self._closed_error is not None:
                        return  # closed while being woken: the descriptor is not ours
                    waited = True
                    continue
                del target
                if not received:
                    raise self._closed_by_broker()
                for payload in splitter.advance(received):
                    self._deliver(payload)
                if not waited:
                    await trio.lowlevel.checkpoint()  # answers keep coming: others' turn
                waited = False
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._fail(NetworkError(f"lost connection to {self.host}:{self.port}: "
                                    f"{exc.__cause__ or exc}"))
        except (NetworkError, ProtocolError) as exc:
            self._fail(exc)

    async def _read_tls(self, splitter: FrameSplitter) -> None:
        while True:
            data = await self._stream.receive_some(RECEIVE_BYTES)
            if not data:
                raise self._closed_by_broker()
            for payload in splitter.feed(data):
                self._deliver(payload)

    def _closed_by_broker(self) -> NetworkError:
        """The error of a connection the broker closed, saying when, which tells why most
        of the time: before any answer (a TLS listener closes a client that does not speak
        TLS on its first bytes), or at the first request after ApiVersions of a client
        without SASL (a SASL listener closes a client that does not log in)."""
        text = f"broker {self.host}:{self.port} closed the connection"
        if not self._answered:
            text += " during the first request"
        elif not self._served and not (self.security is not None and self.security.sasl):
            text += " at its first request after ApiVersions"
        return NetworkError(text)

    def _deliver(self, payload: bytes | bytearray) -> None:
        correlation_id = read_correlation_id(payload)
        pending = self._pending.pop(correlation_id, None)
        if pending is None:
            raise RemoteProtocolError(
                f"response with unknown correlation id {correlation_id} from "
                f"{self.host}:{self.port}"
            )
        self._answered = True
        if pending.api_key not in _OPENING_APIS:
            self._served = True
        try:
            _header, pending.response = decode_response(payload, pending.api_key, pending.version)
        except ProtocolError as exc:
            pending.error = exc
        else:
            throttle_ms = getattr(pending.response, "throttle_time_ms", 0)
            if throttle_ms and throttle_ms > 0:
                self.throttled_until = max(self.throttled_until,
                                           trio.current_time() + throttle_ms / 1000)
        pending.event.set()

    def _fail(self, error: BaseException) -> BaseException:
        """Close the connection and fail every waiting request with ``error``; returns the
        error the connection closed with (the first one)."""
        closed = self._closed_error
        if closed is None:
            closed = self._closed_error = error
            self._closed_event.set()
            log.debug("connection to %s:%d failed: %s", self.host, self.port, error)
        for pending in self._pending.values():
            if not pending.event.is_set():
                pending.error = error
                pending.event.set()
        self._pending.clear()
        self._cancel_scope.cancel()
        # Close the socket now (not at the end of the ``async with``) so a broker sees it.
        try:
            self._socket.close()
        except OSError:
            pass
        return closed

    async def wait_closed(self) -> None:
        """Return once the connection is closed (by either side, or by an error)."""
        await self._closed_event.wait()

    async def aclose(self) -> None:
        self._fail(NetworkError(f"connection to {self.host}:{self.port} was closed"))
        with trio.CancelScope(shield=True):
            # (TLS: no close_notify; _fail has closed the socket under the TLS stream)
            stream = self._stream
            await (stream.transport_stream if isinstance(stream, trio.SSLStream)
                   else stream).aclose()


@asynccontextmanager
async def open_connection(
    host: str,
    port: int,
    *,
    client_id: str = "trilog",
    connect_timeout_s: float = 10.0,
    request_timeout_s: float = 30.0,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    security: ClientSecurity | None = None,
) -> AsyncIterator[BrokerConnection]:
    """Connect to ``host:port`` (with TLS and SASL as ``security`` says), negotiate
    versions, and close on exit.  A TLS or SASL failure raises ``AuthenticationError``
    (not retriable: the same credentials would fail again)."""
    stream: trio.SocketStream | trio.SSLStream
    try:
        with trio.fail_after(connect_timeout_s):
            stream = tcp = await trio.open_tcp_stream(host, port)
            try:
                tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
            except OSError:
                pass
            if security is not None and security.tls:
                assert security.ssl_context is not None
                stream = trio.SSLStream(tcp, security.ssl_context, server_hostname=host)
                try:
                    await stream.do_handshake()
                except trio.BrokenResourceError as exc:
                    await tcp.aclose()
                    raise AuthenticationError(
                        f"TLS handshake with {host}:{port} failed: {exc.__cause__ or exc}"
                    ) from None
    except trio.TooSlowError:
        raise BrokerUnreachableError(f"connecting to {host}:{port} timed out after "
                                     f"{connect_timeout_s:.1f} s") from None
    except OSError as exc:
        raise BrokerUnreachableError(f"cannot connect to {host}:{port}: "
                                     f"{_connect_failure(exc)}") from None
    conn = BrokerConnection(stream, host, port, client_id=client_id,
                            request_timeout_s=request_timeout_s,
                            max_response_bytes=max_response_bytes, security=security)
    with unwrap_exception_group():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(conn._run)
            try:
                await conn.negotiate()
                if security is not None and security.sasl:
                    await authenticate(conn, security)
                yield conn
            finally:
                await conn.aclose()


def _connect_failure(exc: OSError) -> str:
    """Why a connection could not be made, in the system's words ("Connection refused"):
    trio reports every address it tried under one "all attempts ... failed"."""
    causes = getattr(exc.__cause__, "exceptions", ())
    reasons = [os.strerror(c.errno) for c in causes if isinstance(c, OSError) and c.errno]
    return ", ".join(dict.fromkeys(reasons)) or exc.strerror or str(exc)
