"""The broker's configuration: Kafka's property names, types, defaults and documentation.

A ``.properties`` file (Java's format: ``key=value`` or ``key: value``, ``#``/``!``
comments, backslash line continuations) plus ``--override key=value`` pairs become one
``BrokerConfig``.  Unknown keys are an error that names the nearest known key.  The table
``PROPERTIES`` is the single source for parsing, defaults, ``trilog broker --help`` and
``docs/broker-config.md``.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from trilog._properties import PropertiesError
from trilog._properties import parse_properties as java_properties
from trilog.broker.network._listeners import (
    Listener,
    ListenerError,
    PrincipalRules,
    inter_broker_listener,
    parse_client_auth,
    parse_listeners,
    parse_protocol_map,
)
from trilog.errors import TrilogError
from trilog.storage import LogConfig
from trilog.storage._config import NEVER, TIMESTAMP_TYPES, parse_cleanup_policy


class ConfigError(TrilogError):
    """A configuration file or value is wrong; the message says which and why."""


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("true", "yes", "1"):
        return True
    if low in ("false", "no", "0"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _int(text: str) -> int:
    try:
        return int(text.strip().replace("_", ""))
    except ValueError:
        raise ValueError("expected a whole number, such as 3") from None


def _str(text: str) -> str:
    return text.strip()


def _float(text: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise ValueError("expected a number, such as 0.5") from None


def _ratio(text: str) -> float:
    value = _float(text)
    if not 0.0 <= value <= 1.0:
        raise ValueError("expected a ratio between 0 and 1")
    return value


def _timestamp_type(text: str) -> str:
    if text.strip() not in TIMESTAMP_TYPES:
        raise ValueError(f"expected one of {', '.join(TIMESTAMP_TYPES)}")
    return text.strip()


def _list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _principal_rules(text: str) -> PrincipalRules:
    return PrincipalRules.parse(text)


_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _mechanism(text: str) -> str:
    value = text.strip().upper()
    if value not in _SASL_MECHANISMS:
        raise ValueError(f"expected one of {', '.join(_SASL_MECHANISMS)}")
    return value


def _mechanisms(text: str) -> list[str]:
    return [_mechanism(part) for part in _list(text)]


AUTHORIZERS = ("kafka.security.authorizer.AclAuthorizer",
               "kafka.security.auth.SimpleAclAuthorizer")


def _authorizer(text: str) -> str | None:
    value = text.strip()
    if value and value not in AUTHORIZERS:
        raise ValueError(f"the authorizer is {AUTHORIZERS[0]} (or empty: none)")
    return value or None


def _principals(text: str) -> list[str]:
    principals = [p.strip() for p in text.split(";") if p.strip()]
    for p in principals:
        kind, sep, name = p.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"{p!r} is not Type:name (e.g. User:admin)")
    return principals


def _host_counts(text: str) -> dict[str, int]:
    """Kafka's ``max.connections.per.ip.overrides``: ``host:count,host:count``."""
    counts = {}
    for item in _list(text):
        host, sep, count = item.rpartition(":")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"expected host:count, got {item!r}")
        counts[host.strip().strip("[]")] = int(count)
    return counts


@dataclass(frozen=True)
class Property:
    name: str
    parse: Callable[[str], Any]
    default: Any
    doc: str
    low: int | None = None  # for ints: the smallest legal value
    high: int | None = None  # for ints: the largest legal value


_MB = 1 << 20
_INT_MAX = 2**31 - 1

PROPERTIES: tuple[Property, ...] = (
    Property("broker.id", _int, 0, "This broker's id, unique in the cluster.", low=0),
    Property("listeners", _str, "PLAINTEXT://127.0.0.1:9092",
             "Where to listen: comma-separated NAME://host:port (NAME is PLAINTEXT, SSL, "
             "SASL_PLAINTEXT, SASL_SSL, or a name of listener.security.protocol.map). An "
             "empty host is every interface; port 0 picks a free port."),
    Property("listener.security.protocol.map", _str, None,
             "NAME:PROTOCOL pairs for listeners with names of their own (e.g. "
             "INTERNAL:SASL_SSL); Kafka's four protocol names map to themselves."),
    Property("host.name", _str, None, "Old-style listener host (used with port when listeners is not set)."),
    Property("port", _int, None, "Old-style listener port (used with host.name when listeners is not set).", low=0,
             high=65535),
    Property("advertised.listeners", _str, None,
             "The addresses clients are told to use, per listener name, if not the "
             "listeners' own (e.g. behind NAT): NAME://host:port, ..."),
    Property("inter.broker.listener.name", _str, None,
             "The listener brokers use to talk to each other (replica fetches, the "
             "controller's requests); default: the one of security.inter.broker.protocol, "
             "else the first listener."),
    Property("security.inter.broker.protocol", _str, None,
             "The security protocol of the inter-broker listener (when "
             "inter.broker.listener.name is not set)."),
    Property("ssl.certfile", _str, None,
             "PEM file with the broker's certificate chain (and key, unless ssl.keyfile): "
             "needed by SSL and SASL_SSL listeners. Kafka's ssl.keystore.location."),
    Property("ssl.keyfile", _str, None, "PEM file with the broker's private key."),
    Property("ssl.key.password", _str, None, "Password of an encrypted ssl.keyfile."),
    Property("ssl.cafile", _str, None,
             "PEM file of the CAs that client certificates must chain to, and that the "
             "brokers' certificates chain to for inter-broker TLS. Kafka's "
             "ssl.truststore.location."),
    Property("ssl.client.auth", parse_client_auth, "none",
             "Client certificates on TLS listeners: required (mutual TLS; the certificate "
             "names the principal), requested, or none."),
    Property("ssl.principal.mapping.rules", _principal_rules, PrincipalRules(),
             "How a client certificate's subject becomes a principal name: "
             "RULE:pattern/replacement/[LU] entries and DEFAULT (the whole subject, e.g. "
             "CN=alice,O=acme), e.g. RULE:^CN=(.*?),.*$/$1/,DEFAULT."),
    Property("ssl.endpoint.identification.algorithm", _str, "https",
             "https: a broker connecting to another over TLS checks the host name in its "
             "certificate; empty: it does not."),
    Property("sasl.enabled.mechanisms", _mechanisms, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
             "SASL mechanisms the SASL listeners accept (PLAIN, SCRAM-SHA-256, "
             "SCRAM-SHA-512). PLAIN checks the password against the user's SCRAM "
             "credentials; without TLS it crosses the network in the clear."),
    Property("sasl.mechanism.inter.broker.protocol", _mechanism, "SCRAM-SHA-512",
             "The SASL mechanism brokers log in to each other with."),
    Property("sasl.jaas.config", _str, None,
             "The broker's own SASL login, for an inter-broker SASL listener: "
             'org.apache.kafka.common.security.scram.ScramLoginModule required '
             'username="admin" password="..."; (the ScramLoginModule or PlainLoginModule).'),
    Property("connection.failed.authentication.delay.ms", _int, 100,
             "How long the answer to a failed SASL login (or to a request out of turn "
             "before it) waits before it is sent and the connection closed: slows password "
             "guessing; other connections are served meanwhile.", low=0),
    Property("sasl.server.max.receive.size", _int, 512 * 1024,
             "The largest request a connection on a SASL listener may send before its "
             "login; one announcing more closes the connection at once. Requests before the "
             "login draw on a budget of their own (32 times this), never on "
             "queued.max.request.bytes.", low=64),
    Property("authorizer.class.name", _authorizer, None,
             "Turns ACLs on: kafka.security.authorizer.AclAuthorizer (Kafka's name; also "
             "kafka.security.auth.SimpleAclAuthorizer). Unset: every principal may do "
             "everything."),
    Property("super.users", _principals, [],
             "Principals allowed everything whatever the ACLs, ;-separated "
             "(User:admin;User:broker): the brokers' own principal belongs here."),
    Property("allow.everyone.if.no.acl.found", _bool, False,
             "With ACLs on: may anyone act on a resource that has no ACL at all."),
    Property("sasl.credentials.file", _str, None,
             "Standalone mode: the file of SCRAM credentials managed by `trilog users` "
             "(default users.json in the first log directory). With ZooKeeper they live "
             "in /config/users/<user>."),
    Property("log.dirs", _list, ["./trilog-data"], "Comma-separated directories holding the partition logs."),
    Property("log.dir", _list, None, "A single log directory (used when log.dirs is not set)."),
    Property("num.partitions", _int, 1, "Partitions of an auto-created topic.", low=1),
    Property("default.replication.factor", _int, 1,
             "Replicas of an auto-created topic (and of a CreateTopics that asks for -1).", low=1),
    Property("min.insync.replicas", _int, 1,
             "Default of the topic setting min.insync.replicas: in-sync replicas an acks=all "
             "produce needs (NOT_ENOUGH_REPLICAS below it).", low=1),
    Property("unclean.leader.election.enable", _bool, False,
             "Default of the topic setting: may a replica outside the ISR become leader when "
             "no in-sync replica is alive, losing the records it lacks."),
    Property("replica.lag.time.max.ms", _int, 30_000,
             "A follower that has not caught up with its leader for this long leaves the ISR.",
             low=1),
    Property("replica.fetch.wait.max.ms", _int, 500,
             "How long a follower's fetch waits at the leader for new records.", low=0),
    Property("replica.fetch.min.bytes", _int, 1,
             "Bytes a follower's fetch waits for at the leader.", low=1),
    Property("replica.fetch.max.bytes", _int, _MB,
             "Bytes a follower's fetch asks for per partition (a larger batch still comes).",
             low=1),
    Property("replica.fetch.backoff.ms", _int, 1000,
             "How long a follower waits after a failed fetch before trying again (a "
             "partition whose leader has not heard of its leadership yet is retried after "
             "20 ms first, doubling up to this).", low=0),
    Property("replica.socket.timeout.ms", _int, 30_000,
             "Timeout of a follower's fetch requests (above replica.fetch.wait.max.ms).",
             low=1),
    Property("num.replica.fetchers", _int, 1,
             "Fetcher tasks per source broker (partitions are spread over them).", low=1),
    Property("replica.high.watermark.checkpoint.interval.ms", _int, 5000,
             "How often high watermarks are written to replication-offset-checkpoint.", low=1),
    Property("controller.socket.timeout.ms", _int, 30_000,
             "Timeout of the controller's requests to brokers.", low=1),
    Property("controlled.shutdown.enable", _bool, True,
             "On SIGTERM, ask the controller to move this broker's leaderships away first."),
    Property("controlled.shutdown.max.retries", _int, 3,
             "Attempts of a controlled shutdown before the broker stops anyway.", low=0),
    Property("controlled.shutdown.retry.backoff.ms", _int, 5000,
             "Wait between attempts of a controlled shutdown.", low=0),
    Property("auto.leader.rebalance.enable", _bool, True,
             "The controller moves leadership back to each partition's preferred (first) "
             "replica when a broker's imbalance passes leader.imbalance.per.broker.percentage."),
    Property("leader.imbalance.per.broker.percentage", _int, 10,
             "Share of a broker's preferred partitions it may not lead before a rebalance.",
             low=0),
    Property("leader.imbalance.check.interval.seconds", _int, 300,
             "How often the controller checks the leader imbalance.", low=1),
    Property("auto.create.topics.enable", _bool, True,
             "Create a topic when a client asks for metadata of, or produces to, an unknown topic."),
    Property("delete.topic.enable", _bool, True, "Allow DeleteTopics."),
    Property("num.network.threads", _int, 3,
             "Accepted for compatibility with Kafka's files; changes nothing: one event loop "
             "serves every connection.", low=1),
    Property("num.io.threads", _int, 8,
             "Worker threads for blocking work (fsync, sendfile, ZooKeeper calls).", low=1),
    Property("num.recovery.threads.per.data.dir", _int, 1,
             "Threads opening (and after a crash recovering) the logs of each log dir at start "
             "(Kafka's default). Opening a log from the page cache is Python work under the "
             "GIL: on 2 cores, 50,000 logs opened in 4-5 s of CPU on 1 thread and 30-100 % more "
             "on 2, 4 or 8, never sooner. Raise it where the logs lie on a slow disk read "
             "cold (a start after a reboot on spinning disks or network storage): there "
             "opening waits on the disk, and threads overlap the waits.", low=1),
    Property("socket.request.max.bytes", _int, 100 * _MB,
             "Largest request frame; a larger one closes its connection.", low=1024),
    Property("max.connections", _int, _INT_MAX,
             "Connections open at once; a new one above it is closed as soon as it is accepted. "
             "The descriptor budget (`ulimit -n` less the log's open files and a reserve, "
             "never less than max(64, 10 %)) may cap it lower.", low=0),
    Property("max.connections.per.ip", _int, _INT_MAX,
             "Connections open at once from one address; more are closed at once.", low=0),
    Property("max.connections.per.ip.overrides", _host_counts, {},
             "Per-address exceptions to max.connections.per.ip: host:count,host:count."),
    Property("connections.max.idle.ms", _int, 600_000,
             "Close a connection that sent nothing for this long while none of its requests was "
             "being answered (idle, or stalled inside a request); -1: never.", low=-1),
    Property("queued.max.request.bytes", _int, 256 * _MB,
             "Request bytes received or queued, broker-wide; at the limit connections stop "
             "reading until requests are answered (-1: no limit).", low=-1),
    Property("quota.window.num", _int, 11,
             "Samples a client quota's rate is measured over (Kafka's; the rate is taken over "
             "at least this many less one windows).", low=1),
    Property("quota.window.size.seconds", _int, 1,
             "Length of each sample of a client quota's rate, in seconds.", low=1),
    Property("socket.send.buffer.bytes", _int, 1 << 20, "SO_SNDBUF of client sockets (-1: the OS default)."),
    Property("socket.receive.buffer.bytes", _int, 1 << 20, "SO_RCVBUF of client sockets (-1: the OS default)."),
    Property("message.max.bytes", _int, 1048588,
             "Largest record batch the broker accepts (MESSAGE_TOO_LARGE above it).", low=64),
    Property("log.segment.bytes", _int, 1 << 30, "Roll a new segment when the active one reaches this size.", low=1024),
    Property("log.roll.ms", _int, None, "Roll a new segment when the active one is this old (ms)."),
    Property("log.roll.hours", _int, 168, "Like log.roll.ms, in hours (log.roll.ms wins).", low=1),
    Property("log.index.interval.bytes", _int, 4096, "Bytes between offset-index entries.", low=0),
    Property("log.index.size.max.bytes", _int, 10 * _MB, "Largest offset index; the segment rolls when full.", low=4096),
    Property("log.flush.interval.messages", _int, None,
             "Fsync a partition after this many messages (at most this many at risk). Unset: rely on the OS.", low=1),
    Property("log.flush.interval.ms", _int, None,
             "Fsync a partition when its oldest unflushed message is this old (ms). Unset: rely on the OS.", low=0),
    Property("log.flush.scheduler.interval.ms", _int, 1000,
             "How often the flush timer looks for partitions due a time-based flush.", low=1),
    Property("log.flush.offset.checkpoint.interval.ms", _int, 60_000,
             "How often the recovery points are written to recovery-point-offset-checkpoint.",
             low=1),
    Property("max.partitions.per.topic", _int, 10_000,
             "Most partitions one topic may have (INVALID_PARTITIONS above it).", low=1),
    Property("max.broker.partitions", _int, 10_000,
             "Most partitions this broker may hold (POLICY_VIOLATION above it).  Partitions "
             "cost memory (about 6 KB each), not descriptors: segment files are opened "
             "lazily, at most what `ulimit -n` leaves beside the connections' floor and a "
             "reserve.", low=1),
    Property("log.retention.hours", _int, 168, "Delete segments older than this (hours).", low=-1),
    Property("log.retention.minutes", _int, None, "Like log.retention.hours, in minutes (wins over hours)."),
    Property("log.retention.ms", _int, None, "Like log.retention.hours, in ms (wins over minutes and hours; -1: forever)."),
    Property("log.retention.bytes", _int, -1, "Delete oldest segments while a partition is larger than this (-1: no limit)."),
    Property("log.cleanup.policy", parse_cleanup_policy, frozenset({"delete"}),
             "Default cleanup.policy of a topic: delete (retention), compact (keep the latest "
             "record of each key), or compact,delete."),
    Property("log.cleaner.min.cleanable.ratio", _ratio, 0.5,
             "Default min.cleanable.dirty.ratio: clean a compacted log once this share of it "
             "is not clean yet."),
    Property("log.cleaner.delete.retention.ms", _int, 86_400_000,
             "Default delete.retention.ms: how long a compacted topic keeps a tombstone.",
             low=0),
    Property("log.cleaner.min.compaction.lag.ms", _int, 0,
             "Default min.compaction.lag.ms: records younger than this are not compacted.",
             low=0),
    Property("log.cleaner.enable", _bool, True,
             "Run the log cleaner, which compacts the topics whose cleanup.policy has compact "
             "(__consumer_offsets among them)."),
    Property("log.cleaner.threads", _int, 1,
             "Log cleaner threads: how many compacted logs are cleaned at once.", low=1),
    Property("log.cleaner.dedupe.buffer.size", _int, 128 * _MB,
             "Memory for the cleaners' key maps, shared by the threads (about 160 bytes a "
             "key: the default maps some 800,000 keys a pass).", low=1024 * 1024),
    Property("log.cleaner.backoff.ms", _int, 15_000,
             "How long a cleaner thread sleeps when no log is dirty enough to clean.", low=0),
    Property("log.message.timestamp.type", _timestamp_type, "CreateTime",
             "Default message.timestamp.type: CreateTime (the producer's timestamps) or "
             "LogAppendTime (the broker stamps each batch)."),
    Property("log.retention.check.interval.ms", _int, 300_000,
             "How often the retention task looks for segments to delete.", low=1),
    Property("producer.id.expiration.ms", _int, 86_400_000,
             "A partition forgets an idempotent or transactional producer that has not "
             "written to it for this long (unless a transaction of its is open there).",
             low=1),
    Property("producer.id.expiration.check.interval.ms", _int, 600_000,
             "How often the broker looks for expired producers (producer.id.expiration.ms).",
             low=1),
    Property("offsets.topic.num.partitions", _int, 50,
             "Partitions of __consumer_offsets (fixed once the topic exists): a group's coordinator "
             "leads partition abs(hash(group.id)) % this.", low=1),
    Property("offsets.topic.replication.factor", _int, 3,
             "Replicas of __consumer_offsets (at most the live brokers when it is created).",
             low=1),
    Property("offsets.topic.segment.bytes", _int, 100 * _MB,
             "Segment size of __consumer_offsets, a compacted topic: the log cleaner compacts "
             "the segments before the active one.", low=1024),
    Property("offsets.commit.timeout.ms", _int, 5000,
             "How long an offset commit waits for every in-sync replica of its "
             "__consumer_offsets partition (COORDINATOR_NOT_AVAILABLE after that; the client "
             "retries).", low=1),
    Property("offsets.retention.minutes", _int, 10080,
             "Committed offsets of a group with no members are deleted this long after their "
             "commit.", low=1),
    Property("offsets.retention.check.interval.ms", _int, 600_000,
             "How often the coordinator looks for expired offsets.", low=1),
    Property("transaction.state.log.num.partitions", _int, 50,
             "Partitions of __transaction_state (fixed once the topic exists): a transactional "
             "id's coordinator leads partition abs(hash(transactional.id)) % this.", low=1),
    Property("transaction.state.log.replication.factor", _int, 3,
             "Replicas of __transaction_state (at most the live brokers when it is created).",
             low=1),
    Property("transaction.state.log.min.isr", _int, 2,
             "min.insync.replicas of __transaction_state (at most its replication factor).",
             low=1),
    Property("transaction.state.log.segment.bytes", _int, 100 * _MB,
             "Segment size of __transaction_state, a compacted topic.", low=1024),
    Property("transaction.max.timeout.ms", _int, 900_000,
             "The longest transaction.timeout.ms a producer may ask for "
             "(INVALID_TRANSACTION_TIMEOUT above).", low=1),
    Property("transactional.id.expiration.ms", _int, 604_800_000,
             "A transactional id with no transaction open is forgotten this long after its "
             "last change.", low=1),
    Property("transaction.abort.timed.out.transaction.cleanup.interval.ms", _int, 10_000,
             "How often the coordinator aborts the transactions open longer than their "
             "transaction.timeout.ms.", low=1),
    Property("transaction.remove.expired.transaction.cleanup.interval.ms", _int, 3_600_000,
             "How often the coordinator forgets expired transactional ids.", low=1),
    Property("request.timeout.ms", _int, 30_000,
             "How long the broker waits for its own requests: a transaction log write's "
             "in-sync replicas, transaction markers to other brokers.", low=1),
    Property("group.min.session.timeout.ms", _int, 6000,
             "Smallest session timeout a group member may ask for (INVALID_SESSION_TIMEOUT below).",
             low=0),
    Property("group.max.session.timeout.ms", _int, 1_800_000,
             "Largest session timeout a group member may ask for (INVALID_SESSION_TIMEOUT above).",
             low=0),
    Property("group.initial.rebalance.delay.ms", _int, 3000,
             "How long the first rebalance of an empty group waits for more members to join.",
             low=0),
    Property("zookeeper.connect", _str, None,
             "host:port[,host:port...][/chroot] of ZooKeeper. Unset: standalone (no ZooKeeper)."),
    Property("zookeeper.session.timeout.ms", _int, 6000, "ZooKeeper session timeout.", low=1000),
    Property("zookeeper.connection.timeout.ms", _int, 10_000,
             "How long to wait for ZooKeeper at start before giving up.", low=100),
    Property("shutdown.timeout.ms", _int, 5000,
             "On SIGINT/SIGTERM, how long in-flight requests get before connections are cut.", low=0),
    Property("metrics.port", _int, None,
             "Serve Prometheus metrics at http://metrics.host:metrics.port/metrics (see "
             "operations.md). Unset: no metrics server; 0 picks a free port.", low=0,
             high=65535),
    Property("metrics.host", _str, "127.0.0.1",
             "The address of the metrics server (0.0.0.0: every interface)."),
)

PROPERTIES_BY_NAME: dict[str, Property] = {p.name: p for p in PROPERTIES}


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Java ``.properties`` syntax to a dict of raw strings (last one wins); ``ConfigError``
    for a line without a key (the syntax: ``trilog._properties``)."""
    try:
        return java_properties(text, source)
    except PropertiesError as exc:
        raise ConfigError(str(exc)) from None


def suggest(name: str) -> str:
    close = difflib.get_close_matches(name, PROPERTIES_BY_NAME, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _coerce(raw: Mapping[str, str], source: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, text in raw.items():
        prop = PROPERTIES_BY_NAME.get(key)
        if prop is None:
            raise ConfigError(f"{source}: unknown property {key!r}{suggest(key)}")
        try:
            value = prop.parse(text)
        except ValueError as exc:
            raise ConfigError(f"{source}: {key}={text!r} is not valid: {exc}") from None
        if prop.low is not None and value is not None and value < prop.low:
            raise ConfigError(f"{source}: {key}={value} is below its minimum {prop.low}")
        if prop.high is not None and value is not None and value > prop.high:
            raise ConfigError(f"{source}: {key}={value} is above its maximum {prop.high}")
        values[key] = value
    return values


@dataclass
class BrokerConfig:
    """A validated broker configuration.  ``values`` holds every property by Kafka name."""

    values: dict[str, Any] = field(default_factory=dict)
    #: the properties set by the file or an override (the rest have their defaults)
    explicit: frozenset[str] = frozenset()

    @classmethod
    def from_sources(
        cls,
        properties_file: str | os.PathLike | None = None,
        overrides: Iterable[str] | Mapping[str, str] = (),
    ) -> "BrokerConfig":
        """Defaults, then the file, then ``overrides`` (``key=value`` strings or a mapping)."""
        values = {p.name: p.default for p in PROPERTIES}
        explicit: set[str] = set()
        if properties_file is not None:
            try:
                with open(properties_file, encoding="utf-8") as f:
                    text = f.read()
            except OSError as exc:
                raise ConfigError(f"cannot read {properties_file}: {exc.strerror}") from None
            from_file = _coerce(parse_properties(text, str(properties_file)), str(properties_file))
            values.update(from_file)
            explicit.update(from_file)
        if isinstance(overrides, Mapping):
            raw = {str(k): str(v) for k, v in overrides.items()}
        else:
            raw = {}
            for item in overrides:
                key, sep, value = item.partition("=")
                if not sep:
                    raise ConfigError(f"override {item!r} is not key=value")
                raw[key.strip()] = value
        values.update(_coerce(raw, "override"))
        explicit.update(raw)
        config = cls(values, frozenset(explicit))
        config._check()
        return config

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any] | None = None) -> "BrokerConfig":
        """For Python callers and tests: ``{"log.dirs": "/tmp/x", "port": 0}``."""
        return cls.from_sources(overrides={k: property_text(v) for k, v in (mapping or {}).items()})

    def __getitem__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise ConfigError(f"unknown property {name!r}{suggest(name)}") from None

    def _check(self) -> None:
        listeners = self.listeners  # parses and validates
        self.advertised_listeners
        self.inter_broker_listener
        from trilog.broker.network._listeners import inter_broker_security, server_ssl_context
        from trilog.net import SecurityConfigError
        try:
            if any(lst.tls for lst in listeners):
                server_ssl_context(self.values)
            if self.zookeeper_connect:
                inter_broker_security(self)
        except (ListenerError, SecurityConfigError) as exc:
            raise ConfigError(str(exc)) from None
        if not self.log_dirs:
            raise ConfigError("log.dirs is empty")

    # -- derived settings -----------------------------------------------------------------

    @property
    def broker_id(self) -> int:
        return self.values["broker.id"]

    @property
    def listeners(self) -> list[Listener]:
        """The listeners to bind.  host.name/port (the old style) win, when set, over the
        first listener's host and port."""
        try:
            listeners = parse_listeners(self.values["listeners"], self.protocol_map)
        except ListenerError as exc:
            raise ConfigError(f"listeners: {exc}") from None
        host, port = self.values["host.name"], self.values["port"]
        if host is not None or port is not None:
            first = listeners[0]
            listeners[0] = Listener(first.name, first.protocol,
                                    first.host if host is None else host,
                                    first.port if port is None else port)
        return listeners

    @property
    def protocol_map(self) -> dict[str, str]:
        try:
            return parse_protocol_map(self.values["listener.security.protocol.map"])
        except ListenerError as exc:
            raise ConfigError(f"listener.security.protocol.map: {exc}") from None

    @property
    def listener(self) -> tuple[str, int]:
        """``(host, port)`` of the first listener."""
        first = self.listeners[0]
        return first.host, first.port

    @property
    def advertised_listeners(self) -> dict[str, Listener] | None:
        """``advertised.listeners`` by name (None: advertise the listeners themselves)."""
        adv = self.values["advertised.listeners"]
        if not adv:
            return None
        try:
            advertised = parse_listeners(adv, self.protocol_map)
        except ListenerError as exc:
            raise ConfigError(f"advertised.listeners: {exc}") from None
        names = {lst.name for lst in self.listeners}
        for lst in advertised:
            if lst.name not in names:
                raise ConfigError(f"advertised.listeners: {lst.name} is not a listener "
                                  f"({', '.join(sorted(names))})")
        return {lst.name: lst for lst in advertised}

    @property
    def advertised(self) -> tuple[str, int] | None:
        """The advertised address of the first listener, if one is set."""
        adv = self.advertised_listeners
        first = adv.get(self.listeners[0].name) if adv else None
        return (first.host, first.port) if first else None

    @property
    def inter_broker_listener(self) -> Listener:
        try:
            return inter_broker_listener(self.listeners, self.values["inter.broker.listener.name"],
                                         self.values["security.inter.broker.protocol"])
        except ListenerError as exc:
            raise ConfigError(str(exc)) from None

    @property
    def log_dirs(self) -> list[str]:
        dirs = self.values["log.dirs"]
        if self.values["log.dir"] and dirs == PROPERTIES_BY_NAME["log.dirs"].default:
            dirs = self.values["log.dir"]
        return list(dirs)

    @property
    def log_roll_ms(self) -> int:
        ms = self.values["log.roll.ms"]
        return ms if ms is not None else self.values["log.roll.hours"] * 3_600_000

    @property
    def log_retention_ms(self) -> int:
        for key, scale in (("log.retention.ms", 1), ("log.retention.minutes", 60_000)):
            if self.values[key] is not None:
                v = self.values[key]
                return -1 if v < 0 else v * scale
        hours = self.values["log.retention.hours"]
        return -1 if hours < 0 else hours * 3_600_000

    def log_config(self) -> LogConfig:
        """The partitions' ``LogConfig`` from the ``log.*`` properties (Kafka's precedence:
        ``log.roll.ms`` over ``.hours``; ``log.retention.ms`` over ``.minutes`` over
        ``.hours``)."""
        v = self.values
        messages = v["log.flush.interval.messages"]
        return LogConfig(
            segment_bytes=v["log.segment.bytes"],
            segment_ms=self.log_roll_ms,
            index_interval_bytes=v["log.index.interval.bytes"],
            max_index_size=v["log.index.size.max.bytes"],
            flush_interval_messages=NEVER if messages is None else messages,
            flush_interval_ms=v["log.flush.interval.ms"],
            retention_ms=self.log_retention_ms,
            retention_bytes=v["log.retention.bytes"],
            max_message_bytes=v["message.max.bytes"],
            cleanup_policy=v["log.cleanup.policy"],
            min_cleanable_dirty_ratio=v["log.cleaner.min.cleanable.ratio"],
            delete_retention_ms=v["log.cleaner.delete.retention.ms"],
            min_compaction_lag_ms=v["log.cleaner.min.compaction.lag.ms"],
            message_timestamp_type=v["log.message.timestamp.type"],
            producer_id_expiration_ms=v["producer.id.expiration.ms"],
        )

    @property
    def zookeeper_connect(self) -> str | None:
        return self.values["zookeeper.connect"] or None


def property_text(value: Any) -> str:
    """A typed property value written back as Java properties text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return ",".join(f"{k}:{v}" for k, v in value.items())
    if isinstance(value, frozenset):
        return ",".join(sorted(value))
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def properties_help() -> str:
    """The property table as text, for ``trilog broker --help``."""
    width = max(len(p.name) for p in PROPERTIES)
    lines = []
    for p in PROPERTIES:
        default = "unset" if p.default is None else (property_text(p.default) or "empty")
        lines.append(f"  {p.name:<{width}}  {p.doc} (default: {default})")
    return "\n".join(lines)


def properties_markdown() -> str:
    """The property table as Markdown, for ``docs/broker-config.md``."""
    rows = ["| property | default | meaning |", "| --- | --- | --- |"]
    for p in PROPERTIES:
        default = "unset" if p.default is None else (f"`{property_text(p.default)}`"
                                                     if property_text(p.default) else "empty")
        rows.append(f"| `{p.name}` | {default} | {p.doc} |")
    return "\n".join(rows)
