"""Listener settings and TLS principals, without a server: Kafka's listener syntax, the
protocol map, the inter-broker listener, certificate subjects as Java prints them, and
``ssl.principal.mapping.rules``."""

from __future__ import annotations

import pytest

from trilog.broker.network._listeners import (
    ANONYMOUS,
    Listener,
    ListenerError,
    PrincipalRules,
    distinguished_name,
    inter_broker_listener,
    parse_listeners,
    parse_protocol_map,
    tls_principal,
)

CERT = {"subject": ((("countryName", "US"),), (("organizationName", "acme, inc"),),
                    (("organizationalUnitName", "ops"),), (("commonName", "alice"),))}


def test_listeners_with_names_of_their_own():
    mapping = parse_protocol_map("internal:ssl, EXTERNAL:SASL_SSL")
    listeners = parse_listeners("INTERNAL://10.0.0.1:9093,EXTERNAL://:9094,"
                                "PLAINTEXT://[::1]:0", mapping)
    assert listeners == [Listener("INTERNAL", "SSL", "10.0.0.1", 9093),
                         Listener("EXTERNAL", "SASL_SSL", "", 9094),
                         Listener("PLAINTEXT", "PLAINTEXT", "::1", 0)]
    assert [lst.tls for lst in listeners] == [True, True, False]
    assert [lst.sasl for lst in listeners] == [False, True, False]
    assert str(listeners[2]) == "PLAINTEXT://[::1]:0"
    assert parse_listeners("127.0.0.1:9092", mapping)[0].name == "PLAINTEXT"  # the old form


@pytest.mark.parametrize("text, message", [
    ("OTHER://h:1", "listener.security.protocol.map"),
    ("SSL://h:1,SSL://h:2", "unique"),
    ("SSL://h:1,SASL_SSL://h:1", "share a port"),
    ("SSL://h", "NAME://host:port"),
    ("SSL://h:99999", "NAME://host:port"),
    ("", "no listener"),
])
def test_bad_listeners(text, message):
    with pytest.raises(ListenerError, match=message):
        parse_listeners(text, parse_protocol_map(None))


def test_the_inter_broker_listener():
    listeners = parse_listeners("A://h:1,B://h:2", parse_protocol_map("A:SSL,B:SASL_SSL"))
    assert inter_broker_listener(listeners, None, None).name == "A"
    assert inter_broker_listener(listeners, "b", None).name == "B"
    assert inter_broker_listener(listeners, None, "SASL_SSL").name == "B"
    with pytest.raises(ListenerError, match="not one of the listeners"):
        inter_broker_listener(listeners, "C", None)
    with pytest.raises(ListenerError, match="exactly one"):
        inter_broker_listener(listeners, None, "PLAINTEXT")


def test_subjects_are_printed_as_java_does():
    assert distinguished_name(CERT) == r"CN=alice,OU=ops,O=acme\, inc,C=US"


def test_principal_mapping_rules():
    rules = PrincipalRules.parse(r"RULE:^CN=([^,]*),OU=ops,.*$/$1-ops/U, "
                                 r"RULE:^CN=(.*?),.*$/$1/, DEFAULT")
    assert tls_principal(CERT, rules) == "User:ALICE-OPS"
    other = {"subject": ((("organizationName", "x"),), (("commonName", "bob"),))}
    assert tls_principal(other, rules) == "User:bob"
    assert tls_principal({"subject": ((("commonName", "solo"),),)}, rules) == "User:CN=solo"
    assert tls_principal(None, rules) == ANONYMOUS
    assert tls_principal(CERT, PrincipalRules()) == r"User:CN=alice,OU=ops,O=acme\, inc,C=US"
    strict = PrincipalRules.parse(r"RULE:^CN=(.*?),O=x$/$1/L")
    with pytest.raises(ListenerError, match="no ssl.principal.mapping.rules"):
        tls_principal(CERT, strict)
    for bad in ("RULE:x", "RULE:(/x/,", "DEFAULT DEFAULT"):
        with pytest.raises(ValueError):
            PrincipalRules.parse(bad)
