"""Request rate: small requests on one connection with one in flight, and the broker's CPU
time per request, beside a floor measured in the same run.

A ``trilog broker`` runs as a child process on a free loopback port (``_common.BrokerProcess``);
its CPU time (user + sys, ``/proc/<pid>/stat``) is read before and after each phase.  The
floor is a minimal trio server (a child process) that speaks just enough Kafka for a
producer: ApiVersions, Metadata v0-v1 and Produce v3, one partition led by itself, every
answer made once at start, no storage.  It is the cost of trio, the loopback and the client,
with no broker in it.  Each phase runs against the floor and then the broker, ``--rounds``
times alternating; medians are shown.  Phases:

  api-versions        ApiVersions v0 (the smallest request), from a blocking socket client
                      that sends one request, reads its answer and sends the next.
  metadata v1         Metadata v1 for one topic, the same client.
  produce acks=1      Produce v3, acks=1, one record of ``--value-bytes`` per request, the
                      same client.
  librdkafka produce  confluent-kafka (librdkafka) with one record per request and one in
                      flight: ``linger.ms`` 0, ``batch.num.messages`` 1,
                      ``max.in.flight.requests.per.connection`` 1, acks=1 (issue 27's
                      configuration; target: at least 0.8x the floor).

Against the broker only:

  kafka-python        the same produce through kafka-python, ``send(...).get()`` per record
                      (acks=1, ``linger_ms=0``): the figure a pure-Python Kafka client gets.
  pipelined           librdkafka with ``linger.ms=0`` and its default pipelining, paced at
                      ``--rate`` records/s for ``--seconds``: delivery latency percentiles
                      and the broker's memory, which must not grow with a queue.

Absolute figures swing by tens of percent on this VM: compare each phase with its floor.

    .venv/bin/python benchmarks/request_rate.py                  # 5 s per phase, 3 rounds
    .venv/bin/python benchmarks/request_rate.py --seconds 10 --rounds 5
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
_HEADER = struct.Struct(">hhi")  # a request header's api key, version, correlation id


# -- the floor: a minimal trio server ---------------------------------------------------------


def _kafka_floor_server(port_queue, topic: str) -> None:
    """The floor for Kafka clients: a trio server that speaks just enough Kafka for a
    producer (ApiVersions, Metadata v0-v1, Produce v3, one partition led by itself), every
    answer made once at start (only its correlation id is written per request), no storage."""
    import trio

    listeners_ready: list = []

    def answers(port: int) -> dict[tuple[int, int], bytes]:
        keys = {p.ApiKey.API_VERSIONS: (0, 2), p.ApiKey.METADATA: (0, 1),
                p.ApiKey.PRODUCE: (3, 3)}
        versions = p.ApiVersionsResponse(error_code=0, throttle_time_ms=0, api_keys=[
            p.ApiVersionsResponse.ApiVersion(api_key=int(k), min_version=lo, max_version=hi)
            for k, (lo, hi) in keys.items()])
        M = p.MetadataResponse
        metadata = M(brokers=[M.MetadataResponseBroker(node_id=0, host="127.0.0.1",
                                                       port=port)],
                     cluster_id=None, controller_id=0, topics=[M.MetadataResponseTopic(
                         error_code=0, name=topic, is_internal=False, partitions=[
                             M.MetadataResponseTopic.MetadataResponsePartition(
                                 error_code=0, partition_index=0, leader_id=0,
                                 replica_nodes=[0], isr_nodes=[0])])])
        R = p.ProduceResponse
        produce = R(throttle_time_ms=0, responses=[R.TopicProduceResponse(
            name=topic, partition_responses=[R.TopicProduceResponse.PartitionProduceResponse(
                index=0, error_code=0, base_offset=0, log_append_time_ms=-1,
                log_start_offset=0)])])
        made = {(int(p.ApiKey.API_VERSIONS), v): p.encode_response(versions, v, 0)
                for v in range(3)}
        # a newer client's first ApiVersions (v3+): Kafka's fallback, as the broker answers
        made.update({(int(p.ApiKey.API_VERSIONS), v): p.encode_api_versions_fallback(
            0, {int(k): r for k, r in keys.items()}) for v in range(3, 5)})
        made.update({(int(p.ApiKey.METADATA), v): p.encode_response(metadata, v, 0)
                     for v in range(2)})
        made[(int(p.ApiKey.PRODUCE), 3)] = p.encode_response(produce, 3, 0)
        return made

    async def serve(stream) -> None:
        made = listeners_ready[0]
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
                key, version, correlation = _HEADER.unpack_from(buf, 4)
                answer = made.get((key, version))
                if answer is None:
                    return  # not a request this floor knows: close
                del buf[:4 + n]
                os.write(fd, answer[:4] + _SIZE.pack(correlation) + answer[8:])

    async def main() -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
        listeners_ready.append(answers(port))
        port_queue.put(port)
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


# -- librdkafka, one record per request ----------------------------------------------------


def librdkafka_single(bootstrap: str, topic: str, seconds: float, value_bytes: int,
                      pid: int) -> dict | None:
    """librdkafka with one record per request and one request in flight (``linger.ms`` 0,
    ``batch.num.messages`` 1, ``max.in.flight`` 1, acks=1): requests/s is records delivered
    per second, the server's (``pid``) CPU per request beside it."""
    try:
        from confluent_kafka import Producer
    except ImportError:
        return None
    delivered = [0]

    def done(err, _msg) -> None:
        if err is None:
            delivered[0] += 1

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1,
                         "batch.num.messages": 1, "max.in.flight.requests.per.connection": 1,
                         "enable.idempotence": False, "queue.buffering.max.messages": 100_000})
    value = b"v" * value_bytes

    def run(until: float) -> None:
        while time.perf_counter() < until:
            # keep a few hundred records queued, so a request is always ready to go
            while len(producer) < 500:
                producer.produce(topic, value, partition=0, on_delivery=done)
            producer.poll(0.001)

    try:
        run(time.perf_counter() + 1.0)  # warm-up: connections, metadata
        meter = CpuMeter(pid)
        first = delivered[0]
        meter.start()
        run(time.perf_counter() + seconds)
        cpu = meter.stop()
        n = delivered[0] - first
        return {"requests/s": n / cpu["wall"], "cpu_us": cpu["proc_cpu"] / max(n, 1) * 1e6}
    finally:
        producer.purge()
        producer.flush(10)


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


def _median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2]


def _phases(address: tuple[str, int], frames: dict[str, bytes], seconds: float, pid: int,
            value_bytes: int) -> dict[str, dict]:
    """One round of the phases that run against both the floor and the broker."""
    out = {name: one_in_flight(address, frame, seconds, pid) for name, frame in frames.items()}
    single = librdkafka_single(f"{address[0]}:{address[1]}", "rate", seconds, value_bytes, pid)
    if single is not None:
        out["librdkafka produce"] = single
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each phase")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of floor and broker, alternating (medians are shown)")
    parser.add_argument("--value-bytes", type=int, default=100, help="record value size")
    parser.add_argument("--rate", type=int, default=10_000,
                        help="records/s of the pipelined librdkafka phase")
    args = parser.parse_args(argv)

    frames = {
        "api-versions": p.encode_request(p.ApiVersionsRequest(), 0, 1, client_id="rate"),
        "metadata v1": p.encode_request(p.MetadataRequest(topics=[
            p.MetadataRequest.MetadataRequestTopic(name="rate")]), 1, 1, client_id="rate"),
        "produce acks=1": produce_frame("rate", args.value_bytes),
    }
    floor_runs: list[dict[str, dict]] = []
    broker_runs: list[dict[str, dict]] = []
    ctx = mp.get_context("spawn")
    ports = ctx.Queue()
    server = ctx.Process(target=_kafka_floor_server, args=(ports, "rate"), daemon=True)
    server.start()
    try:
        floor_address = ("127.0.0.1", ports.get(timeout=30))
        with tempfile.TemporaryDirectory(prefix="trilog-rate-") as data, \
                BrokerProcess(data) as broker:
            create_topic(broker.address, "rate")
            for _ in range(args.rounds):
                floor_runs.append(_phases(floor_address, frames, args.seconds, server.pid,
                                          args.value_bytes))
                broker_runs.append(_phases(broker.address, frames, args.seconds, broker.pid,
                                           args.value_bytes))
            bootstrap = f"{broker.host}:{broker.port}"
            kafka = kafka_python_sync(bootstrap, "rate", args.seconds, args.value_bytes,
                                      broker.pid)
            piped = pipelined(bootstrap, "rate", args.rate, args.seconds, args.value_bytes,
                              broker.pid)
    finally:
        server.terminate()
        server.join(10)

    print(f"one connection, one request in flight, {args.seconds:.0f} s per phase, "
          f"{args.rounds} rounds of floor and broker alternating, medians "
          f"({os.cpu_count()} cores)")
    print("floor: a trio server speaking just enough Kafka (ApiVersions, Metadata v0-v1, "
          "Produce v3), answers made once, no storage")
    print(f"{'phase':20s} {'floor req/s':>12s} {'trilog req/s':>13s} {'x floor':>8s} "
          f"{'broker CPU us/req':>18s} {'p50 us':>7s} {'p99 us':>7s}")
    for name in broker_runs[0]:
        floor = _median([r[name]["requests/s"] for r in floor_runs])
        rate = _median([r[name]["requests/s"] for r in broker_runs])
        cpu = _median([r[name]["cpu_us"] for r in broker_runs])
        p50 = _median([r[name].get("p50_us", float("nan")) for r in broker_runs])
        p99 = _median([r[name].get("p99_us", float("nan")) for r in broker_runs])
        print(f"{name:20s} {floor:12,.0f} {rate:13,.0f} {rate / floor:8.2f} {cpu:18.1f} "
              f"{p50:7.0f} {p99:7.0f}")
    if kafka is not None:
        print(f"{'kafka-python sync':20s} {'':12s} {kafka['requests/s']:13,.0f} {'':8s} "
              f"{kafka['cpu_us']:18.1f} {kafka['p50_us']:7.0f} {kafka['p99_us']:7.0f}")
    print("targets: librdkafka single-record produce >= 0.8x the floor (issue 27); "
          "produce >= 20,000 requests/s, <= 50 us of broker CPU per request (issue 14)")
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
