"""A standalone ZooKeeper server for development and tests, run from an installed ZooKeeper.

trilog does not ship ZooKeeper; it looks for one, in this order:

1. ``$ZOOKEEPER_HOME`` (a ZooKeeper release: ``lib/*.jar``, or the jars directly in it);
2. Debian's ``zookeeper`` package (``/usr/share/java/zookeeper.jar`` and its dependencies);
3. the ZooKeeper jars that ship inside the pyspark wheel (``pyspark/jars``).

and runs ``org.apache.zookeeper.server.ZooKeeperServerMain`` with Java.  The client port
accepts connections a moment before ZooKeeper serves them, so ``start()`` waits until a
kazoo client really connects.  Blocking code: callers in trio run it in a thread.
"""

from __future__ import annotations

import glob
import logging
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from trilog.errors import TrilogError

_MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"

# The readiness probe expects refused connections while Java starts: keep kazoo quiet.
_probe_log = logging.getLogger("trilog.zk.probe")
_probe_log.addHandler(logging.NullHandler())
_probe_log.propagate = False

INSTALL_HINT = (
    "no ZooKeeper found. Install one of: Debian's package (`apt-get install zookeeper`), "
    "the `pyspark` wheel (`pip install 'trilog[spark]'`, which ships ZooKeeper's jars), or a "
    "ZooKeeper release with ZOOKEEPER_HOME pointing at it. Java 11+ must be on PATH."
)


class ZooKeeperNotFoundError(TrilogError):
    """No ZooKeeper installation (or no Java) was found."""


class ZooKeeperStartError(TrilogError):
    """The ZooKeeper process exited or did not start serving in time."""


def _pyspark_jars() -> Path | None:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    jars = Path(list(spec.submodule_search_locations)[0]) / "jars"
    return jars if glob.glob(str(jars / "zookeeper-[0-9]*.jar")) else None


def find_zookeeper_classpath() -> tuple[str, str]:
    """Return ``(classpath, where_it_came_from)`` or raise ``ZooKeeperNotFoundError``."""
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        found = glob.glob(os.path.join(home, "lib", "*.jar")) + glob.glob(os.path.join(home, "*.jar"))
        if any("zookeeper" in os.path.basename(j) for j in found):
            return os.pathsep.join(sorted(found)), f"ZOOKEEPER_HOME={home}"
        raise ZooKeeperNotFoundError(f"ZOOKEEPER_HOME={home} holds no zookeeper jar")
    debian = Path("/usr/share/java/zookeeper.jar")
    if debian.exists():
        # Debian's jar names its dependencies in its manifest, but not all of them: the
        # logging and netty jars beside it are needed too.
        extra = [
            p
            for pattern in ("slf4j-api.jar", "slf4j-simple.jar", "netty-*.jar", "jute*.jar",
                            "commons-cli.jar", "metrics-core.jar", "log4j*.jar")
            for p in glob.glob(f"/usr/share/java/{pattern}")
        ]
        return os.pathsep.join([str(debian), *sorted(set(extra))]), "Debian's zookeeper package"
    jars = _pyspark_jars()
    if jars is not None:
        return str(jars / "*"), f"the pyspark wheel ({jars})"
    raise ZooKeeperNotFoundError(INSTALL_HINT)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ZooKeeperServer:
    """One standalone ZooKeeper process on a loopback port.

    Use as a context manager, or ``start()`` / ``stop()``.  ``data_dir=None`` uses a
    temporary directory removed on stop.  Not thread-safe.
    """

    def __init__(self, port: int = 2181, data_dir: str | os.PathLike | None = None,
                 host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = port
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.process: subprocess.Popen | None = None
        self.source = ""

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    def __enter__(self) -> "ZooKeeperServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> None:
        classpath, self.source = find_zookeeper_classpath()
        self._check_port_free()
        java = shutil.which("java")
        if java is None:
            raise ZooKeeperNotFoundError("`java` is not on PATH; ZooKeeper needs Java 11 or later")
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="trilog-zk-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cfg = self.data_dir / "zoo.cfg"
        cfg.write_text(
            "tickTime=500\n"
            "initLimit=10\n"
            "syncLimit=5\n"
            f"dataDir={self.data_dir / 'data'}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "admin.enableServer=false\n"
            "maxClientCnxns=0\n"
            # Sessions of 4-40 s: short enough for tests of expiry, long enough for a busy CI.
            "minSessionTimeout=1000\n"
            "maxSessionTimeout=40000\n"
        )
        log = open(self.data_dir / "zookeeper.log", "ab")
        try:
            self.process = subprocess.Popen(
                [java, "-Xmx256m", "-Dzookeeper.admin.enableServer=false",
                 "-cp", classpath, _MAIN_CLASS, str(cfg)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C in the terminal reaches us, not Java first
            )
        finally:
            log.close()
        try:
            self.wait_until_serving(timeout)
        except BaseException:
            self.stop()
            raise

    def _check_port_free(self) -> None:
        """``ZooKeeperStartError`` when something listens on the port already: the probe
        of ``wait_until_serving`` would find that server and take it for ours."""
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Java binds
            try:
                probe.bind((self.host, self.port))
            except OSError as exc:
                raise ZooKeeperStartError(
                    f"cannot serve on {self.connect_string}: {exc.strerror} (another "
                    "ZooKeeper, or another program, listens there); choose another port"
                ) from None

    @property
    def _log_path(self) -> Path | str:
        return self.data_dir / "zookeeper.log" if self.data_dir is not None else "its log"

    def wait_until_serving(self, timeout: float) -> None:
        from kazoo.client import KazooClient

        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise ZooKeeperStartError(
                    f"ZooKeeper exited with status {self.process.returncode}; "
                    f"see {self._log_path}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ZooKeeperStartError(
                    f"ZooKeeper did not serve on {self.connect_string} within {timeout:.0f} s; "
                    f"see {self._log_path}"
                )
            client = KazooClient(self.connect_string, timeout=2.0,
                                 connection_retry={"max_tries": 0}, logger=_probe_log)
            try:
                client.start(timeout=min(2.0, remaining))
                client.get_children("/")
                return
            except Exception:  # not serving yet: refused, dropped or timed out
                time.sleep(0.2)
            finally:
                try:
                    client.stop()
                finally:
                    client.close()

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._own_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None
