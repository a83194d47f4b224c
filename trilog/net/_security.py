"""How a client connection is secured: TLS and SASL, with kafka-python's option names.

``ClientSecurity.from_options(security_protocol="SASL_SSL", ssl_cafile="ca.pem",
sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="alice", sasl_plain_password="...")``
is what ``open_producer``, ``open_consumer``, ``open_admin`` and ``trilog.sync`` take as
keyword arguments; ``ClientSecurity.from_properties`` reads Kafka's client property names
(``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config``, librdkafka's
``sasl.username``/``sasl.password`` and ``ssl.ca.location``...) for the command-line tools'
``--command-config`` and for Spark's ``kafka.*`` options.

The connection (``_connection.py``) wraps its socket in TLS when ``tls`` is true, and after
ApiVersions runs the SASL exchange of ``sasl_mechanism`` (SaslHandshake v1, then
SaslAuthenticate requests carrying the mechanism's tokens).
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from typing import Mapping, TypedDict

from trilog.errors import TrilogError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SecurityConfigError(TrilogError, ValueError):
    """Security options that do not fit together; the message says which and why."""


@dataclass(frozen=True)
class ClientSecurity:
    """A connection's security: the protocol, the TLS context (TLS protocols) and the SASL
    login (SASL protocols).  ``ClientSecurity()`` is PLAINTEXT."""

    protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = None

    def __repr__(self) -> str:
        login = f", {self.sasl_mechanism} as {self.username!r}" if self.sasl else ""
        return f"ClientSecurity({self.protocol}{login})"

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @classmethod
    def from_options(
        cls,
        security_protocol: str = "PLAINTEXT",
        *,
        ssl_context: ssl.SSLContext | None = None,
        ssl_cafile: str | None = None,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        ssl_password: str | None = None,
        ssl_check_hostname: bool = True,
        sasl_mechanism: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
    ) -> "ClientSecurity":
        """kafka-python's names.  ``ssl_context`` wins over the ``ssl_*`` files; without
        either, TLS trusts the system's CAs.  ``sasl_mechanism`` defaults to PLAIN."""
        protocol = str(security_protocol).upper()
        if protocol not in PROTOCOLS:
            raise SecurityConfigError(f"security_protocol={security_protocol!r} is not one of "
                                      f"{', '.join(PROTOCOLS)}")
        context = None
        if protocol in ("SSL", "SASL_SSL"):
            context = ssl_context or client_ssl_context(
                cafile=ssl_cafile, certfile=ssl_certfile, keyfile=ssl_keyfile,
                password=ssl_password, check_hostname=ssl_check_hostname)
        elif ssl_context is not None or ssl_cafile or ssl_certfile:
            raise SecurityConfigError(f"TLS options given with security_protocol={protocol}; "
                                      "use SSL or SASL_SSL")
        mechanism = None
        if protocol.startswith("SASL_"):
            mechanism = (sasl_mechanism or "PLAIN").upper()
            if mechanism not in MECHANISMS:
                raise SecurityConfigError(f"sasl_mechanism={sasl_mechanism!r} is not one of "
                                          f"{', '.join(MECHANISMS)}")
            if not sasl_plain_username or sasl_plain_password is None:
                raise SecurityConfigError(f"{protocol} with {mechanism} needs "
                                          "sasl_plain_username and sasl_plain_password")
        elif sasl_mechanism or sasl_plain_username:
            raise SecurityConfigError(f"SASL options given with security_protocol={protocol}; "
                                      "use SASL_PLAINTEXT or SASL_SSL")
        return cls(protocol, context, mechanism,
                   sasl_plain_username if mechanism else None,
                   sasl_plain_password if mechanism else None)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> "ClientSecurity":
        """Kafka's client property names (Java's and librdkafka's): ``security.protocol``,
        ``sasl.mechanism`` (or ``sasl.mechanisms``), ``sasl.jaas.config`` or
        ``sasl.username``/``sasl.password``, and PEM files in ``ssl.ca.location`` (or
        ``ssl.cafile``, or ``ssl.truststore.location`` when it is PEM),
        ``ssl.certificate.location``, ``ssl.key.location``, ``ssl.key.password``,
        ``ssl.endpoint.identification.algorithm`` (empty or ``none``: no host name check).
        Other keys are left to the caller."""
        def get(*names: str) -> str | None:
            for name in names:
                if props.get(name) not in (None, ""):
                    return str(props[name]).strip()
            return None

        username, password = get("sasl.username"), get("sasl.password")
        jaas = get("sasl.jaas.config")
        if jaas is not None:
            login = parse_jaas_config(jaas)
            username, password = login.get("username", username), login.get("password", password)
        check = get("ssl.endpoint.identification.algorithm")
        return cls.from_options(
            get("security.protocol") or "PLAINTEXT",
            ssl_cafile=get("ssl.ca.location", "ssl.cafile", "ssl.truststore.location"),
            ssl_certfile=get("ssl.certificate.location", "ssl.certfile",
                             "ssl.keystore.location"),
            ssl_keyfile=get("ssl.key.location", "ssl.keyfile"),
            ssl_password=get("ssl.key.password"),
            ssl_check_hostname=(check or "https").lower() not in ("none", ""),
            sasl_mechanism=get("sasl.mechanism", "sasl.mechanisms"),
            sasl_plain_username=username,
            sasl_plain_password=password,
        )


class SecurityOptions(TypedDict, total=False):
    """The security keywords every ``open_*`` takes (kafka-python's names; see
    ``ClientSecurity.from_options``).  ``security`` passes a ready ``ClientSecurity``."""

    security: ClientSecurity | None
    security_protocol: str
    ssl_context: ssl.SSLContext | None
    ssl_cafile: str | None
    ssl_certfile: str | None
    ssl_keyfile: str | None
    ssl_password: str | None
    ssl_check_hostname: bool
    sasl_mechanism: str | None
    sasl_plain_username: str | None
    sasl_plain_password: str | None


def client_security(options: SecurityOptions) -> ClientSecurity:
    """The ``ClientSecurity`` that an ``open_*``'s security keywords describe."""
    given = dict(options)
    ready = given.pop("security", None)
    if isinstance(ready, ClientSecurity):
        if given:
            raise SecurityConfigError(f"give security= or {', '.join(sorted(given))}, "
                                      "not both")
        return ready
    return ClientSecurity.from_options(**given)  # type: ignore[arg-type]


def client_ssl_context(*, cafile: str | None = None, certfile: str | None = None,
                       keyfile: str | None = None, password: str | None = None,
                       check_hostname: bool = True) -> ssl.SSLContext:
    """A TLS client context: the CAs of ``cafile`` (else the system's), a client
    certificate for mutual TLS (``certfile``, ``keyfile``), host name checking."""
    try:
        context = ssl.create_default_context(cafile=cafile)
        if certfile:
            context.load_cert_chain(certfile, keyfile or None, password=password or None)
    except (OSError, ssl.SSLError) as exc:
        raise SecurityConfigError(f"cannot load the TLS files ({cafile or 'system CAs'}, "
                                  f"{certfile or 'no client certificate'}): {exc}") from None
    context.check_hostname = check_hostname
    return context


_JAAS = re.compile(
    r"""^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)\s*
        (?P<options>(?:[\w.-]+\s*=\s*(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s;"']+)\s*)*);?\s*$""",
    re.X)
_OPTION = re.compile(r"""([\w.-]+)\s*=\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s;"']+)""")


def parse_jaas_config(text: str) -> dict[str, str]:
    """The options of a one-module ``sasl.jaas.config``, as Kafka's clients read it::

        org.apache.kafka.common.security.scram.ScramLoginModule required
            username="alice" password="alice-secret";
    """
    match = _JAAS.match(text)
    if match is None:
        raise SecurityConfigError(
            "sasl.jaas.config is not '<LoginModule> required username=\"...\" "
            "password=\"...\";'")
    options = {}
    for key, value in _OPTION.findall(match.group("options")):
        if value[:1] in "\"'":
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        options[key] = value
    return options
