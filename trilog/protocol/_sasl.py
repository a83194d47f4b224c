"""The SASL mechanisms Kafka uses, both sides, as pure functions and small state machines
(no I/O): PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677).

PLAIN, one token from the client::

    [authzid] NUL username NUL password          (UTF-8; Kafka wants authzid empty or = user)

SCRAM, two round trips (``,``-separated ``k=v`` attributes)::

    client-first   n,,n=<user>,r=<client nonce>[,<extensions>]   (gs2 header "n,,": no
                                                                    channel binding;
                                                                    extensions, key=value
                                                                    each, are ignored)
    server-first   r=<client nonce + server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=biws,r=<nonce>,p=<base64 ClientProof>        ("biws" = base64("n,,"))
    server-final   v=<base64 ServerSignature>   or   e=<error>

    SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)
    ClientKey = HMAC(SaltedPassword, "Client Key")   StoredKey = H(ClientKey)
    ServerKey = HMAC(SaltedPassword, "Server Key")
    AuthMessage = client-first-bare "," server-first "," client-final-without-proof
    ClientProof = ClientKey XOR HMAC(StoredKey, AuthMessage)
    ServerSignature = HMAC(ServerKey, AuthMessage)

A server stores only ``ScramCredential`` (salt, iterations, StoredKey, ServerKey), in
Kafka's text form ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``.  Every
problem with a peer's message raises ``SaslError``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
#: Kafka's least iteration count (``ScramMechanism.minIterations``).
MIN_ITERATIONS = 4096
#: Kafka refuses more than this too (a denial of service on the server's PBKDF2).
MAX_ITERATIONS = 16384
#: The longest token read (a SCRAM message is well under 1 KiB).
MAX_TOKEN_BYTES = 8192
_GS2_HEADER = "n,,"


class SaslError(ValueError):
    """A SASL message is malformed, out of turn, or fails its check."""


# -- PLAIN ---------------------------------------------------------------------------------


def plain_initial_response(username: str, password: str, authzid: str = "") -> bytes:
    return f"{authzid}\0{username}\0{password}".encode("utf-8")


def parse_plain(token: bytes) -> tuple[str, str, str]:
    """``(authzid, username, password)`` of a PLAIN token."""
    if len(token) > MAX_TOKEN_BYTES:
        raise SaslError("PLAIN token too long")
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslError("PLAIN token is not UTF-8") from None
    parts = text.split("\0")
    if len(parts) != 3:
        raise SaslError("PLAIN token must be authzid NUL username NUL password")
    authzid, username, password = parts
    if not username:
        raise SaslError("PLAIN token has no username")
    if not password:
        raise SaslError("PLAIN token has no password")
    if authzid and authzid != username:
        raise SaslError("PLAIN authorization id differs from the username")
    return authzid, username, password


# -- SCRAM ---------------------------------------------------------------------------------


def _hash_name(mechanism: str) -> str:
    try:
        return _HASHES[mechanism]
    except KeyError:
        raise SaslError(f"{mechanism!r} is not a SCRAM mechanism") from None


def _hmac(key: bytes, data: bytes, name: str) -> bytes:
    return hmac.new(key, data, name).digest()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise SaslError(f"{what} is not base64") from None


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _unescape(name: str) -> str:
    if "=" in name.replace("=3D", "").replace("=2C", ""):
        raise SaslError("bad escape in SCRAM user name")
    return name.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise SaslError(f"{what}: {part[:20]!r} is not an attribute")
        out.append((part[0], part[2:]))
    return out


def _decode(token: bytes, what: str) -> str:
    if len(token) > MAX_TOKEN_BYTES:
        raise SaslError(f"{what} too long")
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslError(f"{what} is not UTF-8") from None


def _salted_keys(name: str, password: str, salt: bytes, iterations: int
                 ) -> tuple[bytes, bytes]:
    """``(ClientKey, ServerKey)`` of a password."""
    salted = hashlib.pbkdf2_hmac(name, password.encode("utf-8"), salt, iterations)
    return _hmac(salted, b"Client Key", name), _hmac(salted, b"Server Key", name)


@dataclass(frozen=True)
class ScramCredential:
    """What a server keeps of a user's password for one SCRAM mechanism."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        return f"ScramCredential(iterations={self.iterations})"

    @classmethod
    def create(cls, mechanism: str, password: str, *, iterations: int = MIN_ITERATIONS,
               salt: bytes | None = None) -> "ScramCredential":
        name = _hash_name(mechanism)
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise SaslError(f"iterations must be {MIN_ITERATIONS}-{MAX_ITERATIONS}")
        salt = os.urandom(32) if salt is None else salt
        client_key, server_key = _salted_keys(name, password, salt, iterations)
        return cls(salt, hashlib.new(name, client_key).digest(), server_key, iterations)

    def matches(self, mechanism: str, password: str) -> bool:
        """Does ``password`` give this credential?  (PLAIN logins; costs PBKDF2.)"""
        name = _hash_name(mechanism)
        client_key, _ = _salted_keys(name, password, self.salt, self.iterations)
        return hmac.compare_digest(hashlib.new(name, client_key).digest(), self.stored_key)

    def to_text(self) -> str:
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
                f"server_key={_b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> "ScramCredential":
        fields = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep:
                raise SaslError("a SCRAM credential is salt=..,stored_key=..,server_key=..,"
                                "iterations=..")
            fields[key.strip()] = value.strip()
        try:
            iterations = int(fields["iterations"])
            return cls(_unb64(fields["salt"], "salt"), _unb64(fields["stored_key"], "stored_key"),
                       _unb64(fields["server_key"], "server_key"), iterations)
        except (KeyError, ValueError) as exc:
            raise SaslError(f"malformed SCRAM credential ({exc})") from None


class ScramClient:
    """The client side: ``first_message()``, ``final_message(server_first)``,
    ``verify(server_final)``."""

    def __init__(self, mechanism: str, username: str, password: str,
                 nonce: str | None = None) -> None:
        self._name = _hash_name(mechanism)
        self.password = password
        self.nonce = nonce or secrets.token_urlsafe(24)
        self._first_bare = f"n={_escape(username)},r={self.nonce}"
        self._auth_message: bytes | None = None
        self._server_key: bytes | None = None

    def first_message(self) -> bytes:
        return (_GS2_HEADER + self._first_bare).encode("utf-8")

    def final_message(self, server_first: bytes) -> bytes:
        text = _decode(server_first, "server-first message")
        attrs = dict(_attributes(text, "server-first message"))
        if "e" in attrs:
            raise SaslError(f"the server refused: {attrs['e']}")
        try:
            nonce, salt_b64, iterations_text = attrs["r"], attrs["s"], attrs["i"]
        except KeyError:
            raise SaslError("server-first message lacks r, s or i") from None
        if not nonce.startswith(self.nonce) or len(nonce) == len(self.nonce):
            raise SaslError("the server's nonce does not extend ours")
        try:
            iterations = int(iterations_text)
        except ValueError:
            raise SaslError("the iteration count is not a number") from None
        if iterations < MIN_ITERATIONS:
            raise SaslError(f"{iterations} iterations is below the minimum {MIN_ITERATIONS}")
        salt = _unb64(salt_b64, "salt")
        client_key, self._server_key = _salted_keys(self._name, self.password, salt, iterations)
        stored_key = hashlib.new(self._name, client_key).digest()
        without_proof = f"c={_b64(_GS2_HEADER.encode())},r={nonce}"
        self._auth_message = f"{self._first_bare},{text},{without_proof}".encode("utf-8")
        signature = _hmac(stored_key, self._auth_message, self._name)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        return f"{without_proof},p={_b64(proof)}".encode("utf-8")

    def verify(self, server_final: bytes) -> None:
        if self._auth_message is None or self._server_key is None:
            raise SaslError("verify before final_message")
        attrs = dict(_attributes(_decode(server_final, "server-final message"),
                                 "server-final message"))
        if "e" in attrs:
            raise SaslError(f"the server refused: {attrs['e']}")
        if "v" not in attrs:
            raise SaslError("server-final message lacks v")
        expected = _hmac(self._server_key, self._auth_message, self._name)
        if not hmac.compare_digest(_unb64(attrs["v"], "server signature"), expected):
            raise SaslError("the server's signature is wrong: it does not know the password")


class ScramServer:
    """The server side: ``respond(client_first)`` gives the server-first message,
    ``respond(client_final)`` the server-final one, after which ``complete`` is true and
    ``username`` names who logged in.  ``lookup(username)`` gives the stored credential
    (None: no such user; the exchange still runs, with a made-up credential, and fails)."""

    def __init__(self, mechanism: str,
                 lookup: Callable[[str], ScramCredential | None]) -> None:
        self.mechanism = mechanism
        self._name = _hash_name(mechanism)
        self._lookup = lookup
        self.username: str | None = None
        self.complete = False
        self._failed = False
        self._credential: ScramCredential | None = None
        self._known = False
        self._first_bare = ""
        self._server_first = ""
        self._nonce = ""

    def respond(self, token: bytes) -> bytes:
        if self.complete or self._failed:
            raise SaslError("the SCRAM exchange is over")
        try:
            if self._credential is None:
                return self._first(_decode(token, "client-first message"))
            return self._final(_decode(token, "client-final message"))
        except SaslError:
            self._failed = True
            raise

    def _first(self, text: str) -> bytes:
        if not text.startswith(_GS2_HEADER):
            raise SaslError("client-first message must start with 'n,,' (no channel "
                            "binding, no authorization id)")
        bare = text[len(_GS2_HEADER):]
        parts = bare.split(",")
        attrs = _attributes(",".join(parts[:2]), "client-first message")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r":
            raise SaslError("client-first message must be n=<user>,r=<nonce>")
        # Extensions (Kafka's tokenauth=true, a client's own) are ignored, as Kafka's
        # ScramSaslServer ignores those it does not support; each must still be key=value.
        for extension in parts[2:]:
            key, sep, _value = extension.partition("=")
            if not key or not sep:
                raise SaslError(f"client-first message: {extension[:20]!r} is not an "
                                "extension (key=value)")
        username, client_nonce = _unescape(attrs[0][1]), attrs[1][1]
        if not username or not client_nonce:
            raise SaslError("empty user name or nonce")
        credential = self._lookup(username)
        self._known = credential is not None
        self._credential = credential or ScramCredential(
            os.urandom(32), os.urandom(64), os.urandom(64), MIN_ITERATIONS)
        self.username = username
        self._first_bare = bare
        self._nonce = client_nonce + secrets.token_urlsafe(24)
        self._server_first = (f"r={self._nonce},s={_b64(self._credential.salt)},"
                              f"i={self._credential.iterations}")
        return self._server_first.encode("utf-8")

    def _final(self, text: str) -> bytes:
        assert self._credential is not None
        attrs = _attributes(text, "client-final message")
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p":
            raise SaslError("client-final message must be c=..,r=..,p=..")
        if attrs[0][1] != _b64(_GS2_HEADER.encode()):
            raise SaslError("channel binding is not supported")
        if attrs[1][1] != self._nonce:
            raise SaslError("the nonce does not match")
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        proof = _unb64(attrs[-1][1], "client proof")
        signature = _hmac(self._credential.stored_key, auth_message, self._name)
        if len(proof) != len(signature):
            raise SaslError("the client proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        good = hmac.compare_digest(hashlib.new(self._name, client_key).digest(),
                                   self._credential.stored_key)
        if not (good and self._known):
            raise SaslError("unknown user or wrong password")
        self.complete = True
        server_signature = _hmac(self._credential.server_key, auth_message, self._name)
        return f"v={_b64(server_signature)}".encode("utf-8")
