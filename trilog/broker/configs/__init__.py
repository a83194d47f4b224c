"""A broker's settings: its own (``BrokerConfig``: Kafka's property names, types, defaults
and documentation), the topic-level ones (names, types, validation, how each is described),
and where topics' overrides live (``TopicConfigs``: a file standalone, ZooKeeper's
``/config/topics`` in a cluster, with the change notifications that reach every broker).
"""

from trilog.broker.configs._broker_config import (
    PROPERTIES,
    PROPERTIES_BY_NAME,
    BrokerConfig,
    ConfigError,
    Property,
    parse_properties,
    properties_help,
    properties_markdown,
    property_text,
    suggest,
)
from trilog.broker.configs._topic_configs import (
    ConfigStore,
    FileConfigStore,
    TopicConfigs,
    ZooKeeperConfigStore,
    standalone_store,
)
from trilog.broker.configs._topic_properties import (
    TOPIC_PROPERTIES_BY_NAME,
    ConfigEntry,
    TopicConfig,
    describe_broker,
    describe_topic,
    effective_value,
    validate_overrides,
)

__all__ = [
    "PROPERTIES",
    "PROPERTIES_BY_NAME",
    "TOPIC_PROPERTIES_BY_NAME",
    "BrokerConfig",
    "ConfigEntry",
    "ConfigError",
    "ConfigStore",
    "FileConfigStore",
    "Property",
    "TopicConfig",
    "TopicConfigs",
    "ZooKeeperConfigStore",
    "describe_broker",
    "describe_topic",
    "effective_value",
    "parse_properties",
    "properties_help",
    "properties_markdown",
    "property_text",
    "standalone_store",
    "suggest",
    "validate_overrides",
]
