"""One settings table per consumer: each client's frozen config dataclass is the one
declaration of its settings, its typed keyword dict names the same, and its opener takes
them as ``**options`` only; every setting is checked once, before anything connects."""

from __future__ import annotations

import pytest
from settings_helpers import assert_one_settings_table

import trilog
from trilog.client import (
    ConsumerConfig,
    ConsumerOptions,
    KafkaConsumerOptions,
    SecurityOptions,
    SimpleConsumerConfig,
    SimpleConsumerOptions,
    open_consumer,
    open_consumer_connector,
    open_simple_consumer,
)
from trilog.client._settings import config_from_options
from trilog.client.connector import GroupConfig


def test_kafkas_consumer_declares_its_settings_once():
    assert_one_settings_table(ConsumerConfig, KafkaConsumerOptions, open_consumer,
                              positional=("topics",), grouped={"security": SecurityOptions},
                              converted=("partition_assignment_strategy",))


def test_the_consumer_connector_declares_its_settings_once():
    assert_one_settings_table(GroupConfig, ConsumerOptions, open_consumer_connector,
                              positional=("group_id", "topics", "topic_filter"),
                              grouped={"security": SecurityOptions})


def test_the_simple_consumer_declares_its_settings_once():
    assert_one_settings_table(SimpleConsumerConfig, SimpleConsumerOptions, open_simple_consumer,
                              positional=("bootstrap_servers",),
                              grouped={"security": SecurityOptions})


def test_open_consumer_sends_the_connectors_keywords_to_its_opener():
    for call in (lambda: trilog.open_consumer("g", topics={"t": 1}),
                 lambda: trilog.open_consumer("g", topic_filter=trilog.Whitelist("t.*")),
                 lambda: trilog.open_consumer(topics={"t": 1}, group_id="g")):
        with pytest.raises(TypeError, match=r"trilog\.open_consumer_connector"):
            call()


@pytest.mark.parametrize("opener, args, kw", [
    (trilog.open_consumer, ("t",), {}),
    (trilog.open_consumer_connector, ("g",), {"topics": {"t": 1}}),
    (trilog.open_simple_consumer, ("127.0.0.1:1",), {}),
], ids=["consumer", "connector", "simple"])
def test_an_unknown_keyword_is_a_type_error_before_anything_connects(opener, args, kw):
    with pytest.raises(TypeError, match="enable_auto_commits"):
        opener(*args, **kw, enable_auto_commits=True)


def test_the_simple_consumer_checks_its_settings():
    for kw, setting in [({"max_partition_fetch_bytes": 0}, "max_partition_fetch_bytes"),
                        ({"fetch_max_wait_ms": -1}, "fetch_max_wait_ms"),
                        ({"request_timeout_ms": 0}, "request_timeout_ms")]:
        with pytest.raises(ValueError, match=setting):
            open_simple_consumer("127.0.0.1:1", **kw)


@pytest.mark.parametrize("kw, setting", [
    ({"auto_offset_reset": "oldest"}, "auto_offset_reset"),
    ({"fetch_max_bytes": 0}, "fetch_max_bytes"),
    ({"auto_commit_interval_ms": -1}, "auto_commit_interval_ms"),
    ({"heartbeat_interval_ms": 5000, "session_timeout_ms": 3000}, "heartbeat_interval_ms"),
])
def test_a_bad_value_is_a_value_error_naming_the_setting(kw, setting):
    with pytest.raises(ValueError, match=setting):
        trilog.open_consumer("t", bootstrap_servers="127.0.0.1:1", **kw)
    with pytest.raises(ValueError, match=setting):
        trilog.open_consumer_connector("g", topics={"t": 1}, bootstrap_servers="127.0.0.1:1",
                                       **kw)


def test_the_connector_checks_what_it_reads():
    for extra in ({}, {"topics": {"t": 1}, "topic_filter": trilog.Whitelist("t")}):
        with pytest.raises(ValueError, match="exactly one of topics and topic_filter"):
            open_consumer_connector("g", bootstrap_servers="127.0.0.1:1", **extra)


@pytest.mark.parametrize("config", [ConsumerConfig, GroupConfig, SimpleConsumerConfig])
def test_the_security_keywords_become_the_configs_client_security(config):
    sasl = {"security_protocol": "SASL_PLAINTEXT", "sasl_plain_username": "u",
            "sasl_plain_password": "p"}
    # The simple consumer takes its bootstrap servers apart: not a setting of its config.
    base = {} if config is SimpleConsumerConfig else {"bootstrap_servers": "h:1"}
    settings = config_from_options(config, {**base, **sasl}, "open_x")
    assert settings.security.protocol == "SASL_PLAINTEXT"
    assert settings.security.username == "u"
    plain = config_from_options(config, base, "open_x")
    assert plain.security.protocol == "PLAINTEXT"
    with pytest.raises(trilog.client.SecurityConfigError):
        open_consumer("t", security_protocol="BOGUS")
