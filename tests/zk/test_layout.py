import json

import pytest

from trilog.errors import RemoteProtocolError
from trilog.zk import (
    BrokerRegistration,
    assign_replicas,
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
