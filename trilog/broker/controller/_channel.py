"""The controller's senders to the brokers (Kafka's ControllerChannelManager and its
RequestSendThreads).

One sender per live broker, started in the term's nursery when the broker joins and
cancelled when it leaves ``/brokers/ids``: requests to a broker leave in the order the
event loop made them, one at a time over one connection; a request that fails on the
network is sent again (the same request, on a new connection, with a growing pause) until
the broker leaves.  The controller sends to itself over its own listener, like to any
broker.

**A dead broker is noticed at once.**  A sender holds its connection open between requests
and watches it: when it ends (the kernel closes a killed process's sockets) the sender
connects again at once; when a connection cannot be made, it probes the broker's listener
(``_liveness.py``), and a refusal means its process is gone: ``on_gone(registration)`` tells
the term, which moves its leadership without waiting for its ZooKeeper session to expire.

A broker's answer of STALE_CONTROLLER_EPOCH (it has heard from a newer controller) raises
``StaleController`` out of the sender, which ends the term.  Per partition, the same error
is Kafka's answer to a leader epoch that is not newer than the broker's (a state sent
again, as a new controller does): no news.  Other errors are logged; nothing is retried
but lost connections.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import trio

from trilog.broker._limits import RateLimitedLog
from trilog.broker.controller._errors import StaleController
from trilog.broker.controller._liveness import probe
from trilog.broker.controller._requests import (
    LEADER_AND_ISR_VERSION,
    STOP_REPLICA_VERSION,
    UPDATE_METADATA_VERSION,
    RequestBatch,
    RequestBuilder,
    inter_broker_address,
)
from trilog.errors import (
    NO_ERROR,
    BrokerUnreachableError,
    NetworkError,
    RequestTimedOutError,
    StaleControllerEpochError,
    TrilogError,
)
from trilog.net import BrokerConnection, ClientSecurity, open_connection
from trilog.protocol import Message
from trilog.zk import BrokerRegistration

log = logging.getLogger("trilog.broker.controller")

_unreachable = RateLimitedLog(log, 30.0)


class BrokerChannel:
    """Requests to one broker at ``address``, in order, over one connection (Kafka's
    RequestSendThread): a request that fails on the network is sent again on a new
    connection until ``close``."""

    def __init__(self, broker_id: int, address: tuple[str, int], *, controller_id: int,
                 security: ClientSecurity | None, timeout_s: float,
                 on_gone: Callable[[], None] = lambda: None) -> None:
        self.broker_id = broker_id
        self.address = address
        #: called when the broker's listener refuses a connection (its process is gone)
        self.on_gone = on_gone
        self.controller_id = controller_id
        self.security = security
        self.timeout_s = timeout_s
        self._send, self._receive = trio.open_memory_channel[tuple[Message, int]](math.inf)
        self._scope = trio.CancelScope()

    def send(self, request: Message, version: int) -> None:
        self._send.send_nowait((request, version))

    def close(self) -> None:
        self._scope.cancel()

    async def run(self) -> None:
        host, port = self.address
        pending: tuple[Message, int] | None = None
        backoff = 0.1
        with self._scope:
            while True:
                try:
                    async with open_connection(
                            host, port, security=self.security,
                            client_id=f"controller-{self.controller_id}",
                            connect_timeout_s=self.timeout_s,
                            request_timeout_s=self.timeout_s) as conn:
                        backoff = 0.0  # a lost connection is made again at once
                        warned: set[int] = set()
                        while True:
                            if pending is None:
                                pending = await self._next_request(conn)
                            await self._deliver(conn, *pending, warned)
                            pending = None
                except BrokerUnreachableError as exc:
                    # No connection: if nothing listens there any more, the process is gone.
                    self._unreachable(exc)
                    if await probe(host, port) is False:
                        self.on_gone()
                except (NetworkError, RequestTimedOutError) as exc:
                    self._unreachable(exc)
                except TrilogError as exc:  # not the network: the request is dropped
                    log.error("broker %d failed a %s request: %s", self.broker_id,
                              pending[0].API_NAME if pending else "", exc)
                    pending = None
                await trio.sleep(backoff)
                # 0 after a lost connection, then 10 ms doubling to 2 s: a dying process's
                # listener may still take the first attempt; the next ones find it refusing.
                backoff = min(max(backoff * 2, 0.01), 2.0)

    def _unreachable(self, exc: TrilogError) -> None:
        _unreachable.warning(self.broker_id, "controller %d cannot reach broker %d at %s:%d "
                             "(%s); retrying", self.controller_id, self.broker_id,
                             *self.address, exc)

    async def _next_request(self, conn: BrokerConnection) -> tuple[Message, int]:
        """The next request to send; ``NetworkError`` if the connection ends first (the
        broker closed it: it may have died, which the caller finds out)."""
        got: list[tuple[Message, int]] = []
        async with trio.open_nursery() as nursery:
            async def receive() -> None:
                got.append(await self._receive.receive())
                nursery.cancel_scope.cancel()

            async def closed() -> None:
                await conn.wait_closed()
                nursery.cancel_scope.cancel()

            nursery.start_soon(receive)
            nursery.start_soon(closed)
        if not got:
            raise NetworkError(f"broker {self.broker_id} closed the connection")
        return got[0]

    async def _deliver(self, conn: BrokerConnection, request: Message, version: int,
                       warned: set[int]) -> None:
        api_key = request.API_KEY
        if api_key not in conn.api_versions:
            if api_key not in warned:
                warned.add(api_key)
                log.warning("broker %d does not serve %s; not sent", self.broker_id,
                            request.API_NAME)
            await trio.lowlevel.checkpoint()
            return
        response = await conn.request(request, version=version)
        if response.error_code == StaleControllerEpochError.code:
            raise StaleController(f"broker {self.broker_id} has seen a newer "
                                  "controller epoch")
        if response.error_code != NO_ERROR:
            log.warning("broker %d answered %s with error %d", self.broker_id,
                        request.API_NAME, response.error_code)
        failed = sorted({(e.topic_name, e.partition_index, e.error_code)
                         for e in getattr(response, "partition_errors", ())
                         if e.error_code not in (NO_ERROR, StaleControllerEpochError.code)})
        if failed:
            log.warning("broker %d answered %s with partition errors %s",
                        self.broker_id, request.API_NAME, failed)


class ChannelManager:
    """The senders of one term, one per live broker, run in ``nursery``; ``send`` turns an
    event's batch into requests (``requests``) and queues them."""

    def __init__(self, requests: RequestBuilder, nursery: trio.Nursery, *,
                 security: ClientSecurity | None, timeout_s: float,
                 on_gone: Callable[[BrokerRegistration], None] = lambda _reg: None) -> None:
        self.requests = requests
        #: told when a broker's process is found gone (its listener refuses connections)
        self.on_gone = on_gone
        self.nursery = nursery
        self.security = security
        self.timeout_s = timeout_s
        self.channels: dict[int, BrokerChannel] = {}

    def open(self, broker: BrokerRegistration) -> None:
        """Start sending to ``broker`` (a broker that joined)."""
        channel = BrokerChannel(
            broker.broker_id, inter_broker_address(broker, self.requests.listener),
            controller_id=self.requests.controller_id, security=self.security,
            timeout_s=self.timeout_s, on_gone=lambda: self.on_gone(broker))
        self.channels[broker.broker_id] = channel
        self.nursery.start_soon(channel.run)

    def close(self, broker_id: int) -> None:
        """Stop sending to ``broker_id`` (it left): what it was not sent is dropped."""
        channel = self.channels.pop(broker_id, None)
        if channel is not None:
            channel.close()

    def send(self, batch: RequestBatch) -> None:
        """Queue ``batch``'s requests, built from the view as it is now."""
        requests = self.requests
        for broker_id, tps in sorted(batch.leader_and_isr.items()):
            channel = self.channels.get(broker_id)
            if channel is not None:
                channel.send(requests.leader_and_isr(tps), LEADER_AND_ISR_VERSION)
        if batch.update_metadata:
            request = requests.update_metadata()
            for channel in self.channels.values():
                channel.send(request, UPDATE_METADATA_VERSION)
        for (broker_id, delete), stopped in sorted(batch.stop_replica.items()):
            channel = self.channels.get(broker_id)
            if channel is not None:
                channel.send(requests.stop_replica(stopped, delete), STOP_REPLICA_VERSION)
