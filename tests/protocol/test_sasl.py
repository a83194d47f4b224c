"""PLAIN and SCRAM, both sides, without a network: RFC 7677's test vector, client and server
against each other, wrong passwords, and malformed or out-of-order messages (which only
ever raise ``SaslError`` and never log anyone in)."""

from __future__ import annotations

import base64
import random

import pytest

from trilog.protocol import (
    SaslError,
    ScramClient,
    ScramCredential,
    ScramServer,
    parse_plain,
    plain_initial_response,
)


def test_rfc_7677_scram_sha_256_vector():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first_message() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    server_first = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert client.final_message(server_first) == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(SaslError, match="signature"):
        client.verify(b"v=" + base64.b64encode(b"\0" * 32))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user", ["alice", "a,b=c"])
def test_client_and_server_agree(mechanism, user):
    credential = ScramCredential.create(mechanism, "secret")
    assert ScramCredential.from_text(credential.to_text()) == credential
    server = ScramServer(mechanism, lambda name: credential if name == user else None)
    client = ScramClient(mechanism, user, "secret")
    final = server.respond(client.first_message())
    answer = server.respond(client.final_message(final))
    assert server.complete and server.username == user
    client.verify(answer)
    with pytest.raises(SaslError, match="over"):
        server.respond(b"n,,n=x,r=y")


def test_unknown_scram_extensions_are_ignored_as_kafka_does():
    """Extensions after the nonce (Kafka's tokenauth=true, a client's own) change nothing:
    the login completes, and they stay part of the signed message.  One that is not
    key=value is still malformed."""
    credential = ScramCredential.create("SCRAM-SHA-256", "secret")
    for extensions in (",tokenauth=true", ",x=1,traceid=abc=def"):
        server = ScramServer("SCRAM-SHA-256", lambda name: credential)
        client = ScramClient("SCRAM-SHA-256", "alice", "secret")
        client._first_bare += extensions  # what the client signs, and sends
        first = server.respond(client.first_message())
        client.verify(server.respond(client.final_message(first)))
        assert server.complete and server.username == "alice"
    server = ScramServer("SCRAM-SHA-256", lambda name: credential)
    with pytest.raises(SaslError, match="not an extension"):
        server.respond(b"n,,n=alice,r=abc,novalue")


@pytest.mark.parametrize("password, user", [("wrong", "alice"), ("secret", "mallory")])
def test_a_wrong_password_or_unknown_user_fails_alike(password, user):
    credential = ScramCredential.create("SCRAM-SHA-256", "secret")
    server = ScramServer("SCRAM-SHA-256", lambda name: credential if name == "alice" else None)
    client = ScramClient("SCRAM-SHA-256", user, password)
    first = server.respond(client.first_message())
    assert b",i=4096" in first  # an unknown user gets an answer of the same form
    with pytest.raises(SaslError, match="unknown user or wrong password"):
        server.respond(client.final_message(first))
    assert not server.complete


def test_the_client_refuses_a_weak_or_foreign_server():
    client = ScramClient("SCRAM-SHA-256", "u", "p", nonce="abc")
    with pytest.raises(SaslError, match="below the minimum"):
        client.final_message(b"r=abcdef,s=AAAA,i=100")
    with pytest.raises(SaslError, match="does not extend"):
        ScramClient("SCRAM-SHA-256", "u", "p", nonce="abc").final_message(b"r=xyz,s=AAAA,i=4096")
    with pytest.raises(SaslError, match="refused"):
        ScramClient("SCRAM-SHA-256", "u", "p").final_message(b"e=unknown-user")


def test_plain_tokens():
    assert parse_plain(plain_initial_response("alice", "pw")) == ("", "alice", "pw")
    assert parse_plain(b"alice\0alice\0pw") == ("alice", "alice", "pw")
    for bad in (b"", b"alice", b"\0alice", b"\0\0pw", b"\0alice\0", b"bob\0alice\0pw",
                b"\0a\0b\0c", b"\xff\0a\0b", b"\0a\0" + b"x" * 10_000):
        with pytest.raises(SaslError):
            parse_plain(bad)


def test_credentials_check_plain_passwords():
    credential = ScramCredential.create("SCRAM-SHA-512", "secret")
    assert credential.matches("SCRAM-SHA-512", "secret")
    assert not credential.matches("SCRAM-SHA-512", "Secret")
    assert "secret" not in repr(credential)
    for bad in ("", "salt=AAAA", "salt=!!,stored_key=AA==,server_key=AA==,iterations=4096",
                "salt=AA==,stored_key=AA==,server_key=AA==,iterations=many"):
        with pytest.raises(SaslError):
            ScramCredential.from_text(bad)


def test_fuzzed_tokens_only_raise_sasl_error_and_never_complete():
    rng = random.Random(7677)
    credential = ScramCredential.create("SCRAM-SHA-256", "secret")
    good = ScramClient("SCRAM-SHA-256", "alice", "secret")
    seeds = [good.first_message(), b"n,,n=alice,r=x", b"p=tls-unique,,n=a,r=b",
             b"n,,n=alice,r=x,tokenauth=true", b"c=biws,r=x,p=AAAA", b"n,,n=a=ZZ,r=b",
             b"\xff\xfe", b"n,," + b"a" * 9000]
    for _ in range(2000):
        server = ScramServer("SCRAM-SHA-256", lambda name: credential)
        for _step in range(rng.randint(1, 3)):
            token = rng.choice(seeds + [rng.randbytes(rng.randint(0, 200))])
            if rng.random() < 0.4:
                token = token[: rng.randint(0, len(token))]
            try:
                server.respond(token)
            except SaslError:
                break
        assert not server.complete
