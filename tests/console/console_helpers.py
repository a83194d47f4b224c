"""Helpers of the console's tests: a ``trilog console`` child process, plain HTTP GETs
(urllib, an independent client), and a cluster seeded by kafka-python (an independent
producer and group consumer)."""

from __future__ import annotations

import base64
import json
import re
import selectors
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from wait_helpers import wait_for  # noqa: F401  (the console tests import it from here)

_MAIN = "import sys; from trilog.cli import main; sys.exit(main())"
_READY = re.compile(r"trilog console on (\S+) ")

TOPIC = "orders"
PARTITIONS = 3
PER_PARTITION = 40
GROUP = "billing"
#: what the group commits per partition (its lag is PER_PARTITION - this)
COMMITTED = 25
#: TOPIC's one config set
RETENTION_MS = "604800000"


class ConsoleProcess:
    """``trilog console ARGS --port 0`` in a child process; ``url`` from its ready line.
    ``stop()`` sends SIGTERM and returns the exit code."""

    def __init__(self, bootstrap: str, *args: str, log: Path, timeout: float = 30.0) -> None:
        self._log = open(log, "ab")  # noqa: SIM115 - open for the process's life
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _MAIN, "console", "--bootstrap-server", bootstrap,
             "--port", "0", "--sample-interval", "0.3", *args],
            stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL, bufsize=0)
        self.log_path = log
        try:
            line = self._first_line(timeout)
        except BaseException:
            self.stop()
            raise
        match = _READY.match(line)
        assert match, f"unexpected first line {line!r}; log:\n{self.log()}"
        self.url = match.group(1).rstrip("/")
        self.line = line

    def _first_line(self, timeout: float) -> str:
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                raise TimeoutError(f"console not ready after {timeout} s:\n{self.log()}")
            line = self.proc.stdout.readline().decode()
            if not line:
                self.proc.wait(10)
                raise RuntimeError(f"console exited with {self.proc.returncode}:\n{self.log()}")
            return line

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
        return self.proc.returncode


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: str

    def json(self):
        return json.loads(self.body)


def get(url: str, *, user: str | None = None, password: str = "",
        context: ssl.SSLContext | None = None, method: str = "GET",
        data: bytes | None = None) -> Answer:
    """One request; an HTTP error status is an ``Answer`` too, not an exception."""
    request = urllib.request.Request(url, method=method, data=data)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as response:
            return Answer(response.status, {k.lower(): v for k, v in response.headers.items()},
                          response.read().decode())
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, {k.lower(): v for k, v in exc.headers.items()},
                      exc.read().decode())


def seed(bootstrap: str) -> int:
    """kafka-python creates TOPIC (PARTITIONS partitions, retention.ms RETENTION_MS) and
    writes PER_PARTITION JSON records with a key and a header to each partition, a binary
    record and an HTML-looking one to ``raw``; group GROUP commits COMMITTED of each
    partition.  Returns the time (ms) before the last record of partition 0 was written."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.structs import OffsetAndMetadata

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1,
                                  topic_configs={"retention.ms": RETENTION_MS}),
                         NewTopic("raw", 1, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    later = 0
    for i in range(PER_PARTITION):
        if i == PER_PARTITION - 1:
            producer.flush()
            time.sleep(0.05)
            later = int(time.time() * 1000)
        for p in range(PARTITIONS):
            producer.send(TOPIC, partition=p, key=f"k{i}".encode(),
                          value=json.dumps({"n": i, "p": p}).encode(),
                          headers=[("source", b"test")])
    producer.send("raw", value=bytes(range(250, 256)) + b"\x00\x01")
    producer.send("raw", value=b"<script>alert(1)</script>")
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP,
                             enable_auto_commit=False)
    consumer.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(COMMITTED, "", -1)
                     for p in range(PARTITIONS)})
    consumer.close()
    return later
