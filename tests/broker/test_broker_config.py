import pytest

from trilog.broker.configs._broker_config import (
    PROPERTIES,
    BrokerConfig,
    ConfigError,
    parse_properties,
    properties_help,
    properties_markdown,
)
from trilog.storage import LogConfig


def test_java_properties_syntax():
    text = "# comment\n! also\na=b\nc : d\ne f\\\n   g\nh=i=j\n\nk\n"
    assert parse_properties(text) == {"a": "b", "c": "d", "e": "fg", "h": "i=j", "k": ""}


def test_defaults_are_the_embedded_broker():
    config = BrokerConfig.from_sources()
    assert config.listener == ("127.0.0.1", 9092)
    assert config.log_dirs == ["./trilog-data"]
    assert config.zookeeper_connect is None
    assert config["num.partitions"] == 1
    assert config["auto.create.topics.enable"] is True


def test_file_then_overrides(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("broker.id=3\nlog.dirs=/a,/b\nlog.retention.hours=2\nport=9999\n")
    config = BrokerConfig.from_sources(path, ["broker.id=4", "log.retention.ms=500"])
    assert config.broker_id == 4
    assert config.log_dirs == ["/a", "/b"]
    assert config.listener == ("127.0.0.1", 9999)
    assert config.log_retention_ms == 500


def test_retention_precedence_and_forever():
    assert BrokerConfig.from_dict({"log.retention.hours": 2}).log_retention_ms == 7_200_000
    assert BrokerConfig.from_dict({"log.retention.minutes": 3}).log_retention_ms == 180_000
    assert BrokerConfig.from_dict({"log.retention.ms": -1}).log_retention_ms == -1


def test_log_config_from_broker_properties():
    config = BrokerConfig.from_dict(
        {
            "broker.id": "0",
            "log.segment.bytes": "1048576",
            "log.roll.hours": "1",
            "log.index.interval.bytes": "1024",
            "log.flush.interval.messages": "10000",
            "log.flush.interval.ms": "1000",
            "log.retention.hours": "168",
            "log.retention.minutes": "30",
            "log.retention.bytes": "1073741824",
            "message.max.bytes": "2000000",
        }
    ).log_config()
    assert config.segment_bytes == 1048576
    assert config.segment_ms == 3600_000
    assert config.index_interval_bytes == 1024
    assert config.flush_interval_messages == 10000
    assert config.flush_interval_ms == 1000
    assert config.retention_ms == 30 * 60_000  # minutes win over hours
    assert config.retention_bytes == 1073741824
    assert config.max_message_bytes == 2000000
    assert BrokerConfig.from_dict({"log.roll.ms": 5, "log.roll.hours": 1}).log_config(
    ).segment_ms == 5
    assert BrokerConfig.from_dict({"log.retention.ms": "-5"}).log_config().retention_ms == -1
    assert BrokerConfig.from_dict({}).log_config() == LogConfig()  # the same defaults
    with pytest.raises(ConfigError):
        BrokerConfig.from_dict({"log.segment.bytes": "lots"})


def test_unknown_key_suggests_the_nearest(tmp_path):
    with pytest.raises(ConfigError, match="did you mean 'log.segment.bytes'"):
        BrokerConfig.from_sources(overrides=["log.segment.byte=10"])
    path = tmp_path / "x.properties"
    path.write_text("num.partition=3\n")
    with pytest.raises(ConfigError, match=r"x.properties.*did you mean 'num.partitions'"):
        BrokerConfig.from_sources(path)


@pytest.mark.parametrize(
    "override, message",
    [
        ("num.partitions=zero", "not valid"),
        ("num.partitions=0", "below its minimum"),
        ("auto.create.topics.enable=maybe", "true or false"),
        ("listeners=SSL://h:1", "needs ssl.certfile"),
        ("listeners=INTERNAL://h:1", "listener.security.protocol.map"),
        ("listeners=PLAINTEXT://h:1,PLAINTEXT://h:2", "unique"),
        ("listener.security.protocol.map=INTERNAL:TLS", "NAME:PROTOCOL"),
        ("inter.broker.listener.name=OTHER", "not one of the listeners"),
        ("ssl.client.auth=maybe", "required, requested or none"),
        ("sasl.enabled.mechanisms=GSSAPI", "SCRAM-SHA-256"),
        ("ssl.principal.mapping.rules=RULE:x", "cannot read a rule"),
        ("listeners=PLAINTEXT://nohost", "host:port"),
        ("novalue", "key=value"),
    ],
)
def test_bad_values_are_clear_errors(override, message):
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_sources(overrides=[override])


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        BrokerConfig.from_sources(tmp_path / "missing.properties")


def test_every_property_is_documented():
    text, md = properties_help(), properties_markdown()
    for prop in PROPERTIES:
        assert prop.name in text and f"`{prop.name}`" in md
        assert prop.doc.endswith((".", ")"))


def test_docs_reference_matches_the_table():
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "broker-config.md").read_text()
    assert properties_markdown() in doc, "regenerate docs/broker-config.md from PROPERTIES"


def test_logs_open_on_one_thread_by_default():
    # Opening 50,000 logs from the page cache is CPU work under the GIL: more threads only
    # contend for it (the property's doc says when to raise it).
    assert BrokerConfig.from_sources()["num.recovery.threads.per.data.dir"] == 1
