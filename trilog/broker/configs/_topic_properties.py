"""Per-topic configuration: Kafka's topic-level names, typed, validated and described.

A topic's settings are its *overrides* (Kafka's topic-level names and their text, as they
are stored: ``{"retention.ms": "3600000"}``) over the broker's defaults (its ``log.*`` and
related properties).  ``TOPIC_PROPERTIES`` is the one table of them: how each parses and
prints, which ``LogConfig`` or ``TopicConfig`` field it sets, and which broker property gives
its default (Kafka's "synonym").  Pure: no I/O (``_config_store.py`` stores and applies
them).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trilog.broker.configs._broker_config import PROPERTIES, PROPERTIES_BY_NAME, BrokerConfig, property_text
from trilog.errors import InvalidConfigError
from trilog.storage import LogConfig
from trilog.storage._config import NEVER

#: Kafka's ConfigSource codes (DescribeConfigs v1+).
SOURCE_TOPIC = 1  # DYNAMIC_TOPIC_CONFIG
SOURCE_STATIC_BROKER = 4  # STATIC_BROKER_CONFIG
SOURCE_DEFAULT = 5  # DEFAULT_CONFIG

#: Kafka's ConfigType codes (DescribeConfigs v3+).
TYPE_BOOLEAN, TYPE_STRING, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST = 1, 2, 5, 6, 7


@dataclass(frozen=True)
class TopicConfig:
    """A topic's effective configuration: its logs' ``LogConfig`` and the settings that are
    not the log's (the broker reads them)."""

    log: LogConfig
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False


# -- how a value parses and prints -----------------------------------------------------------


def _long(low: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError("must be a whole number, such as 3600000") from None
        if low is not None and value < low:
            raise ValueError(f"must be at least {low}")
        return value
    return parse


def _ratio(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError("must be a number between 0 and 1, such as 0.5") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be between 0 and 1")
    return value


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low not in ("true", "false"):
        raise ValueError("must be true or false")
    return low == "true"


def _choice(*values: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.strip() not in values:
            raise ValueError(f"must be one of {', '.join(values)}")
        return text.strip()
    return parse


def _policy(text: str) -> frozenset[str]:
    parts = frozenset(p.strip() for p in text.split(",") if p.strip())
    if not parts or not parts <= {"delete", "compact"}:
        raise ValueError("must be delete, compact, or compact,delete")
    return parts


def _text(value: Any) -> str:
    """A typed value as Kafka prints it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, frozenset):
        return ",".join(sorted(value))
    if value is None:  # flush.ms unset: never by time
        return str(NEVER)
    return str(value)


@dataclass(frozen=True)
class TopicProperty:
    name: str
    parse: Callable[[str], Any]
    #: the ``LogConfig`` field it sets, or the ``TopicConfig`` one (``log=False``)
    field: str
    #: the broker properties giving its default (Kafka's synonyms), most specific first
    broker_properties: tuple[str, ...]
    doc: str
    log: bool = True
    config_type: int = TYPE_LONG


P = TopicProperty
TOPIC_PROPERTIES: tuple[TopicProperty, ...] = (
    P("cleanup.policy", _policy, "cleanup_policy", ("log.cleanup.policy",),
      "delete: drop old segments by retention; compact: keep the latest record of each key; "
      "or both (compact,delete).", config_type=TYPE_LIST),
    P("delete.retention.ms", _long(0), "delete_retention_ms", ("log.cleaner.delete.retention.ms",),
      "How long a compacted topic keeps a tombstone (a null value) once it is clean."),
    P("flush.messages", _long(1), "flush_interval_messages", ("log.flush.interval.messages",),
      "Fsync after this many messages."),
    P("flush.ms", _long(0), "flush_interval_ms", ("log.flush.interval.ms",),
      "Fsync when the oldest unflushed message is this old."),
    P("max.message.bytes", _long(0), "max_message_bytes", ("message.max.bytes",),
      "The largest record batch the topic takes."),
    P("min.compaction.lag.ms", _long(0), "min_compaction_lag_ms",
      ("log.cleaner.min.compaction.lag.ms",),
      "Records younger than this are not compacted."),
    P("message.timestamp.type", _choice("CreateTime", "LogAppendTime"),
      "message_timestamp_type", ("log.message.timestamp.type",),
      "CreateTime: the producer's timestamps; LogAppendTime: the broker stamps each batch.",
      config_type=TYPE_STRING),
    P("min.cleanable.dirty.ratio", _ratio, "min_cleanable_dirty_ratio",
      ("log.cleaner.min.cleanable.ratio",),
      "Clean a compacted log once this share of it is not clean yet.", config_type=TYPE_DOUBLE),
    P("min.insync.replicas", _long(1), "min_insync_replicas", ("min.insync.replicas",),
      "In-sync replicas an acks=all produce needs (NOT_ENOUGH_REPLICAS below it).",
      log=False),
    P("retention.bytes", _long(-1), "retention_bytes", ("log.retention.bytes",),
      "Delete the oldest segments while a partition is larger than this (-1: no limit)."),
    P("retention.ms", _long(-1), "retention_ms",
      ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
      "Delete segments older than this (-1: forever)."),
    P("segment.bytes", _long(14), "segment_bytes", ("log.segment.bytes",),
      "Roll a new segment at this size."),
    P("segment.ms", _long(1), "segment_ms", ("log.roll.ms", "log.roll.hours"),
      "Roll a new segment when the active one is this old."),
    P("unclean.leader.election.enable", _bool, "unclean_leader_election_enable",
      ("unclean.leader.election.enable",),
      "May a replica outside the ISR lead when none in it is alive, losing records.",
      log=False, config_type=TYPE_BOOLEAN),
)
del P
TOPIC_PROPERTIES_BY_NAME: dict[str, TopicProperty] = {p.name: p for p in TOPIC_PROPERTIES}


# -- validation and resolution ---------------------------------------------------------------


def validate_overrides(raw: Mapping[str, str | None]) -> dict[str, str]:
    """Check a topic's overrides; return them normalised (``None`` values dropped: they mean
    "the default").  ``InvalidConfigError`` names a bad name (and the nearest good one) or a
    bad value and what it must be."""
    out: dict[str, str] = {}
    for name, text in raw.items():
        prop = TOPIC_PROPERTIES_BY_NAME.get(name)
        if prop is None:
            close = difflib.get_close_matches(name, TOPIC_PROPERTIES_BY_NAME, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InvalidConfigError(f"unknown topic config {name!r}{hint}")
        if text is None:
            continue
        try:
            out[name] = _text(prop.parse(text))
        except ValueError as exc:
            raise InvalidConfigError(f"{name}={text!r}: {exc}") from None
    return out


def broker_defaults(config: BrokerConfig) -> TopicConfig:
    """What a topic without overrides gets from this broker's properties."""
    return TopicConfig(
        log=config.log_config(),
        min_insync_replicas=config["min.insync.replicas"],
        unclean_leader_election_enable=config["unclean.leader.election.enable"],
    )


def resolve(defaults: TopicConfig, overrides: Mapping[str, str]) -> TopicConfig:
    """``defaults`` with validated ``overrides`` applied."""
    log_changes: dict[str, Any] = {}
    topic_changes: dict[str, Any] = {}
    for name, text in overrides.items():
        prop = TOPIC_PROPERTIES_BY_NAME[name]
        (log_changes if prop.log else topic_changes)[prop.field] = prop.parse(text)
    log = dataclasses.replace(defaults.log, **log_changes) if log_changes else defaults.log
    return dataclasses.replace(defaults, log=log, **topic_changes)


# -- DescribeConfigs -------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigEntry:
    """One described setting, in DescribeConfigs' terms."""

    name: str
    value: str | None
    source: int
    read_only: bool = False
    is_sensitive: bool = False
    config_type: int = 0  # UNKNOWN
    documentation: str | None = None
    #: (name, value, source) from the most specific on: the topic override, the broker's
    #: property, Kafka's default
    synonyms: tuple[tuple[str, str | None, int], ...] = ()

    @property
    def is_default(self) -> bool:
        return self.source == SOURCE_DEFAULT


def describe_topic(config: TopicConfig, overrides: Mapping[str, str], broker: BrokerConfig,
                   names: Iterable[str] | None = None) -> list[ConfigEntry]:
    """The topic's settings (all, or ``names``; unknown names are left out, as Kafka does),
    each with where its value comes from: the topic, the broker's properties, the default."""
    wanted = TOPIC_PROPERTIES if names is None else [
        TOPIC_PROPERTIES_BY_NAME[n] for n in names if n in TOPIC_PROPERTIES_BY_NAME]
    out = []
    for prop in wanted:
        synonyms: list[tuple[str, str | None, int]] = []
        if prop.name in overrides:
            synonyms.append((prop.name, overrides[prop.name], SOURCE_TOPIC))
        synonyms += [(name, _broker_text(broker.values[name]), SOURCE_STATIC_BROKER)
                     for name in prop.broker_properties if name in broker.explicit]
        last = prop.broker_properties[-1]  # the broker's own default, in its own unit
        synonyms.append((last, _broker_text(PROPERTIES_BY_NAME[last].default), SOURCE_DEFAULT))
        out.append(ConfigEntry(prop.name, _value(config, prop), synonyms[0][2],
                               synonyms=tuple(synonyms), config_type=prop.config_type,
                               documentation=prop.doc))
    return out


def _value(config: TopicConfig, prop: TopicProperty) -> str:
    return _text(getattr(config.log if prop.log else config, prop.field))


def effective_value(config: TopicConfig, name: str) -> str:
    """A setting's value in force for a topic, as Kafka prints it."""
    return _value(config, TOPIC_PROPERTIES_BY_NAME[name])


def _broker_text(value: Any) -> str | None:
    return None if value is None else property_text(value)


def describe_broker(broker: BrokerConfig, names: Iterable[str] | None = None
                    ) -> list[ConfigEntry]:
    """The broker's own properties: read-only here (set in server.properties), each from the
    file or an override (static) or its default."""
    wanted = {p.name for p in PROPERTIES} if names is None else set(names)
    out = []
    for prop in PROPERTIES:
        if prop.name not in wanted:
            continue
        text = _broker_text(broker.values[prop.name])
        source = SOURCE_STATIC_BROKER if prop.name in broker.explicit else SOURCE_DEFAULT
        out.append(ConfigEntry(prop.name, text, source, read_only=True,
                               synonyms=((prop.name, text, source),), documentation=prop.doc))
    return out
