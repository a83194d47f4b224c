"""Client quotas, the pure parts: Kafka's precedence of the eight entity levels and who
shares a rate, the rate over a window of samples, the throttle time, entity paths, and the
checks of quota values and describe filters (no server)."""

from __future__ import annotations

import pytest
import trio

from trilog.broker.network import Later, Session
from trilog.broker.quotas import (
    RequestQuotas,
    parked,
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaManager,
    Rate,
    RateConfig,
    check_filter,
    check_value,
    entity,
    entity_path,
    make_entity,
    matches,
    parse_entity_path,
    throttle_time_ms,
    user_of,
)
from trilog.errors import InvalidRequestError
from trilog.protocol import ApiKey, FetchResponse, ProduceResponse, RequestHeader

P = PRODUCER_BYTE_RATE

#: the eight levels, most specific first, for user alice and client app
LEVELS = [
    entity("alice", "app"),
    entity("alice", default_client=True),
    entity("alice"),
    entity(client_id="app", default_user=True),
    entity(default_user=True, default_client=True),
    entity(default_user=True),
    entity(client_id="app"),
    entity(default_client=True),
]


# -- precedence ------------------------------------------------------------------------------


def test_each_level_wins_over_every_level_below_it():
    for i, winner in enumerate(LEVELS):
        manager = QuotaManager()
        for rank, e in enumerate(LEVELS[i:], start=i):
            manager.set(e, {P: 1000.0 * (rank + 1)})
        resolved = manager.resolve(P, "alice", "app")
        assert resolved is not None
        assert resolved[1] == 1000.0 * (i + 1), f"level {i + 1} ({winner}) should apply"


def test_who_shares_a_rate_follows_the_level():
    # Kafka's metric tags: a user's quota is one rate for all its clients, a client id's
    # one per client id whoever the user, the others one per (user, client id).
    expected_tags = [("alice", "app"), ("alice", "app"), ("alice", ""), ("alice", "app"),
                     ("alice", "app"), ("alice", ""), ("", "app"), ("", "app")]
    for e, tags in zip(LEVELS, expected_tags):
        manager = QuotaManager()
        manager.set(e, {P: 100.0})
        assert manager.resolve(P, "alice", "app") == ((P, *tags), 100.0)


def test_quota_types_resolve_independently_and_unset_means_unlimited():
    manager = QuotaManager()
    manager.set(entity("alice", "app"), {CONSUMER_BYTE_RATE: 5.0})
    manager.set(entity(default_client=True), {P: 7.0})
    assert manager.resolve(P, "alice", "app") == ((P, "", "app"), 7.0)
    assert manager.resolve(CONSUMER_BYTE_RATE, "alice", "app")[1] == 5.0
    assert manager.resolve(CONSUMER_BYTE_RATE, "bob", "app") is None
    assert manager.resolve(REQUEST_PERCENTAGE, "alice", "app") is None
    assert not manager.enabled(REQUEST_PERCENTAGE)
    manager.set(entity(default_client=True), {})  # removed
    assert manager.resolve(P, "alice", "app") is None and not manager.enabled(P)


def test_a_user_quota_is_shared_by_its_clients_a_client_default_is_not():
    manager = QuotaManager(RateConfig(samples=2, window_ms=1000))
    manager.set(entity("alice"), {P: 1000.0})
    manager.set(entity(default_client=True), {P: 1000.0})
    # alice's two clients share one rate: together they exceed it
    assert manager.record(P, "alice", "a", 800, 0) == 0
    assert manager.record(P, "alice", "b", 800, 0) > 0
    # bob's clients each have the default client quota to themselves
    assert manager.record(P, "bob", "a", 800, 0) == 0
    assert manager.record(P, "bob", "b", 800, 0) == 0


# -- the rate --------------------------------------------------------------------------------


def test_rate_is_measured_over_at_least_samples_less_one_windows():
    rate = Rate(RateConfig(samples=11, window_ms=1000))
    rate.record(10_000, 0)
    assert rate.window_size_ms(0) == 10_000
    assert rate.measure(0) == pytest.approx(1000.0)
    rate.record(10_000, 5_500)
    # 5 full windows since the first sample began, short of 10 by 5: 10.5 s in all
    assert rate.window_size_ms(5_500) == 10_500
    assert rate.measure(5_500) == pytest.approx(20_000 / 10.5)
    # past the minimum, the window is the time since the oldest sample began
    assert rate.window_size_ms(10_900) == pytest.approx(10_900)
    # and the first sample, 11 windows old, is forgotten
    assert rate.window_size_ms(11_000) == pytest.approx(10_500)
    assert rate.measure(11_000) == pytest.approx(10_000 / 10.5)


def test_rate_forgets_samples_older_than_the_whole_window():
    rate = Rate(RateConfig(samples=3, window_ms=1000))
    for t in range(0, 3000, 100):
        rate.record(100, t)
    assert rate.measure(2999) == pytest.approx(3000 / 2.999, rel=0.01)
    assert rate.measure(10_000) == 0.0
    rate.record(500, 10_000)
    assert rate.measure(10_000) == pytest.approx(250.0)  # 500 over the minimum 2 s


def test_unrecord_takes_a_value_back():
    rate = Rate(RateConfig(samples=2, window_ms=1000))
    rate.record(700, 0)
    rate.record(-700, 10)
    assert rate.measure(20) == 0.0


def test_throttle_time_is_the_excess_over_the_quota_times_the_window():
    assert throttle_time_ms(1500, 1000, 10_000) == 5000
    assert throttle_time_ms(1000, 1000, 10_000) == 0
    assert throttle_time_ms(900, 1000, 10_000) == 0
    manager = QuotaManager(RateConfig(samples=11, window_ms=1000))
    manager.set(entity(client_id="app"), {P: 1000.0})
    assert manager.record(P, "u", "app", 10_000, 0) == 0  # 1000/s over 10 s: at the quota
    # 15000 over 10 s = 1500/s: half again the quota, so half the window to wait
    assert manager.record(P, "u", "app", 5_000, 0) == 5000
    manager.throttled(P, "u", "app", 5000)
    stats = {k: (rate, given, n) for k, rate, given, n in manager.statistics(0)}
    assert stats[(P, "", "app")][1:] == (5000, 1)


def test_request_throttle_is_capped_at_one_window():
    manager = QuotaManager(RateConfig(samples=11, window_ms=1000))
    manager.set(entity(default_client=True), {REQUEST_PERCENTAGE: 1.0})
    # 5 s of handler time in a 10 s window is 50 %, fifty times the quota
    assert manager.record(REQUEST_PERCENTAGE, "u", "c", 500.0, 0) == 1000


# -- entities and values ---------------------------------------------------------------------


def test_entity_paths_are_kafkas_and_names_are_sanitized():
    assert entity_path(entity("alice", "app")) == "users/alice/clients/app"
    assert entity_path(entity(default_user=True)) == "users/<default>"
    assert entity_path(entity(client_id="<default>")) == "clients/%3Cdefault%3E"
    assert entity_path(entity("CN=a b,O=x*~")) == "users/CN%3Da%20b%2CO%3Dx%2A%7E"
    for e in LEVELS + [entity("a/b", "c d"), entity(client_id="<default>")]:
        assert parse_entity_path(entity_path(e)) == e
    assert parse_entity_path("topics/t") is None
    assert parse_entity_path("clients/a/users/b") is None
    assert parse_entity_path("users/a/clients") is None


def test_wire_entities_are_checked():
    assert make_entity([("client-id", None), ("user", "u")]) == entity("u", default_client=True)
    for bad, text in [([("ip", "1.2.3.4")], "unknown quota entity type"),
                      ([("user", "a"), ("user", "b")], "twice"), ([], "needs"),
                      ([("user", "")], "empty")]:
        with pytest.raises(InvalidRequestError, match=text):
            make_entity(bad)


def test_quota_values_are_checked():
    assert check_value(P, 1048576.0) == 1048576.0
    assert check_value(REQUEST_PERCENTAGE, 12.5) == 12.5
    for key, value, text in [(P, 0.0, "positive"), (P, -1.0, "positive"),
                             (P, 10.5, "whole number"), ("controller_mutation_rate", 1.0,
                                                         "unknown quota"),
                             (REQUEST_PERCENTAGE, float("nan"), "positive")]:
        with pytest.raises(InvalidRequestError, match=text):
            check_value(key, value)


def test_describe_filters_match_as_kafkas():
    alice_app, alice, default_client = (entity("alice", "app"), entity("alice"),
                                        entity(default_client=True))
    assert matches(alice_app, [("user", 0, "alice")], False)
    assert not matches(alice_app, [("user", 0, "alice")], True)  # strict: client-id too
    assert matches(alice, [("user", 0, "alice")], True)
    assert matches(default_client, [("client-id", 1, None)], True)
    assert matches(default_client, [("client-id", 2, None)], False)  # any: the default too
    assert not matches(alice, [("client-id", 2, None)], False)
    assert matches(alice_app, [("client-id", 2, None)], False)
    assert matches(alice_app, [], False) and not matches(alice_app, [], True)
    with pytest.raises(InvalidRequestError):
        check_filter([("user", 1, "x")])
    with pytest.raises(InvalidRequestError):
        check_filter([("ip", 2, None)])
    with pytest.raises(InvalidRequestError):
        check_filter([("user", 5, None)])


def test_the_quota_user_is_the_principals_name():
    assert user_of("User:alice") == "alice"
    assert user_of("User:ANONYMOUS") == "ANONYMOUS"


# -- the request hook (no server: a session, a header and a response) ------------------------


class _Slice:
    def __init__(self, length: int) -> None:
        self.length = length
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _fetch_response(slc: _Slice):
    R = FetchResponse
    PD = R.FetchableTopicResponse.PartitionData
    return R(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        R.FetchableTopicResponse(topic="t", partitions=[PD(partition_index=0, records=slc)])])


class _Fetch:
    replica_id = -1


async def test_the_hook_throttles_sets_the_answer_and_mutes_the_session(autojump_clock):
    manager = QuotaManager(RateConfig(samples=2, window_ms=1000))
    hook = RequestQuotas(manager)
    session = Session("127.0.0.1:5000")
    produce = RequestHeader(ApiKey.PRODUCE, 7, 1, "app")
    answer = ProduceResponse(responses=[], throttle_time_ms=0)
    assert hook(produce, None, answer, session, 5000, 0.001) is answer  # no quota: untouched
    assert session.throttled_until == 0.0
    manager.set(entity(client_id="app"), {P: 1000.0})
    assert hook(produce, None, answer, session, 900, 0.001).throttle_time_ms == 0
    throttled = hook(produce, None, answer, session, 900, 0.001)
    assert throttled.throttle_time_ms == 800  # 1800 B over a 1 s window: 0.8 over
    assert session.throttled_until == pytest.approx(trio.current_time() + 0.8)
    # acks=0 (no answer): still counted, still muted
    assert hook(produce, None, None, session, 900, 0.001) is None
    # a Later answer gets its throttle time once it is ready
    later = hook(produce, None, Later(_ready(ProduceResponse(responses=[]))), session, 10,
                 0.001)
    assert (await later.result()).throttle_time_ms > 0
    # brokers among themselves are never throttled
    markers = RequestHeader(ApiKey.WRITE_TXN_MARKERS, 1, 2, "app")
    assert hook(markers, None, answer, session, 10**9, 0.001) is answer


async def test_a_throttled_fetch_is_answered_empty_and_its_bytes_taken_back(autojump_clock):
    manager = QuotaManager(RateConfig(samples=2, window_ms=1000))
    manager.set(entity(default_client=True), {CONSUMER_BYTE_RATE: 1000.0})
    hook = RequestQuotas(manager)
    session = Session("127.0.0.1:5000")
    fetch = RequestHeader(ApiKey.FETCH, 10, 1, "reader")
    first = _fetch_response(_Slice(800))
    assert hook(fetch, _Fetch(), first, session, 100, 0.0) is first
    big = _Slice(800)
    throttled = hook(fetch, _Fetch(), _fetch_response(big), session, 100, 0.0)
    assert throttled.responses == [] and throttled.throttle_time_ms == 600
    assert big.closed  # the slice read is let go
    # the empty answer's bytes were taken back: the rate is the first fetch's alone
    ((_key, rate, given, count),) = list(manager.statistics(trio.current_time() * 1000))
    assert rate == pytest.approx(800) and (given, count) == (600, 1)


async def test_the_request_quota_leaves_out_time_parked(autojump_clock):
    manager = QuotaManager(RateConfig(samples=2, window_ms=1000))
    manager.set(entity(client_id="c"), {REQUEST_PERCENTAGE: 10.0})
    hook = RequestQuotas(manager)
    session = Session("127.0.0.1:5000")
    header = RequestHeader(ApiKey.FETCH, 10, 1, "c")
    parked.set(0.5)  # a long poll that waited 0.5 s of its 0.505 s
    hook(header, _Fetch(), _fetch_response(_Slice(0)), session, 100, 0.505)
    assert parked.get() == 0.0
    ((_key, rate, _given, _count),) = list(manager.statistics(trio.current_time() * 1000))
    assert rate == pytest.approx(0.5)  # 5 ms of a 1 s window: 0.5 %


def _ready(value):
    async def result():
        await trio.lowlevel.checkpoint()
        return value

    return result
