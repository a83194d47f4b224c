"""Fixtures shared by every layer's tests: real parts only (a real ZooKeeper server)."""

from __future__ import annotations

import uuid

import pytest
from kazoo.client import KazooClient

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
