"""Client quotas on a standalone broker process, over raw requests: DescribeClientQuotas /
AlterClientQuotas at both versions (v1 flexible) with their errors and ACLs, quotas.json
across a restart, a producer's and a consumer's byte rate and the request percentage
throttling answers (throttle_time_ms, and the connection muted after the answer: KIP-219),
a consumer's fetch capped at what its quota allows, and a muted connection at shutdown."""

from __future__ import annotations

import json
import time

import pytest
from broker_helpers import batch, connect, create_topic, fetch_request, produce_request
from broker_helpers import only_partition
from quota_helpers import AR, DR, alter_request, ask, described, entity, everything

from trilog import protocol as p

CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_REQUEST = 42


@pytest.fixture
def broker(broker_process):
    # Two 1 s windows: a client's rate is measured over 1-2 s, so tests see throttling soon.
    return broker_process(overrides={"num.partitions": 1, "quota.window.num": 2})


# -- the APIs --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
def test_alter_and_describe_quotas(broker, version):
    with connect(broker.bootstrap) as sock:
        for request in [alter_request({"producer_byte_rate": 1048576}, client_id="app"),
                        alter_request({"request_percentage": 12.5}, user="alice",
                                      client_id=None),
                        alter_request({"consumer_byte_rate": 2048, "producer_byte_rate": 1024},
                                      user=None)]:
            (result,) = ask(sock, request, version).entries
            assert result.error_code == 0, result
        assert everything(sock, version) == {
            (("client-id", "app"),): {"producer_byte_rate": 1048576.0},
            (("user", "alice"), ("client-id", None)): {"request_percentage": 12.5},
            (("user", None),): {"consumer_byte_rate": 2048.0, "producer_byte_rate": 1024.0},
        }
        C = DR.ComponentData
        only_users = ask(sock, DR(components=[C(entity_type="user", match_type=2)],
                                  strict=True), version)
        # strict: the user-only entities, the default user's included
        assert list(described(only_users)) == [(("user", None),)]
        alice = ask(sock, DR(components=[C(entity_type="user", match_type=0, match="alice")],
                             strict=False), version)
        assert list(described(alice)) == [(("user", "alice"), ("client-id", None))]
        defaults = ask(sock, DR(components=[C(entity_type="user", match_type=1)],
                                strict=True), version)
        assert list(described(defaults)) == [(("user", None),)]
        # remove one quota, keep the other; removing the last removes the entity
        ask(sock, alter_request({"producer_byte_rate": None}, user=None), version)
        ask(sock, alter_request({"request_percentage": None}, user="alice", client_id=None),
            version)
        assert everything(sock, version) == {
            (("client-id", "app"),): {"producer_byte_rate": 1048576.0},
            (("user", None),): {"consumer_byte_rate": 2048.0}}


def test_bad_alterations_name_the_problem_and_change_nothing(broker):
    with connect(broker.bootstrap) as sock:
        cases = [
            (alter_request({"producer_byte_rate": 10.5}, client_id="a"), "whole number"),
            (alter_request({"producer_byte_rate": 0}, client_id="a"), "positive"),
            (alter_request({"producer_byte_rate": -5}, client_id="a"), "positive"),
            (alter_request({"controller_mutation_rate": 5}, client_id="a"), "unknown quota"),
            (alter_request({"producer_byte_rate": 5}, ip="1.2.3.4"), "unknown quota entity"),
            (alter_request({"producer_byte_rate": 5}, client_id=""), "empty"),
            (AR(entries=[AR.EntryData(entity=[], ops=[])], validate_only=False), "needs"),
        ]
        for request, text in cases:
            (result,) = ask(sock, request, 1).entries
            assert result.error_code == INVALID_REQUEST, (request, result)
            assert text in result.error_message
        twice = AR(entries=[AR.EntryData(entity=entity(client_id="a"), ops=[
            AR.EntryData.OpData(key="producer_byte_rate", value=5.0, remove=False),
            AR.EntryData.OpData(key="producer_byte_rate", value=6.0, remove=False)])],
            validate_only=False)
        assert ask(sock, twice, 1).entries[0].error_code == INVALID_REQUEST
        checked = ask(sock, alter_request({"producer_byte_rate": 5}, validate_only=True,
                                          client_id="a"), 1)
        assert checked.entries[0].error_code == 0
        assert everything(sock) == {}
        bad_filter = ask(sock, DR(components=[DR.ComponentData(entity_type="ip",
                                                               match_type=2)], strict=False), 1)
        assert bad_filter.error_code == INVALID_REQUEST and bad_filter.entries is None


def test_quotas_survive_a_restart_in_quotas_json(broker_process, tmp_path):
    log_dir = tmp_path / "data"
    first = broker_process(log_dir)
    with connect(first.bootstrap) as sock:
        ask(sock, alter_request({"producer_byte_rate": 4096}, user="bob", client_id="x y"), 1)
    assert first.stop() == 0
    stored = json.loads((log_dir / "quotas.json").read_text())
    assert stored["entities"] == {"users/bob/clients/x%20y": {"producer_byte_rate": "4096"}}
    second = broker_process(log_dir)
    with connect(second.bootstrap) as sock:
        assert everything(sock) == {(("user", "bob"), ("client-id", "x y")):
                                    {"producer_byte_rate": 4096.0}}


def test_quota_apis_need_describe_and_alter_configs_on_the_cluster(broker_process):
    acl = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}
    refused = broker_process(overrides={**acl, "super.users": "User:admin"})
    with connect(refused.bootstrap) as sock:  # ANONYMOUS, no ACLs
        answer = ask(sock, DR(components=[], strict=False), 1)
        assert answer.error_code == CLUSTER_AUTHORIZATION_FAILED and answer.entries is None
        (result,) = ask(sock, alter_request({"producer_byte_rate": 5}, client_id="a"),
                        1).entries
        assert result.error_code == CLUSTER_AUTHORIZATION_FAILED
    allowed = broker_process(overrides={**acl, "super.users": "User:ANONYMOUS"})
    with connect(allowed.bootstrap) as sock:
        (result,) = ask(sock, alter_request({"producer_byte_rate": 5}, client_id="a"),
                        1).entries
        assert result.error_code == 0
        assert everything(sock) == {(("client-id", "a"),): {"producer_byte_rate": 5.0}}


# -- throttling ------------------------------------------------------------------------------


def produce_until_throttled(sock, client_id: str, limit: int = 200):
    """Produce 20 KiB batches until an answer carries a throttle time; (answer, count)."""
    value = b"x" * 20_000
    for n in range(1, limit + 1):
        answer = ask(sock, produce_request("t", 0, batch([value])), 7, client_id)
        assert only_partition(answer).error_code == 0
        if answer.throttle_time_ms:
            return answer, n
    raise AssertionError(f"{client_id} was never throttled")


def test_a_producer_over_its_byte_rate_is_throttled_and_muted(broker):
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "t")
        ask(sock, alter_request({"producer_byte_rate": 100_000}, client_id="slow"), 1)
        answer, sent = produce_until_throttled(sock, "slow")
        # 100 KB/s measured over at least 1 s: throttled after about 100 KB
        assert 4 <= sent <= 8, sent
        throttle_s = answer.throttle_time_ms / 1000
        assert 0 < throttle_s <= 2
        # KIP-219: the next request waits in the socket until the throttle time is over
        started = time.monotonic()
        ask(sock, p.MetadataRequest(topics=[]), 1, "slow")
        assert time.monotonic() - started >= throttle_s * 0.8
        # another client id, on another connection, is not throttled
        with connect(broker.bootstrap) as other:
            for _ in range(8):
                free = ask(other, produce_request("t", 0, batch([b"x" * 20_000])), 7, "fast")
                assert free.throttle_time_ms == 0


def test_a_consumer_over_its_byte_rate_gets_empty_throttled_fetches(broker):
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "t")
        for _ in range(10):
            ask(sock, produce_request("t", 0, batch([b"y" * 50_000])), 7)
        ask(sock, alter_request({"consumer_byte_rate": 100_000}, client_id=None), 1)
        # default client-id quota: each client id has the rate to itself
        offset, throttled = 0, None
        for _ in range(20):
            answer = ask(sock, fetch_request("t", 0, offset, max_bytes=60_000), 10, "reader")
            if answer.throttle_time_ms:
                throttled = answer
                break
            part = only_partition(answer)
            offset = part.high_watermark if not part.records else offset + 1
        assert throttled is not None, "the consumer was never throttled"
        assert throttled.responses == []  # Kafka answers a throttled fetch empty
        assert 0 < throttled.throttle_time_ms <= 2000


def test_request_percentage_throttles_any_request(broker):
    with connect(broker.bootstrap) as sock:
        # 0.001 % of a handler: 10 microseconds of handler time a second
        (result,) = ask(sock, alter_request({"request_percentage": 0.001}, user="ANONYMOUS"),
                        1).entries
        assert result.error_code == 0
        throttles = [ask(sock, p.MetadataRequest(topics=[]), 5).throttle_time_ms
                     for _ in range(3)]
        assert max(throttles) > 0
        assert max(throttles) <= 1000  # the request quota's throttle is capped at one window


def test_a_muted_connection_does_not_hold_up_a_clean_shutdown(broker):
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "t")
        ask(sock, alter_request({"producer_byte_rate": 10_000}, client_id="slow"), 1)
        answer = ask(sock, produce_request("t", 0, batch([b"x" * 500_000])), 7, "slow")
        assert answer.throttle_time_ms > 30_000  # 50 times the quota over a 1 s window
        sock.sendall(p.encode_request(p.MetadataRequest(topics=[]), 1, 99, client_id="slow"))
        started = time.monotonic()
        assert broker.stop() == 0
        # at once, not after shutdown.timeout.ms (5 s) of waiting for the muted connection
        assert time.monotonic() - started < 3.5


def test_a_consumers_fetch_is_capped_at_what_its_quota_allows(broker):
    # Kafka's cap: without it a fetch larger than the quota over its windows would be
    # throttled, answered empty and taken back, again and again (the consumer starves).
    with connect(broker.bootstrap) as sock:
        create_topic(sock, "t")
        for _ in range(10):
            ask(sock, produce_request("t", 0, batch([b"y" * 50_000])), 7)
        ask(sock, alter_request({"consumer_byte_rate": 120_000}, client_id="big"), 1)
        received, offset, deadline = 0, 0, time.monotonic() + 20
        while received < 500_000:
            assert time.monotonic() < deadline, f"starved after {received} bytes"
            answer = ask(sock, fetch_request("t", 0, offset, max_bytes=10 << 20), 10, "big")
            if not answer.responses:
                continue  # throttled: the connection was muted, ask again
            part = only_partition(answer)
            records = bytes(part.records or b"")
            # one window's worth (two 1 s windows less one): at most 120 KB, 2 batches
            assert 0 < len(records) <= 120_000, len(records)
            received += len(records)
            offset += len(records) // 50_000
