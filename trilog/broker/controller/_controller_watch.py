"""Every other broker watches the controller's process, so that its death elects a new
controller at once instead of when its ZooKeeper session expires (fast failover).

While broker X is the controller, each other broker holds a connection to X's inter-broker
listener (a real Kafka connection, secured as inter-broker traffic is, that sends nothing
after its handshake).  When it ends, the kernel may have closed it because X's process is
gone: the broker probes X's listener (``_liveness.py``).  Refused means gone:
``ControllerElection.remove_dead`` deletes ``/controller`` (conditionally: it cannot delete
a newer controller's node), and every broker's watch of ``/controller`` runs the election.
An answered probe (X only closed an idle connection, or is paused) reconnects; a controller
that is slow or cut off is left to its session timeout, as before.

A controller node can also outlive a controller that restarted at once, faster than the
probe (its new process answers): the restarted broker deletes that node itself, as its own
previous life's (``ControllerElection._seen``).
"""

from __future__ import annotations

import logging

import trio

from trilog.broker.controller._election import NO_CONTROLLER, ControllerElection
from trilog.broker.controller._liveness import probe
from trilog.broker.controller._requests import inter_broker_address
from trilog.errors import RemoteProtocolError, TrilogError
from trilog.net import ClientSecurity, open_connection
from trilog.zk import BrokerRegistration, NoNodeError, ZooKeeper, ZooKeeperError, broker_path

log = logging.getLogger("trilog.broker.controller")

RETRY_S = 1.0


class ControllerWatch:
    """Broker ``broker_id``'s watch of the controller's process (see the module)."""

    def __init__(self, zk: ZooKeeper, election: ControllerElection, broker_id: int, *,
                 listener: str, security: ClientSecurity | None, timeout_s: float) -> None:
        self.zk = zk
        self.election = election
        self.broker_id = broker_id
        self.listener = listener
        self.security = security
        self.timeout_s = timeout_s

    async def run(self) -> None:
        """Watch whichever broker is the controller; runs until cancelled."""
        current = self.election.current
        while True:
            seen = current.value
            controller = seen[0]
            async with trio.open_nursery() as nursery:
                async def until_changed() -> None:
                    await current.wait_value(lambda v: v != seen)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(until_changed)
                if controller not in (NO_CONTROLLER, self.broker_id):
                    nursery.start_soon(self._watch, controller)

    async def _watch(self, controller: int) -> None:
        while True:
            try:
                registration = await self._registration(controller)
                address = inter_broker_address(registration, self.listener)
                await self._hold_connection(address)
                if await probe(*address) is False:
                    await self.election.remove_dead(controller, lambda _owner: True)
                    return  # the election moves on (or the node went first)
            except NoNodeError:
                pass  # its registration is gone: its session ended, the election follows
            except (ZooKeeperError, RemoteProtocolError) as exc:
                log.debug("watching controller %d: %s", controller, exc)
            await trio.sleep(RETRY_S)

    async def _registration(self, controller: int) -> BrokerRegistration:
        return BrokerRegistration.decode(controller, await self.zk.get(broker_path(controller)))

    async def _hold_connection(self, address: tuple[str, int]) -> None:
        """Connect to the controller and return when the connection ends (or cannot be
        made)."""
        try:
            async with open_connection(*address, security=self.security,
                                       client_id=f"broker-{self.broker_id}-controller-watch",
                                       connect_timeout_s=self.timeout_s,
                                       request_timeout_s=self.timeout_s) as conn:
                await conn.wait_closed()
        except TrilogError as exc:
            log.debug("connection to the controller at %s:%d ended: %s", *address, exc)
