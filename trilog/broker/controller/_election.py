"""Which broker is the controller: Kafka's election through ``/controller``.

Every broker of a ZooKeeper cluster runs a ``ControllerElection``.  Each tries to create the
ephemeral ``/controller`` node (``{"version":1,"brokerid":N,"timestamp":...}``); the one that
succeeds is the controller until its session ends, and first bumps ``/controller_epoch``
with a conditional write: every state the controller writes and every request it sends
carries that epoch, so that brokers refuse a controller that lost its place and did not
notice yet (a stale epoch).  The others watch ``/controller`` and try again when it
vanishes (the controller died or stopped), so a new controller takes over within the
ZooKeeper session timeout, or at once when a broker finds the controller's process gone
(``remove_dead``, called by ``_controller_watch.py`` and by a restarted controller that finds
its previous life's node).

``current`` holds ``(controller id, epoch)`` as this broker last saw it (the id is -1 while
there is none); ``is_controller`` says whether this broker won the place in this process
(a node left with our id by a previous life of this broker, whose session has not expired
yet, does not count: it vanishes with that session and the election runs again).  The
controller's work (watching brokers and topics, electing leaders, telling the brokers)
follows ``current``: it starts when this broker becomes the controller and stops when it
no longer is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import aclosing

import trio
from trio_util import AsyncValue

from trilog.errors import RemoteProtocolError
from trilog.zk import (
    CONTROLLER,
    CONTROLLER_EPOCH,
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    ZooKeeper,
    ZooKeeperError,
    decode_controller,
    decode_controller_epoch,
    encode_controller,
    encode_controller_epoch,
)

log = logging.getLogger("trilog.broker.controller")

RETRY_S = 1.0
NO_CONTROLLER = -1


class ControllerElection:
    """Takes part in the controller election for broker ``broker_id`` (see the module)."""

    def __init__(self, zk: ZooKeeper, broker_id: int) -> None:
        self.zk = zk
        self.broker_id = broker_id
        #: ``(controller id, controller epoch)`` as last seen (-1: no controller now)
        self.current: AsyncValue[tuple[int, int]] = AsyncValue((NO_CONTROLLER, 0))
        self._epoch = 0
        self._won = False
        self._retired = False

    @property
    def controller_id(self) -> int:
        return self.current.value[0]

    @property
    def epoch(self) -> int:
        """The controller epoch this broker last saw (its own while it is the controller)."""
        return self._epoch

    @property
    def is_controller(self) -> bool:
        return self._won and self.controller_id == self.broker_id

    async def settle(self) -> None:
        """One look at ``/controller`` (standing if vacant), so that a broker knows the
        controller before it serves; ``run`` keeps following it."""
        try:
            data = await self.zk.get(CONTROLLER)
        except NoNodeError:
            await self._stand()
            return
        await self._seen(data)

    async def run(self) -> None:
        """Follow ``/controller`` and stand whenever it is vacant; runs until cancelled."""
        while True:
            try:
                node = await self.zk.watch_data(CONTROLLER)
                async with aclosing(node.eventual_values()) as values:
                    async for data in values:
                        if data is None:
                            await self._stand()
                        else:
                            await self._seen(data)
            except ZooKeeperError as exc:
                log.warning("following %s failed (%s); retrying", CONTROLLER, exc)
                await trio.sleep(RETRY_S)

    async def _seen(self, data: bytes) -> None:
        try:
            controller = decode_controller(data)
        except RemoteProtocolError as exc:
            log.error("ignoring a malformed %s: %s", CONTROLLER, exc)
            return
        if not (self._won and controller == self.broker_id):
            self._won = False
            self._epoch = await self._read_epoch()
            if controller == self.broker_id and self.zk.session_id is not None:
                # Our id, not our session: a previous life of this broker, which is gone
                # (this process registered the id, so no other process with it lives).
                session = self.zk.session_id
                if await self.remove_dead(controller, lambda owner: owner != session):
                    return  # the watch brings the vacancy; we stand then
        self._set(controller, self._epoch)

    async def _stand(self) -> None:
        if self._retired:
            return
        try:
            epoch = await self._register_and_bump_epoch()
        except NodeExistsError:
            return  # another broker won; its node's data arrives through the watch
        self._epoch = epoch
        self._won = True
        log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch)
        self._set(self.broker_id, epoch)

    async def _read_epoch(self) -> int:
        try:
            return decode_controller_epoch(await self.zk.get(CONTROLLER_EPOCH))
        except NoNodeError:
            return 0
        except RemoteProtocolError as exc:
            log.error("%s is malformed: %s", CONTROLLER_EPOCH, exc)
            return self._epoch

    async def _register_and_bump_epoch(self) -> int:
        """Create ``/controller`` and increment ``/controller_epoch`` in one transaction
        (Kafka's ``registerControllerAndIncrementControllerEpoch``), so that whoever sees
        the new controller's node also sees its epoch, and two would-be controllers never
        get the same epoch.  ``NodeExistsError`` when another broker is the controller."""
        while True:
            try:
                data, version = await self.zk.get_versioned(CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    await self.zk.create(CONTROLLER_EPOCH, encode_controller_epoch(0))
                except NodeExistsError:
                    pass
                continue
            epoch = decode_controller_epoch(data) + 1
            try:
                await self.zk.create_and_set(
                    CONTROLLER, encode_controller(self.broker_id), ephemeral=True,
                    set_path=CONTROLLER_EPOCH, set_value=encode_controller_epoch(epoch),
                    version=version)
                return epoch
            except BadVersionError:
                continue

    async def remove_dead(self, controller: int, dead: Callable[[int], bool]) -> bool:
        """Delete ``/controller`` if it names broker ``controller`` and ``dead(owner)`` says
        its session's process is gone, so that the election runs now instead of when that
        session expires (fast failover).  True if it was deleted.

        Safety: the node is deleted in one transaction with a check that
        ``/controller_epoch`` is still at the version read *before* the node was read.  Every
        registration creates ``/controller`` and bumps that version together
        (``_register_and_bump_epoch``), so the node deleted is the one judged: a controller
        elected meanwhile (a new node, a new version) is never deleted, and of several brokers
        deleting the same dead node, one succeeds."""
        try:
            _data, version = await self.zk.get_versioned(CONTROLLER_EPOCH)
            data, owner = await self.zk.get_owned(CONTROLLER)
            if decode_controller(data) != controller or not dead(owner):
                return False
            await self.zk.delete_checked(CONTROLLER, check_path=CONTROLLER_EPOCH,
                                         version=version)
        except (ZooKeeperError, RemoteProtocolError):
            return False
        log.warning("deleted %s: controller %d's process is gone (its session %#x has not "
                    "expired yet); electing a new controller now", CONTROLLER, controller,
                    owner)
        return True

    async def resign(self) -> None:
        """Give the controller's place up (a controlled shutdown of the controller): the
        node is deleted if it is still this broker's, and this broker stands no more."""
        self._retired = True
        if not self.is_controller:
            return
        self._won = False
        self._set(NO_CONTROLLER, self._epoch)
        try:
            if decode_controller(await self.zk.get(CONTROLLER)) == self.broker_id:
                await self.zk.delete(CONTROLLER)
        except (ZooKeeperError, RemoteProtocolError):
            pass  # gone already, or the session ends with it

    def _set(self, controller: int, epoch: int) -> None:
        if self.current.value != (controller, epoch):
            self.current.value = (controller, epoch)
