"""Per-topic configuration: Kafka's names, the config APIs, storage, and the effect on logs.

Pure checks of the table, then a standalone broker (CreateTopics with configs,
DescribeConfigs for topics and brokers at every version, AlterConfigs and
IncrementalAlterConfigs, validate_only, persistence across a restart), kafka-python and
confluent-kafka as clients, and a ZooKeeper cluster where a change made through one broker
reaches the others without a restart.
"""

from __future__ import annotations

import time
import warnings

import pytest
from broker_helpers import (
    batch,
    connect,
    create_topic,
    fetch_all,
    produce,
    produce_request,
    only_partition,
    roundtrip,
    wait_for,
)
from replication_helpers import live_brokers

from trilog import protocol as p
from trilog.broker.configs._broker_config import BrokerConfig
from trilog.broker.apis._configs import _incremental
from trilog.broker.configs._topic_properties import (
    SOURCE_DEFAULT,
    SOURCE_STATIC_BROKER,
    SOURCE_TOPIC,
    broker_defaults,
    describe_broker,
    describe_topic,
    resolve,
    validate_overrides,
)
from trilog.errors import InvalidConfigError, InvalidRequestError

INVALID_CONFIG = 40
INVALID_REQUEST = 42
UNKNOWN_TOPIC = 3
MESSAGE_TOO_LARGE = 10
TOPIC, BROKER = 2, 4


# -- the table -------------------------------------------------------------------------------


def test_overrides_are_validated_and_normalised():
    assert validate_overrides({"retention.ms": " 1000 ", "cleanup.policy": "delete,compact",
                               "segment.ms": None}) == {
        "retention.ms": "1000", "cleanup.policy": "compact,delete"}
    with pytest.raises(InvalidConfigError, match="did you mean 'retention.ms'"):
        validate_overrides({"retention.msec": "1"})
    with pytest.raises(InvalidConfigError, match="min.cleanable.dirty.ratio='2'"):
        validate_overrides({"min.cleanable.dirty.ratio": "2"})
    with pytest.raises(InvalidConfigError, match="cleanup.policy"):
        validate_overrides({"cleanup.policy": "forever"})
    with pytest.raises(InvalidConfigError, match="at least -1"):
        validate_overrides({"retention.ms": "-2"})


def test_resolution_over_the_brokers_defaults():
    broker = BrokerConfig.from_dict({"log.retention.hours": 1, "min.insync.replicas": 2})
    defaults = broker_defaults(broker)
    assert defaults.log.retention_ms == 3_600_000 and defaults.min_insync_replicas == 2
    config = resolve(defaults, {"retention.ms": "5000", "segment.bytes": "4096",
                                "min.insync.replicas": "3", "cleanup.policy": "compact"})
    assert config.log.retention_ms == 5000 and config.log.segment_bytes == 4096
    assert config.min_insync_replicas == 3
    assert config.log.cleanup_policy == frozenset({"compact"})
    assert config.log.max_message_bytes == defaults.log.max_message_bytes


def test_describe_says_where_each_value_comes_from():
    broker = BrokerConfig.from_dict({"log.retention.hours": 1})
    config = resolve(broker_defaults(broker), {"segment.bytes": "4096"})
    entries = {e.name: e for e in describe_topic(config, {"segment.bytes": "4096"}, broker)}
    assert entries["segment.bytes"].value == "4096"
    assert entries["segment.bytes"].source == SOURCE_TOPIC
    assert entries["segment.bytes"].synonyms[0] == ("segment.bytes", "4096", SOURCE_TOPIC)
    assert entries["segment.bytes"].synonyms[-1] == ("log.segment.bytes", "1073741824",
                                                     SOURCE_DEFAULT)
    assert entries["retention.ms"].synonyms[-1] == ("log.retention.hours", "168", SOURCE_DEFAULT)
    assert entries["retention.ms"].value == "3600000"
    assert entries["retention.ms"].source == SOURCE_STATIC_BROKER
    assert ("log.retention.hours", "1", SOURCE_STATIC_BROKER) in entries["retention.ms"].synonyms
    assert entries["max.message.bytes"].is_default
    only = describe_topic(config, {}, broker, ["retention.ms", "no.such.config"])
    assert [e.name for e in only] == ["retention.ms"]
    brokers = {e.name: e for e in describe_broker(broker)}
    assert brokers["log.retention.hours"].source == SOURCE_STATIC_BROKER
    assert brokers["num.partitions"].is_default and brokers["num.partitions"].read_only


def test_incremental_operations():
    class Change:
        def __init__(self, name, op, value=None):
            self.name, self.config_operation, self.value = name, op, value

    config = resolve(broker_defaults(BrokerConfig.from_dict({})), {})
    now = {"retention.ms": "5", "segment.bytes": "4096"}
    assert _incremental(now, [Change("retention.ms", 0, "6"), Change("segment.bytes", 1),
                              Change("cleanup.policy", 2, "compact")], config) == {
        "retention.ms": "6", "cleanup.policy": "delete,compact"}
    assert _incremental({"cleanup.policy": "compact,delete"},
                        [Change("cleanup.policy", 3, "delete")], config) == {
        "cleanup.policy": "compact"}
    with pytest.raises(InvalidConfigError, match="not a list"):
        _incremental({}, [Change("retention.ms", 2, "1")], config)
    with pytest.raises(InvalidRequestError, match="more than once"):
        _incremental({}, [Change("retention.ms", 0, "1"), Change("retention.ms", 1)], config)


# -- over the wire, one broker -----------------------------------------------------------------


def create_with_configs(sock, name: str, configs: dict, *, partitions: int = 1,
                        validate_only: bool = False):
    R = p.CreateTopicsRequest
    request = R(topics=[R.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1, assignments=[],
        configs=[R.CreatableTopic.CreatableTopicConfig(name=k, value=v)
                 for k, v in configs.items()])], timeout_ms=10_000, validate_only=validate_only)
    (result,) = roundtrip(sock, request, 3).topics
    return result


def describe(sock, kind: int, name: str, keys=None, version: int = 3, synonyms: bool = True):
    R = p.DescribeConfigsRequest
    request = R(resources=[R.DescribeConfigsResource(resource_type=kind, resource_name=name,
                                                     configuration_keys=keys)],
                include_synonyms=synonyms, include_documentation=True)
    (result,) = roundtrip(sock, request, version).results
    return result


def alter(sock, name: str, configs: dict, *, validate_only: bool = False, kind: int = TOPIC):
    R = p.AlterConfigsRequest
    request = R(resources=[R.AlterConfigsResource(
        resource_type=kind, resource_name=name,
        configs=[R.AlterConfigsResource.AlterableConfig(name=k, value=v)
                 for k, v in configs.items()])], validate_only=validate_only)
    (response,) = roundtrip(sock, request, 1).responses
    return response


def incremental(sock, name: str, changes: list[tuple[str, int, str | None]]):
    R = p.IncrementalAlterConfigsRequest
    A = R.AlterConfigsResource.AlterableConfig
    request = R(resources=[R.AlterConfigsResource(
        resource_type=TOPIC, resource_name=name,
        configs=[A(name=n, config_operation=op, value=v) for n, op, v in changes])],
        validate_only=False)
    (response,) = roundtrip(sock, request, 0).responses
    return response


def values(result) -> dict[str, str]:
    return {c.name: c.value for c in result.configs}


@pytest.mark.slow
def test_topic_configs_through_the_apis_and_across_a_restart(broker_process, tmp_path):
    broker = broker_process(overrides={"log.retention.hours": 24})
    with connect(broker.bootstrap) as sock:
        bad = create_with_configs(sock, "t", {"retention.msec": "1"})
        assert bad.error_code == INVALID_CONFIG and "retention.ms" in bad.error_message
        assert create_with_configs(sock, "t", {"max.message.bytes": "200"},
                                   validate_only=True).error_code == 0
        assert describe(sock, TOPIC, "t").error_code == UNKNOWN_TOPIC  # validate_only made none
        assert create_with_configs(sock, "t", {"max.message.bytes": "200"}).error_code == 0

        # The override is in force: a batch over 200 bytes is refused for this topic only.
        big = batch([b"x" * 300])
        assert only_partition(roundtrip(sock, produce_request("t", 0, big), 3)).error_code \
            == MESSAGE_TOO_LARGE
        create_topic(sock, "other")
        assert only_partition(roundtrip(sock, produce_request("other", 0, big), 3)
                              ).error_code == 0

        for version in (0, 1, 2, 3):
            result = describe(sock, TOPIC, "t", version=version)
            assert result.error_code == 0
            described = {c.name: c for c in result.configs}
            assert described["max.message.bytes"].value == "200"
            assert described["retention.ms"].value == str(24 * 3_600_000)
            if version == 0:
                assert not described["max.message.bytes"].is_default
                assert described["segment.bytes"].is_default
            else:
                assert described["max.message.bytes"].config_source == SOURCE_TOPIC
                assert described["retention.ms"].config_source == SOURCE_STATIC_BROKER
                assert [s.name for s in described["retention.ms"].synonyms] == [
                    "log.retention.hours", "log.retention.hours"]
        assert values(describe(sock, TOPIC, "t", ["segment.ms"])).keys() == {"segment.ms"}

        # AlterConfigs replaces the whole set; IncrementalAlterConfigs changes single ones.
        assert alter(sock, "t", {"retention.ms": "60000"}).error_code == 0
        now = values(describe(sock, TOPIC, "t"))
        assert now["retention.ms"] == "60000" and now["max.message.bytes"] == "1048588"
        assert alter(sock, "t", {"retention.ms": "1"}, validate_only=True).error_code == 0
        assert values(describe(sock, TOPIC, "t"))["retention.ms"] == "60000"
        assert alter(sock, "t", {"segment.bytes": "1"}).error_code == INVALID_CONFIG
        assert alter(sock, "nope", {"retention.ms": "1"}).error_code == UNKNOWN_TOPIC
        response = incremental(sock, "t", [("segment.bytes", 0, "4096"),
                                           ("retention.ms", 1, None),
                                           ("cleanup.policy", 2, "compact")])
        assert response.error_code == 0, response
        now = values(describe(sock, TOPIC, "t"))
        assert now["segment.bytes"] == "4096" and now["cleanup.policy"] == "compact,delete"
        assert now["retention.ms"] == str(24 * 3_600_000)

        # The broker's own properties: described, not alterable here.
        result = describe(sock, BROKER, str(broker.broker_id))
        assert values(result)["log.retention.hours"] == "24"
        assert alter(sock, str(broker.broker_id), {"log.retention.hours": "1"},
                     kind=BROKER).error_code == INVALID_REQUEST
        assert describe(sock, BROKER, "99").error_code == INVALID_REQUEST
    assert broker.stop() == 0

    broker = broker_process(broker.log_dir, overrides={"log.retention.hours": 24})
    with connect(broker.bootstrap) as sock:
        now = values(describe(sock, TOPIC, "t"))
        assert now["segment.bytes"] == "4096" and now["cleanup.policy"] == "compact,delete"
        # A deleted topic's name comes back with the defaults.
        R = p.DeleteTopicsRequest
        roundtrip(sock, R(topic_names=["t"], timeout_ms=10_000), 1)
        create_topic(sock, "t")
        assert values(describe(sock, TOPIC, "t"))["segment.bytes"] == "1073741824"


@pytest.mark.slow
def test_a_topics_retention_deletes_its_old_segments_and_no_others_without_restart(
        broker_process):
    broker = broker_process(overrides={"log.segment.bytes": 2048,
                                       "log.retention.check.interval.ms": 200})
    with connect(broker.bootstrap) as sock:
        for topic in ("short", "long"):
            create_topic(sock, topic)
            for i in range(20):
                produce(sock, topic, 0, [b"%d" % i + bytes(300)] * 3)
        assert alter(sock, "short", {"retention.ms": "100"}).error_code == 0
        deadline = time.monotonic() + 30
        while fetch_start(sock, "short") == 0:
            assert time.monotonic() < deadline, "short's old segments were never deleted"
            time.sleep(0.2)
        assert fetch_start(sock, "long") == 0  # untouched
        assert fetch_all(sock, "long", 0)[0].offset == 0


def fetch_start(sock, topic: str) -> int:
    return partition_start(sock, topic, 0)


# -- independent clients -------------------------------------------------------------------


@pytest.mark.slow
def test_kafka_python_and_confluent_kafka_describe_and_alter(broker_process):
    broker = broker_process()
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "shared")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10_000)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "shared",
                                            configs={"retention.ms": "7000"})])
        modified = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "shared")])
        assert {k: v["value"] for k, v in modified["topic"]["shared"].items()} == {
            "retention.ms": "7000"}
        everything = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, "shared")], config_filter="all")
        assert everything["topic"]["shared"]["segment.bytes"]["value"] == "1073741824"
    finally:
        admin.close()

    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource as CR

    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = CR("topic", "shared")
    (future,) = client.describe_configs([resource]).values()
    assert future.result(timeout=20)["retention.ms"].value == "7000"
    resource = CR("topic", "shared", incremental_configs=[
        ConfigEntry("segment.bytes", "8192", incremental_operation=AlterConfigOpType.SET)])
    (future,) = client.incremental_alter_configs([resource]).values()
    future.result(timeout=20)
    (future,) = client.describe_configs([CR("topic", "shared")]).values()
    got = future.result(timeout=20)
    assert got["segment.bytes"].value == "8192" and got["retention.ms"].value == "7000"
    with warnings.catch_warnings():  # the old, replace-everything API is the one tested here
        warnings.simplefilter("ignore", DeprecationWarning)
        (future,) = client.alter_configs([CR("topic", "shared",
                                             set_config={"retention.ms": "9000"})]).values()
    future.result(timeout=20)
    (future,) = client.describe_configs([CR("topic", "shared")]).values()
    got = future.result(timeout=20)
    assert got["retention.ms"].value == "9000" and got["segment.bytes"].value == "1073741824"
    (future,) = client.describe_configs([CR("broker", str(broker.broker_id))]).values()
    assert future.result(timeout=20)["num.partitions"].value == "1"


# -- a cluster -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_change_through_one_broker_reaches_every_broker(broker_process, zookeeper):
    brokers = [broker_process(broker_id=i, zookeeper=zookeeper) for i in (1, 2)]
    # (the creating broker places replicas on the brokers it knows of: wait until it knows)
    wait_for(lambda: sorted(live_brokers(brokers[0])) == [1, 2], what="broker 1 to see 2")
    with connect(brokers[0].bootstrap) as sock:
        assert create_with_configs(sock, "spread", {"max.message.bytes": "300"},
                                   partitions=4).error_code == 0
    big = batch([b"x" * 400])

    def led_by(sock, broker_id: int) -> list[int]:
        """The partitions of "spread" ``broker_id`` leads, once the broker behind ``sock``
        knows a leader for each of the four (its metadata follows the controller's)."""
        def known():
            meta = roundtrip(sock, p.MetadataRequest(topics=[
                p.MetadataRequest.MetadataRequestTopic(name="spread")]), 1)
            parts = meta.topics[0].partitions
            if len(parts) == 4 and all(x.leader_id >= 0 for x in parts):
                return [x.partition_index for x in parts if x.leader_id == broker_id] or None
            return None
        return wait_for(known, what=f"broker {broker_id} to lead some of spread's partitions")

    for b in brokers:  # every broker applies the creation's config to its own partitions
        with connect(b.bootstrap) as sock:
            mine = led_by(sock, b.broker_id)
            assert only_partition(roundtrip(sock, produce_request("spread", mine[0], big), 3)
                                  ).error_code == MESSAGE_TOO_LARGE
    with connect(brokers[1].bootstrap) as sock:
        assert alter(sock, "spread", {"max.message.bytes": "100000"}).error_code == 0
    with connect(brokers[0].bootstrap) as sock:  # the other broker follows, no restart
        deadline = time.monotonic() + 15
        while values(describe(sock, TOPIC, "spread"))["max.message.bytes"] != "100000":
            assert time.monotonic() < deadline, "broker 1 never saw the change"
            time.sleep(0.1)
        mine = led_by(sock, 1)
        assert only_partition(roundtrip(sock, produce_request("spread", mine[0], big), 3)
                              ).error_code == 0


@pytest.mark.slow
def test_retention_altered_by_kafka_python_applies_on_every_broker(broker_process, zookeeper):
    settings = {"log.segment.bytes": 2048, "log.retention.check.interval.ms": 200}
    brokers = [broker_process(broker_id=i, zookeeper=zookeeper, overrides=settings)
               for i in (1, 2)]
    leaders: dict[tuple[str, int], object] = {}
    with connect(brokers[0].bootstrap) as sock:
        for topic in ("short", "long"):
            assert create_with_configs(sock, topic, {}, partitions=4).error_code == 0
            meta = roundtrip(sock, p.MetadataRequest(topics=[
                p.MetadataRequest.MetadataRequestTopic(name=topic)]), 1)
            for part in meta.topics[0].partitions:
                leaders[(topic, part.partition_index)] = next(
                    b for b in brokers if b.broker_id == part.leader_id)
    assert {b.broker_id for b in leaders.values()} == {1, 2}  # both brokers lead some
    for (topic, partition), b in leaders.items():
        with connect(b.bootstrap) as sock:
            for i in range(20):
                produce(sock, topic, partition, [b"%d" % i + bytes(300)] * 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=brokers[1].bootstrap, request_timeout_ms=10_000)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "short",
                                            configs={"retention.ms": "100"})])
    finally:
        admin.close()
    deadline = time.monotonic() + 30
    for (topic, partition), b in sorted(leaders.items(), key=lambda kv: kv[0]):
        with connect(b.bootstrap) as sock:
            if topic == "long":
                continue
            while partition_start(sock, topic, partition) == 0:
                assert time.monotonic() < deadline, \
                    f"{topic}-{partition} on broker {b.broker_id} kept its old segments"
                time.sleep(0.2)
    for (topic, partition), b in leaders.items():
        if topic == "long":
            with connect(b.bootstrap) as sock:
                assert partition_start(sock, topic, partition) == 0  # untouched


def partition_start(sock, topic: str, partition: int) -> int:
    from broker_helpers import EARLIEST, list_offsets_request

    return only_partition(roundtrip(sock, list_offsets_request(topic, partition, EARLIEST),
                                    1)).offset
