"""Helpers shared by the benchmarks: sizes, CPU accounting from /proc, a broker subprocess,
and a minimal blocking Kafka-protocol connection for load generators.

Nothing here is part of trilog; the benchmarks use trilog's public ``protocol`` and
``records`` packages to build and read frames, and run the broker as ``trilog broker``
in a child process, exactly as an operator would.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable

CLK_TCK = os.sysconf("SC_CLK_TCK")
_SIZE = struct.Struct(">i")


def parse_size(text: str) -> int:
    """``"2G"``, ``"256M"``, ``"64KiB"``, ``"1000"`` -> bytes (binary units)."""
    units = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
    text = text.strip().lower().rstrip("ib")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def human_bytes(n: float) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


# -- CPU accounting ---------------------------------------------------------------------------


def process_cpu_times(pid: int) -> tuple[float, float]:
    """``(user, system)`` CPU seconds of every thread of ``pid`` (``/proc/<pid>/stat``)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        data = f.read()
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = data[data.rindex(b")") + 2 :].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK  # fields 14, 15 of proc(5)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of every thread of ``pid``."""
    return sum(process_cpu_times(pid))


def machine_cpu_seconds() -> dict[str, float]:
    """CPU seconds of the whole machine, all cores, from ``/proc/stat``: ``busy``, ``total``
    and ``irq`` (hard + soft interrupts: with IRQ time accounting, loopback TCP processing
    done in softirq context is charged here, not to the process that caused it)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    values += [0] * (8 - len(values))
    idle = values[3] + values[4]  # idle + iowait
    total = sum(values[:8])  # user nice system idle iowait irq softirq steal
    return {"busy": (total - idle) / CLK_TCK, "total": total / CLK_TCK,
            "irq": (values[5] + values[6]) / CLK_TCK}


class CpuMeter:
    """CPU used by one process and by the whole machine between ``start()`` and ``stop()``."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def start(self) -> None:
        self._wall0 = time.perf_counter()
        self._proc0 = process_cpu_times(self.pid)
        self._self0 = process_cpu_seconds(os.getpid())
        self._machine0 = machine_cpu_seconds()

    def stop(self) -> dict[str, float]:
        wall = time.perf_counter() - self._wall0
        user, system = process_cpu_times(self.pid)
        me = process_cpu_seconds(os.getpid()) - self._self0
        machine = machine_cpu_seconds()
        m0 = self._machine0
        return {
            "wall": wall,
            "proc_cpu": user + system - sum(self._proc0),
            "proc_user": user - self._proc0[0],
            "proc_sys": system - self._proc0[1],
            "self_cpu": me,
            "machine_busy": machine["busy"] - m0["busy"],
            "machine_total": machine["total"] - m0["total"],
            "machine_irq": machine["irq"] - m0["irq"],
        }


# -- the broker subprocess --------------------------------------------------------------------


class BrokerProcess:
    """``trilog broker`` on a free loopback port, as a child process in its own session.

    ``start()`` (``spawn()`` then ``wait_ready()``, apart when several start at once) waits
    for the "listening on" line; ``stop()`` asks for a clean shutdown with SIGTERM and kills
    it if it is not gone within ``grace`` seconds.  Use as a context manager so that an error
    or Ctrl-C in the benchmark never leaves a broker behind.  ``broker_id`` and
    ``zookeeper`` make it a cluster member; ``log_path`` sends its log to a file (else to
    this process's stderr).
    """

    def __init__(self, log_dir: str, overrides: dict[str, object] | None = None,
                 log_level: str = "WARNING", *, broker_id: int | None = None,
                 zookeeper: str | None = None, log_path: str | None = None,
                 preexec_fn: Callable[[], None] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self.preexec_fn = preexec_fn  # e.g. a lower RLIMIT_NOFILE for the child
        self.env = env  # the child's environment (None: this process's)
        self.overrides = dict(overrides or {})
        self.log_level = log_level
        self.broker_id = broker_id
        self.zookeeper = zookeeper
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.host = "127.0.0.1"
        self.port = 0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    @property
    def _name(self) -> str:
        return "the broker" if self.broker_id is None else f"broker {self.broker_id}"

    def spawn(self) -> None:
        cmd = [
            sys.executable, "-c",
            "import sys; from trilog.cli import main; sys.exit(main(sys.argv[1:]))",
            "broker", "--port", "0", "--host", self.host, "--log-dir", self.log_dir,
            "--log-level", self.log_level,
        ]
        if self.broker_id is not None:
            cmd += ["--broker-id", str(self.broker_id)]
        if self.zookeeper is not None:
            cmd += ["--zookeeper", self.zookeeper]
        for key, value in self.overrides.items():
            cmd += ["--override", f"{key}={value}"]
        # A session of its own: Ctrl-C in the terminal reaches the benchmark only, which
        # then stops the broker itself (stop() runs from a finally block).
        log = open(self.log_path, "ab") if self.log_path else None  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         text=True, bufsize=1, preexec_fn=self.preexec_fn,
                                         env=self.env)
        finally:
            if log is not None:
                log.close()  # the child has its own descriptor

    def wait_ready(self, timeout: float = 60.0) -> BrokerProcess:
        assert self.proc is not None and self.proc.stdout is not None
        where = f"; see {self.log_path}" if self.log_path else "; its log is on stderr above"
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{self._name} did not start within {timeout:.0f} s{where}")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                continue
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{self._name} exited (status {self.proc.wait()}) before "
                                   f"listening{where}")
            if " listening on " in line:
                hostport = line.split(" listening on ", 1)[1].split()[0]
                self.host, port = hostport.rsplit(":", 1)
                self.port = int(port)
                return self

    def start(self, timeout: float = 60.0) -> BrokerProcess:
        self.spawn()
        return self.wait_ready(timeout)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)  # our own child, by its pid

    def reap(self, timeout: float) -> bool:
        """Wait for the process; True if it is gone."""
        if self.proc is None:
            return True
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return True

    def cpu(self) -> float:
        """Its CPU seconds so far (0 once it is gone)."""
        try:
            return process_cpu_seconds(self.pid) if self.alive() else 0.0
        except OSError:
            return 0.0

    def stop(self, grace: float = 5.0) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()  # only our own child, by its pid
                proc.wait(10)
        finally:
            if proc.stdout is not None:
                proc.stdout.close()

    def __enter__(self) -> BrokerProcess:  # noqa: PYI034
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# -- a blocking protocol connection -----------------------------------------------------------


def connect(address: tuple[str, int], buffer_bytes: int = 4 << 20) -> socket.socket:
    sock = socket.create_connection(address)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)
    return sock


def recv_exactly(sock: socket.socket, view: memoryview) -> None:
    """Fill ``view`` from ``sock``; ``ConnectionError`` if the peer closes first."""
    got, n = 0, len(view)
    recv_into = sock.recv_into
    while got < n:
        k = recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("the broker closed the connection")
        got += k


class FrameReader:
    """Reads size-delimited response frames into one reusable buffer (no per-frame copy)."""

    def __init__(self, sock: socket.socket, capacity: int = 1 << 20) -> None:
        self.sock = sock
        self._buf = bytearray(capacity)
        self._size = bytearray(4)

    def read(self) -> memoryview:
        """The next frame's payload, valid until the next ``read``."""
        recv_exactly(self.sock, memoryview(self._size))
        (n,) = _SIZE.unpack(self._size)
        if n > len(self._buf):
            self._buf = bytearray(max(n, 2 * len(self._buf)))
        view = memoryview(self._buf)[:n]
        recv_exactly(self.sock, view)
        return view


def call(sock: socket.socket, frame: bytes, reader: FrameReader | None = None) -> memoryview:
    """Send one request frame and return its response payload."""
    sock.sendall(frame)
    return (reader or FrameReader(sock)).read()


def create_topic(address: tuple[str, int], topic: str, partitions: int = 1) -> None:
    """Create ``topic`` (replication factor 1) with CreateTopics v2."""
    from trilog import protocol as p

    sock = connect(address)
    try:
        request = p.CreateTopicsRequest(topics=[p.CreateTopicsRequest.CreatableTopic(
            name=topic, num_partitions=partitions, replication_factor=1, assignments=[],
            configs=[])], timeout_ms=30000, validate_only=False)
        sock.sendall(p.encode_request(request, 2, 1))
        FrameReader(sock).read()
    finally:
        sock.close()
