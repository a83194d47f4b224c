"""The console's login: HTTP basic authentication against a file of users.

The file has one ``user:password`` per line, or ``user:sha256:HEX`` with the hex SHA-256 of
the password (``printf %s 'secret' | sha256sum``) so that the file need not hold it in the
clear; blank lines and ``#`` comments are skipped.  Pure functions: the server asks
``authorized(users, header)`` for each request.  Basic credentials travel in the clear, so
the console refuses a login without TLS unless it listens on loopback only (``_config``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

#: the ``WWW-Authenticate`` challenge of a 401 answer
CHALLENGE = 'Basic realm="trilog console", charset="UTF-8"'


class AuthFileError(ValueError):
    """A users file that cannot be read as ``user:password`` lines."""


def parse_users(text: str, source: str = "the users file") -> dict[str, str]:
    """``{user: "sha256:HEX"}`` for each line of ``text`` (a password in the clear is
    hashed here, so only digests stay in memory)."""
    users: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, secret = line.partition(":")
        if not sep or not user or not secret:
            raise AuthFileError(f"{source}, line {number}: not user:password")
        if user in users:
            raise AuthFileError(f"{source}, line {number}: user {user!r} again")
        kind, sep, digest = secret.partition(":")
        if sep and kind == "sha256":
            if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest.lower()):
                raise AuthFileError(f"{source}, line {number}: sha256: needs 64 hex digits")
            users[user] = f"sha256:{digest.lower()}"
        else:
            users[user] = f"sha256:{_sha256(secret)}"
    if not users:
        raise AuthFileError(f"{source} names no user")
    return users


def authorized(users: dict[str, str], header: str | None) -> str | None:
    """The user an ``Authorization: Basic ...`` header logs in, or None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    expected = users.get(user)
    given = f"sha256:{_sha256(password)}"
    # compare even for an unknown user, so the time taken does not say who exists
    ok = hmac.compare_digest(expected or "sha256:" + "0" * 64, given)
    return user if sep and expected is not None and ok else None


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
