"""Clean shutdown with open connections and a parked long-poll fetch.

SIGTERM/SIGINT to a broker process, and leaving ``open_broker``, must finish within 5 s:
parked fetches answer (or their connection closes), idle connections close, logs are
flushed and the clean-shutdown marker is written, so the next start recovers nothing.
"""

from __future__ import annotations

import select
import signal
import time

import pytest
import trio
from broker_helpers import (
    connect,
    create_topic,
    create_topics_request,
    fetch_request,
    metadata_request,
    only_partition,
    produce,
    recv_frame,
    roundtrip,
    send_request,
    trio_connect,
    trio_recv_frame,
    trio_roundtrip,
    trio_send,
)

from trilog import protocol as p
from trilog.broker import open_broker

MARKER = ".kafka_cleanshutdown"


def _no_answer_yet(sock, wait: float = 0.5) -> bool:
    readable, _, _ = select.select([sock], [], [], wait)
    return not readable


def _check_parked_fetch_outcome(payload: bytes | None, corr: int, version: int) -> None:
    """A parked fetch either gets its (empty) answer or its connection closes."""
    if payload is None:
        return
    assert p.read_correlation_id(payload) == corr
    _, response = p.decode_response(payload, p.ApiKey.FETCH, version)
    part = only_partition(response)
    assert part.error_code == 0
    assert bytes(part.records or b"") == b""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_with_open_connections_and_parked_fetch(broker_process, sig):
    broker = broker_process()
    with connect(broker.bootstrap) as admin:
        create_topic(admin, "quiet")
        create_topic(admin, "busy")
        produce(admin, "busy", 0, [b"a", b"b"])

    idle = [connect(broker.bootstrap) for _ in range(3)]
    roundtrip(idle[0], metadata_request(None), 1)
    # A connection in the middle of sending a request (half a frame so far).
    partial = connect(broker.bootstrap)
    partial.sendall(b"\x00\x00\x01\x00" + b"\x00" * 10)
    parked = connect(broker.bootstrap)
    parked.settimeout(10)
    corr = send_request(parked, fetch_request("quiet", 0, 0, max_wait_ms=30000, min_bytes=1), 4)
    assert _no_answer_yet(parked), "the fetch should be parked (no data, 30 s max wait)"
    try:
        t0 = time.monotonic()
        broker.proc.send_signal(sig)
        code = broker.proc.wait(5)
        elapsed = time.monotonic() - t0
        assert code == 0, broker.stderr()
        assert elapsed < 5
        _check_parked_fetch_outcome(recv_frame(parked), corr, 4)
        for sock in idle + [partial]:
            assert recv_frame(sock) is None  # closed by the broker
    finally:
        for sock in idle + [partial, parked]:
            sock.close()
    broker.stop()
    assert any(b"shutting down" in line for line in broker.stdout_lines)
    assert (broker.log_dir / MARKER).exists()

    # The next start finds the marker: no recovery, and the data is all there.
    again = broker_process(broker.log_dir)
    with connect(again.bootstrap) as sock:
        part = only_partition(roundtrip(sock, fetch_request("busy", 0, 0), 4))
        assert part.high_watermark == 2
    assert "no clean-shutdown marker" not in again.stderr()
    assert again.stop() == 0


def test_signal_while_clients_keep_sending(broker_process):
    """A client pipelining requests during shutdown gets answers for what the broker read,
    then a closed connection; the broker still exits promptly and cleanly."""
    broker = broker_process()
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "stream")
        from broker_helpers import batch, produce_request

        request = produce_request("stream", 0, batch([b"x" * 100] * 10))
        sent = []
        for _ in range(50):
            sent.append(send_request(sock, request, 3))
        broker.proc.send_signal(signal.SIGTERM)
        answered = 0
        for corr in sent:
            payload = recv_frame(sock)
            if payload is None:
                break
            assert p.read_correlation_id(payload) == corr
            answered += 1
        assert broker.proc.wait(5) == 0
    again = broker_process(broker.log_dir)
    with connect(again.bootstrap) as sock:
        part = only_partition(roundtrip(sock, fetch_request("stream", 0, 0), 4))
        # Every answered produce is in the log (and perhaps a few unanswered ones).
        assert part.high_watermark >= answered * 10


async def test_open_broker_exit_with_parked_fetch(tmp_path):
    log_dir = tmp_path / "data"
    with trio.fail_after(30):
        async with open_broker({"port": 0, "log.dirs": str(log_dir)}) as broker:
            admin = await trio_connect(broker.port)
            response = await trio_roundtrip(admin, create_topics_request({"quiet": 1}), 2)
            assert response.topics[0].error_code == 0
            idle = [await trio_connect(broker.port) for _ in range(3)]
            parked = await trio_connect(broker.port)
            corr = await trio_send(parked, fetch_request("quiet", 0, 0, max_wait_ms=30000,
                                                         min_bytes=1), 4)
            while broker.statistics()["parked_fetches"] != 1:
                await trio.sleep(0.01)
            assert broker.statistics()["open_connections"] == 5
            t0 = trio.current_time()
        elapsed = trio.current_time() - t0
        assert elapsed < 5
        assert broker.stopped.is_set()
        _check_parked_fetch_outcome(await trio_recv_frame(parked), corr, 4)
        for stream in idle + [admin]:
            assert await trio_recv_frame(stream) is None
            await stream.aclose()
        await parked.aclose()
    assert (log_dir / MARKER).exists()
    assert broker.statistics()["open_connections"] == 0


async def test_shutdown_method_returns_serve_broker(tmp_path):
    """``Broker.shutdown()`` makes ``serve_broker`` return (and the marker appear)."""
    from trilog.broker import serve_broker

    log_dir = tmp_path / "data"
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            broker = await nursery.start(serve_broker, {"port": 0, "log.dirs": str(log_dir)})
            stream = await trio_connect(broker.port)
            await trio_roundtrip(stream, metadata_request(["auto"]), 1)
            broker.shutdown()
            await broker.stopped.wait()
            await stream.aclose()
    assert (log_dir / MARKER).exists()
    assert (log_dir / "auto-0").is_dir()
