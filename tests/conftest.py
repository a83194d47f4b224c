"""Fixtures shared by every layer's tests: real parts only (a real ZooKeeper server, real
broker processes)."""

from __future__ import annotations

import re
import resource
import selectors
import signal
import subprocess
import sys
import time
import uuid
from functools import partial
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from scheduling_helpers import work_unit as _work_unit

from trilog.zk import ZooKeeperServer
from trilog.zk._server import free_port


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory):
    """One real ZooKeeper for the whole session, on a free loopback port."""
    server = ZooKeeperServer(port=free_port(), data_dir=tmp_path_factory.mktemp("zookeeper"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zookeeper(zookeeper_server) -> str:
    """A connect string with a fresh chroot, so tests never see each other's nodes."""
    chroot = f"/test-{uuid.uuid4().hex[:12]}"
    client = KazooClient(zookeeper_server.connect_string)
    client.start(timeout=10)
    try:
        client.ensure_path(chroot)
    finally:
        client.stop()
        client.close()
    return zookeeper_server.connect_string + chroot


# -- broker processes ----------------------------------------------------------------------


_LISTENING = re.compile(rb"trilog broker (\d+) listening on (\S+):(\d+) ")
_LISTENER = re.compile(rb"trilog broker \d+ listener (\S+) \(\S+\) on \S+:(\d+)")
# ``python -m trilog.cli._main`` warns (runpy) that the module was imported by its package.
_BROKER_MAIN = "import sys; from trilog.cli import main; sys.exit(main())"


def _limit_fds(limit: int | tuple[int, int]) -> None:
    """In the child before exec: what ``ulimit -n <limit>`` does (a pair: soft, hard)."""
    soft, hard = limit if isinstance(limit, tuple) else (limit, limit)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class BrokerProcess:
    """A ``trilog broker`` subprocess; ``port``/``bootstrap`` come from its ready line.

    ``fd_limit`` runs it as under ``ulimit -n fd_limit`` (or a (soft, hard) pair).  ``pid`` and ``rss_bytes()`` are for
    the resource tests.

    ``stop()`` sends SIGTERM and returns the exit code (SIGKILL after ``timeout``);
    ``kill()`` sends SIGKILL.  stderr (the broker's log) goes to ``stderr_path``.
    """

    def __init__(self, args: list[str], log_dir: Path, stderr_path: Path, cwd: Path,
                 start_timeout: float = 30.0,
                 fd_limit: int | tuple[int, int] | None = None) -> None:
        self.args = args
        self.log_dir = log_dir
        self.stderr_path = stderr_path
        # Open for the life of the process (closed by stop/kill), not a with block.
        self._stderr = open(stderr_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BROKER_MAIN, "broker", *args],
            # Unbuffered: a line read must never pull the next ones into a buffer that
            # the selector in _read_line cannot see.
            stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL, cwd=cwd,
            bufsize=0,
            preexec_fn=None if fd_limit is None else partial(_limit_fds, fd_limit),
        )
        self.stdout_lines: list[bytes] = []
        try:
            line = self._read_line(start_timeout)
            match = _LISTENING.match(line)
            if match is None:
                raise RuntimeError(f"unexpected first line from the broker: {line!r}")
        except BaseException:
            self.kill()
            raise
        self.broker_id = int(match.group(1))
        self.host = match.group(2).decode()
        self.port = int(match.group(3))
        self.bootstrap = f"127.0.0.1:{self.port}"

    def _read_line(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"broker not ready after {timeout} s:\n{self.stderr()}")
                if sel.select(left):
                    line = self.proc.stdout.readline()
                    if not line:
                        self.proc.wait(5)
                        raise RuntimeError(
                            f"broker exited with {self.proc.returncode} before listening:\n"
                            f"{self.stderr()}"
                        )
                    self.stdout_lines.append(line)
                    return line

    def listener(self, name: str, timeout: float = 10.0) -> str:
        """``127.0.0.1:port`` of listener ``name`` (from the lines a broker with several
        listeners, or a secured one, prints after its first)."""
        for line in self.stdout_lines:
            match = _LISTENER.match(line)
            if match is not None and match.group(1).decode() == name:
                return f"127.0.0.1:{int(match.group(2))}"
        deadline = time.monotonic() + timeout
        while True:
            line = self._read_line(max(0.1, deadline - time.monotonic()))
            match = _LISTENER.match(line)
            if match is not None and match.group(1).decode() == name:
                return f"127.0.0.1:{int(match.group(2))}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_bytes(self) -> int:
        """The process's resident memory now (``VmRSS``)."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS line")

    def stderr(self, tail: int = 4000) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")[-tail:]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Signal the process and wait; SIGKILL if it outlives ``timeout``.  Returns the code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._close()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._close()

    def _close(self) -> None:
        if self.proc.stdout is not None and not self.proc.stdout.closed:
            rest = self.proc.stdout.read() if self.proc.poll() is not None else b""
            self.stdout_lines.extend(rest.splitlines(keepends=True))
            self.proc.stdout.close()
        if not self._stderr.closed:
            self._stderr.close()


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist the longest units go first (the Spark unit, then the modules of
    ``_LONG_MODULES``): a run that ended on one of them would leave the other workers idle
    meanwhile.  Each module's tests keep their order."""
    if getattr(config.option, "numprocesses", None):
        def rank(item) -> int:
            unit = _work_unit(item.nodeid)
            return 0 if unit == "spark" else 1 if unit in _LONG_MODULES else 2

        items.sort(key=rank)  # stable


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # (pytest-xdist is in the test extra; without it the suite runs serially)
    pass
else:
    class _ModuleScheduling(LoadScopeScheduling):
        """Each unit (``_work_unit``) whole on one worker, so a module's module-scoped
        brokers start once, and the units handed out in the order of the collection.
        (xdist's ``--dist loadgroup`` cannot do it under pytest 9: it marks groups on a
        node id attribute pytest 9 no longer reads, so modules were split over workers
        and each worker started a Spark session of its own.)"""

        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    @pytest.hookimpl(tryfirst=True)  # before xdist's own choice from ``--dist``
    def pytest_xdist_make_scheduler(config, log):
        config.option.loadscopereorder = False  # (xdist would put the largest units first)
        return _ModuleScheduling(config, log)


#: The modules that take longest after the Spark ones (minutes under load), run first.
_LONG_MODULES = frozenset({
    "tests/docs/test_doc_examples.py", "tests/records/test_speedups.py",
    "tests/broker/test_replication_load.py",
    "tests/cli/test_groups_cli.py", "tests/broker/test_transactions_faults.py",
})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that started broker processes shows the end of each one's log."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        module = getattr(item, "module", None)
        for process in [*getattr(item, "trilog_brokers", ()),
                        *getattr(module, "trilog_module_brokers", ())]:
            report.sections.append((f"broker log {process.stderr_path.name}",
                                    process.stderr(tail=12_000)))


def _broker_starter(base: Path, started: list[BrokerProcess]):
    """``start(log_dir=None, *extra_args, port=0, broker_id=None, zookeeper=None,
    overrides={...}, cwd=None, fd_limit=None) -> BrokerProcess``, keeping its files under
    ``base`` and every process it starts in ``started``."""
    counter = iter(range(1_000_000))

    def start(log_dir: Path | str | None = None, *extra: str, port: int = 0,
              broker_id: int | None = None, zookeeper: str | None = None,
              overrides: dict | None = None, cwd: Path | None = None,
              fd_limit: int | tuple[int, int] | None = None) -> BrokerProcess:
        n = next(counter)
        if log_dir is None:
            log_dir = base / f"broker-{n}-data"
        log_dir = Path(log_dir)
        args = ["--port", str(port), "--host", "127.0.0.1", "--log-dir", str(log_dir)]
        if broker_id is not None:
            args += ["--broker-id", str(broker_id)]
        if zookeeper is not None:
            args += ["--zookeeper", zookeeper]
        for key, value in (overrides or {}).items():
            args += ["--override", f"{key}={value}"]
        args += list(extra)
        if cwd is None:
            cwd = base / "broker-cwd"
            cwd.mkdir(exist_ok=True)
        process = BrokerProcess(args, log_dir, base / f"broker-{n}.stderr", cwd,
                                fd_limit=fd_limit)
        started.append(process)
        return process

    return start


@pytest.fixture
def broker_process(tmp_path, request):
    """Factory: ``broker_process(log_dir=None, *extra_args, port=0, broker_id=None,
    zookeeper=None, overrides={...}, fd_limit=None)`` starts a ``trilog broker`` process and returns a
    ``BrokerProcess``.  Every process still running at teardown gets SIGTERM (then SIGKILL).
    """
    started: list[BrokerProcess] = []
    request.node.trilog_brokers = started
    try:
        yield _broker_starter(tmp_path, started)
    finally:
        for process in started:
            process.stop()


@pytest.fixture(scope="module")
def module_broker_process(tmp_path_factory, request):
    """``broker_process`` for brokers that serve every test of a module."""
    started: list[BrokerProcess] = []
    request.module.trilog_module_brokers = started
    try:
        yield _broker_starter(tmp_path_factory.mktemp("brokers"), started)
    finally:
        for process in started:
            process.stop()
