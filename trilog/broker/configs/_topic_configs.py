"""Where topic configurations live, and how every broker comes to apply a change.

- Standalone: ``topic-configs.json`` in the first log dir, ``{"version":1,"topics":{topic:
  {name: value}}}``, replaced atomically on every change (a ``JsonFileStore``: a file
  that cannot be read stops the broker at start, naming it).
- ZooKeeper (Kafka 0.8+'s layout, ``trilog.zk``): ``/config/topics/<topic>`` holds a topic's
  overrides; a change also writes a sequential ``/config/changes/config_change_<n>``
  naming the topic, which every broker watches and answers by re-reading that topic's node.
  The writer removes notifications more than ``KEEP_NOTIFICATIONS`` behind its own; a broker
  that finds it missed some (a gap in the numbers) re-reads every topic.

``TopicConfigs`` is one broker's registry: each topic's overrides, resolved against the
broker's defaults (``_topic_configs.resolve``) and applied to the topic's logs
(``LogManager.update_topic_config``), for existing partitions and the ones created later.
Runs in the trio thread.
"""

from __future__ import annotations

import logging
import os
from contextlib import aclosing
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol, TypeVar

import trio

from trilog.broker._json_store import JsonFileStore
from trilog.broker.configs._broker_config import BrokerConfig
from trilog.broker.configs._topic_properties import (
    TopicConfig,
    broker_defaults,
    resolve,
    validate_overrides,
)
from trilog.errors import InvalidConfigError, RemoteProtocolError, RequestTimedOutError
from trilog.storage import LogManager
from trilog.zk import (
    CONFIG_CHANGE_PREFIX,
    CONFIG_CHANGES,
    CONFIG_TOPICS,
    NoNodeError,
    ZooKeeper,
    ZooKeeperError,
    config_change_sequence,
    decode_config_change,
    decode_entity_config,
    encode_config_change,
    encode_entity_config,
    topic_config_path,
)

log = logging.getLogger("trilog.broker.configs")
_T = TypeVar("_T")

STANDALONE_FILE = "topic-configs.json"
#: Change notifications a writer leaves behind its own (Kafka purges by age instead).
KEEP_NOTIFICATIONS = 100
RETRY_S = 1.0

Overrides = dict[str, str]


class ConfigStore(Protocol):
    """Where the overrides are kept (see the module docstring)."""

    async def load_all(self) -> dict[str, Overrides]: ...

    async def load(self, topic: str) -> Overrides: ...

    async def write(self, topic: str, overrides: Overrides) -> None: ...

    async def delete(self, topic: str) -> None: ...


class FileConfigStore:
    """A standalone broker's store: one JSON file, rewritten atomically on each change."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file = JsonFileStore(path, "topics")
        self._all: dict[str, Overrides] = {}

    async def load_all(self) -> dict[str, Overrides]:
        self._all = await trio.to_thread.run_sync(self._read)
        return {t: dict(o) for t, o in self._all.items()}

    def _read(self) -> dict[str, Overrides]:
        topics = self._file.read()
        for topic, overrides in topics.items():
            if not isinstance(overrides, dict):
                raise self._file.error(f"has overrides of topic {topic!r} that are not an "
                                       "object")
        return {t: {k: str(v) for k, v in o.items()} for t, o in topics.items()}

    async def load(self, topic: str) -> Overrides:
        await trio.lowlevel.checkpoint()
        return dict(self._all.get(topic, {}))

    async def write(self, topic: str, overrides: Overrides) -> None:
        updated = {**self._all, topic: dict(overrides)}
        if not overrides:
            del updated[topic]
        await self._save(updated)

    async def delete(self, topic: str) -> None:
        if topic in self._all:
            await self._save({t: o for t, o in self._all.items() if t != topic})
        else:
            await trio.lowlevel.checkpoint()

    async def _save(self, topics: dict[str, Overrides]) -> None:
        await trio.to_thread.run_sync(self._file.write, topics)
        self._all = topics  # only once it is on disk


class ZooKeeperConfigStore:
    """A cluster's store: Kafka's ``/config/topics`` nodes and change notifications."""

    def __init__(self, zk: ZooKeeper) -> None:
        self.zk = zk
        #: the newest notification this broker has answered (-1: none yet)
        self.seen = -1

    async def load_all(self) -> dict[str, Overrides]:
        await self.zk.ensure_path(CONFIG_CHANGES)
        await self.zk.ensure_path(CONFIG_TOPICS)
        # Note the newest notification first: a change made while we read is seen again.
        self.seen = max(self._sequences(await self.zk.get_children(CONFIG_CHANGES)), default=-1)
        return {topic: await self.load(topic) for topic in await self.zk.get_children(CONFIG_TOPICS)}

    async def load(self, topic: str) -> Overrides:
        path = topic_config_path(topic)
        try:
            return decode_entity_config(path, await self.zk.get(path))
        except NoNodeError:
            return {}
        except RemoteProtocolError as exc:
            log.error("ignoring %s: %s", path, exc)
            return {}

    async def write(self, topic: str, overrides: Overrides) -> None:
        try:
            await self.zk.put(topic_config_path(topic), encode_entity_config(overrides))
            created = await self.zk.create(f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}",
                                           encode_config_change(f"topics/{topic}"),
                                           sequence=True, makepath=True)
        except ZooKeeperError as exc:
            raise RequestTimedOutError(f"cannot store the config of {topic!r}: {exc}") from None
        newest = config_change_sequence(created.rsplit("/", 1)[-1])
        if newest is not None:
            await self._purge(newest)

    async def delete(self, topic: str) -> None:
        try:
            await self.zk.delete(topic_config_path(topic))
        except NoNodeError:
            pass

    async def _purge(self, newest: int) -> None:
        try:
            for name in await self.zk.get_children(CONFIG_CHANGES):
                seq = config_change_sequence(name)
                if seq is not None and seq < newest - KEEP_NOTIFICATIONS:
                    await self.zk.delete(f"{CONFIG_CHANGES}/{name}")
        except ZooKeeperError as exc:  # another broker purging too, or ZooKeeper away
            log.debug("purging config notifications: %s", exc)

    @staticmethod
    def _sequences(children: list[str]) -> list[int]:
        return sorted(s for s in map(config_change_sequence, children) if s is not None)

    async def changed_topics(self, children: list[str]) -> set[str] | None:
        """The topics named by notifications newer than ``seen`` (then seen), or None when
        some were purged unseen (re-read every topic)."""
        sequences = self._sequences(children)
        new = [s for s in sequences if s > self.seen]
        if not new:
            return set()
        # The oldest notification left is newer than the next we expected: some were purged.
        missed = self.seen >= 0 and sequences[0] > self.seen + 1
        topics = set()
        for seq in new:
            try:
                data = await self.zk.get(f"{CONFIG_CHANGES}/{CONFIG_CHANGE_PREFIX}{seq:010d}")
                entity = decode_config_change(data)
            except (NoNodeError, RemoteProtocolError):
                continue
            kind, _, name = entity.partition("/")
            if kind == "topics" and name:
                topics.add(name)
        self.seen = new[-1]
        return None if missed else topics


class TopicConfigs:
    """This broker's topic configurations (see the module docstring)."""

    def __init__(self, broker_config: BrokerConfig, logs: LogManager, store: ConfigStore,
                 limiter: trio.CapacityLimiter) -> None:
        self.broker_config = broker_config
        self.defaults = broker_defaults(broker_config)
        self.store = store
        self._logs = logs
        self._limiter = limiter
        self._overrides: dict[str, Overrides] = {}

    def overrides(self, topic: str) -> Overrides:
        return dict(self._overrides.get(topic, {}))

    def config_for(self, topic: str) -> TopicConfig:
        return resolve(self.defaults, self._overrides.get(topic, {}))

    async def load_all(self) -> None:
        """Read every stored override and apply it (at start, or after missed changes)."""
        stored = await self.store.load_all()
        for topic in set(self._overrides) - set(stored):
            await self._apply(topic, {})
        for topic, overrides in stored.items():
            await self._apply(topic, overrides)

    async def refresh(self, topic: str) -> None:
        """Re-read one topic's overrides (another broker changed them, or its logs are about
        to be created here) and apply them."""
        await self._apply(topic, await self.store.load(topic))

    async def set(self, topic: str, overrides: Overrides) -> None:
        """Store a topic's whole set of overrides (validated first) and apply it here; in a
        cluster the other brokers follow the change notification."""
        overrides = validate_overrides(overrides)
        if overrides == self._overrides.get(topic, {}):
            await trio.lowlevel.checkpoint()
            return
        await self.store.write(topic, overrides)
        await self._apply(topic, overrides)

    async def forget(self, topic: str, *, stored: bool = True) -> None:
        """A deleted topic: drop its overrides (from the store too if ``stored``)."""
        if stored:
            await self.store.delete(topic)
        await self._apply(topic, {})

    async def _apply(self, topic: str, overrides: Overrides) -> None:
        try:
            overrides = validate_overrides(overrides)
        except InvalidConfigError as exc:  # written by something else: keep what we have
            log.error("ignoring the stored config of %s: %s", topic, exc)
            return
        if overrides:
            self._overrides[topic] = overrides
            config = resolve(self.defaults, overrides).log
        else:
            self._overrides.pop(topic, None)
            config = None
        await trio.to_thread.run_sync(self._logs.update_topic_config, topic, config,
                                      limiter=self._limiter)

    async def follow_changes(self) -> None:
        """In a cluster: answer the change notifications until cancelled."""
        store = self.store
        if not isinstance(store, ZooKeeperConfigStore):
            return

        async def changed(children: list[str]) -> list[str] | None:
            topics = await store.changed_topics(children)
            return None if topics is None else sorted(topics)

        await follow_config_changes(store.zk, changed, self.refresh, self.load_all, "topics")


async def follow_config_changes(zk: ZooKeeper,
                                changed: Callable[[list[str]], Awaitable[Iterable[_T] | None]],
                                apply: Callable[[_T], Awaitable[None]],
                                reload: Callable[[], Awaitable[None]], what: str) -> None:
    """Answer ``/config/changes``' notifications until cancelled (topic configs and client
    quotas share them, as in Kafka): ``changed(children)`` names what changed since it was
    last asked, each of which is ``apply``-ed; None (notifications were missed) ``reload``s
    all of ``what``.  A ZooKeeper error is retried after ``RETRY_S``."""
    while True:
        try:
            value = await zk.watch_children(CONFIG_CHANGES)
            async with aclosing(value.eventual_values(lambda v: v is not None)) as values:
                async for children in values:
                    items = await changed(children)
                    if items is None:
                        log.warning("config notifications were missed; re-reading %s", what)
                        await reload()
                        continue
                    for item in items:
                        await apply(item)
        except ZooKeeperError as exc:
            log.warning("watching %s failed (%s); retrying", CONFIG_CHANGES, exc)
            await trio.sleep(RETRY_S)


def standalone_store(log_dirs: list[str]) -> FileConfigStore:
    return FileConfigStore(os.path.join(log_dirs[0], STANDALONE_FILE))
