"""One settings table per client, for the producer and the admin clients: the config
dataclass declares each setting once, its typed keyword dict names the same settings with
the same types, the opener takes them as ``**options`` only and builds the config before
anything connects (an unknown keyword: ``TypeError``; a bad value: ``ValueError`` naming
the setting)."""

from __future__ import annotations

import pytest
from settings_helpers import assert_one_settings_table

import trilog.sync
from trilog.client import (
    AdminConfig,
    AdminOptions,
    ClientSecurity,
    GroupAdminConfig,
    GroupAdminOptions,
    ProducerConfig,
    ProducerOptions,
    SecurityOptions,
    open_admin,
    open_group_admin,
    open_producer,
)

# Nothing listens here: every check below must fail before a connection is tried.
NOWHERE = "127.0.0.1:1"


@pytest.mark.parametrize("config, options, opener", [
    (ProducerConfig, ProducerOptions, open_producer),
    (AdminConfig, AdminOptions, open_admin),
    (GroupAdminConfig, GroupAdminOptions, open_group_admin),
], ids=["producer", "admin", "group-admin"])
def test_each_client_declares_its_settings_once(config, options, opener):
    assert_one_settings_table(config, options, opener, positional=("bootstrap_servers",),
                              grouped={"security": SecurityOptions})


@pytest.mark.parametrize("opener", [open_producer, open_admin, open_group_admin])
def test_an_unknown_keyword_is_a_type_error_before_anything_connects(opener):
    with pytest.raises(TypeError, match="lingr_ms"):
        opener(NOWHERE, lingr_ms=5)


@pytest.mark.parametrize("opener, setting, value", [
    (open_producer, "acks", 2),
    (open_producer, "acks", "leader"),
    (open_producer, "linger_ms", -1),
    (open_producer, "batch_size", -1),
    (open_producer, "buffer_memory", 0),
    (open_producer, "max_in_flight_requests_per_connection", 0),
    (open_producer, "delivery_timeout_ms", 0),
    (open_producer, "compression_type", "zip"),
    (open_producer, "key_serializer", b"not callable"),
    (open_admin, "request_timeout_s", 0),
    (open_group_admin, "connect_timeout_ms", -5),
])
def test_a_bad_value_is_a_value_error_naming_the_setting(opener, setting, value):
    with pytest.raises(ValueError, match=setting):
        opener(NOWHERE, **{setting: value})


def test_the_sync_producer_checks_its_settings_in_the_callers_thread():
    with pytest.raises(TypeError, match="lingr_ms"):
        trilog.sync.Producer(NOWHERE, lingr_ms=5)
    with pytest.raises(ValueError, match="acks"):
        trilog.sync.Producer(NOWHERE, acks="some")


def test_the_producer_config_settles_acks_and_idempotence_as_kafka_3():
    assert ProducerConfig().guarantees == (-1, True, False)
    assert ProducerConfig(acks="all").guarantees == (-1, True, False)
    assert ProducerConfig(acks=1).guarantees == (1, False, False)
    assert ProducerConfig(retries=0).guarantees == (-1, False, False)
    assert ProducerConfig(enable_idempotence=True).guarantees == (-1, True, True)
    assert ProducerConfig(acks=0, enable_idempotence=False).guarantees == (0, False, True)
    with pytest.raises(ValueError, match="acks='all'"):
        ProducerConfig(acks=1, enable_idempotence=True)
    with pytest.raises(ValueError, match="retries"):
        ProducerConfig(enable_idempotence=True, retries=0)


def test_the_security_keywords_become_one_client_security():
    from trilog.client._settings import config_from_options

    config = config_from_options(ProducerConfig, {"linger_ms": 1,
                                                  "security_protocol": "SSL"}, "open_producer")
    assert isinstance(config.security, ClientSecurity) and config.linger_ms == 1
    assert config.security.protocol == "SSL"
    plain = config_from_options(AdminConfig, {}, "open_admin")
    assert isinstance(plain.security, ClientSecurity)
    ready = ClientSecurity.from_options(security_protocol="SSL")
    assert config_from_options(GroupAdminConfig, {"security": ready},
                               "open_group_admin").security is ready


@pytest.mark.parametrize("opener", [open_admin, open_group_admin])
def test_the_admins_need_exactly_one_place_to_find_the_cluster(opener):
    with pytest.raises(ValueError, match="exactly one"):
        opener()
    with pytest.raises(ValueError, match="exactly one"):
        opener(NOWHERE, zookeeper="127.0.0.1:2")
