import json

import pytest

from trilog.errors import InvalidReplicationFactorError, RemoteProtocolError
from trilog.zk import (
    BrokerRegistration,
    PartitionState,
    assign_new_partitions,
    assign_replicas,
    decode_controller,
    decode_controller_epoch,
    encode_controller,
    encode_controller_epoch,
    decode_cluster_id,
    decode_partition_state,
    decode_topic_assignment,
    encode_cluster_id,
    encode_partition_state,
    encode_topic_assignment,
    partition_state_path,
)


def test_broker_registration_has_the_seed_fields():
    data = json.loads(BrokerRegistration(3, "127.0.0.1", 9093).encode())
    assert {"jmx_port", "timestamp", "endpoints", "host", "version", "port"} <= set(data)
    assert data["endpoints"] == ["PLAINTEXT://127.0.0.1:9093"]
    back = BrokerRegistration.decode(3, BrokerRegistration(3, "h", 1).encode())
    assert (back.broker_id, back.host, back.port) == (3, "h", 1)


def test_broker_registration_from_endpoints_only():
    raw = b'{"version":4,"host":null,"port":-1,"endpoints":["PLAINTEXT://10.0.0.1:9092"]}'
    reg = BrokerRegistration.decode(1, raw)
    assert (reg.host, reg.port) == ("10.0.0.1", 9092)


def test_broker_registration_with_several_listeners():
    reg = BrokerRegistration(2, "h1", 9092, endpoints=(("INTERNAL", "h1", 9092),
                                                       ("SASL_SSL", "::1", 9094)),
                             protocols={"INTERNAL": "SSL", "SASL_SSL": "SASL_SSL"})
    data = json.loads(reg.encode())
    assert data["endpoints"] == ["INTERNAL://h1:9092", "SASL_SSL://[::1]:9094"]
    assert data["listener_security_protocol_map"] == {"INTERNAL": "SSL", "SASL_SSL": "SASL_SSL"}
    assert (data["host"], data["port"]) == (None, -1)  # Kafka writes them for PLAINTEXT only
    back = BrokerRegistration.decode(2, reg.encode())
    assert back.endpoints == reg.endpoints and dict(back.protocols) == dict(reg.protocols)
    assert back.address("SASL_SSL") == ("::1", 9094)
    assert back.address("PLAINTEXT") is None
    assert back.address() == ("h1", 9092)


@pytest.mark.parametrize("raw", [b"", b"not json", b"[]", b'{"host":"h"}', b"\xff"])
def test_bad_broker_registration_is_a_clear_error(raw):
    with pytest.raises(RemoteProtocolError):
        BrokerRegistration.decode(1, raw)


def test_topic_assignment_round_trip():
    assignment = {0: [1], 1: [2], 2: [1]}
    raw = encode_topic_assignment(assignment)
    assert json.loads(raw) == {"version": 1, "partitions": {"0": [1], "1": [2], "2": [1]}}
    assert decode_topic_assignment("t", raw) == assignment
    with pytest.raises(RemoteProtocolError):
        decode_topic_assignment("t", b'{"partitions":{"x":[1]}}')


def test_partition_state_and_cluster_id():
    state = decode_partition_state(encode_partition_state(2))
    assert state["leader"] == 2 and state["isr"] == [2]
    assert decode_cluster_id(encode_cluster_id("abc")) == "abc"
    assert partition_state_path("t", 4) == "/brokers/topics/t/partitions/4/state"


def test_assign_replicas_round_robin():
    assert assign_replicas(5, [3, 1, 2]) == {0: [1], 1: [2], 2: [3], 3: [1], 4: [2]}
    assert assign_replicas(2, [7], start=1) == {0: [7], 1: [7]}
    with pytest.raises(ValueError):
        assign_replicas(1, [])


def test_assign_replicas_follows_kafkas_layout():
    # The table in Kafka's AdminUtils: 5 brokers, 10 partitions, 3 replicas, start 0, shift 0.
    assignment = assign_replicas(10, [0, 1, 2, 3, 4], start=0, replication_factor=3, shift=0)
    assert assignment == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }
    # Every broker leads two partitions and holds six replicas.
    for broker in range(5):
        assert sum(r[0] == broker for r in assignment.values()) == 2
        assert sum(broker in r for r in assignment.values()) == 6
    with pytest.raises(InvalidReplicationFactorError, match="larger than available"):
        assign_replicas(1, [1, 2], replication_factor=3)


def test_new_partitions_continue_the_assignment():
    current = assign_replicas(3, [1, 2, 3], start=1, replication_factor=2)
    grown = assign_new_partitions(current, 6, None, [1, 2, 3])
    assert grown == {p: r for p, r in assign_replicas(6, [1, 2, 3], start=1,
                                                      replication_factor=2).items() if p >= 3}


def test_partition_state_round_trip_and_errors():
    state = PartitionState(leader=2, leader_epoch=5, isr=(2, 3), controller_epoch=7)
    raw = json.loads(state.encode())
    assert raw == {"controller_epoch": 7, "leader": 2, "version": 1, "leader_epoch": 5,
                   "isr": [2, 3]}
    assert PartitionState.decode(state.encode()) == state
    # The seeds' leader-written form (no controller yet) still reads.
    assert PartitionState.decode(encode_partition_state(4)) == PartitionState(4, 0, (4,), 1)
    for bad in (b"{}", b'{"leader": "x"}', b'{"leader": 1, "isr": [null]}', b"[]", b"nope"):
        with pytest.raises(RemoteProtocolError):
            PartitionState.decode(bad)


def test_controller_nodes():
    raw = json.loads(encode_controller(3))
    assert raw["version"] == 1 and raw["brokerid"] == 3 and raw["timestamp"].isdigit()
    assert decode_controller(encode_controller(3)) == 3
    assert decode_controller(b"5") == 5  # Kafka 0.8's bare id
    assert decode_controller_epoch(encode_controller_epoch(12)) == 12
    with pytest.raises(RemoteProtocolError):
        decode_controller(b'{"version": 1}')
    with pytest.raises(RemoteProtocolError):
        decode_controller_epoch(b"x")


def test_isr_change_notification():
    from trilog.zk import decode_isr_change, encode_isr_change

    raw = encode_isr_change([("t", 1), ("u", 0)])
    assert json.loads(raw) == {"version": 1, "partitions": [{"topic": "t", "partition": 1},
                                                            {"topic": "u", "partition": 0}]}
    assert decode_isr_change(raw) == [("t", 1), ("u", 0)]
    with pytest.raises(RemoteProtocolError):
        decode_isr_change(b'{"version": 1}')
