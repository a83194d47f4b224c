"""The rough edges a hostile or confused client found around logins and ACLs (issue 25,
item 5): failed logins logged at most once a second, PLAIN logins not paying PBKDF2 each
time, a refused client certificate answered with a TLS alert, a refused DescribeAcls that
says why, and the credentials file readable by its owner only.

The SASL authenticator runs in-process against a user store in memory; the TLS alert and
the files come from real broker and ``trilog users`` processes."""

from __future__ import annotations

import logging
import os
import socket
import ssl
import stat
from types import SimpleNamespace

import pytest
import trio
from security_helpers import USERS, add_users, make_certs

import trilog
from trilog import protocol as p
from trilog.broker.network._network import Session, current_session
from trilog.broker.security import _sasl
from trilog.broker.security._sasl import SaslAuthenticator, VerifiedLogins
from trilog.protocol import ScramCredential


class MemoryUsers:
    """A ``UserStore`` in memory."""

    def __init__(self) -> None:
        self.users: dict[str, dict[str, str]] = {}

    def set_password(self, user: str, password: str) -> None:
        self.users[user] = {"SCRAM-SHA-512": ScramCredential.create(
            "SCRAM-SHA-512", password).to_text()}

    async def credentials(self, user: str) -> dict[str, str]:
        await trio.lowlevel.checkpoint()
        return dict(self.users.get(user, {}))


async def plain_login(auth: SaslAuthenticator, user: str, password: str) -> int:
    """One PLAIN login on a fresh SASL connection: its SaslAuthenticate error code."""
    session = Session("127.0.0.1:5000", "SASL_PLAINTEXT", "SASL_PLAINTEXT")
    current_session.set(session)
    shake = await auth.handshake(SimpleNamespace(mechanism="PLAIN"),
                                 SimpleNamespace(api_version=1))
    assert shake.error_code == 0
    answer = await auth.authenticate(
        SimpleNamespace(auth_bytes=p.plain_initial_response(user, password)), None)
    assert session.authenticated == (answer.error_code == 0)
    return answer.error_code


async def test_failed_logins_are_logged_at_most_once_a_second(caplog, monkeypatch):
    monkeypatch.setattr(_sasl, "FAILED_LOGIN_LOG_S", 0.5)
    auth = SaslAuthenticator(["PLAIN"], MemoryUsers())
    with caplog.at_level(logging.INFO, logger="trilog.broker.sasl"):
        for _ in range(300):  # unknown users: no PBKDF2, so all within the interval
            assert await plain_login(auth, "mallory", "guess") == 58
        await trio.sleep(0.6)
        assert await plain_login(auth, "mallory", "again") == 58
    lines = [r.getMessage() for r in caplog.records if "login from" in r.getMessage()]
    assert 2 <= len(lines) <= 4, lines  # not 301
    assert lines[-1].endswith("similar messages suppressed)"), lines


async def test_a_plain_login_pays_pbkdf2_once_per_password(monkeypatch):
    calls = []
    matches = ScramCredential.matches

    def counting(self, mechanism, password):
        calls.append(password)
        return matches(self, mechanism, password)

    monkeypatch.setattr(ScramCredential, "matches", counting)
    users = MemoryUsers()
    users.set_password("alice", "first-secret")
    auth = SaslAuthenticator(["PLAIN"], users)
    for _ in range(5):
        assert await plain_login(auth, "alice", "first-secret") == 0
    assert len(calls) == 1
    for _ in range(3):  # wrong passwords are never remembered: each pays
        assert await plain_login(auth, "alice", "wrong") == 58
    assert len(calls) == 4
    users.set_password("alice", "second-secret")  # a changed password: the old one is out
    assert await plain_login(auth, "alice", "first-secret") == 58
    assert await plain_login(auth, "alice", "second-secret") == 0
    assert await plain_login(auth, "alice", "second-secret") == 0
    assert len(calls) == 6
    del users.users["alice"]  # a deleted user logs in no more
    assert await plain_login(auth, "alice", "second-secret") == 58
    # What is remembered holds no password.
    for entry in auth.verified._entries:
        assert "secret" not in repr(entry) and b"secret" not in entry[2]


def test_verified_logins_are_bounded():
    verified = VerifiedLogins(size=2)
    for user in ("a", "b", "c"):
        verified.remember(user, "cred", "pw")
    assert len(verified) == 2
    assert not verified.known("a", "cred", "pw") and verified.known("c", "cred", "pw")
    assert not verified.known("c", "other cred", "pw") and not verified.known("c", "cred", "x")


# -- on a broker process ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.mark.slow
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_a_missing_client_certificate_gets_a_tls_alert(broker_process, certs, tmp_path,
                                                       version):
    """ssl.client.auth=required: a client without a certificate is told so by a TLS alert
    (certificate_required in TLS 1.3, handshake_failure in 1.2), not just a closed
    connection."""
    broker = broker_process(tmp_path / "data", overrides={
        "listeners": "SSL://127.0.0.1:0", "ssl.certfile": certs["server"],
        "ssl.cafile": certs["ca"], "ssl.client.auth": "required"})
    context = ssl.create_default_context(cafile=certs["ca"])
    context.maximum_version = version
    host, port = broker.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with pytest.raises(ssl.SSLError) as caught:
            with context.wrap_socket(raw, server_hostname=host) as sock:
                # TLS 1.3: the client's side of the handshake is done before the broker
                # checks its certificate; the alert comes with the first read.
                sock.sendall(p.frame(b"\0\x12\0\0\0\0\0\1\0\0"))
                sock.recv(1024)
    assert "ALERT" in str(caught.value).upper(), caught.value


@pytest.mark.slow
async def test_a_refused_describe_acls_says_why(broker_process, tmp_path):
    data = tmp_path / "data"
    add_users("--log-dir", str(data))
    broker = broker_process(data, overrides={
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})
    login = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
             "sasl_plain_username": "bob", "sasl_plain_password": USERS["bob"]}
    async with trilog.open_admin(broker.bootstrap, **login) as admin:
        with pytest.raises(trilog.errors.ClusterAuthorizationFailedError) as caught:
            await admin.describe_acls()
    assert "User:bob is not authorized to describe ACLs (Describe on the cluster is " \
           "required)" in str(caught.value)


def test_the_credentials_file_is_readable_by_its_owner_only(tmp_path):
    add_users("--log-dir", str(tmp_path), users={"carol": "carol-secret"})
    path = tmp_path / "users.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert not os.path.exists(f"{path}.tmp")
