"""A connection's SASL login (Kafka's ``SaslClientAuthenticator``), after ApiVersions:

    SaslHandshake v1 (mechanism)            -> the broker's mechanisms, or 33
    SaslAuthenticate (token) ...            -> the broker's token, or 58 with a message

PLAIN sends one token (``\\0user\\0password``); SCRAM two (client-first, client-final), and
checks the broker's signature in its last answer, so a broker that does not know the
password cannot pass for one that does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from trilog.errors import (
    IllegalSaslStateError,
    NO_ERROR,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
    raise_for_code,
)
from trilog.protocol import (
    ApiKey,
    SaslAuthenticateRequest,
    SaslError,
    SaslHandshakeRequest,
    ScramClient,
    plain_initial_response,
)

if TYPE_CHECKING:
    from trilog.net._security import ClientSecurity


class Requester(Protocol):
    """What a login needs of a connection (``BrokerConnection`` is one): its address, the
    versions the broker speaks, and a request."""

    host: str
    port: int
    api_versions: dict[int, tuple[int, int]]

    async def request(self, request: Any, *, version: int | None = None) -> Any: ...


async def authenticate(conn: Requester, security: ClientSecurity) -> None:
    """Log in on ``conn`` as ``security`` says; raise a ``SaslAuthenticationFailedError``
    (or ``UnsupportedSaslMechanismError``) when the broker refuses."""
    mechanism = security.sasl_mechanism
    assert mechanism is not None and security.username is not None
    where = f"{conn.host}:{conn.port}"
    if ApiKey.SASL_AUTHENTICATE not in conn.api_versions:
        raise IllegalSaslStateError(f"broker {where} does not speak SaslAuthenticate; it is "
                                    "not a SASL listener, or too old")
    response = await conn.request(SaslHandshakeRequest(mechanism=mechanism), version=1)
    if response.error_code == UnsupportedSaslMechanismError.code:
        raise UnsupportedSaslMechanismError(
            f"broker {where} does not accept {mechanism}; it accepts "
            f"{', '.join(response.mechanisms) or 'none'}")
    raise_for_code(response.error_code, f"SaslHandshake with {where} failed")

    async def exchange(token: bytes) -> bytes:
        answer = await conn.request(SaslAuthenticateRequest(auth_bytes=token))
        if answer.error_code != NO_ERROR:
            raise_for_code(answer.error_code, answer.error_message
                           or f"authentication with {where} failed")
        return bytes(answer.auth_bytes)

    password = security.password or ""
    if mechanism == "PLAIN":
        await exchange(plain_initial_response(security.username, password))
        return
    scram = ScramClient(mechanism, security.username, password)
    try:
        server_first = await exchange(scram.first_message())
        server_final = await exchange(scram.final_message(server_first))
        scram.verify(server_final)
    except SaslError as exc:
        raise SaslAuthenticationFailedError(f"{mechanism} with {where}: {exc}") from None
