"""The data source's options, parsed and checked before any I/O (pure: no pyspark, no network).

Names follow Spark's Kafka source (``subscribe``, ``startingOffsets``, ``failOnDataLoss``...);
Spark hands them over case-insensitively, so every lookup here is on lower-cased keys.
A bad or missing option raises ``OptionError`` naming the option and what it accepts, so the
query fails at planning time instead of inside a task.  Every name is checked too
(``check_names``): an option a read or a write does not take is an error naming the nearest
one it does, never silently ignored.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from trilog.sync import ClientSecurity, SecurityConfigError
from trilog.errors import TrilogError

#: Offsets in the JSON form of ``startingOffsets``/``endingOffsets``: as Spark's Kafka source.
EARLIEST = -2
LATEST = -1


#: The client id of the source's connections when no option names them.
DEFAULT_CLIENT_ID = "trilog-spark"


class OptionError(TrilogError, ValueError):
    """An option of the ``trilog`` data source is missing, unknown in value, or conflicting."""


@dataclass(frozen=True)
class Connection:
    """Where the cluster is (exactly one of the two is set) and how to connect to it:
    ``security`` holds the ``kafka.security.protocol``, ``kafka.ssl.*`` and
    ``kafka.sasl.*`` options without their prefix, turned into a ``ClientSecurity`` where
    the connection is made (an executor).  Picklable, holds no socket."""

    bootstrap_servers: str | None = None
    zookeeper: str | None = None
    security: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # holds secrets

    def kwargs(self) -> dict:
        out: dict = ({"bootstrap_servers": self.bootstrap_servers}
                     if self.bootstrap_servers is not None else {"zookeeper": self.zookeeper})
        if self.security:
            out["security"] = ClientSecurity.from_properties(dict(self.security))
        return out

    def describe(self) -> str:
        return self.bootstrap_servers or f"zookeeper {self.zookeeper}"


@dataclass(frozen=True)
class Subscription:
    """One of ``subscribe`` (``topics``), ``subscribePattern`` (``pattern``) or ``assign``
    (``assigned``: topic -> partitions)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def kind(self) -> str:
        if self.pattern is not None:
            return "subscribePattern"
        return "assign" if self.assigned else "subscribe"

    def matches(self, topic: str) -> bool:
        """Whether a topic name is covered (internal ``__`` topics only when named)."""
        if self.pattern is not None:
            return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None
        if self.assigned:
            return topic in dict(self.assigned)
        return topic in self.topics


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends: ``earliest``, ``latest``, per-partition offsets (``json``;
    ``EARLIEST``/``LATEST`` allowed), one timestamp for every partition (``timestamp``) or one
    per partition (``timestamps``).  A timestamp stands for the offset of the partition's
    first record stamped at or after it.  ``option`` is the option it came from."""

    kind: str  # "earliest" | "latest" | "json" | "timestamp" | "timestamps"
    #: (topic, partition, offset or timestamp in ms), sorted
    offsets: tuple[tuple[str, int, int], ...] = ()
    timestamp: int | None = None
    option: str = ""

    def as_dict(self) -> dict[tuple[str, int], int]:
        return {(t, p): o for t, p, o in self.offsets}


@dataclass(frozen=True)
class ReadOptions:
    connection: Connection
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    #: A starting timestamp no record of a partition is that recent: "error" fails the query
    #: (Spark's Kafka default), "latest" starts the partition at its end.  (An ending
    #: timestamp always falls back to the end, as in Spark.)
    timestamp_strategy: str = "error"
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    #: A micro-batch waits for this many new records, or ``max_trigger_delay_ms`` since the
    #: last one (Spark's ``minOffsetsPerTrigger`` and ``maxTriggerDelay``).
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    fail_on_data_loss: bool = True
    include_headers: bool = False
    #: Bytes a reading task asks for per fetch (it fetches one partition at a time).
    max_partition_fetch_bytes: int = 1 << 20
    #: Keywords for ``trilog.sync.SimpleConsumer`` (client id, timeouts) from kafka.* options.
    consumer: dict = field(default_factory=lambda: {"client_id": DEFAULT_CLIENT_ID})


#: ``deliveryGuarantee``'s values.
AT_LEAST_ONCE = "at_least_once"
EXACTLY_ONCE = "exactly_once"
#: The start of the transactional ids an exactly-once write uses (``transactionalIdPrefix``).
DEFAULT_TRANSACTIONAL_ID_PREFIX = "trilog-spark"


@dataclass(frozen=True)
class WriteOptions:
    connection: Connection
    topic: str | None = None
    producer: dict = field(default_factory=dict)
    #: ``AT_LEAST_ONCE`` (the default, as Spark's Kafka sink) or ``EXACTLY_ONCE``: each task
    #: writes in one transaction and records its batch id in it (see ``_write``).
    delivery_guarantee: str = AT_LEAST_ONCE
    transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX

    @property
    def exactly_once(self) -> bool:
        return self.delivery_guarantee == EXACTLY_ONCE


# -- which names a read and a write take ------------------------------------------------------

#: Kafka client settings that map to a keyword of trilog's client, by Kafka's name: a read or
#: write takes each as ``kafka.<name>`` (Spark's spelling) or plain ``<name>``.
#: name -> (keyword, type, lowest value).
_CONSUMER_SETTINGS = {
    "client.id": ("client_id", str, None),
    "request.timeout.ms": ("request_timeout_ms", int, 1),
    "metadata.max.age.ms": ("metadata_max_age_ms", int, 0),
    "isolation.level": ("isolation_level", str, None),
}
_PRODUCER_SETTINGS = {
    "client.id": ("client_id", str, None),
    "linger.ms": ("linger_ms", int, 0),
    "batch.size": ("batch_size", int, 0),
    "buffer.memory": ("buffer_memory", int, 0),
    "retries": ("retries", int, 0),
    "retry.backoff.ms": ("retry_backoff_ms", int, 0),
    "delivery.timeout.ms": ("delivery_timeout_ms", int, 0),
    "request.timeout.ms": ("request_timeout_ms", int, 1),
    "max.request.size": ("max_request_size", int, 0),
    "max.in.flight.requests.per.connection": ("max_in_flight_requests_per_connection", int, 1),
    "metadata.max.age.ms": ("metadata_max_age_ms", int, 0),
    "enable.idempotence": ("enable_idempotence", bool, None),
    "transaction.timeout.ms": ("transaction_timeout_ms", int, 1),
}
#: TLS and SASL: Kafka's Java client names (PEM files where Java takes keystores) and
#: librdkafka's, as ``ClientSecurity.from_properties`` reads them.
_SECURITY = ("security.protocol", "sasl.mechanism", "sasl.jaas.config", "sasl.username",
             "sasl.password", "ssl.ca.location", "ssl.cafile", "ssl.truststore.location",
             "ssl.certificate.location", "ssl.keystore.location", "ssl.key.location",
             "ssl.key.password", "ssl.endpoint.identification.algorithm")
#: Settings with their own parsing: the fetch sizes become one per-fetch size; acks and
#: compression.type are checked against what the producer knows; the security settings
#: become the connection's ``ClientSecurity``.
_READ_CLIENT = (*_CONSUMER_SETTINGS, "max.partition.fetch.bytes", "fetch.max.bytes",
                *_SECURITY)
_WRITE_CLIENT = (*_PRODUCER_SETTINGS, "acks", "compression.type", *_SECURITY)

_CONNECTION = ("bootstrap.servers", "kafka.bootstrap.servers", "zookeeper.connect",
               "kafka.zookeeper.connect")


def _both_spellings(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(n for name in names for n in (name, "kafka." + name))


#: Every option a read takes, spelled as the docs (and error messages) show them.
READ_OPTIONS = _CONNECTION + (
    "subscribe", "subscribePattern", "assign",
    "startingOffsets", "startingOffsetsByTimestamp", "startingTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp",
    "minPartitions", "maxRecordsPerPartition",
    "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
    "failOnDataLoss", "includeHeaders",
    # Spark's source names its consumers' group after these; trilog's source has no group
    # and puts them in the client id instead (see _consumer_settings).
    "kafka.group.id", "groupIdPrefix",
) + _both_spellings(_READ_CLIENT)

#: Every option a write takes.  ``checkpointLocation`` is Spark's own: a streaming write hands
#: it to the sink with the others.
WRITE_OPTIONS = _CONNECTION + ("topic", "checkpointLocation", "deliveryGuarantee",
                               "transactionalIdPrefix") + _both_spellings(_WRITE_CLIENT)

_PEM_ONLY = ("trilog's client reads PEM files: give ssl.truststore.location (or "
             "ssl.ca.location) and ssl.keystore.location/ssl.key.location as PEM, without "
             "store passwords or types")

#: Options known to be wrong for this source, with the reason (so the error can say it).
#: Kafka settings are listed without their ``kafka.`` prefix.
_REFUSED = {
    "path": "the trilog source takes no path: name the topics with subscribe, "
            "subscribePattern or assign (reads) or with topic (writes)",
    "kafkaconsumer.polltimeoutms": "a reading task's requests time out after "
                                   "kafka.request.timeout.ms",
    "fetchoffset.numretries": "trilog's client retries offset lookups itself",
    "fetchoffset.retryintervalms": "trilog's client retries offset lookups itself",
    # As Spark's Kafka source refuses them:
    "auto.offset.reset": "set the option startingOffsets instead",
    "enable.auto.commit": "the source commits no offsets to the cluster: they live in "
                          "Spark's checkpoint",
    "key.deserializer": "rows carry keys and values as bytes: deserialize them with "
                        "DataFrame operations",
    "value.deserializer": "rows carry keys and values as bytes: deserialize them with "
                          "DataFrame operations",
    "key.serializer": "the sink sends the key and value columns' bytes: serialize with "
                      "DataFrame operations (cast, to_json)",
    "value.serializer": "the sink sends the key and value columns' bytes: serialize with "
                        "DataFrame operations (cast, to_json)",
    "interceptor.classes": "trilog's client has no interceptors",
    "transactional.id": "the sink names its transactions itself: set deliveryGuarantee="
                        "exactly_once (and transactionalIdPrefix to choose their prefix)",
}
_REFUSED_WRITE = {
    "group.id": "a write joins no consumer group",
    "groupidprefix": "a write joins no consumer group",
}

#: Settings of Kafka's Java clients, often given to Spark's Kafka source, that the trilog
#: source does not take (so they are never taken for typos of ones it does).
_KAFKA_NOT_TAKEN = frozenset({
    "fetch.min.bytes", "fetch.max.wait.ms", "max.poll.records", "max.poll.interval.ms",
    "session.timeout.ms", "heartbeat.interval.ms", "check.crcs",
    "reconnect.backoff.ms", "reconnect.backoff.max.ms",
    "connections.max.idle.ms", "default.api.timeout.ms", "client.dns.lookup",
    "receive.buffer.bytes", "send.buffer.bytes", "socket.connection.setup.timeout.ms",
    "partitioner.class", "compression.level", "max.block.ms",
})


def _refusal(name: str, write: bool) -> str | None:
    """Why an option (lower-cased) is refused, if it is one this source knows to refuse."""
    bare = name.removeprefix("kafka.")
    if bare.startswith(("ssl.", "sasl.")) and bare not in _SECURITY:
        return _PEM_ONLY if bare.startswith("ssl.") else (
            "trilog's client logs in with sasl.mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) "
            "and sasl.jaas.config")
    if write and bare in _REFUSED_WRITE:
        return _REFUSED_WRITE[bare]
    return _REFUSED.get(bare)


def check_names(options: Mapping[str, str], *, write: bool) -> None:
    """Refuse every option a read (``write=False``) or a write does not take.

    Spark's own Kafka source ignores what it does not know, so a typo such as
    ``startingOfsets`` reads a different range without a word; here it fails the query,
    naming the nearest known option.  Spark lower-cases names on the way in: suggestions
    give the documented spelling."""
    known = {n.lower(): n for n in (WRITE_OPTIONS if write else READ_OPTIONS)}
    other = {n.lower(): n for n in (READ_OPTIONS if write else WRITE_OPTIONS)}
    for raw in options:
        name = str(raw).lower()
        if name in known:
            continue
        reason = _refusal(name, write)
        if reason:
            raise OptionError(f"option {raw!r} is not supported: {reason}")
        if name in other:
            raise OptionError(_wrong_side(raw, write))
        kafka = name.startswith("kafka.")
        # Kafka has many settings one letter apart (fetch.min.bytes, fetch.max.bytes): a
        # real one is never "corrected" into another, and only near-certain typos are.
        close = [] if kafka and name[6:] in _KAFKA_NOT_TAKEN else difflib.get_close_matches(
            name, list(known), n=1, cutoff=0.9 if kafka else 0.75)
        if close:
            raise OptionError(f"unknown option {raw!r}; did you mean {known[close[0]]!r}?")
        if kafka:
            passed = ", ".join("kafka." + n for n in (_WRITE_CLIENT if write else _READ_CLIENT))
            raise OptionError(f"option {raw!r} is not passed to trilog's client: the source "
                              f"has no such setting; a {'write' if write else 'read'} passes "
                              f"kafka.bootstrap.servers, {passed}")
        # List each name once: kafka.X stands for its unprefixed alias.
        names = sorted((n for n in known.values() if "kafka." + n.lower() not in known),
                       key=str.lower)
        raise OptionError(f"unknown option {raw!r}; a {'write' if write else 'read'} takes "
                          f"{', '.join(names)}")


def _wrong_side(name: str, write: bool) -> str:
    if write:
        hint = ("a write takes its topic from the option topic or a 'topic' column"
                if name.lower() in ("subscribe", "subscribepattern", "assign") else
                "a write does not take it")
        return f"option {name!r} is for reading; {hint}"
    hint = ("a read names its topics with subscribe, subscribePattern or assign"
            if name.lower() == "topic" else "a read does not take it")
    return f"option {name!r} is for writing; {hint}"


# -- helpers ---------------------------------------------------------------------------------


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): v for k, v in options.items() if v is not None}


def _first(opts: dict[str, str], *names: str) -> str | None:
    for name in names:
        if name.lower() in opts:
            return opts[name.lower()]
    return None


def _int(opts: dict[str, str], name: str | None, *, low: int | None = None) -> int | None:
    raw = _first(opts, name) if name is not None else None
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {name}={raw!r} is not an integer") from None
    if low is not None and value < low:
        raise OptionError(f"option {name}={value} must be at least {low}")
    return value


def _bool(opts: dict[str, str], name: str, default: bool) -> bool:
    raw = _first(opts, name)
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"option {name}={raw!r} must be true or false")
    return text == "true"


def _spelled(opts: dict[str, str], name: str) -> str | None:
    """Which of ``kafka.<name>`` and ``<name>`` was given (the prefixed one wins)."""
    for spelled in ("kafka." + name, name):
        if spelled in opts:
            return spelled
    return None


def _client_settings(opts: dict[str, str], table: dict) -> dict:
    """trilog client keywords for the Kafka settings of ``table`` that were given."""
    out: dict = {}
    for name, (kwarg, kind, low) in table.items():
        spelled = _spelled(opts, name)
        if spelled is None:
            continue
        if kind is int:
            out[kwarg] = _int(opts, spelled, low=low)
        elif kind is bool:
            out[kwarg] = _bool(opts, spelled, False)
        else:
            value = str(opts[spelled]).strip()
            if not value:
                raise OptionError(f"option {spelled} is empty")
            out[kwarg] = value
    return out


def _security(opts: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The security options given, without ``kafka.``, checked by building the
    ``ClientSecurity`` once (its files must be readable here and on the executors)."""
    given = {}
    for name in _SECURITY:
        spelled = _spelled(opts, name)
        if spelled is not None:
            given[name] = str(opts[spelled])
    try:
        ClientSecurity.from_properties(given)
    except SecurityConfigError as exc:
        raise OptionError(f"the kafka.security.protocol/ssl/sasl options: {exc}") from None
    return tuple(sorted(given.items()))


#: Units of a duration, as Spark's ``timeStringAsMs`` (no unit: milliseconds).
_DURATION_MS = {"": 1, "us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000,
                "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(name: str, raw: str) -> int:
    """``"15m"``, ``"30s"``, ``"500ms"``, ``"500"`` (ms) ... -> milliseconds."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", str(raw).lower())
    if match is None or match.group(2) not in _DURATION_MS:
        raise OptionError(f"option {name}={raw!r} is not a duration such as 15m, 30s or "
                          "500ms (units: us, ms, s, m, min, h, d)")
    return int(int(match.group(1)) * _DURATION_MS[match.group(2)])


def parse_connection(options: Mapping[str, str]) -> Connection:
    opts = _lower(options)
    servers = _first(opts, "bootstrap.servers", "kafka.bootstrap.servers")
    zookeeper = _first(opts, "zookeeper.connect", "kafka.zookeeper.connect")
    if (servers is None) == (zookeeper is None):
        raise OptionError(
            "give exactly one of the options bootstrap.servers (host:port[,host:port]) "
            "and zookeeper.connect (host:port[/chroot])"
            + ("; both were given" if servers is not None else "")
        )
    if servers is not None:
        items = [s.strip() for s in servers.split(",") if s.strip()]
        for item in items:
            _host, sep, port = item.rpartition(":")
            if not sep or not port.isdigit():
                raise OptionError(f"option bootstrap.servers: {item!r} is not host:port")
        if not items:
            raise OptionError("option bootstrap.servers is empty")
        return Connection(bootstrap_servers=",".join(items), security=_security(opts))
    assert zookeeper is not None  # exactly one of the two was given
    if not zookeeper.strip():
        raise OptionError("option zookeeper.connect is empty")
    return Connection(zookeeper=zookeeper.strip(), security=_security(opts))


def _json(name: str, raw: str, example: str):
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise OptionError(f"option {name} is not valid JSON ({exc}); expected e.g. {example}"
                          ) from None


def parse_subscription(opts: dict[str, str]) -> Subscription:
    given = [n for n in ("subscribe", "subscribePattern", "assign") if n.lower() in opts]
    if len(given) != 1:
        raise OptionError(
            "give exactly one of the options subscribe (topic list), subscribePattern "
            "(regular expression) and assign (JSON {\"topic\": [0, 1]})"
            + (f"; got {', '.join(given)}" if given else "")
        )
    name = given[0]
    raw = opts[name.lower()]
    if name == "subscribe":
        topics = tuple(sorted({t.strip() for t in raw.split(",") if t.strip()}))
        if not topics:
            raise OptionError("option subscribe names no topic")
        return Subscription(topics=topics)
    if name == "subscribePattern":
        if not raw.strip():
            raise OptionError("option subscribePattern is empty")
        try:
            re.compile(raw)
        except re.error as exc:
            raise OptionError(f"option subscribePattern={raw!r} is not a regular expression: "
                              f"{exc}") from None
        return Subscription(pattern=raw)
    value = _json("assign", raw, '{"events": [0, 1]}')
    if not isinstance(value, dict) or not value:
        raise OptionError(f"option assign={raw!r} must be a JSON object like "
                          '{"events": [0, 1]}')
    assigned = []
    for topic, parts in sorted(value.items()):
        if not isinstance(parts, list) or not parts or \
                not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts):
            raise OptionError(f"option assign: topic {topic!r} needs a non-empty list of "
                              f"partition numbers, not {parts!r}")
        assigned.append((topic, tuple(sorted(set(parts)))))
    return Subscription(assigned=tuple(assigned))


def parse_offsets(name: str, raw: str | None, default: str, *, allow_earliest: bool = True,
                  allow_latest: bool = True) -> OffsetSpec:
    text = (raw if raw is not None else default).strip()
    if text.lower() in ("earliest", "latest"):
        kind = text.lower()
        if kind == "earliest" and not allow_earliest:
            raise OptionError(f"option {name}=earliest is not allowed here")
        if kind == "latest" and not allow_latest:
            raise OptionError(f"option {name}=latest is not allowed here")
        return OffsetSpec(kind, option=name)
    example = '{"events": {"0": 23, "1": -2}}'
    value = _json(name, text, f"earliest, latest or {example}")
    if not isinstance(value, dict):
        raise OptionError(f"option {name} must be earliest, latest or JSON like {example}")
    offsets = []
    for topic, parts in value.items():
        if not isinstance(parts, dict):
            raise OptionError(f"option {name}: topic {topic!r} needs an object of "
                              f"partition -> offset, not {parts!r}")
        for part, offset in parts.items():
            try:
                p = int(part)
            except (TypeError, ValueError):
                raise OptionError(f"option {name}: {part!r} of topic {topic!r} is not a "
                                  "partition number") from None
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < EARLIEST \
                    or p < 0:
                raise OptionError(f"option {name}: offset {offset!r} of {topic}-{part} must be "
                                  "an offset >= 0, -2 (earliest) or -1 (latest)")
            if offset == EARLIEST and not allow_earliest:
                raise OptionError(f"option {name}: -2 (earliest) is not allowed for "
                                  f"{topic}-{p}")
            if offset == LATEST and not allow_latest:
                raise OptionError(f"option {name}: -1 (latest) is not allowed for {topic}-{p}")
            offsets.append((topic, p, offset))
    if not offsets:
        raise OptionError(f"option {name} names no partition")
    return OffsetSpec("json", tuple(sorted(offsets)), option=name)


def parse_timestamps(name: str, raw: str) -> OffsetSpec:
    """``{"topic": {"0": ms, ...}}``: a timestamp (ms since the epoch) per partition."""
    example = '{"events": {"0": 1700000000000, "1": 1700000000000}}'
    value = _json(name, raw, example)
    if not isinstance(value, dict) or not value:
        raise OptionError(f"option {name} must be JSON like {example}")
    stamps = []
    for topic, parts in value.items():
        if not isinstance(parts, dict) or not parts:
            raise OptionError(f"option {name}: topic {topic!r} needs an object of "
                              f"partition -> timestamp, not {parts!r}")
        for part, ts in parts.items():
            try:
                p = int(part)
            except (TypeError, ValueError):
                raise OptionError(f"option {name}: {part!r} of topic {topic!r} is not a "
                                  "partition number") from None
            if not isinstance(ts, int) or isinstance(ts, bool) or ts < 0 or p < 0:
                raise OptionError(f"option {name}: {ts!r} of {topic}-{part} is not a "
                                  "timestamp (milliseconds since the epoch, >= 0)")
            stamps.append((topic, p, ts))
    return OffsetSpec("timestamps", tuple(sorted(stamps)), option=name)


def _bound(opts: dict[str, str], which: str, default: str, *, allow_earliest: bool = True,
           allow_latest: bool = True) -> OffsetSpec:
    """Where a read starts (``which="starting"``) or ends, by Spark's order of preference:
    ``<which>Timestamp``, then ``<which>OffsetsByTimestamp``, then ``<which>Offsets``."""
    ts = _int(opts, f"{which}Timestamp", low=0)
    if ts is not None:
        return OffsetSpec("timestamp", timestamp=ts, option=f"{which}Timestamp")
    raw = _first(opts, f"{which}OffsetsByTimestamp")
    if raw is not None:
        return parse_timestamps(f"{which}OffsetsByTimestamp", raw)
    return parse_offsets(f"{which}Offsets", _first(opts, f"{which}Offsets"), default,
                         allow_earliest=allow_earliest, allow_latest=allow_latest)


def parse_read_options(options: Mapping[str, str], *, streaming: bool | None) -> ReadOptions:
    """Check every read option; ``streaming`` changes defaults and what is allowed (``None``:
    not known yet, as in ``DataSource.schema()``; only the checks common to both are made)."""
    check_names(options, write=False)
    opts = _lower(options)
    connection = parse_connection(opts)
    subscription = parse_subscription(opts)
    max_per_trigger = _int(opts, "maxOffsetsPerTrigger", low=1)
    min_per_trigger = _int(opts, "minOffsetsPerTrigger", low=1)
    raw_delay = _first(opts, "maxTriggerDelay")
    delay_ms = parse_duration_ms("maxTriggerDelay", raw_delay if raw_delay is not None
                                 else "15m")
    if raw_delay is not None and min_per_trigger is None:
        raise OptionError("option maxTriggerDelay only bounds the wait of "
                          "minOffsetsPerTrigger; give that too")
    if min_per_trigger is not None and max_per_trigger is not None and \
            min_per_trigger > max_per_trigger:
        raise OptionError(f"option minOffsetsPerTrigger={min_per_trigger} is more than "
                          f"maxOffsetsPerTrigger={max_per_trigger}")
    if streaming:
        ends = [n for n in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")
                if n.lower() in opts]
        if ends:
            raise OptionError(f"option {ends[0]} is for batch queries; a streaming query has "
                              "no end")
        starting = _bound(opts, "starting", "latest")
    else:
        starting = _bound(opts, "starting", "earliest", allow_latest=streaming is None)
        given = [n for n in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
                 if n.lower() in opts]
        if given and streaming is False:
            raise OptionError(f"option {given[0]} is for streaming queries")
    ending = _bound(opts, "ending", "latest", allow_earliest=False)
    strategy = (_first(opts, "startingOffsetsByTimestampStrategy") or "error").strip().lower()
    if strategy not in ("latest", "error"):
        raise OptionError(f"option startingOffsetsByTimestampStrategy={strategy!r} must be "
                          "latest or error")
    fetch_bytes = _int(opts, _spelled(opts, "max.partition.fetch.bytes"), low=1) or (1 << 20)
    total_bytes = _int(opts, _spelled(opts, "fetch.max.bytes"), low=1)
    if total_bytes is not None:
        # A reading task fetches one partition per request: both caps bound the same bytes.
        fetch_bytes = min(fetch_bytes, total_bytes)
    return ReadOptions(
        connection=connection,
        subscription=subscription,
        starting=starting,
        ending=ending,
        timestamp_strategy=strategy,
        min_partitions=_int(opts, "minPartitions", low=1),
        max_records_per_partition=_int(opts, "maxRecordsPerPartition", low=1),
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_ms=delay_ms,
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        max_partition_fetch_bytes=fetch_bytes,
        consumer=_consumer_settings(opts),
    )


def _consumer_settings(opts: dict[str, str]) -> dict:
    """Keywords for the source's consumers.  Spark's Kafka source names its consumers' group
    after ``kafka.group.id`` (or ``groupIdPrefix`` and a unique suffix) and joins no group
    with it either: offsets live in the checkpoint.  trilog's source has no group at all, so
    the names go where a broker sees them, the client id, unless ``kafka.client.id`` is set."""
    consumer = _client_settings(opts, _CONSUMER_SETTINGS)
    for name in ("kafka.group.id", "groupIdPrefix"):
        value = _first(opts, name)
        if value is not None and not str(value).strip():
            raise OptionError(f"option {name} is empty")
        if value is not None:
            consumer.setdefault("client_id", str(value).strip())
    consumer.setdefault("client_id", DEFAULT_CLIENT_ID)
    level = consumer.get("isolation_level")
    if level is not None:
        consumer["isolation_level"] = level = level.lower()
        if level not in _ISOLATION_LEVELS:
            raise OptionError(f"option {_spelled(opts, 'isolation.level')}={level!r} must be "
                              "read_committed or read_uncommitted")
    return consumer


#: Kafka's ``isolation.level``: read_committed reads only committed transactions' records
#: (what an exactly-once sink's readers need), read_uncommitted (the default) every record.
_ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
_GUARANTEES = {"at_least_once": AT_LEAST_ONCE, "at-least-once": AT_LEAST_ONCE,
               "exactly_once": EXACTLY_ONCE, "exactly-once": EXACTLY_ONCE}


_ACKS = {"all": "all", "-1": "all", "1": 1, "0": 0}
_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    check_names(options, write=True)
    opts = _lower(options)
    connection = parse_connection(opts)
    topic = _first(opts, "topic")
    if topic is not None and not topic.strip():
        raise OptionError("option topic is empty")
    producer: dict = {"acks": "all"}
    spelled = _spelled(opts, "acks")
    if spelled is not None:
        acks = str(opts[spelled]).strip().lower()
        if acks not in _ACKS:
            raise OptionError(f"option {spelled}={opts[spelled]!r} must be all, -1, 1 or 0")
        producer["acks"] = _ACKS[acks]
    if producer["acks"] == 0:
        # acks=0 gives no acknowledgement to check: the sink could not promise at least once.
        raise OptionError("option acks=0 is not allowed: the sink waits for every "
                          "acknowledgement (at least once)")
    producer.update(_client_settings(opts, _PRODUCER_SETTINGS))
    spelled = _spelled(opts, "compression.type")
    if spelled is not None:
        codec = str(opts[spelled]).strip().lower()
        if codec not in _CODECS:
            raise OptionError(f"option {spelled}={opts[spelled]!r} must be one of "
                              f"{', '.join(_CODECS)}")
        producer["compression_type"] = None if codec == "none" else codec
    if producer.get("enable_idempotence"):
        # Checked here so the query fails at planning, not in every task (as in Kafka).
        if producer["acks"] != "all":
            raise OptionError("option enable.idempotence=true needs acks=all")
        if producer.get("retries") == 0:
            raise OptionError("option enable.idempotence=true needs retries >= 1")
    guarantee, prefix = _delivery_guarantee(opts, producer)
    return WriteOptions(connection=connection, topic=topic.strip() if topic else None,
                        producer=producer, delivery_guarantee=guarantee,
                        transactional_id_prefix=prefix)


def _delivery_guarantee(opts: dict[str, str], producer: dict) -> tuple[str, str]:
    """``deliveryGuarantee`` and ``transactionalIdPrefix``, checked against the producer
    settings (a transactional producer is idempotent with acks=all, as in Kafka)."""
    raw = _first(opts, "deliveryGuarantee")
    guarantee = AT_LEAST_ONCE if raw is None else _GUARANTEES.get(str(raw).strip().lower(), "")
    if not guarantee:
        raise OptionError(f"option deliveryGuarantee={raw!r} must be at_least_once (the "
                          "default) or exactly_once")
    prefix = _first(opts, "transactionalIdPrefix")
    if guarantee == AT_LEAST_ONCE:
        given = [n for n in ("transactionalIdPrefix",) if n.lower() in opts] + \
            [s for s in (_spelled(opts, "transaction.timeout.ms"),) if s is not None]
        if given:
            raise OptionError(f"option {given[0]} is for transactions: it needs "
                              "deliveryGuarantee=exactly_once")
        return guarantee, DEFAULT_TRANSACTIONAL_ID_PREFIX
    if prefix is not None and not prefix.strip():
        raise OptionError("option transactionalIdPrefix is empty")
    if _first(opts, "zookeeper.connect", "kafka.zookeeper.connect") is not None:
        # A task reads its recorded batch id with Kafka's consumer, which takes brokers only.
        raise OptionError("deliveryGuarantee=exactly_once needs bootstrap.servers, not "
                          "zookeeper.connect")
    if producer["acks"] != "all":
        raise OptionError("deliveryGuarantee=exactly_once needs acks=all (the default): a "
                          "transactional producer waits for every replica")
    if producer.get("enable_idempotence") is False:
        raise OptionError("deliveryGuarantee=exactly_once needs enable.idempotence=true (a "
                          "transactional producer is idempotent)")
    if producer.get("retries") == 0:
        raise OptionError("deliveryGuarantee=exactly_once needs retries >= 1")
    return guarantee, (prefix.strip() if prefix else DEFAULT_TRANSACTIONAL_ID_PREFIX)
