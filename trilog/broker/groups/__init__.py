"""Consumer groups on the broker: the group coordinator (FindCoordinator, JoinGroup,
SyncGroup, Heartbeat, LeaveGroup, the offset APIs, DescribeGroups, ListGroups), Kafka's group
state machine, and the offset manager that keeps committed offsets in
``__consumer_offsets`` (appended through the replica manager, as a produce is).
"""

from trilog.broker.groups._coordinator import GroupCoordinator
from trilog.broker.groups._group import Group, GroupState, Member
from trilog.broker.groups._offsets import (
    OFFSETS_TOPIC,
    ApplyOrder,
    OffsetManager,
    java_string_hashcode,
    partition_for,
)

__all__ = [
    "OFFSETS_TOPIC",
    "ApplyOrder",
    "Group",
    "GroupCoordinator",
    "GroupState",
    "Member",
    "OffsetManager",
    "java_string_hashcode",
    "partition_for",
]
