"""Where the brokers are: a bootstrap list, or the registrations under ZooKeeper's
``/brokers/ids`` (seed 002).  Every client-side module that starts from either uses these."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trilog.errors import TrilogError

if TYPE_CHECKING:  # trilog.zk imports kazoo: only a client that uses ZooKeeper pays for it
    from trilog.zk import ZooKeeper


@dataclass(frozen=True)
class BrokerAddress:
    node_id: int
    host: str
    port: int


def parse_bootstrap(servers: str | list[str]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9093"`` (or a list) -> ``[("h1", 9092), ("h2", 9093)]``."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not host:port")
        out.append((host.strip("[]") or "127.0.0.1", int(port)))
    if not out:
        raise ValueError("no bootstrap servers given")
    return out


async def registered_brokers(zk: ZooKeeper, ids: Iterable[str] | None = None
                             ) -> list[BrokerAddress]:
    """The brokers registered in ZooKeeper, by node id: the children ``ids`` of
    ``/brokers/ids`` (read now when not given).  A registration that is gone or malformed
    by the time it is read is left out."""
    from trilog.zk import BROKER_IDS, BrokerRegistration, NoNodeError, broker_path

    if ids is None:
        try:
            ids = await zk.get_children(BROKER_IDS)
        except NoNodeError:
            return []
    out = []
    for child in ids:
        if not child.isdigit():
            continue
        try:
            reg = BrokerRegistration.decode(int(child), await zk.get(broker_path(int(child))))
        except (NoNodeError, TrilogError):
            continue
        out.append(BrokerAddress(reg.broker_id, reg.host, reg.port))
    return sorted(out, key=lambda b: b.node_id)
