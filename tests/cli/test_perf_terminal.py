"""``trilog perf`` as a user runs it: on a terminal (a real pseudo-terminal, so the progress
line is on), against a real broker process.  The run ends by itself with its summary, and one
Ctrl-C (SIGINT) ends it promptly with the summary of what was done so far.

The timeouts are failure guards for a tool that hangs, not speed assertions.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

_MAIN = "import sys; from trilog.cli import main; sys.exit(main())"
_GUARD_S = 30.0
_PROGRESS = b"\r\x1b[K"  # how the tool redraws its progress line


class TerminalRun:
    """``trilog ARGS...`` with stdin and stdout on a fresh pseudo-terminal and stderr in a
    file.  A thread reads the terminal's side as the tool writes, so the tool never blocks
    on a full terminal buffer."""

    def __init__(self, args: list[str], stderr_path: Path) -> None:
        master, slave = os.openpty()
        self._master = master
        self._stderr_path = stderr_path
        with open(stderr_path, "wb") as stderr:
            self.proc = subprocess.Popen([sys.executable, "-c", _MAIN, *args], stdin=slave,
                                         stdout=slave, stderr=stderr, close_fds=True)
        os.close(slave)  # the child holds the terminal now: reading ends when it exits
        self._output = bytearray()
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 4096)
            except OSError:  # EIO: no process holds the terminal any more
                chunk = b""
            with self._changed:
                self._output += chunk
                self._changed.notify_all()
            if not chunk:
                return

    @property
    def output(self) -> bytes:
        with self._changed:
            return bytes(self._output)

    @property
    def stderr(self) -> str:
        return self._stderr_path.read_text(errors="replace")

    def wait_for_output(self, wanted: bytes, timeout: float = _GUARD_S) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while wanted not in self._output:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise AssertionError(f"{wanted!r} never appeared on the terminal:\n"
                                         f"{bytes(self._output)!r}\nstderr: {self.stderr}")
                self._changed.wait(min(left, 0.1))

    def wait(self, timeout: float = _GUARD_S) -> int:
        """The exit status; fails the test if the tool is still running after ``timeout``."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running after {timeout} s; the terminal shows:\n"
                                 f"{self.output[-400:]!r}\nstderr: {self.stderr}") from None
        self._reader.join(10)
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(10)
        os.close(self._master)


@pytest.fixture
def terminal(tmp_path):
    """Factory: ``terminal("perf", "produce", ...)`` starts the tool on a pseudo-terminal;
    every one started is killed (if need be) and closed at teardown."""
    runs: list[TerminalRun] = []

    def start(*args: str) -> TerminalRun:
        run = TerminalRun(list(args), tmp_path / f"stderr-{len(runs)}")
        runs.append(run)
        return run

    try:
        yield start
    finally:
        for run in runs:
            run.close()


@pytest.fixture
def broker(broker_process):
    return broker_process(overrides={"num.partitions": 2})


def _summary(output: bytes, what: bytes) -> bytes:
    """The last line of the terminal output that starts (after the progress line's
    redraw) with ``N records <what>, ``: the tool's summary."""
    text = output.replace(b"\r\n", b"\n").replace(_PROGRESS, b"\n")
    lines = [line for line in text.split(b"\n") if b" records " + what + b", " in line]
    assert lines, output
    return lines[-1]


def _count(summary: bytes) -> int:
    return int(summary.split(b" ", 1)[0])


def test_perf_produce_on_a_terminal_ends_with_its_summary(broker, terminal):
    # ~2 s at 1500 records/s: the progress line is drawn at least once before the end.
    run = terminal("perf", "produce", "--topic", "perf-tty", "--num-records", "3000",
                   "--record-size", "100", "--throughput", "1500",
                   "--bootstrap-server", broker.bootstrap)
    run.wait_for_output(_PROGRESS)
    assert run.wait() == 0, run.stderr
    # done/total, the share, the rate and the time left
    assert re.search(rb"\r\x1b\[K\d+/3000 records sent \(\d+\.\d%\), \d+\.\d records/sec "
                     rb"\([\d.]+ MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms max latency, "
                     rb"\d+ s left", run.output), run.output
    summary = _summary(run.output, b"sent")
    assert summary.startswith(b"3000 records sent, ") and summary.endswith(b"ms 99.9th."), \
        run.output
    assert "Traceback" not in run.stderr


def test_perf_produce_on_a_terminal_stops_at_one_ctrl_c(broker, terminal):
    run = terminal("perf", "produce", "--topic", "perf-tty", "--num-records", "10000000",
                   "--record-size", "100", "--throughput", "1000",
                   "--bootstrap-server", broker.bootstrap)
    run.wait_for_output(b"records/sec")  # a progress line: the run is under way
    run.proc.send_signal(signal.SIGINT)
    assert run.wait() == 130, run.stderr
    summary = _summary(run.output, b"sent")
    assert summary.endswith(b"ms 99.9th."), run.output
    assert 0 < _count(summary) < 10_000_000
    assert f"interrupted after {_count(summary)} of 10000000 records" in run.stderr
    assert "Traceback" not in run.stderr


def _fill(broker, topic: str, records: int) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _MAIN, "perf", "produce", "--topic", topic, "--num-records",
         str(records), "--record-size", "50", "--bootstrap-server", broker.bootstrap],
        capture_output=True, timeout=_GUARD_S, check=False)
    assert done.returncode == 0, done.stderr


def test_perf_consume_on_a_terminal_ends_with_its_summary(broker, terminal):
    _fill(broker, "perf-read", 2000)
    run = terminal("perf", "consume", "--topic", "perf-read", "--messages", "2000",
                   "--bootstrap-server", broker.bootstrap)
    assert run.wait() == 0, run.stderr
    assert _summary(run.output, b"consumed").startswith(b"2000 records consumed, ")
    assert "Traceback" not in run.stderr


def test_perf_consume_on_a_terminal_stops_at_one_ctrl_c(broker, terminal):
    _fill(broker, "perf-read", 2000)
    # More records than there are, and a long idle timeout: only Ctrl-C ends this run.
    run = terminal("perf", "consume", "--topic", "perf-read", "--messages", "1000000",
                   "--timeout-ms", "600000", "--bootstrap-server", broker.bootstrap)
    run.wait_for_output(b"2000/1000000 records consumed (0.2%)")  # the progress line caught up
    run.proc.send_signal(signal.SIGINT)
    assert run.wait() == 130, run.stderr
    summary = _summary(run.output, b"consumed")
    assert summary.startswith(b"2000 records consumed, ") and summary.endswith(b"fetches."), \
        run.output
    assert "interrupted after 2000 of 1000000 records" in run.stderr
    assert "Traceback" not in run.stderr


def test_perf_produce_off_a_terminal_logs_progress_to_stderr(broker):
    """Piped (a log, a CI job): a progress line on stderr every 5 s; stdout keeps only the
    summary."""
    done = subprocess.run(
        [sys.executable, "-c", _MAIN, "perf", "produce", "--topic", "perf-log",
         "--num-records", "1300", "--record-size", "10", "--throughput", "200",
         "--bootstrap-server", broker.bootstrap],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("1300 records sent, ") and done.stdout.count("\n") == 1
    lines = done.stderr.splitlines()
    assert 1 <= len(lines) <= 2, done.stderr  # about 6.5 s: one line at 5 s
    assert re.fullmatch(r"\d+/1300 records sent \(\d+\.\d%\), \d+\.\d records/sec "
                        r"\([\d.]+ MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms max latency, "
                        r"\d+ s left", lines[0]), lines
    assert "\x1b" not in done.stderr + done.stdout


def test_progress_lines_and_time_left():
    from trilog.cli._perf import progress_line, time_left

    assert progress_line(250, 1000, "consumed", 98.76, 2.5) == \
        "250/1000 records consumed (25.0%), 98.8 records/sec, 8 s left"
    assert progress_line(0, 1000, "sent", 0.0, 1.0) == \
        "0/1000 records sent (0.0%), 0.0 records/sec, time left unknown"
    assert progress_line(10, 10, "sent", 5.0, 2.0, " (x)") == \
        "10/10 records sent (100.0%), 5.0 records/sec (x), 0 s left"
    assert [time_left(s) for s in (None, 0.4, 59.6, 61, 3599, 3661, 90000)] == [
        "time left unknown", "0 s left", "1 min 00 s left", "1 min 01 s left", "59 min 59 s left",
        "1 h 01 min left", "25 h 00 min left"]
