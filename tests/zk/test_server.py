import subprocess
import sys

import pytest
from kazoo.client import KazooClient

from trilog.zk import ZooKeeperNotFoundError, ZooKeeperServer, find_zookeeper_classpath
from trilog.zk._server import free_port


@pytest.mark.smoke
def test_session_zookeeper_serves(zookeeper_server):
    client = KazooClient(zookeeper_server.connect_string)
    client.start(timeout=10)
    try:
        client.create("/smoke", b"hello")
        assert client.get("/smoke")[0] == b"hello"
        client.delete("/smoke")
    finally:
        client.stop()
        client.close()


def test_chroot_fixture_isolates(zookeeper):
    client = KazooClient(zookeeper)
    client.start(timeout=10)
    try:
        client.ensure_path("/")
        client.create("/mine", b"")
        assert client.get_children("/") == ["mine"]
    finally:
        client.stop()
        client.close()


def test_missing_zookeeper_home_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("ZOOKEEPER_HOME", str(tmp_path))
    with pytest.raises(ZooKeeperNotFoundError, match="holds no zookeeper jar"):
        find_zookeeper_classpath()


def test_stop_removes_its_temporary_dir():
    server = ZooKeeperServer(port=free_port())
    server.start()
    data_dir = server.data_dir
    assert data_dir.exists()
    server.stop()
    assert not data_dir.exists()
    assert server.process is None


def test_cli_zookeeper_check():
    out = subprocess.run(
        [sys.executable, "-m", "trilog.cli._main", "zookeeper", "--check"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "ZooKeeper found" in out.stdout
