"""The console: its routes, over the public clients (``open_admin``, ``open_group_admin``,
``open_simple_consumer``), so it works against any Kafka-protocol broker.

``open_console(bootstrap_servers, config, **connection)`` connects, starts the sampler and
the HTTP server in its nursery, and gives a ``Console`` (its ``url``) for the body of the
``async with``.  Each page has a JSON twin under ``/api/`` (the same dict, see ``_data``).
Errors become pages that say what went wrong, with their status: 400 for a bad parameter,
404 for an unknown topic, partition or group, 401 without a login, 403 for records in
read-only mode, 503 when the cluster does not answer; never a trace.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

import trio

from trilog._concurrency import unwrap_exception_group
from trilog.client import (
    GroupAdmin,
    SimpleConsumer,
    open_admin,
    open_group_admin,
    open_simple_consumer,
)
from trilog.console import _data, _views
from trilog.console._auth import CHALLENGE, authorized
from trilog.console._http import Request, Response, serve_http
from trilog.console._records import BadInput, NotFound, browse, parse_browse
from trilog.console._reopen import ReopeningAdmin
from trilog.console._sampler import History, run_sampler
from trilog.errors import (
    ApiError,
    GroupAuthorizationFailedError,
    GroupIdNotFoundError,
    InvalidTopicError,
    NetworkError,
    OffsetOutOfRangeError,
    TopicAuthorizationFailedError,
    TrilogError,
    UnknownTopicOrPartitionError,
)

_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".svg": "image/svg+xml", ".png": "image/png", ".txt": "text/plain; charset=utf-8"}


@dataclass(frozen=True)
class ConsoleConfig:
    """How the console serves: where, with what login, and what it shows."""

    host: str = "127.0.0.1"
    port: int = 8080
    #: show records (False: read-only mode without record browsing)
    records: bool = True
    #: ``{user: "sha256:HEX"}`` (``_auth.parse_users``): require a login; None: none
    users: dict[str, str] | None = None
    #: serve HTTPS with this context (None: plain HTTP)
    ssl_context: ssl.SSLContext | None = None
    sample_interval_s: float = 5.0
    #: how long the charts look back
    history_s: float = 900.0

    def __post_init__(self) -> None:
        if self.users is not None and self.ssl_context is None and not _loopback(self.host):
            raise ValueError("a login over plain HTTP would send passwords in the clear: "
                             "give a TLS certificate and key, or listen on loopback only")
        if not self.sample_interval_s > 0:
            raise ValueError("the sample interval must be positive")
        if not self.history_s >= self.sample_interval_s:
            raise ValueError("the history must be at least one sample interval long")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HttpError(Exception):
    def __init__(self, status: int, title: str, message: str,
                 headers: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.status, self.title, self.message = status, title, message
        self.headers = headers or []


Route = Callable[["Console", Request, list[str]], Awaitable[Response]]


class Console:
    """The running console; ``handle`` answers one request."""

    def __init__(self, config: ConsoleConfig, admins: ReopeningAdmin, groups: GroupAdmin,
                 consumer: SimpleConsumer, history: History, cluster: str) -> None:
        self.config = config
        self.admins = admins
        self.groups = groups
        self.consumer = consumer
        self.history = history
        self.cluster = cluster
        self.port = config.port
        self._static = _load_static()

    @property
    def url(self) -> str:
        scheme = "https" if self.config.ssl_context is not None else "http"
        host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
        return f"{scheme}://{host}:{self.port}/"

    async def handle(self, request: Request) -> Response:
        segments = request.segments()
        api = bool(segments) and segments[0] == "api"
        try:
            self._check_login(request)
            return await self._dispatch(request, segments[1:] if api else segments, api)
        except Exception as exc:
            error = _http_error(exc)
            if error is None:
                raise  # a bug: _http logs it and answers a plain 500
            if isinstance(exc, NetworkError):
                self.admins.invalidate()  # its connection may be the broken one
            return self._error(error, api)

    def _error(self, exc: HttpError, api: bool) -> Response:
        if api:
            body = _views.as_json({"error": exc.message, "status": exc.status})
            return Response(exc.status, body, "application/json", list(exc.headers))
        html = _views.layout(_views.error_page(exc.status, exc.title, exc.message),
                             self.cluster)
        return Response(exc.status, html.encode(), headers=list(exc.headers))

    def _check_login(self, request: Request) -> None:
        users = self.config.users
        if users is not None and authorized(users, request.headers.get("authorization")) \
                is None:
            raise HttpError(401, "Unauthorized", "log in to see the console",
                            [("WWW-Authenticate", CHALLENGE)])

    async def _dispatch(self, request: Request, segments: list[str], api: bool) -> Response:
        if not api and segments and segments[0] == "static":
            return self._static_file(segments[1:])
        route, args = _route(segments, api)
        if route is None:
            raise HttpError(404, "Not Found", f"no page at {request.path}")
        return await route(self, request, args)

    def _static_file(self, rest: list[str]) -> Response:
        name = "/".join(rest)
        body = self._static.get(name)
        if body is None:
            raise HttpError(404, "Not Found", f"no static file {name!r}")
        suffix = name[name.rfind("."):]
        return Response(200, body, _TYPES.get(suffix, "application/octet-stream"))

    def page(self, page: _views.Page) -> Response:
        return Response(200, _views.layout(page, self.cluster).encode())

    def records_allowed(self) -> None:
        if not self.config.records:
            raise HttpError(403, "Forbidden", "record browsing is off: this console runs "
                                              "read-only (--no-records)")


def _load_static() -> dict[str, bytes]:
    folder = resources.files("trilog.console").joinpath("static")
    return {f.name: f.read_bytes() for f in folder.iterdir()
            if f.is_file() and not f.name.startswith(".")}


def _http_error(exc: Exception) -> HttpError | None:
    """The page an exception is answered with (None: not one the console expects)."""
    if isinstance(exc, HttpError):
        return exc
    if isinstance(exc, BadInput):
        return HttpError(400, "Bad Request", str(exc))
    if isinstance(exc, (NotFound, UnknownTopicOrPartitionError, InvalidTopicError,
                        GroupIdNotFoundError)):
        return HttpError(404, "Not Found", str(exc))
    if isinstance(exc, OffsetOutOfRangeError):
        return HttpError(400, "Bad Request", f"offset out of range: {exc}")
    if isinstance(exc, (TopicAuthorizationFailedError, GroupAuthorizationFailedError)):
        return HttpError(403, "Forbidden", f"the console's credentials may not read this: "
                                           f"{exc}")
    if isinstance(exc, NetworkError):
        return HttpError(503, "Service Unavailable", f"the cluster did not answer: {exc}")
    if isinstance(exc, (ApiError, TrilogError)):
        return HttpError(502, "Bad Gateway", f"the cluster answered with an error: {exc}")
    return None


def _json(data: Any) -> Response:
    return Response(200, _views.as_json(data), "application/json")


# -- routes ---------------------------------------------------------------------------------


async def _overview(c: Console, r: Request, args: list[str], api: bool) -> Response:
    d = await _data.overview(await c.admins.get(), c.history)
    return _json(d) if api else c.page(_views.overview_page(d))


async def _topics(c: Console, r: Request, args: list[str], api: bool) -> Response:
    d = await _data.topics(await c.admins.get(), c.history)
    return _json(d) if api else c.page(_views.topics_page(d))


async def _topic(c: Console, r: Request, args: list[str], api: bool) -> Response:
    d = await _data.topic(await c.admins.get(), c.groups, c.history, args[0])
    return _json(d) if api else c.page(_views.topic_page(d, records=c.config.records))


async def _records(c: Console, r: Request, args: list[str], api: bool) -> Response:
    c.records_allowed()
    query = parse_browse(r.query)
    info = await _data.topic_info(await c.admins.get(), args[0])
    partition = next((p for p in info.partitions if p.partition == query.partition), None)
    if partition is None:
        raise NotFound(f"topic {args[0]!r} has no partition {query.partition} (it has "
                       f"{len(info.partitions)})")
    if partition.leader < 0:
        raise HttpError(503, "Service Unavailable", f"partition {query.partition} of "
                        f"{args[0]!r} is offline: no broker leads it now")
    d = await browse(c.consumer, args[0], query)
    return _json(d) if api else c.page(_views.records_page(d, len(info.partitions)))


async def _groups(c: Console, r: Request, args: list[str], api: bool) -> Response:
    d = await _data.groups_list(c.groups)
    return _json(d) if api else c.page(_views.groups_page(d))


async def _group(c: Console, r: Request, args: list[str], api: bool) -> Response:
    d = await _data.group(c.groups, c.history, args[0])
    return _json(d) if api else c.page(_views.group_page(d))


async def _chart(c: Console, r: Request, args: list[str], api: bool) -> Response:
    kind, name = args[0], (args[1] if len(args) > 1 else None)
    h = c.history
    if kind == "cluster":
        return _json(h.cluster_chart())
    if kind == "throughput":
        return _json(h.throughput_chart(None))
    if kind == "topics" and name is not None:
        return _json(h.topic_chart(name))
    assert kind == "groups" and name is not None
    return _json(h.lag_chart(name))


#: (segments' shape, whether it is API-only, handler): "*" matches one segment
_ROUTES: list[tuple[tuple[str, ...], bool, Callable[..., Awaitable[Response]]]] = [
    ((), False, _overview),
    (("cluster",), True, _overview),
    (("topics",), False, _topics),
    (("topics", "*"), False, _topic),
    (("topics", "*", "records"), False, _records),
    (("groups",), False, _groups),
    (("groups", "*"), False, _group),
    (("charts", "cluster"), True, _chart),
    (("charts", "throughput"), True, _chart),
    (("charts", "topics", "*"), True, _chart),
    (("charts", "groups", "*"), True, _chart),
]


def _route(segments: list[str], api: bool) -> tuple[Route | None, list[str]]:
    """The handler for ``segments`` (pages, or with ``api`` the ``/api/`` twins) and the
    segments its ``*`` matched; (None, []) for no route."""
    for shape, api_only, handler in _ROUTES:
        if len(shape) != len(segments) or (api_only and not api) or (api and not shape):
            continue
        if all(s == "*" or s == seg for s, seg in zip(shape, segments)):
            args = [seg for s, seg in zip(shape, segments) if s == "*"]
            if shape[:1] == ("charts",):
                args = [shape[1], *args]

            async def bound(c: Console, r: Request, a: list[str],
                            h: Callable[..., Awaitable[Response]] = handler) -> Response:
                return await h(c, r, a, api)

            return bound, args
    return None, []


@asynccontextmanager
async def open_console(bootstrap_servers: str, config: ConsoleConfig | None = None,
                       **connection: Any) -> AsyncIterator[Console]:
    """Connect to the cluster (``connection``: the openers' ``security`` and
    ``bootstrap_timeout_ms``), then sample and serve in the background until the body
    ends; ``Console.port`` is the port listened on (``config.port`` 0: a free one)."""
    config = config or ConsoleConfig()
    history = History(config.history_s)
    with unwrap_exception_group():
        async with open_group_admin(bootstrap_servers, client_id="trilog-console",
                                 **connection) as groups, \
                open_simple_consumer(bootstrap_servers, client_id="trilog-console",
                                     allow_auto_create_topics=False, **connection) as consumer, \
                trio.open_nursery() as nursery:
            admins = ReopeningAdmin(nursery, lambda: open_admin(
                bootstrap_servers, client_id="trilog-console", **connection))
            await admins.get()  # the cluster answers (or the console does not start)
            console = Console(config, admins, groups, consumer, history, bootstrap_servers)
            await nursery.start(run_sampler, admins, groups, history, config.sample_interval_s)
            console.port = await nursery.start(partial_serve(console))
            try:
                yield console
            finally:
                nursery.cancel_scope.cancel()


def partial_serve(console: Console) -> Callable[..., Awaitable[None]]:
    async def serve(*, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        await serve_http(console.handle, console.config.host, console.config.port,
                         ssl_context=console.config.ssl_context, task_status=task_status)
    return serve
