"""ZooKeeper: the only package that imports kazoo.

``ZooKeeperServer`` runs a standalone ZooKeeper for development and tests.
"""

from trilog.zk._server import (
    INSTALL_HINT,
    ZooKeeperNotFoundError,
    ZooKeeperServer,
    ZooKeeperStartError,
    find_zookeeper_classpath,
)

__all__ = [
    "INSTALL_HINT",
    "ZooKeeperNotFoundError",
    "ZooKeeperServer",
    "ZooKeeperStartError",
    "find_zookeeper_classpath",
]
