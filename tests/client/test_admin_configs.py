"""The admin's describe_configs and alter_configs, and create_topic with configs, against a
real standalone broker process; the ZooKeeper admin refuses them with a clear error."""

from __future__ import annotations

import pytest

from trilog.client import ConfigEntry, open_admin
from trilog.errors import InvalidConfigError, InvalidRequestError, TrilogError


async def test_create_with_configs_describe_and_alter(broker):
    async with open_admin(broker.bootstrap) as admin:
        await admin.create_topic("configured", 1, configs={"retention.ms": "3600000",
                                                           "cleanup.policy": "compact"})
        (topic,) = await admin.describe_configs(topics=["configured"])
        assert (topic.kind, topic.name, topic.error) == ("topic", "configured", None)
        assert topic.get("retention.ms") == ConfigEntry(
            "retention.ms", "3600000", "DYNAMIC_TOPIC_CONFIG", False, False, False)
        assert topic.overrides == {"retention.ms": "3600000", "cleanup.policy": "compact"}
        segment = topic.get("segment.bytes")
        assert segment is not None and segment.is_default and segment.source == "DEFAULT_CONFIG"

        await admin.alter_configs({"segment.bytes": "1048576", "cleanup.policy": None},
                                  topic="configured")
        await admin.alter_configs({"retention.ms": "1"}, topic="configured", validate_only=True)
        (topic,) = await admin.describe_configs(topics=["configured"])
        assert topic.overrides == {"retention.ms": "3600000", "segment.bytes": "1048576"}

        with pytest.raises(InvalidConfigError, match="retention.mss"):
            await admin.alter_configs({"retention.mss": "1"}, topic="configured")
        with pytest.raises(InvalidConfigError, match="cleanup.policy"):
            await admin.create_topic("badly", 1, configs={"cleanup.policy": "shred"})
        assert "badly" not in await admin.list_topics()


async def test_brokers_and_unknown_resources(broker):
    async with open_admin(broker.bootstrap) as admin:
        (b,) = await admin.brokers()
        missing, own, ghost = await admin.describe_configs(topics=["missing"],
                                                           brokers=[b.node_id, 99])
        assert missing.error == "UNKNOWN_TOPIC_OR_PARTITION" and missing.entries == ()
        assert own.kind == "broker" and own.error is None
        port = own.get("port")
        assert port is not None and port.read_only and port.source == "STATIC_BROKER_CONFIG"
        assert ghost.error == "INVALID_REQUEST" and "99" in (ghost.error_message or "")
        with pytest.raises(InvalidRequestError, match="static"):
            await admin.alter_configs({"log.retention.hours": "1"}, broker=b.node_id)
        with pytest.raises(ValueError):
            await admin.alter_configs({"retention.ms": "1"})


@pytest.mark.slow
async def test_the_zookeeper_admin_sends_configs_to_the_brokers(zookeeper):
    async with open_admin(zookeeper=zookeeper) as admin:
        with pytest.raises(TrilogError, match="bootstrap_servers"):
            await admin.describe_configs(topics=["t"])
        with pytest.raises(TrilogError, match="bootstrap_servers"):
            await admin.alter_configs({"retention.ms": "1"}, topic="t")
        with pytest.raises(TrilogError, match="bootstrap_servers"):
            await admin.create_topic("t", 1, configs={"retention.ms": "1"})
