"""The trilog broker: a Kafka-protocol server on Trio.

``serve_broker(config, task_status=...)`` and ``async with open_broker(config) as broker``
run one; ``BrokerConfig`` reads Kafka's property names.
"""

from trilog.broker._broker import Broker, open_broker, serve_broker
from trilog.broker.configs._broker_config import PROPERTIES, BrokerConfig, ConfigError

__all__ = ["PROPERTIES", "Broker", "BrokerConfig", "ConfigError", "open_broker", "serve_broker"]
