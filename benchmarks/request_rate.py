"""Request rate: small requests on one connection with one in flight, and the broker's CPU
time per request, beside the floor of any trio server measured in the same run.

A ``trilog broker`` runs as a child process on a free loopback port (``_common.BrokerProcess``);
its CPU time (user + sys, ``/proc/<pid>/stat``) is read before and after each phase.  The client
is this process: a blocking socket that sends one request, reads its answer, and sends the
next, timing each round trip.  Phases:

  floor         the same client against a minimal trio server (a child process) that splits
                the frames and answers each with bytes of a produce answer's size: the cost
                of trio, the loopback and this client, with no Kafka in it.
  api-versions  ApiVersions v0 (the smallest request; its answer is made once).
  produce       Produce v3, acks=1, one record of ``--value-bytes`` per request (the
                latency-sensitive configuration: ``linger.ms=0``, one in flight).
  kafka-python  the same produce through kafka-python, ``send(...).get()`` per record
                (acks=1, ``linger_ms=0``): the figure a pure-Python Kafka client gets, its
                own per-record cost included.
  pipelined     (if confluent-kafka is installed) librdkafka with ``linger.ms=0`` and its
                default pipelining, paced at ``--rate`` records/s for ``--seconds``: delivery
                latency percentiles and the broker's memory, which must not grow with a queue
                (a connection that sends faster than it is answered is slowed by TCP, since
                the broker reads a connection's next request only after answering the last).

Issue 14's target is 20,000 single-record produce requests/s on one connection (at most
50 us of broker time per request).  Absolute figures swing by tens of percent on this VM:
compare each phase with the floor of the same run.

    .venv/bin/python benchmarks/request_rate.py                  # 5 s per phase
    .venv/bin/python benchmarks/request_rate.py --seconds 10 --rate 5000
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import BrokerProcess, CpuMeter, FrameReader, connect, create_topic  # noqa: E402

from trilog import protocol as p  # noqa: E402
from trilog.records import build_batch  # noqa: E402

_SIZE = struct.Struct(">i")


# -- the floor: a minimal trio server ---------------------------------------------------------


def _floor_server(port_queue, answer_size: int) -> None:
    import trio

    answer = _SIZE.pack(answer_size) + bytes(answer_size)

    async def serve(stream) -> None:
        sock = stream.socket
        fd = sock.fileno()
        buf = bytearray()
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(sock)
                continue
            if not data:
                return
            buf += data
            while len(buf) >= 4:
                n = _SIZE.unpack_from(buf)[0]
                if len(buf) < 4 + n:
                    break
                del buf[:4 + n]
                os.write(fd, answer)

    async def main() -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port_queue.put(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(serve, listeners)

    trio.run(main)


# -- the client -------------------------------------------------------------------------------


def timed_requests(request: Callable[[], object], seconds: float, pid: int,
                   warmup: int = 500) -> dict:
    """Call ``request()`` (one request and its answer) again and again for ``seconds``:
    requests/s, the server's (``pid``) CPU per request, round-trip p50 and p99."""
    for _ in range(warmup):
        request()
    meter = CpuMeter(pid)
    meter.start()
    latencies: list[int] = []
    clock, note = time.perf_counter_ns, latencies.append
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(100):
            t0 = clock()
            request()
            note(clock() - t0)
    cpu = meter.stop()
    n = len(latencies)
    latencies.sort()
    return {"requests/s": n / cpu["wall"], "cpu_us": cpu["proc_cpu"] / n * 1e6,
            "p50_us": latencies[n // 2] / 1000, "p99_us": latencies[int(n * 0.99)] / 1000}


def one_in_flight(address: tuple[str, int], frame: bytes, seconds: float, pid: int) -> dict:
    """Send ``frame`` and wait for its answer, again and again, for ``seconds``."""
    sock = connect(address, buffer_bytes=256 * 1024)
    reader = FrameReader(sock, capacity=64 * 1024)
    sendall, read = sock.sendall, reader.read

    def request() -> None:
        sendall(frame)
        read()

    try:
        return timed_requests(request, seconds, pid)
    finally:
        sock.close()


def produce_frame(topic: str, value_bytes: int) -> bytes:
    batch = build_batch([(int(time.time() * 1000), None, b"v" * value_bytes)])
    request = p.ProduceRequest(
        transactional_id=None, acks=1, timeout_ms=30000,
        topic_data=[p.ProduceRequest.TopicProduceData(name=topic, partition_data=[
            p.ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=batch)])])
    return p.encode_request(request, 3, 1, client_id="request-rate")


def kafka_python_sync(bootstrap: str, topic: str, seconds: float, value_bytes: int,
                      pid: int) -> dict | None:
    """One record per request, each waited for, through kafka-python."""
    import warnings

    warnings.filterwarnings("ignore", module="kafka")  # kafka-python warns at import
    try:
        from kafka import KafkaProducer
    except ImportError:
        return None
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0,
                             max_in_flight_requests_per_connection=1)
    value = b"v" * value_bytes
    try:
        return timed_requests(lambda: producer.send(topic, value, partition=0).get(30),
                              seconds, pid, warmup=200)
    finally:
        producer.close()


# -- pipelined: librdkafka ------------------------------------------------------------------


def pipelined(bootstrap: str, topic: str, rate: int, seconds: float, value_bytes: int,
              broker_pid: int) -> dict | None:
    try:
        from confluent_kafka import Producer
    except ImportError:
        return None
    latencies: list[float] = []
    errors = [0]

    def delivered(err, msg) -> None:
        if err is not None:
            errors[0] += 1
            return
        latencies.append(time.perf_counter() - struct.unpack(">d", msg.value()[:8])[0])

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1,
                         "enable.idempotence": False})
    rss_before = _rss(broker_pid)
    rss_max = rss_before
    padding = b"p" * max(0, value_bytes - 8)
    interval = 1.0 / rate
    start = time.perf_counter()
    sent = 0
    while True:
        now = time.perf_counter()
        if now - start >= seconds:
            break
        due = int((now - start) / interval) + 1
        while sent < due:
            producer.produce(topic, struct.pack(">d", time.perf_counter()) + padding,
                             on_delivery=delivered)
            sent += 1
        producer.poll(0)
        if sent % 1000 == 0:
            rss_max = max(rss_max, _rss(broker_pid))
        time.sleep(min(interval, 0.001))
    producer.flush(60)
    rss_max = max(rss_max, _rss(broker_pid))
    latencies.sort()
    n = len(latencies)
    if not n:
        return {"sent": sent, "delivered": 0, "errors": errors[0]}
    return {"sent": sent, "delivered": n, "errors": errors[0],
            "p50_ms": latencies[n // 2] * 1000, "p99_ms": latencies[int(n * 0.99)] * 1000,
            "max_ms": latencies[-1] * 1000, "rss_growth_mb": (rss_max - rss_before) / 2**20}


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- main -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each phase")
    parser.add_argument("--value-bytes", type=int, default=100, help="record value size")
    parser.add_argument("--rate", type=int, default=10_000,
                        help="records/s of the pipelined librdkafka phase")
    args = parser.parse_args(argv)

    rows: list[tuple[str, dict]] = []
    produce = produce_frame("rate", args.value_bytes)
    # Floor: answers the size of a Produce v3 answer for one partition.
    ctx = mp.get_context("spawn")
    ports = ctx.Queue()
    server = ctx.Process(target=_floor_server, args=(ports, 4 + 4 + 2 + 4 + 4 + 2 + 8 + 8 + 4),
                        daemon=True)
    server.start()
    try:
        port = ports.get(timeout=30)
        rows.append(("floor (trio echo)", one_in_flight(("127.0.0.1", port), produce,
                                                        args.seconds, server.pid)))
    finally:
        server.terminate()
        server.join(10)

    with tempfile.TemporaryDirectory(prefix="trilog-rate-") as data, \
            BrokerProcess(data) as broker:
        create_topic(broker.address, "rate")
        api_versions = p.encode_request(p.ApiVersionsRequest(), 0, 1, client_id="request-rate")
        rows.append(("api-versions", one_in_flight(broker.address, api_versions,
                                                   args.seconds, broker.pid)))
        rows.append(("produce acks=1", one_in_flight(broker.address, produce, args.seconds,
                                                     broker.pid)))
        bootstrap = f"{broker.host}:{broker.port}"
        kafka = kafka_python_sync(bootstrap, "rate", args.seconds, args.value_bytes,
                                  broker.pid)
        if kafka is not None:
            rows.append(("kafka-python sync", kafka))
        piped = pipelined(bootstrap, "rate", args.rate, args.seconds, args.value_bytes,
                          broker.pid)

    floor = rows[0][1]
    print(f"one connection, one request in flight, {args.seconds:.0f} s per phase "
          f"({os.cpu_count()} cores)")
    print(f"{'phase':20s} {'requests/s':>11s} {'x floor':>8s} {'server CPU us/req':>18s} "
          f"{'p50 us':>8s} {'p99 us':>8s}")
    for name, r in rows:
        print(f"{name:20s} {r['requests/s']:11,.0f} {r['requests/s'] / floor['requests/s']:8.2f} "
              f"{r['cpu_us']:18.1f} {r['p50_us']:8.0f} {r['p99_us']:8.0f}")
    print("target: produce >= 20,000 requests/s, <= 50 us of broker CPU per request")
    if piped is None:
        print("pipelined: confluent-kafka is not installed; skipped")
    elif "p50_ms" not in piped:
        print(f"pipelined: nothing delivered ({piped})")
    else:
        print(f"pipelined librdkafka, linger.ms=0, {args.rate:,} records/s for "
              f"{args.seconds:.0f} s: {piped['delivered']:,}/{piped['sent']:,} delivered, "
              f"{piped['errors']} errors; delivery p50 {piped['p50_ms']:.1f} ms, "
              f"p99 {piped['p99_ms']:.1f} ms, max {piped['max_ms']:.1f} ms; broker RSS "
              f"+{piped['rss_growth_mb']:.1f} MB")
    return 0


if __name__ == "__main__":
    threading.current_thread().name = "request-rate"
    sys.exit(main())
