"""The broker's network layer: one acceptor, N processors, a task pair per connection.

The seed's design (001, "Network Layer"): an acceptor takes connections and hands them,
round robin, to a fixed number of processors.  Here a processor is a nursery; a connection is
two tasks in it:

- a *reader* that splits the byte stream into size-delimited frames and queues them (a frame
  over ``socket.request.max.bytes`` closes the connection, with a log line);
- a *responder* that takes frames in order, asks the request handler for the response and
  writes it, so responses leave in request order (Kafka's guarantee per connection).

A response is a list of parts: ``bytes`` written with ``send_all``, and file slices (an
object with ``fileno()``, ``position`` and ``length``) sent from the segment file to the
socket with ``os.sendfile``: record bytes never pass through Python.  Large slices are sent
from worker threads (a disk read may block); small ones inline, since a page-cache hit costs
less than the hop to a thread.

Shutdown (``drain``): stop accepting, stop reading new requests, let queued requests finish
(parked long polls are woken by the handler), then close.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import socket
import time
from itertools import cycle
from typing import Any, Awaitable, Callable, Protocol, Sequence

import trio

from trilog._concurrency import unwrap_exception_group
from trilog.errors import ProtocolError
from trilog.protocol import FrameDecoder

log = logging.getLogger("trilog.broker.network")

#: Slices at most this long are sent inline on the event loop (see the module docstring).
INLINE_SENDFILE_BYTES = 64 * 1024
#: How long a sendfile worker waits for a full socket buffer to drain before handing control
#: back to trio (bounds how late a cancellation is noticed).
SENDFILE_THREAD_WAIT_S = 0.1
#: Requests read ahead per connection while the current one is being answered.
MAX_QUEUED_REQUESTS = 16


class FileSlice(Protocol):
    """A byte range of an open file (``trilog.storage.FetchSlice``); closed once sent."""

    fd: int
    position: int
    length: int

    def close(self) -> None: ...


ResponseParts = Sequence["bytes | bytearray | memoryview | FileSlice"]
#: ``handler(frame, peer) -> parts or None`` (None: no response, e.g. a Produce with acks=0).
Handler = Callable[[memoryview, str], Awaitable["ResponseParts | None"]]


class Network:
    """Accepts and serves connections for one listener.  Owned by the broker's nursery."""

    def __init__(
        self,
        handler: Handler,
        *,
        host: str,
        port: int,
        num_processors: int,
        max_request_bytes: int,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        limiter: trio.CapacityLimiter | None = None,
    ) -> None:
        self._handler = handler
        self.host = host
        self.port = port
        self._num_processors = num_processors
        self._max_request_bytes = max_request_bytes
        self._sndbuf = send_buffer_bytes
        self._rcvbuf = receive_buffer_bytes
        self._limiter = limiter
        self._accept_scope = trio.CancelScope()
        self._reader_scopes: set[trio.CancelScope] = set()
        self._connections: set[Any] = set()
        self._listeners: list[trio.SocketListener] = []
        self.connection_count = 0

    async def listen(self) -> int:
        """Bind the listening socket (``port`` 0 picks one); return the bound port."""
        self._listeners = await trio.open_tcp_listeners(self.port, host=self.host, backlog=1024)
        self.port = self._listeners[0].socket.getsockname()[1]
        return self.port

    async def aclose_listeners(self) -> None:
        for listener in self._listeners:
            await listener.aclose()

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Serve on the bound listeners until cancelled; ``listen()`` first."""
        listeners = self._listeners
        async with trio.open_nursery() as nursery:
            channels = []
            for i in range(self._num_processors):
                send, receive = trio.open_memory_channel(0)
                channels.append(send)
                nursery.start_soon(self._processor, receive, name=f"processor-{i}")
            task_status.started(self.port)
            try:
                with self._accept_scope:
                    await self._acceptor(listeners, cycle(channels))
            finally:
                await self.aclose_listeners()
                for send in channels:
                    await send.aclose()

    async def _acceptor(self, listeners, processors) -> None:
        async with trio.open_nursery() as nursery:
            for listener in listeners:
                nursery.start_soon(self._accept_loop, listener, processors)

    async def _accept_loop(self, listener: trio.SocketListener, processors) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                # EMFILE and friends: wait and go on rather than die (trio's serve_listeners).
                log.error("accept failed: %s; retrying in 100 ms", exc)
                await trio.sleep(0.1)
                continue
            self._tune(stream)
            await next(processors).send(stream)

    def _tune(self, stream: trio.SocketStream) -> None:
        try:
            stream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
            if self._sndbuf > 0:
                stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._sndbuf)
            if self._rcvbuf > 0:
                stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self._rcvbuf)
        except OSError:  # the peer may already be gone
            pass

    async def _processor(self, connections: trio.MemoryReceiveChannel) -> None:
        async with trio.open_nursery() as nursery:
            async for stream in connections:
                nursery.start_soon(self._connection, stream)

    def stop_accepting(self) -> None:
        self._accept_scope.cancel()

    def stop_reading(self) -> None:
        """Stop taking new requests on every connection; queued ones still get answers."""
        for scope in list(self._reader_scopes):
            scope.cancel()

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    # -- one connection ---------------------------------------------------------------------

    async def _connection(self, stream: trio.SocketStream) -> None:
        try:
            peer = "%s:%s" % stream.socket.getpeername()[:2]
        except OSError:
            peer = "?"
        self.connection_count += 1
        self._connections.add(stream)
        requests_send, requests_receive = trio.open_memory_channel(MAX_QUEUED_REQUESTS)
        try:
            with unwrap_exception_group():
                async with stream, trio.open_nursery() as nursery:
                    nursery.start_soon(self._reader, stream, requests_send, peer)
                    await self._responder(stream, requests_receive, peer)
                    nursery.cancel_scope.cancel()
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            pass  # the peer went away
        except ProtocolError as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except Exception:
            log.exception("closing connection from %s after an unexpected error", peer)
        finally:
            self._connections.discard(stream)

    async def _reader(self, stream: trio.SocketStream, requests: trio.MemorySendChannel,
                      peer: str) -> None:
        decoder = FrameDecoder(max_frame_size=self._max_request_bytes)
        scope = trio.CancelScope()
        self._reader_scopes.add(scope)
        try:
            async with requests:
                with scope:
                    sock = stream.socket
                    while True:
                        try:
                            # recv_into the decoder's buffer: a large request lands in its
                            # own bytearray, copied by nobody (see FrameSplitter).
                            target = decoder.read_buffer()
                            received = await sock.recv_into(target)
                        except ProtocolError as exc:
                            log.warning("closing connection from %s: %s", peer, exc)
                            await stream.aclose()
                            return
                        finally:
                            target = None  # release the memoryview before the buffer moves
                        if not received:
                            return
                        try:
                            frames = decoder.advance(received)
                        except ProtocolError as exc:
                            log.warning("closing connection from %s: %s", peer, exc)
                            await stream.aclose()
                            return
                        for frame in frames:
                            await requests.send(frame)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
            return
        finally:
            self._reader_scopes.discard(scope)

    async def _responder(self, stream: trio.SocketStream, requests: trio.MemoryReceiveChannel,
                         peer: str) -> None:
        async for frame in requests:
            parts = await self._handler(frame, peer)
            if parts:
                await self._send(stream, parts)

    async def _send(self, stream: trio.SocketStream, parts: ResponseParts) -> None:
        try:
            pending: list = []
            for part in parts:
                if isinstance(part, (bytes, bytearray, memoryview)):
                    pending.append(part)
                    continue
                if pending:
                    await stream.send_all(b"".join(pending))
                    pending = []
                await self._sendfile(stream, part)
            if pending:
                await stream.send_all(b"".join(pending) if len(pending) > 1 else pending[0])
        finally:
            for part in parts:
                if not isinstance(part, (bytes, bytearray, memoryview)):
                    part.close()

    async def _sendfile(self, stream: trio.SocketStream, part: FileSlice) -> None:
        sock = stream.socket
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
                # The file is shorter than the slice promised (it was truncated under us):
                # the frame length is already on the wire, so the connection cannot go on.
                raise ProtocolError("segment file ended inside a fetch response; closing")
            offset += sent
            remaining -= sent
        await trio.lowlevel.checkpoint()


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
