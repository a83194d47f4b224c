"""A small HTTP/1.1 server on trio, with h11 doing the protocol (sans-I/O: h11 turns bytes
into events, this module moves the bytes).

The console serves a few people, not the internet: one task per connection, keep-alive,
GET and HEAD only (the console is read-only: a body is read and dropped, up to 64 KiB), a request head capped at
16 KiB, a connection closed after ``IDLE_TIMEOUT_S`` without a request.  A handler's
exception is logged and answered with a plain 500 page: a trace never reaches the browser.
TLS when given an ``ssl.SSLContext`` (``trio.SSLListener``).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from urllib.parse import parse_qsl, unquote, urlsplit

import h11
import trio

log = logging.getLogger("trilog.console")

#: the largest request line and headers accepted (h11's own default)
MAX_HEAD_BYTES = 16 * 1024
#: the most of a request body read (and dropped: the console only reads)
MAX_BODY_BYTES = 64 * 1024
#: a connection with no request for this long is closed
IDLE_TIMEOUT_S = 30.0
#: how long a response may take to send before the connection is dropped
SEND_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Request:
    method: str
    #: the path as sent (percent-encoded: a group id may hold a ``/``); ``segments()``
    #: decodes it
    path: str
    #: query parameters (the last one wins when repeated)
    query: dict[str, str]
    #: header names in lower case
    headers: dict[str, str]

    def segments(self) -> list[str]:
        """``/groups/a%2Fb/`` -> ``["groups", "a/b"]``."""
        return [unquote(s) for s in self.path.split("/") if s]


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[Request], Awaitable[Response]]


def parse_target(target: str) -> tuple[str, dict[str, str]]:
    """``/a%20b?x=1&y=2`` -> ``("/a%20b", {"x": "1", "y": "2"})``: the path stays encoded."""
    parts = urlsplit(target)
    return parts.path or "/", dict(parse_qsl(parts.query, keep_blank_values=True))


def plain(status: int, text: str) -> Response:
    return Response(status, text.encode(), "text/plain; charset=utf-8")


async def serve_http(handler: Handler, host: str, port: int, *,
                     ssl_context: ssl.SSLContext | None = None,
                     task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``handler`` on ``host:port`` until cancelled; ``task_status.started`` gets the
    port listened on (``port=0``: a free one)."""
    tcp = await trio.open_tcp_listeners(port, host=host)
    bound = tcp[0].socket.getsockname()[1]
    listeners: list[trio.abc.Listener[trio.abc.Stream]] = list(tcp)
    if ssl_context is not None:
        listeners = [trio.SSLListener(t, ssl_context, https_compatible=True) for t in tcp]
    task_status.started(bound)
    await trio.serve_listeners(partial(_serve_connection, handler), listeners)


async def _serve_connection(handler: Handler, stream: trio.abc.Stream) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    try:
        while True:
            with trio.move_on_after(IDLE_TIMEOUT_S):
                request = await _read_request(conn, stream)
            if request is None:
                return
            response = await _respond(handler, request)
            with trio.fail_after(SEND_TIMEOUT_S):
                await _send(conn, stream, response, head_only=request.method == "HEAD")
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()
    except h11.RemoteProtocolError as exc:
        await _refuse(conn, stream, exc)
    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
            h11.LocalProtocolError):
        pass
    finally:
        with trio.move_on_after(1) as cleanup:
            cleanup.shield = True
            await stream.aclose()


async def _read_request(conn: h11.Connection, stream: trio.abc.Stream) -> Request | None:
    """The next request (its body read and dropped), or None when the client is gone."""
    request: Request | None = None
    body = 0
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(65536)
            if not data and request is None and conn.their_state is h11.IDLE:
                return None
            conn.receive_data(bytes(data))
        elif isinstance(event, h11.Request):
            path, query = parse_target(event.target.decode("latin-1"))
            request = Request(event.method.decode("ascii", "replace").upper(), path, query,
                              {k.decode("latin-1").lower(): v.decode("latin-1")
                               for k, v in event.headers})
        elif isinstance(event, h11.Data):
            body += len(event.data)  # dropped: no route reads a body
            if body > MAX_BODY_BYTES:
                raise h11.RemoteProtocolError("request body too large", error_status_hint=413)
        elif isinstance(event, h11.EndOfMessage):
            return request
        elif isinstance(event, h11.ConnectionClosed):
            return None
        else:  # pragma: no cover - PAUSED cannot happen: each cycle is finished first
            return None


async def _respond(handler: Handler, request: Request) -> Response:
    if request.method not in ("GET", "HEAD"):
        response = plain(405, "405 Method Not Allowed: the console only reads (GET, HEAD)\n")
        response.headers.append(("Allow", "GET, HEAD"))
        return response
    try:
        return await handler(request)
    except Exception:
        log.exception("the console failed to answer %s %s", request.method, request.path)
        return plain(500, "500 Internal Server Error: the console failed to answer this "
                          "request; its log says why.\n")


async def _send(conn: h11.Connection, stream: trio.abc.Stream, response: Response, *,
                head_only: bool = False) -> None:
    headers = [("Content-Type", response.content_type),
               ("Content-Length", str(len(response.body))),
               *_SECURITY_HEADERS, *response.headers]
    data = conn.send(h11.Response(status_code=response.status, headers=headers,
                                  reason=_REASONS.get(response.status, "")))
    if not head_only and response.body:
        data = (data or b"") + (conn.send(h11.Data(data=response.body)) or b"")
    data = (data or b"") + (conn.send(h11.EndOfMessage()) or b"")
    await stream.send_all(data)


async def _refuse(conn: h11.Connection, stream: trio.abc.Stream,
                  exc: h11.RemoteProtocolError) -> None:
    """A bad request: answer its status (400, 413, 431, ...) if a response can still go."""
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    status = exc.error_status_hint
    body = f"{status} Bad Request: {exc}\n".encode()
    try:
        data = conn.send(h11.Response(status_code=status, headers=[
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))), ("Connection", "close")]))
        data = (data or b"") + (conn.send(h11.Data(data=body)) or b"")
        data += conn.send(h11.EndOfMessage()) or b""
        with trio.move_on_after(5):
            await stream.send_all(data)
        # Read a little of what the client still sends before closing: closing with unread
        # input makes the kernel reset the connection, which can lose the answer.
        with trio.move_on_after(1):
            drained = 0
            while drained < MAX_HEAD_BYTES * 4 and (chunk := await stream.receive_some(65536)):
                drained += len(chunk)
    except (h11.LocalProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
        pass


#: on every answer: nothing cached (pages may show records), no framing, and only the
#: console's own scripts and styles (a record's text can never run as code)
_SECURITY_HEADERS = [
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; "
                                "frame-ancestors 'none'; form-action 'self'"),
]

_REASONS = {200: "OK", 301: "Moved Permanently", 302: "Found", 304: "Not Modified",
            400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 413: "Content Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}
