"""The ZooKeeper layout of the seeds (001 "ZooKeeper Directories", 004), paths and JSON.

    /cluster/id                                   {"version":"1","id":"<cluster id>"}
    /brokers/ids/<id>                  ephemeral  {"version":4,"host":..,"port":..,"endpoints":[..],
                                                   "listener_security_protocol_map":{..},
                                                   "jmx_port":-1,"timestamp":"<ms>"}
    /brokers/topics/<topic>                       {"version":1,"partitions":{"0":[<broker>],..}}
    /brokers/topics/<topic>/partitions/<n>/state  {"controller_epoch":..,"leader":..,"version":1,
                                                   "leader_epoch":..,"isr":[..]}
                                                  written conditionally (its znode version), so
                                                  that of two writers only one wins
    /controller                        ephemeral  {"version":1,"brokerid":<id>,"timestamp":"<ms>"}
    /controller_epoch                             <epoch as decimal text>
    /isr_change_notification/isr_change_<seq>  sequential  {"version":1,"partitions":
                                                  [{"topic":..,"partition":..},..]}: a leader
                                                  changed these ISRs (the controller tells
                                                  every broker, then deletes the node)
    /consumers/<group>/ids/<consumer id>  ephemeral  {"version":1,"subscription":{topic: streams},
                                                      "pattern":"static|white_list|black_list",
                                                      "timestamp":"<ms>"}
    /consumers/<group>/owners/<topic>/<partition>  ephemeral  <consumer thread id>
    /consumers/<group>/offsets/<topic>/<partition>            <offset as decimal text>
    /config/topics/<topic>                        {"version":1,"config":{"retention.ms":"..",..}}
    /config/changes/config_change_<seq>  sequential  {"version":2,"entity_path":"topics/<topic>"}
    /admin/reassign_partitions                    {"version":1,"partitions":[{"topic":..,
                                                   "partition":..,"replicas":[..]},..]}: the
                                                  reassignments the controller has still to
                                                  finish (it removes each one when done, and
                                                  the node when none is left)

Pure: no kazoo here, so the layout is tested without a server.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping

from trilog._time import now_ms
from trilog.errors import (
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    RemoteProtocolError,
)

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CLUSTER_ID = "/cluster/id"
CONSUMERS = "/consumers"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
CONFIG_TOPICS = "/config/topics"
#: ``/config/users/<user>``: a user's SCRAM credentials, ``{"version":1,"config":
#: {"SCRAM-SHA-256":"salt=..,stored_key=..,server_key=..,iterations=4096"}}``
CONFIG_USERS = "/config/users"
CONFIG_CHANGES = "/config/changes"
ADMIN = "/admin"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
#: Kafka's name for a change notification (a sequential node: the name gets a 10-digit number).
CONFIG_CHANGE_PREFIX = "config_change_"


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def consumer_ids_path(group: str) -> str:
    return f"{CONSUMERS}/{group}/ids"


def consumer_owner_path(group: str, topic: str, partition: int | None = None) -> str:
    base = f"{CONSUMERS}/{group}/owners/{topic}"
    return base if partition is None else f"{base}/{partition}"


def consumer_offset_path(group: str, topic: str, partition: int | None = None) -> str:
    base = f"{CONSUMERS}/{group}/offsets/{topic}"
    return base if partition is None else f"{base}/{partition}"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def user_config_path(user: str) -> str:
    return f"{CONFIG_USERS}/{user}"


def encode_entity_config(config: dict[str, str]) -> bytes:
    """An entity's (a topic's) configuration overrides: Kafka's ``{"version":1,"config":..}``."""
    return _dumps({"version": 1, "config": dict(config)})


def decode_entity_config(what: str, data: bytes) -> dict[str, str]:
    value = _loads(data, what)
    config = value.get("config", {})
    if not isinstance(config, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in config.items()):
        raise RemoteProtocolError(f"{what}: config must map names to strings")
    return config


def encode_config_change(entity_path: str) -> bytes:
    """A change notification: Kafka's v2, ``{"version":2,"entity_path":"topics/<topic>"}``."""
    return _dumps({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes) -> str:
    """The ``entity_path`` of a change notification (``topics/<topic>``)."""
    value = _loads(data, "config change notification")
    path = value.get("entity_path")
    if value.get("version") != 2 or not isinstance(path, str):
        raise RemoteProtocolError(f"config change notification: unknown form {value!r}")
    return path


def config_change_sequence(name: str) -> int | None:
    """The sequence number of a notification node's name, None for another name."""
    digits = name[len(CONFIG_CHANGE_PREFIX):]
    if not name.startswith(CONFIG_CHANGE_PREFIX) or not digits.isdigit():
        return None
    return int(digits)


def _loads(data: bytes, what: str) -> dict:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RemoteProtocolError(f"{what}: not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise RemoteProtocolError(f"{what}: expected a JSON object")
    return value


def _dumps(value: dict) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode("utf-8")


#: Kafka's security protocols, by name (``listener_security_protocol_map``'s values).
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class BrokerRegistration:
    """``/brokers/ids/<id>``: where a broker listens.  ``endpoints`` are ``(listener name,
    host, port)`` with ``protocols`` giving each name's security protocol; ``host`` and
    ``port`` are the first endpoint's (Kafka writes them for a PLAINTEXT listener only)."""

    broker_id: int
    host: str
    port: int
    timestamp: str = ""
    endpoints: tuple[tuple[str, str, int], ...] = ()
    protocols: Mapping[str, str] = field(default_factory=dict)

    def address(self, listener: str | None = None) -> tuple[str, int] | None:
        """``(host, port)`` of the endpoint of ``listener`` (None: the first), or None
        when the broker has no such listener."""
        if listener is None or not self.endpoints:
            return self.host, self.port
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None

    def encode(self) -> bytes:
        endpoints = self.endpoints or (("PLAINTEXT", self.host, self.port),)
        protocols = dict(self.protocols) or {name: name for name, _h, _p in endpoints}
        plaintext = next(((h, p) for name, h, p in endpoints
                          if protocols.get(name) == "PLAINTEXT"), None)
        return _dumps(
            {
                "version": 4,
                "host": plaintext[0] if plaintext else None,
                "port": plaintext[1] if plaintext else -1,
                "endpoints": [f"{name}://{_bracketed(h)}:{p}" for name, h, p in endpoints],
                "listener_security_protocol_map": {name: protocols[name]
                                                   for name, _h, _p in endpoints},
                "jmx_port": -1,
                "timestamp": self.timestamp or str(now_ms()),
            }
        )

    @classmethod
    def decode(cls, broker_id: int, data: bytes) -> "BrokerRegistration":
        value = _loads(data, f"broker {broker_id} registration")
        protocol_map = value.get("listener_security_protocol_map") or {}
        if not isinstance(protocol_map, dict):
            protocol_map = {}
        endpoints: list[tuple[str, str, int]] = []
        protocols: dict[str, str] = {}
        for endpoint in value.get("endpoints") or ():
            name, _, address = str(endpoint).partition("://")
            h, colon, p = address.rpartition(":")
            if not colon or not p.isdigit():
                continue
            protocol = str(protocol_map.get(name, name))
            if protocol not in SECURITY_PROTOCOLS:
                continue
            endpoints.append((name, h.strip("[]"), int(p)))
            protocols[name] = protocol
        host, port = value.get("host"), value.get("port")
        if endpoints:
            host, port = endpoints[0][1], endpoints[0][2]
        if not host or not isinstance(port, int) or port < 0:
            raise RemoteProtocolError(f"broker {broker_id} registration has no usable endpoint")
        return cls(broker_id, host, port, str(value.get("timestamp", "")),
                   tuple(endpoints), protocols)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


# -- ACLs (Kafka's ZkAclStore layout) -------------------------------------------------------

#: pattern type -> where its ACL nodes live: ``<root>/<ResourceType>/<name>``
_ACL_ROOTS = {"LITERAL": "/kafka-acl", "PREFIXED": "/kafka-acl-extended/prefixed"}
#: pattern type -> where a change to its ACLs is announced (sequential ``acl_changes_`` nodes)
_ACL_CHANGE_ROOTS = {"LITERAL": "/kafka-acl-changes",
                     "PREFIXED": "/kafka-acl-extended-changes"}
ACL_CHANGE_ROOTS = tuple(_ACL_CHANGE_ROOTS.values())


def acl_roots() -> dict[str, str]:
    return dict(_ACL_ROOTS)


def acl_path(pattern_type: str, resource_type: str, name: str) -> str:
    """The node of the ACLs of one pattern (``resource_type`` as Kafka writes it: Topic,
    Group, Cluster, TransactionalId)."""
    return f"{_ACL_ROOTS[pattern_type]}/{resource_type}/{name}"


def acl_change_root(pattern_type: str) -> str:
    return _ACL_CHANGE_ROOTS[pattern_type]


def encode_acl_node(entries: list[dict[str, str]]) -> bytes:
    """``{"version":1,"acls":[{"principal":..,"permissionType":..,"operation":..,
    "host":..}]}``"""
    return _dumps({"version": 1, "acls": list(entries)})


def decode_acl_node(what: str, data: bytes) -> list[dict[str, str]]:
    value = _loads(data, f"ACLs of {what}")
    acls = value.get("acls")
    if not isinstance(acls, list) or not all(isinstance(a, dict) for a in acls):
        raise RemoteProtocolError(f"ACLs of {what}: 'acls' must be a list of objects")
    return acls


def encode_acl_change(pattern_type: str, resource_type: str, name: str) -> bytes:
    """A change notification: Kafka's literal store writes ``Type:name``, its extended
    store a JSON object."""
    if pattern_type == "LITERAL":
        return f"{resource_type}:{name}".encode("utf-8")
    return _dumps({"version": 1, "resourceType": resource_type, "name": name,
                   "patternType": pattern_type})


def encode_topic_assignment(assignment: dict[int, list[int]]) -> bytes:
    return _dumps(
        {"version": 1, "partitions": {str(p): list(r) for p, r in sorted(assignment.items())}}
    )


def decode_topic_assignment(topic: str, data: bytes) -> dict[int, list[int]]:
    value = _loads(data, f"topic {topic} assignment")
    partitions = value.get("partitions")
    if not isinstance(partitions, dict):
        raise RemoteProtocolError(f"topic {topic} assignment has no partitions map")
    try:
        return {int(p): [int(b) for b in replicas] for p, replicas in partitions.items()}
    except (TypeError, ValueError):
        raise RemoteProtocolError(f"topic {topic} assignment is malformed") from None


@dataclass(frozen=True)
class PartitionState:
    """A partition's leadership as ``.../partitions/<n>/state`` holds it (Kafka's
    ``LeaderIsrAndControllerEpoch``): the leader (-1: none), its epoch (bumped on every
    leader change), the in-sync replicas, and the epoch of the controller that wrote it."""

    leader: int
    leader_epoch: int = 0
    isr: tuple[int, ...] = ()
    controller_epoch: int = 0

    def encode(self) -> bytes:
        return _dumps({"controller_epoch": self.controller_epoch, "leader": self.leader,
                       "version": 1, "leader_epoch": self.leader_epoch,
                       "isr": list(self.isr)})

    @classmethod
    def decode(cls, data: bytes) -> PartitionState:
        value = _loads(data, "partition state")
        try:
            leader = value["leader"]
            epoch = value.get("leader_epoch", 0)
            isr = value.get("isr", [leader] if leader >= 0 else [])
            controller_epoch = value.get("controller_epoch", 0)
            if not all(isinstance(x, int) for x in (leader, epoch, controller_epoch, *isr)):
                raise TypeError
        except (KeyError, TypeError):
            raise RemoteProtocolError(f"partition state is malformed: {value}") from None
        return cls(leader, epoch, tuple(isr), controller_epoch)


def encode_partition_state(leader: int, leader_epoch: int = 0, isr: list[int] | None = None,
                           controller_epoch: int = 1) -> bytes:
    return PartitionState(leader, leader_epoch,
                          tuple(isr if isr is not None else [leader]), controller_epoch).encode()


def decode_partition_state(data: bytes) -> dict:
    value = _loads(data, "partition state")
    if not isinstance(value.get("leader"), int):
        raise RemoteProtocolError("partition state has no leader")
    return value


def encode_isr_change(partitions: list[tuple[str, int]]) -> bytes:
    return _dumps({"version": 1, "partitions": [{"topic": t, "partition": p}
                                                for t, p in partitions]})


def decode_isr_change(data: bytes) -> list[tuple[str, int]]:
    value = _loads(data, "ISR change notification")
    try:
        return [(str(e["topic"]), int(e["partition"])) for e in value["partitions"]]
    except (KeyError, TypeError, ValueError):
        raise RemoteProtocolError(f"ISR change notification is malformed: {value}") from None


def encode_reassignment(partitions: dict[tuple[str, int], list[int]]) -> bytes:
    """``/admin/reassign_partitions`` (also the JSON of ``kafka-reassign-partitions.sh``'s
    ``--reassignment-json-file``): each partition's new replica list."""
    return _dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r)}
        for (t, p), r in sorted(partitions.items())]})


def decode_reassignment(data: bytes, what: str = "/admin/reassign_partitions"
                        ) -> dict[tuple[str, int], list[int]]:
    """The partitions and new replica lists of a reassignment (Kafka's JSON; ``log_dirs``
    and other fields are ignored).  Raises ``RemoteProtocolError`` when malformed: not
    JSON, a field missing or of the wrong type, a partition listed twice, a replica list
    empty or with a broker twice."""
    value = _loads(data, what)
    entries = value.get("partitions")
    if value.get("version", 1) != 1 or not isinstance(entries, list):
        raise RemoteProtocolError(f"{what}: expected {{\"version\":1,\"partitions\":[..]}}")
    out: dict[tuple[str, int], list[int]] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise RemoteProtocolError(f"{what}: a partition entry is not an object: {entry!r}")
        topic, partition, replicas = (entry.get("topic"), entry.get("partition"),
                                      entry.get("replicas"))
        if (not isinstance(topic, str) or type(partition) is not int
                or not isinstance(replicas, list)
                or not all(type(r) is int for r in replicas)):
            raise RemoteProtocolError(f"{what}: an entry needs \"topic\" (a string), "
                                      f"\"partition\" and \"replicas\" (integers): {entry!r}")
        if not replicas or len(set(replicas)) != len(replicas):
            raise RemoteProtocolError(f"{what}: {topic}-{partition}: the replica list "
                                      f"{replicas} is empty or names a broker twice")
        if (topic, partition) in out:
            raise RemoteProtocolError(f"{what}: {topic}-{partition} is listed twice")
        out[(topic, partition)] = list(replicas)
    return out


def encode_controller(broker_id: int) -> bytes:
    return _dumps({"version": 1, "brokerid": broker_id, "timestamp": str(now_ms())})


def decode_controller(data: bytes) -> int:
    """The controller's broker id from ``/controller`` (also Kafka 0.8's bare-number form)."""
    text = data.decode("utf-8", "replace").strip()
    if text.lstrip("-").isdigit():
        return int(text)
    value = _loads(data, "/controller")
    broker_id = value.get("brokerid")
    if not isinstance(broker_id, int):
        raise RemoteProtocolError(f"/controller has no brokerid: {value}")
    return broker_id


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    try:
        return int(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        raise RemoteProtocolError(f"/controller_epoch is not a number: {data[:40]!r}") from None


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    value = _loads(data, "cluster id")
    if not isinstance(value.get("id"), str):
        raise RemoteProtocolError("/cluster/id has no id")
    return value["id"]


def assign_replicas(num_partitions: int, brokers: list[int], start: int = 0,
                    replication_factor: int = 1, shift: int | None = None,
                    first_partition: int = 0) -> dict[int, list[int]]:
    """Kafka's replica assignment (``assignReplicasToBrokersRackUnaware``) of partitions
    ``first_partition ..`` over ``brokers`` (sorted): partition p's first replica is broker
    ``(p + start) % n``, round robin; its followers come after it with a shift that grows by
    one each time the partitions wrap around the brokers, so that the followers of one
    broker's partitions spread over all the others.  ``start`` and ``shift`` are random in
    Kafka (``shift`` defaults to ``start`` here)."""
    if not brokers:
        raise ValueError("no live brokers to assign partitions to")
    ordered = sorted(brokers)
    n = len(ordered)
    if not 1 <= replication_factor <= n:
        raise InvalidReplicationFactorError(
            f"Replication factor: {replication_factor} larger than available brokers: {n}.")
    next_shift = start if shift is None else shift
    out: dict[int, list[int]] = {}
    for p in range(first_partition, first_partition + num_partitions):
        if p > 0 and p % n == 0:
            next_shift += 1
        first = (p + start) % n
        replicas = [ordered[first]]
        for j in range(replication_factor - 1):
            replicas.append(ordered[(first + 1 + (next_shift + j) % (n - 1)) % n])
        out[p] = replicas
    return out


def assign_new_partitions(current: dict[int, list[int]], count: int,
                          assignment: list[list[int]] | None,
                          live: list[int]) -> dict[int, list[int]]:
    """The replicas of the partitions that grow a topic from its ``current`` assignment to
    ``count`` partitions (Kafka's CreatePartitions): ``assignment`` (one replica list per new
    partition, in order) or, without one, spread over the ``live`` brokers where the
    topic's round robin (``assign_replicas``) left off, with the topic's replication factor.
    Raises the ``ApiError`` Kafka answers with: ``InvalidPartitionsError`` (never shrink,
    not the same count), ``InvalidReplicaAssignmentError``, ``InvalidReplicationFactorError``.
    """
    old = len(current)
    if count < old:
        raise InvalidPartitionsError(
            f"Topic currently has {old} partitions, which is higher than the requested {count}.")
    if count == old:
        raise InvalidPartitionsError(f"Topic already has {old} partitions.")
    factor = len(current[min(current)]) if current else 1
    if assignment is None:
        ordered = sorted(live)
        if factor > len(ordered):
            raise InvalidReplicationFactorError(
                f"replication factor {factor} is larger than the {len(ordered)} live brokers")
        first = current.get(0, [ordered[0]])[0]
        start = ordered.index(first) if first in ordered else 0
        return assign_replicas(count - old, ordered, start, factor, first_partition=old)
    unknown = {b for replicas in assignment for b in replicas} - set(live)
    if unknown:
        raise InvalidReplicaAssignmentError(
            f"Unknown broker(s) in replica assignment: {', '.join(map(str, sorted(unknown)))}.")
    if len(assignment) != count - old:
        raise InvalidReplicaAssignmentError(
            f"Increasing the number of partitions by {count - old} but {len(assignment)} "
            "assignments provided.")
    for replicas in assignment:
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(
                f"Duplicate brokers not allowed in replica assignment: {replicas}")
        if len(replicas) != factor:
            raise InvalidReplicaAssignmentError(
                f"Inconsistent replication factor: the topic's partitions have {factor} "
                f"replicas, the assignment {replicas} has {len(replicas)}")
    return {old + i: list(replicas) for i, replicas in enumerate(assignment)}
