"""Where client quotas live, and how every broker comes to apply a change.

- Standalone: ``quotas.json`` in the first log dir, ``{"version":1,"entities":
  {"users/alice/clients/app": {"producer_byte_rate": "1048576"}}}`` (entity paths as in
  ZooKeeper), replaced atomically on every change (a ``JsonFileStore``: a damaged file stops
  the broker at start, naming it).
- ZooKeeper (Kafka's layout): ``/config/users/<user>``, ``/config/users/<user>/clients/
  <client-id>``, ``/config/clients/<client-id>`` (``<default>`` for the defaults), each
  ``{"version":1,"config":{"producer_byte_rate":"1048576",..}}``.  ``/config/users/<user>``
  also holds the user's SCRAM credentials: a quota write keeps what is not a quota.  A change
  also writes ``/config/changes/config_change_<n>`` with the entity's path (as topic configs
  do); every broker watches them and re-reads that entity.  A broker that finds it missed
  notifications (a gap in the numbers) re-reads every quota.

``ClientQuotas`` is one broker's registry: the store and the ``QuotaManager`` it feeds.
Runs in the trio thread.
"""

from __future__ import annotations

import logging
import os
from typing import Protocol

import trio

from trilog.broker._json_store import JsonFileStore
from trilog.broker.configs._topic_configs import KEEP_NOTIFICATIONS, follow_config_changes
from trilog.broker.quotas._entity import (
    QUOTA_KEYS,
    Entity,
    Quotas,
    entity_path,
    parse_entity_path,
    parse_values,
    value_text,
)
from trilog.broker.quotas._manager import QuotaManager
from trilog.errors import InvalidRequestError, RemoteProtocolError, RequestTimedOutError
from trilog.zk import (
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES,
    NoNodeError,
    ZooKeeper,
    ZooKeeperError,
    config_change_sequence,
    decode_config_change,
    decode_entity_config,
    encode_config_change,
    encode_entity_config,
)

log = logging.getLogger("trilog.broker.quotas")

STANDALONE_FILE = "quotas.json"


class QuotaStore(Protocol):
    async def load_all(self) -> dict[Entity, Quotas]: ...

    async def load(self, e: Entity) -> Quotas: ...

    async def write(self, e: Entity, quotas: Quotas) -> None: ...


class FileQuotaStore:
    """A standalone broker's quotas: one JSON file, rewritten atomically on each change."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file = JsonFileStore(path, "entities")
        self._all: dict[str, dict[str, str]] = {}

    async def load_all(self) -> dict[Entity, Quotas]:
        self._all = await trio.to_thread.run_sync(self._read)
        return {e: await self.load(e) for e in map(parse_entity_path, self._all) if e}

    def _read(self) -> dict[str, dict[str, str]]:
        entities = self._file.read()
        for path, values in entities.items():
            if parse_entity_path(path) is None or not isinstance(values, dict):
                raise self._file.error(f"has an entry {path!r} that is not a quota entity's")
            try:
                parse_values(path, {k: str(v) for k, v in values.items()})
            except InvalidRequestError as exc:
                raise self._file.error(f"has a bad quota ({exc})") from None
        return {p: {k: str(v) for k, v in values.items()} for p, values in entities.items()}

    async def load(self, e: Entity) -> Quotas:
        await trio.lowlevel.checkpoint()
        return parse_values(entity_path(e), self._all.get(entity_path(e), {}))

    async def write(self, e: Entity, quotas: Quotas) -> None:
        path = entity_path(e)
        updated = {p: v for p, v in self._all.items() if p != path}
        if quotas:
            updated[path] = {k: value_text(v) for k, v in sorted(quotas.items())}
        await trio.to_thread.run_sync(self._file.write, updated)
        self._all = updated  # only once it is on disk


class ZooKeeperQuotaStore:
    """A cluster's quotas: Kafka's ``/config/users`` and ``/config/clients`` nodes."""

    def __init__(self, zk: ZooKeeper) -> None:
        self.zk = zk
        #: the newest change notification this broker has answered (-1: none yet)
        self.seen = -1

    async def load_all(self) -> dict[Entity, Quotas]:
        await self.zk.ensure_path(CONFIG_CHANGES)
        children = await self.zk.get_children(CONFIG_CHANGES)
        # Note the newest notification first: a change made while we read is seen again.
        self.seen = max((s for s in map(config_change_sequence, children) if s is not None),
                        default=-1)
        paths = []
        for user in await self._children("/config/users"):
            paths.append(f"users/{user}")
            paths += [f"users/{user}/clients/{c}"
                      for c in await self._children(f"/config/users/{user}/clients")]
        paths += [f"clients/{c}" for c in await self._children("/config/clients")]
        found = {}
        for e in (e for e in map(parse_entity_path, paths) if e is not None):
            quotas = await self.load(e)
            if quotas:
                found[e] = quotas
        return found

    async def _children(self, path: str) -> list[str]:
        try:
            return await self.zk.get_children(path)
        except NoNodeError:
            return []

    async def _config(self, e: Entity) -> dict[str, str]:
        path = "/config/" + entity_path(e)
        try:
            return decode_entity_config(path, await self.zk.get(path))
        except NoNodeError:
            return {}

    async def load(self, e: Entity) -> Quotas:
        try:
            return parse_values("/config/" + entity_path(e), await self._config(e))
        except (RemoteProtocolError, InvalidRequestError) as exc:
            log.error("ignoring the quotas of %s: %s", entity_path(e), exc)
            return {}

    async def write(self, e: Entity, quotas: Quotas) -> None:
        path = entity_path(e)
        try:
            # what else the node holds (a user's SCRAM credentials) stays
            kept = {k: v for k, v in (await self._config(e)).items() if k not in QUOTA_KEYS}
            config = {**kept, **{k: value_text(v) for k, v in quotas.items()}}
            await self.zk.put("/config/" + path, encode_entity_config(config))
            created = await self.zk.create(f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}",
                                           encode_config_change(path), sequence=True,
                                           makepath=True)
        except (ZooKeeperError, RemoteProtocolError) as exc:
            raise RequestTimedOutError(f"cannot store the quotas of {path}: {exc}") from None
        newest = config_change_sequence(created.rsplit("/", 1)[-1])
        if newest is not None:
            await self._purge(newest)

    async def _purge(self, newest: int) -> None:
        try:
            for name in await self.zk.get_children(CONFIG_CHANGES):
                seq = config_change_sequence(name)
                if seq is not None and seq < newest - KEEP_NOTIFICATIONS:
                    await self.zk.delete(f"{CONFIG_CHANGES}/{name}")
        except ZooKeeperError as exc:  # another broker purging too, or ZooKeeper away
            log.debug("purging config notifications: %s", exc)

    async def changed(self, children: list[str]) -> set[Entity] | None:
        """The quota entities named by notifications newer than ``seen`` (then seen), or
        None when some were purged unseen (re-read them all)."""
        sequences = sorted(s for s in map(config_change_sequence, children) if s is not None)
        new = [s for s in sequences if s > self.seen]
        if not new:
            return set()
        missed = self.seen >= 0 and sequences[0] > self.seen + 1
        entities = set()
        for seq in new:
            try:
                data = await self.zk.get(f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}{seq:010d}")
                e = parse_entity_path(decode_config_change(data))
            except (NoNodeError, RemoteProtocolError):
                continue
            if e is not None:
                entities.add(e)
        self.seen = new[-1]
        return None if missed else entities


class ClientQuotas:
    """This broker's quotas: what the store holds, applied to ``manager``."""

    def __init__(self, store: QuotaStore, manager: QuotaManager) -> None:
        self.store = store
        self.manager = manager

    async def load_all(self) -> None:
        self.manager.replace_all(await self.store.load_all())

    async def alter(self, e: Entity, quotas: Quotas) -> None:
        """Store ``e``'s whole set of quotas (checked by the caller) and apply it here; in a
        cluster the other brokers follow the change notification."""
        await self.store.write(e, quotas)
        self.manager.set(e, quotas)

    async def follow_changes(self) -> None:
        """In a cluster: answer the change notifications until cancelled."""
        store = self.store
        if not isinstance(store, ZooKeeperQuotaStore):
            return

        async def apply(e: Entity) -> None:
            self.manager.set(e, await store.load(e))

        await follow_config_changes(store.zk, store.changed, apply, self.load_all, "quotas")


def standalone_quota_store(log_dirs: list[str]) -> FileQuotaStore:
    return FileQuotaStore(os.path.join(log_dirs[0], STANDALONE_FILE))
