"""The network layer's ordering with answers that come later (``Later``): a connection's
requests are handled one at a time and in order, and answered in order, but a request whose
answer waits (an ``acks=all`` produce waiting for the in-sync replicas) does not hold up the
handling of the requests behind it.  And its back-pressure: a client that sends faster than
it reads its answers is slowed by TCP, not queued in the broker."""

from __future__ import annotations

import socket

import trio

from trilog import protocol as p
from trilog.broker.network._network import IOV_MAX, Later, Network, _write_all
from trilog.errors import RemoteProtocolError


async def _serve(handler, body, **options):
    """Run a ``Network`` with ``handler`` (and ``options``) around ``body(stream)``, a
    connected client."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    network = Network(handler, listeners, max_request_bytes=1 << 20, **options)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(network.serve)
            stream = await trio.open_tcp_stream("127.0.0.1", network.port)
            try:
                await body(stream)
            finally:
                await stream.aclose()
            nursery.cancel_scope.cancel()
    for listener in listeners:
        await listener.aclose()


async def _receive_frames(stream, count: int) -> list[bytes]:
    data = b""
    frames = []
    while len(frames) < count:
        chunk = await stream.receive_some(1 << 16)
        if not chunk:
            break
        data += chunk
        while len(data) >= 4 and len(data) >= 4 + int.from_bytes(data[:4], "big"):
            size = int.from_bytes(data[:4], "big")
            frames.append(data[4:4 + size])
            data = data[4 + size:]
    return frames


async def test_a_later_answer_does_not_hold_up_the_next_request_and_answers_keep_order():
    handled: list[bytes] = []
    release = trio.Event()

    async def handler(frame, peer):
        body = bytes(frame)
        handled.append(body)
        if body == b"slow":
            async def answer():
                await release.wait()
                return [p.frame(b"slow answered")]
            return Later(answer)
        return [p.frame(body + b" answered")]

    async def body(stream):
        await stream.send_all(p.frame(b"slow") + p.frame(b"fast") + p.frame(b"last"))
        with trio.fail_after(5):
            while len(handled) < 3:  # the requests behind the slow one were handled ...
                await trio.sleep(0.01)
        with trio.move_on_after(0.2):  # ... but nothing is answered before the slow one
            assert await stream.receive_some(1) == b"", "an answer overtook the slow one"
        release.set()
        assert await _receive_frames(stream, 3) == [
            b"slow answered", b"fast answered", b"last answered"]

    await _serve(handler, body)
    assert handled == [b"slow", b"fast", b"last"]


async def test_a_refused_request_closes_the_connection_after_the_answers_before_it():
    release = trio.Event()

    async def handler(frame, peer):
        if bytes(frame) == b"bad":
            release.set()
            raise RemoteProtocolError("a malformed request")

        async def answer():
            await release.wait()
            return [p.frame(b"good answered")]
        return Later(answer)

    async def body(stream):
        await stream.send_all(p.frame(b"good") + p.frame(b"bad") + p.frame(b"ignored"))
        frames = await _receive_frames(stream, 2)
        assert frames == [b"good answered"]  # then the connection closed

    await _serve(handler, body)


async def test_a_client_that_does_not_read_its_answers_stops_being_read():
    """Kafka's processors mute a connection while its request is handled; here a connection
    reads its next request only once the last is answered, so requests sent faster than
    their answers are read wait in the socket buffers, not in the broker."""
    handled = 0
    answer = p.frame(bytes(64 * 1024))

    async def handler(frame, peer):
        nonlocal handled
        handled += 1
        return [answer]

    async def body(stream):
        stream.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        requests = 400
        async with trio.open_nursery() as nursery:
            # 400 requests of 1 KiB fit in the buffers; their 25 MiB of answers do not.
            nursery.start_soon(stream.send_all, p.frame(bytes(1024)) * requests)
            await trio.sleep(1.0)
            stalled_at = handled
            assert 0 < stalled_at < 10, (
                f"{stalled_at} of {requests} requests were handled with no answer read")
            frames = await _receive_frames(stream, requests)
        assert len(frames) == requests and handled == requests

    await _serve(handler, body, send_buffer_bytes=64 * 1024)


async def test_an_answer_of_more_parts_than_one_writev_takes_is_written_whole():
    """A fetch of many partitions answers in thousands of small parts; ``writev`` takes at
    most IOV_MAX (1024) buffers per call."""
    pieces = [b"%05d" % i for i in range(3 * IOV_MAX + 7)]
    left, right = trio.socket.socketpair()
    with left, right:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_write_all, left, left.fileno(), list(pieces))
            received = b""
            with trio.fail_after(10):
                while len(received) < 5 * len(pieces):
                    received += await right.recv(1 << 16)
    assert received == b"".join(pieces)
