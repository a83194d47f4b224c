"""The broker's network layer: an acceptor per listener and a task per connection.

The seed's design (001, "Network Layer") has an acceptor hand connections to a fixed number
of processor threads, each multiplexing its connections.  On trio the event loop does the
multiplexing: the acceptor starts each connection's task in one nursery (so
``num.network.threads`` is accepted for compatibility and changes nothing).

A connection's task reads the byte stream, splits it into size-delimited frames (a frame
over ``socket.request.max.bytes`` closes the connection, with a log line) and handles the
requests one at a time, in order, writing each answer itself when it is ready.  It reads the
next request only once the last one is answered, as Kafka's processors mute a channel while
its request is in the handlers: a client that sends faster than it is answered is slowed by
TCP (its requests wait in the socket buffers), never by a queue in the broker.  The common
case costs one trip through trio's scheduler per request: the wait for the next one.

A handler may answer ``Later(...)``: the request is done (a produce appended) but its
response waits for something (``acks=all``: the in-sync replicas).  Such an answer, and
every answer behind it, goes to the connection's *writer* task, which sends them in order
(Kafka's guarantee per connection); meanwhile the connection goes on with its next requests,
so a client pipelining ``acks=all`` produces has their replication waits overlap instead of
queueing one after another.  Up to ``MAX_QUEUED_ANSWERS`` wait for the writer before the
connection stops reading.

A response is a list of parts: bytes written with ``writev`` straight from the event loop
(waiting only while the socket buffer is full), and file slices (an object with ``fileno()``,
``position`` and ``length``) sent from the segment file to the socket with ``os.sendfile``:
record bytes never pass through Python.  Large slices are sent from worker threads (a disk
read may block); small ones inline, since a page-cache hit costs less than the hop to a
thread.

Limits (:class:`ConnectionLimits`, Kafka's property names):

- ``max.connections`` and ``max.connections.per.ip``: a connection over either limit, or over
  what the descriptor budget leaves beside the log, is closed as soon as it is accepted;
- ``queued.max.request.bytes``: request bytes received or queued, broker-wide.  When they
  reach the budget, connections stop reading (TCP pushes back on their clients) until
  answered requests give bytes back.  Memory follows the bytes that arrive, never the size a
  frame announces (within 17 times for frames up to 1 MiB and 64 KiB, 2 times beyond: see
  ``FrameSplitter``), and idle connections hold no buffer: readers share
  one scratch buffer per listener, filled and emptied with no checkpoint in between;
- ``connections.max.idle.ms``: a connection that sent nothing for that long while nothing of
  its was being answered (idle, or stalled inside a request) is closed.  One task sweeps
  the connections for this (as Kafka's selector does), so waiting for a request costs no
  timer of its own.

Before its login (a SASL listener's connection until the login is done) a connection is
someone the broker does not know yet, and gets less (Kafka's ``SaslServerAuthenticator``):

- ``sasl.server.max.receive.size`` (512 KiB): a request announcing more closes the
  connection as soon as its 4-byte size arrives, before its body is buffered;
- its bytes draw on a budget of their own (``login_request_bytes``, the same rules as
  ``queued.max.request.bytes``), never on ``queued.max.request.bytes``: connections that
  never log in cannot stop the reads of those that did.  The login done, what the
  connection holds moves to the broker-wide budget;
- ``connection.failed.authentication.delay.ms``: a failed login (or a request out of turn)
  is answered, and the connection closed, only after that delay, which holds up nothing
  but that connection (Kafka's delayed close: a password guesser waits for each answer).

A client quota's throttle (``Session.throttled_until``, set by the request dispatcher's quota
hook) mutes a connection once its answer is out: nothing more is handled from it until then
(KIP-219; TCP holds the client's next requests meanwhile).

Shutdown (``drain``): stop accepting, stop reading new requests, let the requests received
finish (parked long polls are woken by the handler), then close.
"""

from __future__ import annotations

import contextvars
import errno
import logging
import os
import select
import socket
import ssl
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Protocol, Sequence

import trio

from trilog._concurrency import unwrap_exception_group
from trilog.broker._limits import RateLimitedLog
from trilog.errors import ProtocolError, TrilogError
from trilog.protocol import FrameDecoder

log = logging.getLogger("trilog.broker.network")

#: Slices at most this long are sent inline on the event loop (see the module docstring).
INLINE_SENDFILE_BYTES = 64 * 1024
#: A response whose file slices add up to at most this many bytes has them read into its
#: one ``writev`` instead of sent with ``sendfile``: one TCP segment and one wake-up of the
#: reader instead of one per part (a replica's or a consumer's fetch under a steady load is
#: this small; zero-copy pays for its extra system calls only on larger answers).
COPY_SLICES_BYTES = 64 * 1024
#: How long a sendfile worker waits for a full socket buffer to drain before handing control
#: back to trio (bounds how late a cancellation is noticed).
SENDFILE_THREAD_WAIT_S = 0.1
#: Answers a connection's writer may hold (``Later`` ones and those behind them) before the
#: connection stops reading requests.
MAX_QUEUED_ANSWERS = 16
#: The readers' shared receive buffer (per listener): what one read can take at most.
SCRATCH_BYTES = 256 * 1024
#: How long a connection closed after its last answer (a failed login) waits for the
#: client to close its side before closing it.
CLOSE_LINGER_S = 1.0
#: How long a TLS client has to finish its handshake.
TLS_HANDSHAKE_TIMEOUT_S = 10.0
#: What a TLS answer's file slices are read (and encrypted) in at a time.
TLS_SLICE_CHUNK = 1024 * 1024
#: accept() errors that mean "out of a resource, try again soon" (trio's serve_listeners).
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
UNLIMITED = 2**31 - 1
#: The budget of request bytes before the login, in requests of the largest size allowed
#: then (``sasl.server.max.receive.size``): 16 MiB at its default.
LOGIN_BUDGET_REQUESTS = 32
#: The most buffers one ``writev`` takes (Linux: 1024).
IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024
_BYTES = (bytes, bytearray, memoryview)
#: A file slice that ended early (truncated under us): its frame length is already on the
#: wire, so the connection cannot go on.
_SLICE_TRUNCATED = "segment file ended inside a fetch response; closing"


class Settings(Protocol):
    """Kafka's properties by name (``BrokerConfig``, or a plain dict in tests)."""

    def __getitem__(self, name: str, /) -> Any: ...


class FileSlice(Protocol):
    """A byte range of an open file (``trilog.storage.FetchSlice``); closed once sent."""

    fd: int
    position: int
    length: int

    def close(self) -> None: ...


ResponseParts = Sequence["bytes | bytearray | memoryview | FileSlice"]


class Later:
    """A response that is not ready when its request has been handled: ``await
    later.result()`` gives its parts (or None), and the writer sends them in turn."""

    __slots__ = ("_result",)

    def __init__(self, result: Callable[[], Awaitable[ResponseParts | None]]) -> None:
        self._result = result

    async def result(self) -> ResponseParts | None:
        return await self._result()


class Session:
    """Who is at the other end of a connection, and how it came: the listener's name and
    security protocol, the peer's address, the principal (``User:ANONYMOUS`` until TLS or
    SASL names it) and, on SASL listeners, the login in progress (``sasl``, owned by the
    request handler).  ``authenticated`` is false on a SASL listener until the login is
    done; ``close_after_answer`` makes the network hold the answer being sent for
    ``connection.failed.authentication.delay.ms``, then close the connection once it is
    out (a failed login); ``throttled_until`` (trio time, 0: not throttled) makes it read
    nothing more from the connection until then (a quota's throttle, KIP-219: the answer
    goes at once, then the connection is muted)."""

    __slots__ = ("peer", "host", "listener", "protocol", "principal", "authenticated",
                 "sasl", "close_after_answer", "throttled_until")

    def __init__(self, peer: str, listener: str = "PLAINTEXT", protocol: str = "PLAINTEXT",
                 principal: str = "User:ANONYMOUS") -> None:
        self.peer = peer
        self.host = peer.rpartition(":")[0] or peer  # the client's address (ACL hosts)
        self.listener = listener
        self.protocol = protocol
        self.principal = principal
        self.authenticated = not protocol.startswith("SASL_")
        self.sasl: Any = None
        self.close_after_answer = False
        self.throttled_until = 0.0

    def __repr__(self) -> str:
        return f"Session({self.peer} on {self.listener}, {self.principal})"


#: The session of the connection whose request is being handled (set in each connection's
#: task, so the handlers of a request can ask who sent it).
current_session: contextvars.ContextVar[Session] = contextvars.ContextVar(
    "trilog_session", default=Session(""))


@dataclass(frozen=True)
class BoundListener:
    """A bound socket and its listener: name, security protocol, TLS context (TLS
    protocols) and how a client certificate becomes a principal."""

    socket_listener: trio.SocketListener
    name: str = "PLAINTEXT"
    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    tls_principal: Callable[[Any], str] | None = None

    @property
    def port(self) -> int:
        return self.socket_listener.socket.getsockname()[1]


#: ``handler(frame, session) -> parts, Later or None`` (None: no response, e.g. a Produce
#: with acks=0).
Handler = Callable[[memoryview, Session], Awaitable["ResponseParts | Later | None"]]


@dataclass(frozen=True)
class ConnectionLimits:
    """The network's limits; see the module docstring.  ``idle_ms`` < 0: never idle out;
    ``queued_request_bytes`` < 0: no budget."""

    max_connections: int = UNLIMITED
    max_connections_per_ip: int = UNLIMITED
    per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    idle_ms: int = 600_000
    queued_request_bytes: int = -1
    #: ``connection.failed.authentication.delay.ms``: how long the answer to a failed login
    #: (and the close after it) waits (slows password guessing)
    failed_auth_delay_ms: int = 100
    #: ``sasl.server.max.receive.size``: the largest request before the login
    login_request_max_bytes: int = 512 * 1024
    #: the request bytes that connections before their login may hold, all together
    login_request_bytes: int = LOGIN_BUDGET_REQUESTS * 512 * 1024

    @classmethod
    def of(cls, config: Settings) -> ConnectionLimits:
        """The limits a broker's configuration (Kafka's property names) sets."""
        return cls(max_connections=config["max.connections"],
                   max_connections_per_ip=config["max.connections.per.ip"],
                   per_ip_overrides=config["max.connections.per.ip.overrides"],
                   idle_ms=config["connections.max.idle.ms"],
                   queued_request_bytes=config["queued.max.request.bytes"],
                   failed_auth_delay_ms=config["connection.failed.authentication.delay.ms"],
                   login_request_max_bytes=config["sasl.server.max.receive.size"],
                   login_request_bytes=LOGIN_BUDGET_REQUESTS
                   * config["sasl.server.max.receive.size"])


class ConnectionBudget(Protocol):
    """How many connections the descriptors leave room for (``DescriptorBudget``), told how
    many are open."""

    open_connections: int

    def connection_room(self) -> int: ...


class RequestMemory:
    """The broker-wide budget of request bytes received or queued (``queued.max.request.bytes``).

    Readers charge what they receive (``received``); the responder gives a request's bytes
    back once it is answered (``give_back``).  While the budget is spent, connections wait
    before reading (``wait_to_read``) for answers to give bytes back.  One exception keeps
    requests received in parts from holding the budget and waiting for each other forever:
    when such parts hold more of the budget than requests awaiting their answers, the
    connection closest to finishing its request goes on reading, and its request completes.
    So the budget may be overshot by a request or two, as Kafka's memory pool lets one
    allocation overshoot (a single request larger than the budget is still received).
    Runs in the trio thread.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._changed: trio.Event | None = None
        #: connection -> (bytes its request in progress lacks, bytes of it received)
        self._unfinished: dict[object, tuple[int, int]] = {}
        self._partial = 0  # bytes of requests in progress, of every connection

    @property
    def exhausted(self) -> bool:
        return 0 <= self.capacity <= self.used

    def may_read(self, conn: object) -> bool:
        if not self.exhausted:
            return True
        if conn not in self._unfinished or self._partial <= self.used - self._partial:
            return False  # answers on their way will give bytes back: wait for them
        closest = min(self._unfinished, key=lambda c: (self._unfinished[c][0], id(c)))
        return closest is conn

    async def wait_to_read(self, conn: object) -> None:
        while not self.may_read(conn):
            if self._changed is None:
                self._changed = trio.Event()
            await self._changed.wait()

    def received(self, conn: object, n: int, lacking: int | None, partial: int) -> None:
        """``conn`` received ``n`` bytes; its request in progress (if any: ``lacking`` is
        None between requests) lacks ``lacking`` bytes and holds ``partial``."""
        self.used += n
        _lacking, before = self._unfinished.pop(conn, (None, 0))
        self._partial -= before
        if lacking is not None:
            self._unfinished[conn] = (lacking, partial)
            self._partial += partial
        elif _lacking is not None:
            self._notify()  # another connection may now be the closest to finishing

    def give_back(self, n: int) -> None:
        self.used -= n
        self._notify()

    def hand_over(self, conn: object, n: int, other: RequestMemory) -> None:
        """Move ``conn``'s ``n`` bytes, and its request in progress, to ``other`` (a login
        done: the connection now draws on the broker-wide budget)."""
        lacking, partial = self._unfinished.pop(conn, (None, 0))
        self._partial -= partial
        self.give_back(n)
        other.used += n
        if lacking is not None:
            other._unfinished[conn] = (lacking, partial)
            other._partial += partial
        other._notify()

    def forget(self, conn: object) -> None:
        """``conn`` closed (give its bytes back too)."""
        _lacking, partial = self._unfinished.pop(conn, (None, 0))
        self._partial -= partial
        self._notify()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None


class _Connection:
    """One client connection's state, shared by its reader and responder tasks."""

    __slots__ = ("stream", "tcp", "sock", "tls", "listener", "session", "peer", "ip",
                 "last_active", "queued", "charged", "memory", "reading", "closed")

    def __init__(self, stream: trio.SocketStream, peer: str, ip: str,
                 listener: BoundListener, memory: RequestMemory) -> None:
        #: what requests are read from and answers written to (TLS: an ``SSLStream``)
        self.stream: trio.SocketStream | trio.SSLStream = stream
        self.tcp = stream  # the TCP stream under it
        self.sock = stream.socket
        self.tls = False
        self.listener = listener
        self.session = Session(peer, listener.name, listener.protocol)
        self.peer = peer
        self.ip = ip
        self.last_active = trio.current_time()
        self.queued = 0  # answers queued for the writer or being sent by it
        self.charged = 0  # request bytes charged to ``memory``, not yet given back
        #: the budget its requests draw on: the login budget until the login is done
        self.memory = memory
        self.reading = False  # parked waiting for bytes to read
        self.closed = False  # closed by the network (idle, or a drain) while parked

    async def close_parked(self) -> None:
        """Close the connection while its task is parked waiting to read (it wakes with
        ``ClosedResourceError`` and ends); queued answers are lost, so only call this when
        none are."""
        self.closed = True
        await self.tcp.aclose()


class Network:
    """Accepts and serves connections on bound listeners.  Owned by the broker's nursery.

    ``descriptors``, when given, says how many connections the descriptor budget has room
    for now, and is told how many are open (``DescriptorBudget``).
    """

    def __init__(
        self,
        handler: Handler,
        listeners: Sequence[trio.SocketListener | BoundListener],
        *,
        max_request_bytes: int,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        limiter: trio.CapacityLimiter | None = None,
        limits: ConnectionLimits | None = None,
        descriptors: ConnectionBudget | None = None,
    ) -> None:
        self._handler = handler
        self._listeners = [lst if isinstance(lst, BoundListener) else BoundListener(lst)
                           for lst in listeners]
        self.host, self.port = self._listeners[0].socket_listener.socket.getsockname()[:2]
        self._max_request_bytes = max_request_bytes
        self._sndbuf = send_buffer_bytes
        self._rcvbuf = receive_buffer_bytes
        self._limiter = limiter
        self.limits = limits or ConnectionLimits()
        self._descriptors = descriptors
        self.memory = RequestMemory(self.limits.queued_request_bytes)
        self.login_memory = RequestMemory(self.limits.login_request_bytes)
        self._scratch = memoryview(bytearray(SCRATCH_BYTES))
        self._accept_scope = trio.CancelScope()
        self._budget_scopes: set[trio.CancelScope] = set()
        self._stopped_reading = False
        self._connections: set[_Connection] = set()
        self._by_ip: dict[str, int] = {}
        self._open = 0
        self._all_closed = trio.Event()
        self._quiet = RateLimitedLog(log, 1.0)
        self.connection_count = 0
        self.connections_refused = 0
        self.connections_idled_out = 0

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Accept and serve until cancelled; ``stop_accepting`` ends the accepting and closes
        the listeners, and ``serve`` returns once the open connections are done."""
        async with trio.open_nursery() as connections:
            if self.limits.idle_ms >= 0:
                connections.start_soon(self._close_idle_connections)
            task_status.started(self.port)
            with self._accept_scope:
                async with trio.open_nursery() as acceptors:
                    for listener in self._listeners:
                        acceptors.start_soon(self._accept_loop, listener, connections)
            # Accepting is over (a drain): new clients are refused at once, not left waiting.
            with trio.CancelScope(shield=True):
                for listener in self._listeners:
                    await listener.socket_listener.aclose()
            await self.wait_all_closed()
            connections.cancel_scope.cancel()  # the idle reaper

    async def _accept_loop(self, listener: BoundListener,
                           connections: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.socket_listener.accept()
            except OSError as exc:
                if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                    raise
                self._quiet.error("accept", "accept failed: %s; retrying in 100 ms", exc)
                await trio.sleep(0.1)
                continue
            try:
                ip, port = stream.socket.getpeername()[:2]
            except OSError:  # the peer is already gone
                stream.socket.close()
                continue
            refusal = self._refusal(ip)
            if refusal is not None:
                self.connections_refused += 1
                self._quiet.warning("refused", "refusing a connection from %s: %s", ip, refusal)
                stream.socket.close()  # at once: a refused connection costs no task
                continue
            self._open += 1
            if self._descriptors is not None:
                self._descriptors.open_connections = self._open
            self._by_ip[ip] = self._by_ip.get(ip, 0) + 1
            self.connection_count += 1
            self._tune(stream)
            conn = _Connection(stream, f"{ip}:{port}", ip, listener, self.memory)
            if not conn.session.authenticated:
                conn.memory = self.login_memory
            self._connections.add(conn)
            connections.start_soon(self._connection, conn)

    def _refusal(self, ip: str) -> str | None:
        """Why a new connection from ``ip`` cannot be served now, or None."""
        limits = self.limits
        limit = limits.max_connections
        room = self._descriptors.connection_room() if self._descriptors is not None else limit
        if self._open >= min(limit, room):
            if room < limit:
                return (f"{self._open} connections are open, all the descriptor budget leaves "
                        "beside the log (raise `ulimit -n`)")
            return f"{self._open} connections are open (max.connections={limit})"
        per_ip = limits.per_ip_overrides.get(ip, limits.max_connections_per_ip)
        if self._by_ip.get(ip, 0) >= per_ip:
            return f"{ip} has {self._by_ip[ip]} connections open (the limit per address is {per_ip})"
        return None

    def _tune(self, stream: trio.SocketStream) -> None:
        try:
            stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
            if self._sndbuf > 0:
                stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._sndbuf)
            if self._rcvbuf > 0:
                stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._rcvbuf)
        except OSError:  # the peer may already be gone
            pass

    def stop_accepting(self) -> None:
        self._accept_scope.cancel()

    async def stop_reading(self) -> None:
        """Stop taking new requests on every connection; those received still get answers,
        then the connections close."""
        self._stopped_reading = True
        for scope in list(self._budget_scopes):
            scope.cancel()
        for conn in list(self._connections):
            if conn.reading and not conn.queued:
                await conn.close_parked()
        # The others close once their answers are out (_serve, _writer).

    async def _close_idle_connections(self) -> None:
        """Close connections parked for ``connections.max.idle.ms`` with nothing to answer
        (Kafka's selector does this sweep too): one task for all, so that waiting for a
        request costs no timer."""
        idle_s = self.limits.idle_ms / 1000
        period = min(1.0, max(idle_s / 4, 0.01))
        while True:
            await trio.sleep(period)
            expired = trio.current_time() - idle_s
            for conn in list(self._connections):
                if conn.reading and not conn.queued and conn.last_active <= expired:
                    self.connections_idled_out += 1
                    log.info("closing connection from %s: idle for %d ms", conn.peer,
                             self.limits.idle_ms)
                    await conn.close_parked()

    @property
    def open_connections(self) -> int:
        return self._open

    async def wait_all_closed(self) -> None:
        """Return once no connection is open (after ``stop_accepting``)."""
        if self._open:
            await self._all_closed.wait()
        else:
            await trio.lowlevel.checkpoint()

    def statistics(self) -> dict[str, int]:
        return {
            "open_connections": self._open,
            "connections_accepted": self.connection_count,
            "connections_refused": self.connections_refused,
            "connections_idled_out": self.connections_idled_out,
            "queued_request_bytes": self.memory.used,
            "login_request_bytes": self.login_memory.used,
        }

    # -- one connection ---------------------------------------------------------------------

    async def _connection(self, conn: _Connection) -> None:
        peer = conn.peer
        current_session.set(conn.session)
        answers_send, answers_receive = trio.open_memory_channel[
            "tuple[ResponseParts | Later | None, int]"](MAX_QUEUED_ANSWERS)
        refused: ProtocolError | None = None
        try:
            if conn.listener.ssl_context is not None and not await self._start_tls(conn):
                await conn.tcp.aclose()
                return
            with unwrap_exception_group():
                async with conn.tcp, trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer, conn, answers_receive)
                    async with answers_send:
                        refused = await self._serve(conn, answers_send)
            if refused is not None:
                raise refused
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass  # the peer went away
        except ProtocolError as exc:
            if conn.session.authenticated:
                log.warning("closing connection from %s: %s", peer, exc)
            else:  # anyone can cause this line: one a second at most
                self._quiet.warning("before-login", "closing connection from %s: %s", peer, exc)
        except Exception:
            log.exception("closing connection from %s after an unexpected error", peer)
        finally:
            self._connections.discard(conn)
            conn.memory.forget(conn)
            conn.memory.give_back(conn.charged)  # partial and unanswered requests
            conn.charged = 0
            self._open -= 1
            if self._descriptors is not None:
                self._descriptors.open_connections = self._open
            left = self._by_ip[conn.ip] - 1
            if left:
                self._by_ip[conn.ip] = left
            else:
                del self._by_ip[conn.ip]
            if not self._open:
                self._all_closed.set()
                self._all_closed = trio.Event()

    async def _start_tls(self, conn: _Connection) -> bool:
        """The TLS handshake of a connection to a TLS listener, and the principal its
        client certificate names; False (logged) if either fails."""
        listener = conn.listener
        assert listener.ssl_context is not None
        stream = trio.SSLStream(conn.tcp, listener.ssl_context, server_side=True)
        with trio.move_on_after(TLS_HANDSHAKE_TIMEOUT_S) as scope:
            try:
                await stream.do_handshake()
            except trio.BrokenResourceError as exc:
                self._quiet.info("tls", "TLS handshake with %s on %s failed: %s",
                                 conn.peer, listener.name, exc.__cause__ or exc)
                if await _send_tls_alert(conn.tcp, stream):
                    await self._close_gently(conn)
                return False
        if scope.cancelled_caught:
            self._quiet.info("tls", "TLS handshake with %s on %s took over %.0f s",
                             conn.peer, listener.name, TLS_HANDSHAKE_TIMEOUT_S)
            return False
        if listener.tls_principal is not None:
            try:
                conn.session.principal = listener.tls_principal(stream.getpeercert())
            except TrilogError as exc:
                self._quiet.warning("tls", "refusing %s on %s: %s", conn.peer,
                                    listener.name, exc)
                return False
        conn.stream = stream
        conn.tls = True
        return True

    async def _serve(self, conn: _Connection,
                     answers: trio.MemorySendChannel) -> ProtocolError | None:
        """Read the connection's requests and handle them one at a time, in order.

        An answer that is ready while the writer has nothing queued is sent from here (the
        common case costs one trip through the scheduler per request: the wait for the next
        one); a ``Later``, and every answer behind one, goes to the writer.  Returns the
        error of a request the handler refused (nothing after it is read), or None once
        the peer closed, the connection idled out or the network stopped reading.
        """
        decoder = FrameDecoder(max_frame_size=self._max_request_bytes
                               if conn.memory is self.memory
                               else self.limits.login_request_max_bytes)
        frames: deque[bytes | bytearray] = deque()
        waited = True  # the task went through the scheduler since its last request
        while True:
            if conn.session.throttled_until:
                await self._wait_throttled(conn)
            if not frames:
                got = await self._read_frames(conn, decoder)
                if got is None:
                    return None
                frames.extend(got[0])
                waited = got[1]
            frame = frames.popleft()
            if not waited:
                # Pipelined requests are all in hand: let other connections have a turn.
                await trio.lowlevel.checkpoint()
            waited = False
            size = len(frame) + 4
            try:
                answer = await self._handler(memoryview(frame), conn.session)
            except BaseException as exc:
                self._answered(conn, size)
                if isinstance(exc, ProtocolError):
                    if not conn.session.authenticated:  # out of turn before the login
                        await self._failed_login_pause()
                    return exc  # (the frames after it give their bytes back on closing)
                raise
            del frame
            if conn.memory is not self.memory and conn.session.authenticated:
                self._logged_in(conn, decoder)
            elif conn.session.close_after_answer:
                await self._failed_login_pause()
            if conn.queued or isinstance(answer, Later):
                conn.queued += 1
                await answers.send((answer, size))
                continue
            try:
                if answer:
                    await self._send(conn, answer)
            finally:
                self._answered(conn, size)
            conn.last_active = trio.current_time()
            if conn.session.close_after_answer:
                await self._close_gently(conn)
                return None

    async def _read_frames(self, conn: _Connection, decoder: FrameDecoder
                           ) -> tuple[list[bytes | bytearray], bool] | None:
        """The next complete frames (at least one) and whether the task waited for them;
        None when no more requests are to be read: the peer closed, the connection was idle
        for ``connections.max.idle.ms`` (it is closed), a frame was malformed (logged, and
        closed), or the network stopped reading."""
        if conn.tls:
            return await self._read_tls_frames(conn, decoder)
        fd = conn.sock.fileno()
        memory = conn.memory
        waited = False
        while True:
            if self._stopped_reading:
                return None
            if not memory.may_read(conn):
                waited = True
                if not await self._wait_for_budget(conn):
                    return None
            # The receive and the split run with no checkpoint in between, so every
            # connection of this listener can share one scratch buffer.
            target = decoder.read_buffer(self._scratch)
            try:
                received = os.readv(fd, [target])
            except BlockingIOError:
                received = -1
            except (ConnectionError, OSError):
                return None
            finally:
                del target  # release the view before the buffer may grow
            if received < 0:
                waited = True
                conn.reading = True
                try:
                    await trio.lowlevel.wait_readable(conn.sock)
                except trio.ClosedResourceError:
                    return None
                finally:
                    conn.reading = False
                if conn.closed:  # closed while it was being woken: its fd is not ours
                    return None
                continue
            if not received:
                return None
            conn.charged += received
            conn.last_active = trio.current_time()
            try:
                frames = decoder.advance(received)
            except ProtocolError as exc:
                memory.received(conn, received, None, 0)
                self._log_malformed(conn, exc)
                await conn.tcp.aclose()
                return None
            memory.received(conn, received, decoder.frame_remaining, decoder.buffered)
            if frames:
                return frames, waited
            await trio.lowlevel.checkpoint()  # a large request arriving in pieces
            waited = True

    async def _read_tls_frames(self, conn: _Connection, decoder: FrameDecoder
                               ) -> tuple[list[bytes | bytearray], bool] | None:
        """``_read_frames`` of a TLS connection: the bytes come decrypted from its stream
        (every read is a trip through the scheduler)."""
        memory = conn.memory
        while True:
            if self._stopped_reading:
                return None
            if not memory.may_read(conn) and not await self._wait_for_budget(conn):
                return None
            conn.reading = True
            try:
                data = await conn.stream.receive_some(SCRATCH_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return None
            finally:
                conn.reading = False
            if conn.closed or not data:
                return None
            conn.charged += len(data)
            conn.last_active = trio.current_time()
            try:
                frames = decoder.feed(data)
            except ProtocolError as exc:
                memory.received(conn, len(data), None, 0)
                self._log_malformed(conn, exc)
                return None
            memory.received(conn, len(data), decoder.frame_remaining, decoder.buffered)
            if frames:
                return frames, True

    def _logged_in(self, conn: _Connection, decoder: FrameDecoder) -> None:
        """The connection's login is done: its requests may be as large as anyone's, and
        what it holds moves from the login budget to the broker-wide one."""
        decoder.max_frame_size = self._max_request_bytes
        conn.memory.hand_over(conn, conn.charged, self.memory)
        conn.memory = self.memory

    async def _failed_login_pause(self) -> None:
        """Hold a connection whose login failed (its answer not yet sent) for
        ``connection.failed.authentication.delay.ms``; other connections go on."""
        await trio.sleep(self.limits.failed_auth_delay_ms / 1000)

    def _log_malformed(self, conn: _Connection, exc: ProtocolError) -> None:
        """The line for a connection closed over its framing (rate-limited before the
        login, where anyone may cause one)."""
        if conn.session.authenticated:
            log.warning("closing connection from %s: %s", conn.peer, exc)
        else:
            self._quiet.warning(
                "before-login", "closing connection from %s on %s before its login: %s "
                "(sasl.server.max.receive.size=%d)", conn.peer, conn.listener.name, exc,
                self.limits.login_request_max_bytes)

    async def _close_gently(self, conn: _Connection) -> None:
        """End a connection whose last answer must reach the client (a failed login, a
        TLS alert): wait for the client to close its side, reading and dropping what it
        still sends, for at most ``CLOSE_LINGER_S``; the caller then closes.  (A FIN that
        arrives with the answer makes some clients drop it (kafka-python reads the end of
        the stream first); closing with unread bytes would send a reset.)"""
        with trio.move_on_after(CLOSE_LINGER_S):
            try:
                while await conn.tcp.receive_some(65536):
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    async def _wait_throttled(self, conn: _Connection) -> None:
        """A quota throttled the last answer: handle nothing more from the connection until
        its throttle time is over (``stop_reading`` ends the wait early)."""
        until, conn.session.throttled_until = conn.session.throttled_until, 0.0
        if self._stopped_reading:
            return  # nothing more is read anyway
        with trio.CancelScope(deadline=until) as scope:
            self._budget_scopes.add(scope)
            try:
                await trio.sleep_forever()
            finally:
                self._budget_scopes.discard(scope)
        conn.last_active = trio.current_time()

    async def _wait_for_budget(self, conn: _Connection) -> bool:
        """Wait for room in the request budget; False if the network stopped reading."""
        with trio.CancelScope() as scope:
            self._budget_scopes.add(scope)
            try:
                await conn.memory.wait_to_read(conn)
                return True
            finally:
                self._budget_scopes.discard(scope)
        return False

    async def _writer(self, conn: _Connection,
                      answers: trio.MemoryReceiveChannel) -> None:
        """Send the answers queued behind a ``Later``, in order."""
        async for parts, size in answers:
            try:
                if isinstance(parts, Later):
                    parts = await parts.result()
                if parts:
                    await self._send(conn, parts)
            finally:
                conn.queued -= 1
                self._answered(conn, size)
            conn.last_active = trio.current_time()
            if not conn.queued and conn.reading and self._stopped_reading:
                await conn.close_parked()  # a drain waited for these answers

    def _answered(self, conn: _Connection, size: int) -> None:
        conn.charged -= size
        conn.memory.give_back(size)

    async def _send(self, conn: _Connection, parts: ResponseParts) -> None:
        """Write ``parts`` to the socket: byte parts with ``writev``, straight from the event
        loop (waiting only when the socket buffer is full), file slices with ``sendfile``,
        or, when they are small, read into the same ``writev`` (``COPY_SLICES_BYTES``).
        On TLS, file slices are read and encrypted (zero copy cannot go through TLS)."""
        if conn.tls:
            await self._send_tls(conn, parts)
            return
        sock = conn.sock
        fd = sock.fileno()
        slices = [part for part in parts if not isinstance(part, _BYTES)]
        try:
            if slices and sum(part.length for part in slices) <= COPY_SLICES_BYTES:
                await _write_all(sock, fd, [part if isinstance(part, _BYTES)
                                            else _read_slice(part) for part in parts])
                return
            pending: list = []
            for part in parts:
                if isinstance(part, _BYTES):
                    pending.append(part)
                    continue
                if pending:
                    await _write_all(sock, fd, pending)
                    pending = []
                await self._sendfile(sock, part)
            if pending:
                await _write_all(sock, fd, pending)
        finally:
            for part in slices:
                part.close()

    async def _send_tls(self, conn: _Connection, parts: ResponseParts) -> None:
        pending: list = []
        slices = [part for part in parts if not isinstance(part, _BYTES)]
        try:
            for part in parts:
                if isinstance(part, _BYTES):
                    pending.append(part)
                    continue
                position, remaining = part.position, part.length
                while remaining:
                    n = min(remaining, TLS_SLICE_CHUNK)
                    if n > INLINE_SENDFILE_BYTES:
                        data = await trio.to_thread.run_sync(os.pread, part.fd, n, position,
                                                             limiter=self._limiter)
                    else:
                        data = os.pread(part.fd, n, position)
                    if len(data) < n:
                        raise ProtocolError(_SLICE_TRUNCATED)
                    pending.append(data)
                    position += n
                    remaining -= n
                    if remaining:
                        await conn.stream.send_all(b"".join(pending))
                        pending = []
            await conn.stream.send_all(b"".join(pending))
        finally:
            for part in slices:
                part.close()

    async def _sendfile(self, sock: trio.socket.SocketType, part: FileSlice) -> None:
        out_fd = sock.fileno()
        in_fd = part.fd
        offset, remaining = part.position, part.length
        inline = remaining <= INLINE_SENDFILE_BYTES
        while remaining > 0:
            if inline:
                sent = _sendfile_some(out_fd, in_fd, offset, remaining)
            else:
                sent = await trio.to_thread.run_sync(
                    _sendfile_some, out_fd, in_fd, offset, remaining, SENDFILE_THREAD_WAIT_S,
                    limiter=self._limiter,
                )
            if sent < 0:  # the socket buffer is full
                await trio.lowlevel.wait_writable(sock)
                continue
            if sent == 0:
                raise ProtocolError(_SLICE_TRUNCATED)
            offset += sent
            remaining -= sent
        await trio.lowlevel.checkpoint()


async def _send_tls_alert(tcp: trio.SocketStream, stream: trio.SSLStream) -> bool:
    """Send the alert OpenSSL wrote as it failed a handshake (a client certificate missing
    or refused: certificate_required, handshake_failure, unknown_ca, ...), which trio's
    ``SSLStream`` leaves unsent when it raises: without it a client sees only "connection
    closed by peer" instead of what was wrong.  Whether there was one to send."""
    outgoing = getattr(stream, "_outgoing", None)  # trio's outgoing MemoryBIO
    data = outgoing.read() if isinstance(outgoing, ssl.MemoryBIO) else b""
    if not data:
        return False
    with trio.move_on_after(CLOSE_LINGER_S):
        try:
            await tcp.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            return False
    return True


def _read_slice(part: FileSlice) -> bytes:
    """A small file slice's bytes (a page-cache read)."""
    if not part.length:
        return b""
    data = os.pread(part.fd, part.length, part.position)
    if len(data) < part.length:
        raise ProtocolError(_SLICE_TRUNCATED)
    return data


async def _write_all(sock: trio.socket.SocketType, fd: int, pieces: list) -> None:
    """Write ``pieces`` to the non-blocking socket ``fd`` (``IOV_MAX`` of them per
    ``writev``), waiting while its buffer is full."""
    while pieces:
        batch = pieces[:IOV_MAX]
        try:
            sent = os.writev(fd, batch)
        except BlockingIOError:
            sent = 0
        full = sent < sum(map(len, batch))  # the socket took less than offered
        done = 0
        while done < len(pieces) and sent >= len(pieces[done]):
            sent -= len(pieces[done])
            done += 1
        pieces = pieces[done:]
        if sent:
            pieces[0] = memoryview(pieces[0])[sent:]
        if full:
            await trio.lowlevel.wait_writable(sock)


def _sendfile_some(out_fd: int, in_fd: int, offset: int, count: int,
                   wait_s: float = 0.0) -> int:
    """Send as much as the non-blocking socket takes; -1 if it took nothing (EAGAIN).

    With ``wait_s`` (worker threads only) a full socket buffer is waited for here, up to
    ``wait_s`` in all, instead of hopping back to trio for each ~2 MiB the buffer holds.
    """
    total = 0
    poller = None
    deadline = 0.0
    while count > 0:
        try:
            sent = os.sendfile(out_fd, in_fd, offset, count)
        except BlockingIOError:
            if wait_s <= 0:
                return total or -1
            now = time.monotonic()
            if poller is None:
                poller = select.poll()
                poller.register(out_fd, select.POLLOUT)
                deadline = now + wait_s
            remaining = deadline - now
            if remaining <= 0 or not poller.poll(remaining * 1000):
                return total or -1
            continue
        except OSError as exc:
            if exc.errno == errno.EINTR:
                continue
            raise
        if sent == 0:
            return total
        total += sent
        offset += sent
        count -= sent
    return total
