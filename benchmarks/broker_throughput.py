"""Broker throughput: produce and fetch through a real ``trilog broker`` process, with the
broker's CPU seconds per GB, each beside a reference measured in the same run.

The broker runs as a child process on a free loopback port with a temporary log dir; its
CPU time (user and sys of all its threads, from ``/proc/<pid>/stat``) is read before and
after each phase.  Load generators are separate processes (multiprocessing), started and
connected before the clock starts.  Phases:

  produce, lean    raw Produce v3 requests, each a prebuilt ~1 MiB RecordBatch v2 for one
                   partition, pipelined (``--inflight``) on one connection per client: this
                   measures the broker, not a client library.  Target: < 1 CPU s/GB.
  produce floor    the same requests, same clients, to a tiny Python server that only
                   ``recv_into``s each request and ``os.write``s it to a file (page cache), in
                   alternating rounds with the lean phase: what any Python broker pays.
  produce, kafka   kafka-python's KafkaProducer (acks=1, no idempotence), record by record:
                   a real client, whose per-record Python cost limits the figure.
  fetch            raw Fetch v4 requests (``--fetch-max-bytes`` per partition), one in flight
                   per partition, several partitions per connection; responses are read into
                   a reused buffer and only batch headers are looked at.  Target: >= 1 GB/s.
  sendfile         the ceiling, in alternating rounds with fetch: a tiny server process
                   ``os.sendfile``s the same segment files over loopback to as many readers.

The broker and the load generators share this machine's cores: the table shows where the
machine's CPU went, so a client-bound phase, or other work on the machine, shows up.  In a VM
the page cache makes absolute figures swing by tens of percent between runs (writing fresh
page-cache pages is much dearer there than on bare metal): compare the ratios from one run,
and run it a few times.

    .venv/bin/python benchmarks/broker_throughput.py --quick       # 256 MiB, 2 rounds
    .venv/bin/python benchmarks/broker_throughput.py               # 2 GiB per phase
    .venv/bin/python benchmarks/broker_throughput.py --size 1G --record-size 100 --partitions 4
"""

from __future__ import annotations

import argparse
import glob
import multiprocessing as mp
import os
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import (
    BrokerProcess,
    CpuMeter,
    FrameReader,
    call,
    connect,
    human_bytes,
    parse_size,
    recv_exactly,
)

from trilog import protocol as p
from trilog.records import RecordBatchBuilder

PRODUCE_VERSION = 3
FETCH_VERSION = 4
TARGET_PRODUCE_CPU_PER_GB = 1.0
TARGET_FETCH_MB_S = 1000.0
#: SO_SNDBUF of the broker's sockets (its ``socket.send.buffer.bytes``) and of the sendfile
#: ceiling's: loopback throughput depends on it (8 MiB is twice as slow as 1 MiB here).
SEND_BUFFER_BYTES = 1 << 20

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")
_CORRELATION_AT = 4 + 2 + 2  # frame size, api key, api version
_BATCH_LENGTH_AT = 8  # RecordBatch v2: base offset int64, then batch length int32
_LAST_DELTA_AT = 23  # ... partition leader epoch int32, magic int8, crc int32, attributes int16


# -- setup ------------------------------------------------------------------------------------


def create_topic(address, name: str, partitions: int) -> None:
    CT = p.CreateTopicsRequest
    request = CT(topics=[CT.CreatableTopic(name=name, num_partitions=partitions,
                                           replication_factor=1, assignments=[], configs=[])],
                 timeout_ms=30_000)
    with connect(address) as sock:
        _, response = p.decode_response(call(sock, p.encode_request(request, 0, 1)),
                                        p.ApiKey.CREATE_TOPICS, 0)
    error = response.topics[0].error_code
    if error:
        raise RuntimeError(f"CreateTopics {name}: error {error}")


def delete_topics(address, names: list[str]) -> None:
    """Delete topics we no longer need, so that their page cache is given back."""
    request = p.DeleteTopicsRequest(topic_names=names, timeout_ms=30_000)
    with connect(address) as sock:
        call(sock, p.encode_request(request, 0, 1))


def build_record_batch(record_size: int, batch_bytes: int, seed: int = 0) -> tuple[bytes, int]:
    """One v2 batch of at most ``batch_bytes`` of ``record_size``-byte values (keyless, no
    compression), values cut from a random pool so the pages are not all alike."""
    pool = os.urandom(max(64 * 1024, 2 * record_size))
    builder = RecordBatchBuilder(max_bytes=batch_bytes)
    i = 0
    span = len(pool) - record_size
    ts = 1_700_000_000_000 + seed
    while builder.append(ts + (i & 1023), None, pool[(i * 7919) % span:][:record_size]) is not None:
        i += 1
    return builder.build(), i


def source_version() -> str:
    """The trilog commit measured (read-only git), with a note when the tree is modified."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=False).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "trilog"],
                               capture_output=True, text=True, timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + (" + local changes under trilog/" if dirty else "")


def assign(partitions: int, workers: int, w: int) -> list[int]:
    mine = [q for q in range(partitions) if q % workers == w]
    return mine or [w % partitions]


# -- load generators (child processes) --------------------------------------------------------


def _worker(target, ready: mp.Queue, go, results: mp.Queue, *args) -> None:
    """Run ``target(*args)`` (a generator: prepares, yields once when ready, then returns the
    result) in a child process, in step with the others."""
    try:
        gen = target(*args)
        next(gen)
        ready.put(os.getpid())
        go.wait()
        t0 = os.times()
        try:
            next(gen)
        except StopIteration as done:
            t1 = os.times()
            done.value["cpu"] = (t1.user - t0.user) + (t1.system - t0.system)
            results.put(("ok", done.value))
        else:
            raise RuntimeError("load generator yielded twice")
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
        ready.put(None)
        results.put(("error", traceback.format_exc()))


def lean_producer(address, topic, partitions, record_size, batch_bytes, batches, inflight):
    batch, records_per_batch = build_record_batch(record_size, batch_bytes, seed=partitions[0])
    PR = p.ProduceRequest
    frames = []
    for q in partitions:
        request = PR(acks=1, timeout_ms=30_000, topic_data=[PR.TopicProduceData(
            name=topic, partition_data=[PR.TopicProduceData.PartitionProduceData(
                index=q, records=batch)])])
        frames.append(bytearray(p.encode_request(request, PRODUCE_VERSION, 0)))
    sock = connect(address)
    reader = FrameReader(sock, 64 * 1024)
    yield
    start = time.perf_counter()
    sent = acked = errors = 0
    pack_into = _I32.pack_into
    nframes = len(frames)
    while acked < batches:
        while sent < batches and sent - acked < inflight:
            frame = frames[sent % nframes]
            pack_into(frame, _CORRELATION_AT, sent)
            sock.sendall(frame)
            sent += 1
        _, response = p.decode_response(reader.read(), p.ApiKey.PRODUCE, PRODUCE_VERSION)
        for topic_response in response.responses:
            for part in topic_response.partition_responses:
                errors += part.error_code != 0
        acked += 1
    elapsed = time.perf_counter() - start
    sock.close()
    return {"bytes": batches * len(batch), "records": batches * records_per_batch,
            "requests": batches, "errors": errors, "elapsed": elapsed,
            "batch_bytes": len(batch), "records_per_batch": records_per_batch}


def kafka_producer(bootstrap, topic, partitions, record_size, count, batch_bytes):
    import logging

    from kafka import KafkaProducer

    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks=1, enable_idempotence=False, linger_ms=20,
        batch_size=batch_bytes, max_request_size=4 * batch_bytes,
        max_in_flight_requests_per_connection=5,
    )
    producer.partitions_for(topic)  # metadata now, not inside the timing
    pool = os.urandom(max(64 * 1024, 2 * record_size))
    span = len(pool) - record_size
    values = [pool[(i * 7919) % span:][:record_size] for i in range(1024)]
    yield
    start = time.perf_counter()
    send = producer.send
    nparts = len(partitions)
    failures = []
    for i in range(count):
        send(topic, values[i & 1023], partition=partitions[i % nparts])
    producer.flush()
    elapsed = time.perf_counter() - start
    producer.close()
    return {"bytes": count * record_size, "records": count, "requests": 0,
            "errors": len(failures), "elapsed": elapsed}


def _fetch_frame(topic: str, partition: int, offset: int, max_bytes: int, corr: int) -> bytes:
    FR = p.FetchRequest
    request = FR(max_wait_ms=0, min_bytes=1, max_bytes=0x7FFFFFFF, isolation_level=0,
                 topics=[FR.FetchTopic(topic=topic, partitions=[FR.FetchTopic.FetchPartition(
                     partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes)])])
    return p.encode_request(request, FETCH_VERSION, corr)


def _parse_fetch_v4(payload: memoryview) -> tuple[int, int, int, int, int]:
    """``(partition, error, high_watermark, records_length, next_offset or -1)`` of a
    one-partition Fetch v4 response, looking at nothing but headers (no record decoding)."""
    pos = 4 + 4  # correlation id, throttle_time_ms
    (ntopics,) = _I32.unpack_from(payload, pos)
    assert ntopics == 1, ntopics
    (name_len,) = _I16.unpack_from(payload, pos + 4)
    pos += 4 + 2 + name_len
    (nparts,) = _I32.unpack_from(payload, pos)
    assert nparts == 1, nparts
    partition, error, hw, _lso = struct.unpack_from(">ihqq", payload, pos + 4)
    pos += 4 + 4 + 2 + 8 + 8
    (naborted,) = _I32.unpack_from(payload, pos)
    pos += 4 + max(naborted, 0) * 16
    (length,) = _I32.unpack_from(payload, pos)
    pos += 4
    end = pos + max(length, 0)
    next_offset = -1
    while end - pos >= 61:  # walk the batch headers only
        (base,) = _I64.unpack_from(payload, pos)
        (blen,) = _I32.unpack_from(payload, pos + _BATCH_LENGTH_AT)
        if pos + 12 + blen > end:
            break  # a partial trailing batch
        (delta,) = _I32.unpack_from(payload, pos + _LAST_DELTA_AT)
        next_offset = base + delta + 1
        pos += 12 + blen
    return partition, error, hw, max(length, 0), next_offset


def fetch_consumer(address, pairs, max_bytes):
    """Fetch each ``(topic, partition)`` from offset 0 to its high watermark: one request in
    flight per partition, all of this worker's partitions pipelined on one connection."""
    sock = connect(address, 8 << 20)
    reader = FrameReader(sock, max_bytes + (1 << 20))
    yield
    start = time.perf_counter()
    offsets = dict.fromkeys(pairs, 0)
    in_flight = {}  # correlation id -> (topic, partition); responses come back in order
    total = responses = errors = corr = 0
    for key in pairs:
        sock.sendall(_fetch_frame(*key, 0, max_bytes, corr))
        in_flight[corr] = key
        corr += 1
    while in_flight:
        payload = reader.read()
        key = in_flight.pop(_I32.unpack_from(payload, 0)[0])
        responses += 1
        _q, error, hw, length, next_offset = _parse_fetch_v4(payload)
        if error:
            errors += 1
            continue
        total += length
        offsets[key] = max(offsets[key], next_offset)
        if offsets[key] < hw and next_offset != -1:
            sock.sendall(_fetch_frame(*key, offsets[key], max_bytes, corr))
            in_flight[corr] = key
            corr += 1
    elapsed = time.perf_counter() - start
    sock.close()
    return {"bytes": total, "records": sum(offsets.values()), "requests": responses,
            "errors": errors, "elapsed": elapsed}


def sendfile_reader(address, index: int, expected: int, chunk: int):
    sock = connect(address, 8 << 20)
    buf = memoryview(bytearray(chunk))
    yield
    start = time.perf_counter()
    sock.sendall(bytes([index]))  # which files: the same partitions as fetch worker ``index``
    got = 0
    recv_into = sock.recv_into
    while got < expected:
        n = recv_into(buf, min(chunk, expected - got))
        if n == 0:
            raise ConnectionError("the sendfile server closed early")
        got += n
    elapsed = time.perf_counter() - start
    sock.close()
    return {"bytes": got, "records": 0, "requests": 0, "errors": 0, "elapsed": elapsed}


def sendfile_server(listener: socket.socket, per_connection: list[list[str]]) -> None:
    """Child process: for each accepted connection, a thread waits for one byte (the reader's
    index) and then ``os.sendfile``s that reader's files whole, blocking, with the broker's
    socket send buffer size."""

    def serve(conn: socket.socket) -> None:
        with conn:
            paths = per_connection[conn.recv(1)[0]]
            out = conn.fileno()
            for path in paths:
                fd = os.open(path, os.O_RDONLY)
                try:
                    offset, size = 0, os.fstat(fd).st_size
                    while offset < size:
                        sent = os.sendfile(out, fd, offset, size - offset)
                        if sent == 0:
                            break
                        offset += sent
                finally:
                    os.close(fd)

    threads = []
    for _ in per_connection:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        t = threading.Thread(target=serve, args=(conn,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()


def produce_floor_server(listener: socket.socket, connections: int, directory: str) -> None:
    """Child process: the least a Python broker must do per produce request, as a reference.

    A thread per connection reads each size-delimited request into a reused buffer
    (``recv_into``), ``os.write``s the payload to a file of its own (into the page cache, as
    the broker does) and answers with a canned ProduceResponse v3.  No parsing, no CRC, no
    event loop: what is left is the copy from the socket and the copy into the page cache."""
    R = p.ProduceResponse
    canned = bytearray(p.encode_response(R(responses=[R.TopicProduceResponse(
        name="floor", partition_responses=[R.TopicProduceResponse.PartitionProduceResponse(
            index=0, error_code=0, base_offset=0)])], throttle_time_ms=0),
        PRODUCE_VERSION, 0))

    def serve(conn: socket.socket, n: int) -> None:
        response = bytearray(canned)
        size = bytearray(4)
        buf = bytearray(1 << 20)
        fd = os.open(os.path.join(directory, f"floor-{n}.log"),
                     os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            with conn:
                while True:
                    try:
                        recv_exactly(conn, memoryview(size))
                    except ConnectionError:
                        return
                    (length,) = _I32.unpack(size)
                    if length > len(buf):
                        buf = bytearray(length)
                    view = memoryview(buf)[:length]
                    recv_exactly(conn, view)
                    os.write(fd, view)
                    response[4:8] = view[4:8]  # the request's correlation id
                    conn.sendall(response)
        finally:
            os.close(fd)

    threads = []
    for n in range(connections):
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        t = threading.Thread(target=serve, args=(conn, n))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()


class ServerProcess:
    """A reference server (``sendfile_server``, ``produce_floor_server``) in a child process
    on a free loopback port; joined (or terminated) on exit."""

    def __init__(self, target, *args) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.address = self.listener.getsockname()
        self.proc = mp.get_context("fork").Process(target=target, args=(self.listener, *args),
                                                   daemon=True)

    def __enter__(self) -> ServerProcess:  # noqa: PYI034
        self.proc.start()
        return self

    def __exit__(self, *exc) -> None:
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.terminate()  # only the process this object started
            self.proc.join(5)
        self.listener.close()


# -- phases -----------------------------------------------------------------------------------


def run_phase(meter: CpuMeter, target, per_worker_args: list[tuple], timeout: float = 3600):
    """Start one process per argument tuple, wait until all are ready, start the clock and
    the CPU meter, let them go, collect their results."""
    ctx = mp.get_context("fork")
    ready, results, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_worker, args=(target, ready, go, results, *a), daemon=True)
             for a in per_worker_args]
    outcomes = []
    try:
        for proc in procs:
            proc.start()
        for _ in procs:
            if ready.get(timeout=120) is None:
                break
        meter.start()
        go.set()
        outcomes = [results.get(timeout=timeout) for _ in procs]
        usage = meter.stop()
        for proc in procs:
            proc.join(10)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()  # only the processes this function started
                proc.join(5)
    failed = [detail for status, detail in outcomes if status != "ok"]
    if failed:
        raise RuntimeError("a load generator failed:\n" + failed[0])
    out = [detail for _, detail in outcomes]
    total = {k: sum(r[k] for r in out)
             for k in ("bytes", "records", "requests", "errors", "cpu")}
    total.update(usage)
    total["workers"] = len(out)
    total["client_elapsed_max"] = max(r["elapsed"] for r in out)
    return total


def summarize(name: str, r: dict, reference: str = "", records: bool = True,
              quiet: bool = False) -> dict:
    wall = r["wall"]
    rest = r["machine_busy"] - r["proc_cpu"] - r["cpu"] - r["machine_irq"] - r["self_cpu"]
    row = {
        "name": name,
        "bytes": r["bytes"],
        "mb_s": r["bytes"] / wall / 1e6,
        "records_s": r["records"] / wall if records else None,
        "cpu_per_gb": r["proc_cpu"] / (r["bytes"] / 1e9) if r["bytes"] else float("nan"),
        "user_per_gb": r["proc_user"] / (r["bytes"] / 1e9) if r["bytes"] else float("nan"),
        "sys_per_gb": r["proc_sys"] / (r["bytes"] / 1e9) if r["bytes"] else float("nan"),
        "server_cores": r["proc_cpu"] / wall,
        "client_cores": (r["cpu"] + r["self_cpu"]) / wall,
        "irq_cores": r["machine_irq"] / wall,
        "rest_cores": max(0.0, rest / wall),
        "machine_busy": r["machine_busy"] / wall,
        "reference": reference,
        "errors": r["errors"],
        "wall": wall,
    }
    if not quiet:
        print(describe(row), flush=True)
    return row


def describe(row: dict) -> str:
    flag = f"  ({row['errors']} errors!)" if row["errors"] else ""
    rec = f", {row['records_s']:,.0f} records/s" if row["records_s"] is not None else ""
    return (f"  {row['name']}: {human_bytes(row['bytes'])} in {row['wall']:.2f} s: "
            f"{row['mb_s']:,.0f} MB/s{rec}, {row['cpu_per_gb']:.2f} server CPU s/GB (user "
            f"{row['user_per_gb']:.2f} + sys {row['sys_per_gb']:.2f}); cores: "
            f"server {row['server_cores']:.2f}, clients {row['client_cores']:.2f}, softirq "
            f"{row['irq_cores']:.2f}, rest {row['rest_cores']:.2f} (busy "
            f"{row['machine_busy']:.2f} of {os.cpu_count()}){flag}")


def median_row(name: str, rows: list[dict], reference: str) -> dict:
    """The round with the median MB/s stands for the phase."""
    ordered = sorted(rows, key=lambda r: r["mb_s"])
    row = dict(ordered[(len(ordered) - 1) // 2])
    row["name"] = name
    row["reference"] = reference
    return row


def combine(results: list[dict]) -> dict:
    """Rounds of one phase as one: bytes, CPU seconds and wall time add up."""
    keys = ("bytes", "records", "requests", "errors", "cpu", "wall", "proc_cpu", "proc_user",
            "proc_sys", "self_cpu", "machine_busy", "machine_total", "machine_irq")
    return {k: sum(r[k] for r in results) for k in keys}


def print_table(rows: list[dict], notes: list[str]) -> None:
    header = (f"{'phase':38} {'MB/s':>7} {'records/s':>10} {'server CPU s/GB':>17}  "
              f"{'----- cores busy -----':24}  reference / target")
    sub = (f"{'':38} {'':>7} {'':>10} {'all':>5} {'user':>5} {'sys':>5}  {'server':>6}"
           f"{'client':>7}{'sirq':>5}{'rest':>6}")
    print()
    print(header)
    print(sub)
    print("-" * (len(header) + 10))
    for row in rows:
        if row.get("ratio") is not None:
            print(f"{row['name']:38} {row['ratio']:7.2f} {'':>10} {'':>17}  {'':24}  "
                  f"{row['reference']}")
            continue
        rec = f"{row['records_s']:10,.0f}" if row["records_s"] is not None else f"{'':>10}"
        print(f"{row['name']:38} {row['mb_s']:7,.0f} {rec} {row['cpu_per_gb']:5.2f} "
              f"{row['user_per_gb']:5.2f} {row['sys_per_gb']:5.2f}  {row['server_cores']:6.2f}"
              f"{row['client_cores']:7.2f}{row['irq_cores']:5.2f}{row['rest_cores']:6.2f}  "
              f"{row['reference']}")
    print()
    for note in notes:
        print(note)


# -- the run ----------------------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    parser.add_argument("--size", default="2G",
                        help="bytes per lean produce phase (split over the rounds), fetched "
                             "back (default 2G)")
    parser.add_argument("--record-size", type=int, action="append", default=None,
                        help="record value size in bytes, repeatable (default: 100 and 1024)")
    parser.add_argument("--batch-size", default="1M",
                        help="lean producer's RecordBatch size (default 1M)")
    parser.add_argument("--partitions", type=int, default=8, help="partitions (default 8)")
    parser.add_argument("--clients", type=int, default=2,
                        help="lean producer processes, one connection each (default 2)")
    parser.add_argument("--inflight", type=int, default=4,
                        help="pipelined Produce requests per connection (default 4)")
    parser.add_argument("--fetch-clients", type=int, default=None,
                        help="fetch consumer processes, one connection each (default --clients)")
    parser.add_argument("--fetch-max-bytes", default="16M",
                        help="Fetch partition_max_bytes (default 16M)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of each measurement, alternating with its reference: "
                             "lean produce with the floor, fetch with sendfile (default 3)")
    parser.add_argument("--kafka-size", default=None,
                        help="bytes per kafka-python produce phase (default --size / 16)")
    parser.add_argument("--kafka-clients", type=int, default=2,
                        help="kafka-python producer processes (default 2)")
    parser.add_argument("--no-kafka", action="store_true", help="skip the kafka-python phases")
    parser.add_argument("--no-floor", action="store_true",
                        help="skip the produce floor (recv + write) reference")
    parser.add_argument("--quick", action="store_true",
                        help="--size 256M, kafka-python 32M, 2 rounds: a quick look, noisier")
    parser.add_argument("--dir", default=None, help="where the log dir goes (default: temp)")
    parser.add_argument("--pause", action="store_true",
                        help="before each phase, wait for Enter (to attach a profiler)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    size = parse_size("256M" if args.quick else args.size)
    kafka_size = parse_size(args.kafka_size) if args.kafka_size else (
        32 << 20 if args.quick else size // 16)
    rounds = 2 if args.quick and args.rounds == 3 else max(1, args.rounds)
    record_sizes = args.record_size or [100, 1024]
    batch_bytes = parse_size(args.batch_size)
    fetch_max = parse_size(args.fetch_max_bytes)
    parts, clients, inflight = args.partitions, args.clients, args.inflight
    fetch_clients = args.fetch_clients or clients

    def pause(what: str) -> None:
        if args.pause:
            input(f"next: {what}; broker pid {broker.pid}. Enter to go ")

    def split(total: int, n: int) -> list[int]:
        return [total // n + (w < total % n) for w in range(n)]

    base = tempfile.mkdtemp(prefix="trilog-bench-", dir=args.dir)
    log_dir = os.path.join(base, "logs")
    rows: list[dict] = []
    try:
        overrides = {"message.max.bytes": max(1048588, batch_bytes + 1024),
                     "socket.send.buffer.bytes": SEND_BUFFER_BYTES,
                     "log.retention.check.interval.ms": 3_600_000}
        with BrokerProcess(log_dir, overrides) as broker:
            print(f"broker pid {broker.pid} on {broker.host}:{broker.port}, log dir {log_dir}; "
                  f"{os.cpu_count()} cores; python {sys.version.split()[0]}; trilog "
                  f"{source_version()}", flush=True)
            meter = CpuMeter(broker.pid)
            address = broker.address

            # -- produce: lean producer against the broker, alternating with the floor ----
            fetch_topics: list[str] = []
            for record_size in record_sizes:
                probe, per_batch = build_record_batch(record_size, batch_bytes)
                batches = max(clients * rounds, -(-size // len(probe)))
                print(f"produce, lean: {batches} batches of {human_bytes(len(probe))} "
                      f"({per_batch} records of {record_size} B) in {rounds} rounds, "
                      f"{clients} connections x {inflight} in flight, {parts} partitions"
                      + ("" if args.no_floor else "; each round followed by the floor"),
                      flush=True)
                topics, lean_rounds, floor_rounds = [], [], []
                for n, round_batches in enumerate(split(batches, rounds)):
                    topic = f"lean-{record_size}-{n}"
                    topics.append(topic)
                    create_topic(address, topic, parts)
                    per = split(round_batches, clients)
                    pause(f"lean produce {record_size} B, round {n + 1}")
                    r = run_phase(meter, lean_producer, [
                        (address, topic, assign(parts, clients, w), record_size, batch_bytes,
                         per[w], inflight) for w in range(clients)])
                    lean_rounds.append(r)
                    summarize(f"lean round {n + 1}", r)
                    if args.no_floor:
                        continue
                    floor_dir = os.path.join(base, "floor")
                    os.mkdir(floor_dir)
                    try:
                        with ServerProcess(produce_floor_server, clients, floor_dir) as server:
                            r = run_phase(CpuMeter(server.proc.pid), lean_producer, [
                                (server.address, "floor", [0], record_size, batch_bytes,
                                 per[w], inflight) for w in range(clients)])
                    finally:
                        shutil.rmtree(floor_dir, ignore_errors=True)
                    floor_rounds.append(r)
                    summarize(f"floor round {n + 1}", r)
                lean = summarize(f"produce lean, {record_size} B records",
                                 combine(lean_rounds),
                                 f"target < {TARGET_PRODUCE_CPU_PER_GB:.1f} CPU s/GB", quiet=True)
                rows.append(lean)
                if floor_rounds:
                    floor = summarize(f"floor: recv_into+write, {record_size} B",
                                      combine(floor_rounds),
                                      "reference: no parsing, no event loop", quiet=True)
                    rows.append(floor)
                    ratios = [summarize("", a, quiet=True)["cpu_per_gb"]
                              / summarize("", b, quiet=True)["cpu_per_gb"]
                              for a, b in zip(lean_rounds, floor_rounds)]
                    rows.append({"name": "  lean / floor, CPU s/GB",
                                 "ratio": lean["cpu_per_gb"] / floor["cpu_per_gb"],
                                 "reference": "1.00 = as cheap as recv+write; rounds: "
                                              + " ".join(f"{x:.2f}" for x in ratios)})
                if fetch_topics:  # keep only the last record size's data for fetching
                    delete_topics(address, fetch_topics)
                fetch_topics = topics

            # -- produce, kafka-python --------------------------------------------------------
            if not args.no_kafka:
                kc = args.kafka_clients
                for record_size in record_sizes:
                    topic = f"kafka-{record_size}"
                    create_topic(address, topic, parts)
                    count = max(kc, kafka_size // record_size)
                    per = split(count, kc)
                    print(f"produce, kafka-python: {count:,} records of {record_size} B, "
                          f"{kc} processes, acks=1, batch_size {human_bytes(batch_bytes)}",
                          flush=True)
                    pause(f"kafka-python produce {record_size} B")
                    r = run_phase(meter, kafka_producer, [
                        (f"{broker.host}:{broker.port}", topic, assign(parts, kc, w),
                         record_size, per[w], batch_bytes) for w in range(kc)])
                    rows.append(summarize(f"produce kafka-python, {record_size} B", r,
                                          "client-bound (per-record Python)"))
                    delete_topics(address, [topic])

            # -- fetch and the sendfile ceiling, alternating rounds -------------------------
            pairs = [(t, q) for t in fetch_topics for q in range(parts)]
            mine = [pairs[w::fetch_clients] for w in range(fetch_clients)]
            per_conn = [[f for t, q in pairs_w
                         for f in sorted(glob.glob(os.path.join(log_dir, f"{t}-{q}", "*.log")))]
                        for pairs_w in mine]
            expected = [sum(os.path.getsize(f) for f in fs) for fs in per_conn]
            print(f"fetch: {len(pairs)} partitions ({', '.join(fetch_topics)}) over "
                  f"{fetch_clients} connections, one request in flight per partition, "
                  f"partition_max_bytes {human_bytes(fetch_max)}; sendfile ceiling: the same "
                  f"{human_bytes(sum(expected))} of segment files; {rounds} rounds", flush=True)
            fetch_rounds, ceiling_rounds, ratios = [], [], []
            for n in range(rounds):
                pause(f"fetch round {n + 1}")
                r = run_phase(meter, fetch_consumer, [
                    (address, mine[w], fetch_max) for w in range(fetch_clients)])
                fetch_rounds.append(r)
                f_row = summarize(f"fetch round {n + 1}", r)
                with ServerProcess(sendfile_server, per_conn) as server:
                    r = run_phase(CpuMeter(server.proc.pid), sendfile_reader, [
                        (server.address, w, expected[w], fetch_max)
                        for w in range(fetch_clients)])
                ceiling_rounds.append(r)
                c_row = summarize(f"sendfile round {n + 1}", r, records=False)
                ratios.append(f_row["mb_s"] / c_row["mb_s"])
            fetch = summarize(f"fetch raw v{FETCH_VERSION}, {human_bytes(fetch_max)}/part.",
                              combine(fetch_rounds), f"target >= {TARGET_FETCH_MB_S:,.0f} MB/s",
                              quiet=True)
            ceiling = summarize("sendfile ceiling, same files", combine(ceiling_rounds),
                                "ceiling (tiny sendfile server)", records=False, quiet=True)
            rows += [fetch, ceiling]
            rows.append({"name": "  fetch / sendfile, MB/s",
                         "ratio": fetch["mb_s"] / ceiling["mb_s"],
                         "reference": "1.00 = the ceiling; rounds: "
                                      + " ".join(f"{x:.2f}" for x in ratios)})
            pause("stopping the broker")
    finally:
        shutil.rmtree(base, ignore_errors=True)

    notes = [
        (f"{rounds} rounds per measurement, alternating with its reference; the rows add the "
         "rounds up. MB and GB are 10^6 and 10^9 bytes. Lean produce counts RecordBatch "
         "bytes, kafka-python value bytes."),
        ("server CPU s/GB: user+sys CPU seconds of the broker process (reference rows: of the "
         "reference server) per GB."),
        (f"cores busy (of {os.cpu_count()}): server; client = load generators and this "
         "script; sirq = interrupts (loopback TCP, charged to no process); rest = kernel "
         "threads (writeback, reclaim) and anything else running on the machine."),
    ]
    verdicts = []
    for row in rows:
        if row["name"].startswith("produce lean,"):
            ok = row["cpu_per_gb"] < TARGET_PRODUCE_CPU_PER_GB
            verdicts.append(f"{row['name']} {row['cpu_per_gb']:.2f} CPU s/GB "
                            f"({'met' if ok else 'MISSED'})")
    ok_fetch = fetch["mb_s"] >= TARGET_FETCH_MB_S
    verdicts.append(f"fetch {fetch['mb_s']:,.0f} MB/s ({'met' if ok_fetch else 'MISSED'})")
    print_table(rows, notes + ["targets: " + "; ".join(verdicts)])
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted; the broker and load generators were stopped", file=sys.stderr)
        sys.exit(130)
