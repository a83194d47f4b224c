"""The controller (Kafka's ``KafkaController``): which broker controls (``ControllerElection``,
through ``/controller``), and, while this one does, the cluster's partition states: leaders
and ISRs chosen by pure decisions, written to ZooKeeper, and sent to the brokers
(LeaderAndIsr, UpdateMetadata, StopReplica), ControlledShutdown and ElectLeaders answered.
"""

from trilog.broker.controller._controller import Controller
from trilog.broker.controller._election import NO_CONTROLLER, ControllerElection

__all__ = ["NO_CONTROLLER", "Controller", "ControllerElection"]
