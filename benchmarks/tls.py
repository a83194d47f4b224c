"""Fetch over TLS against plaintext: what losing zero-copy costs.

One broker with a PLAINTEXT and an SSL listener (a private CA made here with ``trustme``,
the test dependency, or ``openssl``), one topic filled once, then the same fetch-everything
pass over each listener, alternating, ``--rounds`` times: raw Fetch v4 requests with one in
flight, as ``broker_throughput.py``'s fetch phase, the TLS client with Python's ``ssl``.
Printed per listener: MB/s, and the broker's CPU seconds per GB fetched (the broker's cost
is what TLS changes most: ``sendfile`` becomes read + encrypt + write); the ratio of the
two listeners is the figure to compare across machines (absolute figures on a shared VM
swing by tens of percent).

    python benchmarks/tls.py [--size 512M] [--rounds 3] [--fetch-max-bytes 4M]
"""

from __future__ import annotations

import argparse
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import BrokerProcess, CpuMeter, FrameReader, human_bytes, parse_size  # noqa: E402
from broker_throughput import (  # noqa: E402
    PRODUCE_VERSION,
    _fetch_frame,
    _parse_fetch_v4,
    build_record_batch,
    create_topic,
)

from trilog import protocol as p  # noqa: E402

TOPIC = "tls-bench"


def make_certs(directory: str) -> tuple[str, str]:
    """``(ca.pem, broker.pem)``: a CA and a certificate for 127.0.0.1 signed by it."""
    ca_path, server_path = (os.path.join(directory, n) for n in ("ca.pem", "broker.pem"))
    try:
        import trustme
    except ImportError:
        key, csr, ext = (os.path.join(directory, n) for n in ("b.key", "b.csr", "san.ext"))
        run = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True)  # noqa: E731
        run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=bench-ca", "-keyout", os.path.join(directory, "ca.key"),
            "-out", ca_path)
        run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", key, "-out", csr)
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:127.0.0.1")
        run("openssl", "x509", "-req", "-in", csr, "-CA", ca_path, "-CAkey",
            os.path.join(directory, "ca.key"), "-CAcreateserial", "-days", "2",
            "-extfile", ext, "-out", server_path)
        with open(server_path, "a") as out, open(key) as k:
            out.write(k.read())
        return ca_path, server_path
    ca = trustme.CA()
    ca.cert_pem.write_to_path(ca_path)
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(server_path)
    return ca_path, server_path


def fill(address: tuple[str, int], size: int) -> None:
    batch, _records = build_record_batch(1024, 1 << 20)
    PR = p.ProduceRequest
    request = PR(acks=1, timeout_ms=30_000, topic_data=[PR.TopicProduceData(
        name=TOPIC, partition_data=[PR.TopicProduceData.PartitionProduceData(
            index=0, records=batch)])])
    frame = p.encode_request(request, PRODUCE_VERSION, 0)
    with socket.create_connection(address) as sock:
        reader = FrameReader(sock, 64 * 1024)
        for _ in range(max(1, size // len(batch))):
            sock.sendall(frame)
            reader.read()


def fetch_all(sock: socket.socket, max_bytes: int) -> int:
    """Fetch the whole partition, one request in flight; the bytes of records received."""
    reader = FrameReader(sock, max_bytes + (1 << 20))
    offset = total = corr = 0
    while True:
        sock.sendall(_fetch_frame(TOPIC, 0, offset, max_bytes, corr))
        corr += 1
        _q, error, hw, length, next_offset = _parse_fetch_v4(reader.read())
        if error:
            raise RuntimeError(f"fetch error {error}")
        total += length
        if next_offset == -1 or next_offset >= hw:
            return total
        offset = next_offset


def measure(broker: BrokerProcess, address: tuple[str, int], context: ssl.SSLContext | None,
            max_bytes: int) -> dict[str, float]:
    raw = socket.create_connection(address)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock = context.wrap_socket(raw, server_hostname=address[0]) if context else raw
    try:
        meter = CpuMeter(broker.pid)
        meter.start()
        fetched = fetch_all(sock, max_bytes)
        cpu = meter.stop()
    finally:
        sock.close()
    return {"bytes": fetched, "wall": cpu["wall"], "broker_cpu": cpu["proc_cpu"],
            "client_cpu": cpu["self_cpu"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="512M", help="bytes in the topic (default 512M)")
    parser.add_argument("--rounds", type=int, default=3, help="passes per listener (default 3)")
    parser.add_argument("--fetch-max-bytes", default="4M",
                        help="Fetch partition_max_bytes (default 4M)")
    args = parser.parse_args(argv)
    size, max_bytes = parse_size(args.size), parse_size(args.fetch_max_bytes)
    with tempfile.TemporaryDirectory(prefix="trilog-tls-") as tmp:
        ca, server = make_certs(tmp)
        overrides = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                     "ssl.certfile": server, "log.segment.bytes": 256 << 20}
        with BrokerProcess(os.path.join(tmp, "data"), overrides) as broker:
            ports = listener_ports(broker)
            plain, tls = ("127.0.0.1", ports["PLAINTEXT"]), ("127.0.0.1", ports["SSL"])
            create_topic(plain, TOPIC, 1)
            fill(plain, size)
            context = ssl.create_default_context(cafile=ca)
            rows: dict[str, list[dict[str, float]]] = {"PLAINTEXT": [], "SSL": []}
            for _ in range(args.rounds):
                rows["PLAINTEXT"].append(measure(broker, plain, None, max_bytes))
                rows["SSL"].append(measure(broker, tls, context, max_bytes))
    print(f"fetch of {human_bytes(size)} (one partition, {human_bytes(max_bytes)} per "
          f"fetch, one in flight), {args.rounds} alternating rounds, median:")
    print(f"{'listener':<10} {'MB/s':>8} {'broker CPU-s/GB':>16} {'client CPU-s/GB':>16}")
    medians = {}
    for name, runs in rows.items():
        mbs = sorted(r["bytes"] / r["wall"] / 1e6 for r in runs)[len(runs) // 2]
        broker_gb = sorted(r["broker_cpu"] / (r["bytes"] / 1e9) for r in runs)[len(runs) // 2]
        client_gb = sorted(r["client_cpu"] / (r["bytes"] / 1e9) for r in runs)[len(runs) // 2]
        medians[name] = (mbs, broker_gb)
        print(f"{name:<10} {mbs:>8.0f} {broker_gb:>16.2f} {client_gb:>16.2f}")
    (pm, pc), (tm, tc) = medians["PLAINTEXT"], medians["SSL"]
    print(f"TLS/plaintext: {tm / pm:.2f}x the throughput, {tc / pc:.1f}x the broker CPU per GB "
          "(plaintext is the reference: zero-copy sendfile, measured in the same run)")
    return 0


def listener_ports(broker: BrokerProcess, timeout: float = 10.0) -> dict[str, int]:
    """The ports of the broker's listeners, from the lines it prints after the first."""
    assert broker.proc is not None and broker.proc.stdout is not None
    ports: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    while len(ports) < 2 and time.monotonic() < deadline:
        line = broker.proc.stdout.readline()
        if " listener " in line:
            name = line.split(" listener ", 1)[1].split()[0]
            ports[name] = int(line.rsplit(":", 1)[1])
    return ports


if __name__ == "__main__":
    sys.exit(main())
