"""Where SCRAM credentials live: salted, never the passwords themselves.

- ZooKeeper (Kafka's layout): ``/config/users/<user>`` holds ``{"version":1,"config":
  {"SCRAM-SHA-256":"salt=...,stored_key=...,server_key=...,iterations=4096", ...}}``, what
  ``kafka-configs --alter --add-config 'SCRAM-SHA-256=[password=...]' --entity-type users``
  writes.
- Standalone: the same map per user in a JSON file (``sasl.credentials.file``, by default
  ``users.json`` in the first log dir), ``{"version":1,"users":{user:{mechanism:text}}}``,
  replaced atomically on every change (a ``JsonFileStore``: the broker reads it at start,
  and a file it cannot read stops it, naming the file).

The ZooKeeper node also holds the user's client quotas (``broker/quotas/``, as Kafka's):
each store keeps the other's keys when it writes.

The broker reads a user's credentials at each login (a login is rare; a change applies at
the next one, with no notification to follow); ``trilog users`` writes them.
"""

from __future__ import annotations

import os
from typing import Protocol

import trio

from trilog.broker._json_store import JsonFileStore
from trilog.protocol import SASL_MECHANISMS, SaslError, ScramCredential
from trilog.zk import (
    CONFIG_USERS,
    NoNodeError,
    NotEmptyError,
    ZooKeeper,
    decode_entity_config,
    encode_entity_config,
    user_config_path,
)

STANDALONE_FILE = "users.json"
SCRAM_MECHANISMS = tuple(m for m in SASL_MECHANISMS if m.startswith("SCRAM-"))

#: user -> {mechanism: credential text}
Users = dict[str, dict[str, str]]


class UserStore(Protocol):
    async def check(self) -> None:
        """At the broker's start: raise ``StoreError`` if the store cannot be read."""
        ...

    async def credentials(self, user: str) -> dict[str, str]:
        """``{mechanism: credential text}`` of ``user`` (empty: no such user)."""
        ...

    async def users(self) -> Users: ...

    async def set(self, user: str, credentials: dict[str, str]) -> None:
        """Replace ``user``'s credentials (empty: delete the user)."""
        ...


async def scram_credential(store: UserStore, mechanism: str, user: str
                           ) -> ScramCredential | None:
    """``user``'s credential for ``mechanism`` (None: unknown user, or no credential of
    that mechanism, or an unreadable one)."""
    text = (await store.credentials(user)).get(mechanism)
    if text is None:
        return None
    try:
        return ScramCredential.from_text(text)
    except SaslError:
        return None


class FileUserStore:
    """A standalone broker's credentials: one JSON file (see the module docstring)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file = JsonFileStore(path, "users")

    async def check(self) -> None:
        await self.users()

    def _read(self) -> Users:
        users = self._file.read()
        for user, credentials in users.items():
            if not isinstance(credentials, dict):
                raise self._file.error(f"has credentials of user {user!r} that are not an "
                                       "object")
        return {u: {m: str(t) for m, t in c.items()} for u, c in users.items()}

    async def users(self) -> Users:
        return await trio.to_thread.run_sync(self._read)

    async def credentials(self, user: str) -> dict[str, str]:
        return (await self.users()).get(user, {})

    async def set(self, user: str, credentials: dict[str, str]) -> None:
        users = await self.users()
        if credentials:
            users[user] = dict(credentials)
        else:
            users.pop(user, None)
        await trio.to_thread.run_sync(self._file.write, users)


class ZooKeeperUserStore:
    """A cluster's credentials: Kafka's ``/config/users`` nodes."""

    def __init__(self, zk: ZooKeeper) -> None:
        self.zk = zk

    async def check(self) -> None:
        await trio.lowlevel.checkpoint()  # read at each login; ZooKeeper has no file to fail

    async def _config(self, user: str) -> dict[str, str]:
        try:
            data = await self.zk.get(user_config_path(user))
        except NoNodeError:
            return {}
        return decode_entity_config(f"user {user}", data)

    async def credentials(self, user: str) -> dict[str, str]:
        # The node may also hold the user's client quotas (broker/quotas/), as in Kafka.
        return {k: v for k, v in (await self._config(user)).items() if k in SCRAM_MECHANISMS}

    async def users(self) -> Users:
        try:
            names = await self.zk.get_children(CONFIG_USERS)
        except NoNodeError:
            return {}
        users = {}
        for name in sorted(names):
            credentials = await self.credentials(name)
            if credentials:
                users[name] = credentials
        return users

    async def set(self, user: str, credentials: dict[str, str]) -> None:
        path = user_config_path(user)
        # What is not a credential (the user's client quotas) stays.
        others = {k: v for k, v in (await self._config(user)).items()
                  if k not in SCRAM_MECHANISMS}
        if not credentials and not others:
            try:
                await self.zk.delete(path)
            except NoNodeError:
                pass
            except NotEmptyError:  # the quotas of the user's client ids are below it
                await self.zk.put(path, encode_entity_config({}))
            return
        await self.zk.put(path, encode_entity_config({**others, **credentials}))


def standalone_user_store(log_dirs: list[str], path: str | None = None) -> FileUserStore:
    return FileUserStore(path or os.path.join(log_dirs[0], STANDALONE_FILE))
