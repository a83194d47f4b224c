"""SASL logins on SASL_PLAINTEXT and SASL_SSL listeners (Kafka's
``SaslServerAuthenticator``).

A connection to a SASL listener may send ApiVersions, then must log in before anything
else (any other request closes it)::

    SaslHandshake v1 (mechanism)  -> NONE and the enabled mechanisms, or
                                     UNSUPPORTED_SASL_MECHANISM (33) and the connection closes
    SaslAuthenticate (token)      -> the mechanism's answer; once it is complete the
                                     connection is ``User:<name>``.  A wrong password or an
                                     unknown user: SASL_AUTHENTICATION_FAILED (58), and the
                                     connection closes once that answer is out.

With SaslHandshake v0 (Kafka 0.10's clients) the tokens that follow are bare size-delimited
frames instead of SaslAuthenticate requests (``raw_token``); a failure just closes.
PLAIN checks the password against the user's SCRAM credential (``sasl.enabled.mechanisms``,
``_users.py``); SCRAM runs RFC 5802 with the stored keys, so no password is stored.  A
SaslHandshake or SaslAuthenticate out of turn (on a listener without SASL, twice, after the
login) answers ILLEGAL_SASL_STATE (34) and closes.

The network holds every failed answer for ``connection.failed.authentication.delay.ms``.
Failures are logged at most once a second (with the count of those held back): anyone who
reaches a SASL listener can cause one.  A PLAIN login checked once is remembered
(``VerifiedLogins``), so a client that logs in again, as clients do on each connection,
costs an HMAC instead of PBKDF2's ~8 ms of CPU.
"""

from __future__ import annotations

import hmac
import logging
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from trilog.broker._limits import RateLimitedLog
from trilog.broker.network._network import Session, current_session
from trilog.broker.security._users import UserStore, scram_credential
from trilog.errors import (
    IllegalSaslStateError,
    RemoteProtocolError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from trilog.protocol import (
    ApiKey,
    SaslAuthenticateResponse,
    SaslError,
    SaslHandshakeResponse,
    ScramCredential,
    ScramServer,
    frame,
    parse_plain,
)

log = logging.getLogger("trilog.broker.sasl")

#: What a connection may send before its login is done.
BEFORE_LOGIN = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
#: At most one line per this many seconds about failed logins (and their kind).
FAILED_LOGIN_LOG_S = 1.0
#: PLAIN logins remembered as verified.
VERIFIED_LOGINS = 1024


class VerifiedLogins:
    """PLAIN logins whose password PBKDF2 found right, remembered so that the next login
    with the same password costs an HMAC.

    An entry is the user, the credential's text it was checked against (a changed or
    deleted credential never matches again: a user's new password or removal needs no
    notice) and an HMAC-SHA256 of the password under a key made at start (never the
    password, nor a digest that a table made elsewhere could look up).  Wrong passwords are
    not remembered: each guess still pays PBKDF2.  At most ``size`` entries, the least
    recently used going first.  Runs in the trio thread.
    """

    def __init__(self, size: int = VERIFIED_LOGINS) -> None:
        self.size = size
        self._key = secrets.token_bytes(32)
        self._entries: OrderedDict[tuple[str, str, bytes], None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def _entry(self, user: str, credential: str, password: str) -> tuple[str, str, bytes]:
        return user, credential, hmac.new(self._key, password.encode("utf-8"),
                                          "sha256").digest()

    def known(self, user: str, credential: str, password: str) -> bool:
        entry = self._entry(user, credential, password)
        if entry not in self._entries:
            return False
        self._entries.move_to_end(entry)
        return True

    def remember(self, user: str, credential: str, password: str) -> None:
        entry = self._entry(user, credential, password)
        self._entries[entry] = None
        self._entries.move_to_end(entry)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)


class _Login:
    """One connection's login in progress (``Session.sasl``)."""

    __slots__ = ("mechanism", "raw", "scram", "username", "complete")

    def __init__(self, mechanism: str, raw: bool) -> None:
        self.mechanism = mechanism
        self.raw = raw  # SaslHandshake v0: bare tokens follow
        self.scram: ScramServer | None = None
        self.username: str | None = None
        self.complete = False


class SaslAuthenticator:
    """Serves SaslHandshake and SaslAuthenticate, and the bare tokens after SaslHandshake v0
    (``raw_token``, which the request dispatcher hands here)."""

    #: What a connection may send before its login is done.
    before_login = BEFORE_LOGIN

    def __init__(self, mechanisms: list[str], users: UserStore) -> None:
        self.mechanisms = list(mechanisms)
        self.users = users
        self.verified = VerifiedLogins()
        self._quiet = RateLimitedLog(log, FAILED_LOGIN_LOG_S)

    def apis(self) -> Mapping[int, Callable[[Any, Any], Awaitable[Any]]]:
        return {ApiKey.SASL_HANDSHAKE: self.handshake,
                ApiKey.SASL_AUTHENTICATE: self.authenticate}

    async def handshake(self, request: Any, header: Any) -> Any:
        session = current_session.get()
        R = SaslHandshakeResponse
        if not session.protocol.startswith("SASL_") or session.authenticated or session.sasl:
            session.close_after_answer = True
            await trio.lowlevel.checkpoint()
            return R(error_code=IllegalSaslStateError.code, mechanisms=self.mechanisms)
        mechanism = request.mechanism
        if mechanism not in self.mechanisms:
            self._quiet.info("mechanism", "%s asked for SASL mechanism %r; enabled: %s",
                             session.peer, mechanism, ", ".join(self.mechanisms))
            session.close_after_answer = True
            await trio.lowlevel.checkpoint()
            return R(error_code=UnsupportedSaslMechanismError.code, mechanisms=self.mechanisms)
        session.sasl = _Login(mechanism, raw=header.api_version == 0)
        await trio.lowlevel.checkpoint()
        return R(error_code=0, mechanisms=self.mechanisms)

    async def authenticate(self, request: Any, header: Any) -> Any:
        session = current_session.get()
        login = session.sasl
        R = SaslAuthenticateResponse
        if not isinstance(login, _Login) or login.raw or session.authenticated:
            session.close_after_answer = True
            await trio.lowlevel.checkpoint()
            return R(error_code=IllegalSaslStateError.code,
                     error_message="SaslAuthenticate out of turn: SaslHandshake v1 first, "
                                   "once per connection", auth_bytes=b"")
        try:
            answer = await self._step(session, login, bytes(request.auth_bytes))
        except SaslError as exc:
            session.close_after_answer = True
            self._log_failure(login, session, exc)
            return R(error_code=SaslAuthenticationFailedError.code,
                     error_message="Authentication failed during authentication due to "
                                   f"invalid credentials with SASL mechanism {login.mechanism}",
                     auth_bytes=b"")
        return R(error_code=0, error_message=None, auth_bytes=answer, session_lifetime_ms=0)

    async def raw_token(self, token: bytes, session: Session) -> list[bytes]:
        """A bare token after SaslHandshake v0: the answer, framed; a failure closes."""
        login = session.sasl
        assert isinstance(login, _Login)
        try:
            return [frame(await self._step(session, login, token))]
        except SaslError as exc:
            self._log_failure(login, session, exc)
            raise RemoteProtocolError(f"SASL {login.mechanism} login failed") from None

    def _log_failure(self, login: _Login, session: Session, exc: SaslError) -> None:
        self._quiet.info("failed", "SASL %s login from %s failed: %s", login.mechanism,
                         session.peer, exc)

    async def _step(self, session: Session, login: _Login, token: bytes) -> bytes:
        if login.mechanism == "PLAIN":
            answer = await self._plain(login, token)
        else:
            answer = await self._scram(login, token)
        if login.complete:
            session.authenticated = True
            session.principal = f"User:{login.username}"
            session.sasl = None
            log.debug("%s logged in as %s with %s", session.peer, session.principal,
                      login.mechanism)
        return answer

    async def _plain(self, login: _Login, token: bytes) -> bytes:
        _authzid, username, password = parse_plain(token)
        credentials = await self.users.credentials(username)
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            text = credentials.get(mechanism)
            if text is None:
                continue
            seen = f"{mechanism}:{text}"
            if self.verified.known(username, seen, password):
                await trio.lowlevel.checkpoint()
                ok = True
            else:
                credential = ScramCredential.from_text(text)
                ok = await trio.to_thread.run_sync(credential.matches, mechanism, password)
                if ok:
                    self.verified.remember(username, seen, password)
            if ok:
                login.username, login.complete = username, True
                return b""
            break
        raise SaslError("unknown user or wrong password")

    async def _scram(self, login: _Login, token: bytes) -> bytes:
        if login.scram is None:
            username = scram_username(token)
            credential = (await scram_credential(self.users, login.mechanism, username)
                          if username else None)
            login.scram = ScramServer(login.mechanism, lambda _name: credential)
        else:
            await trio.lowlevel.checkpoint()
        answer = login.scram.respond(token)
        if login.scram.complete:
            login.username, login.complete = login.scram.username, True
        return answer


def scram_username(client_first: bytes) -> str | None:
    """The user a SCRAM client-first message names (``n,,n=<user>,r=...``), or None."""
    try:
        parts = client_first.decode("utf-8").split(",")
    except UnicodeDecodeError:
        return None
    if len(parts) < 4 or not parts[2].startswith("n="):
        return None
    return parts[2][2:].replace("=2C", ",").replace("=3D", "=") or None
