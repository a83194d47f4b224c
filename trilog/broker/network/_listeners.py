"""Listeners and their security: Kafka's ``listeners``, ``listener.security.protocol.map``,
``advertised.listeners`` and ``inter.broker.listener.name``, the broker's TLS context, and
the principal of a TLS client (``ssl.principal.mapping.rules``).

A listener is ``NAME://host:port``.  Its security protocol is the name's entry in
``listener.security.protocol.map`` (by default each of Kafka's four protocols maps to
itself, so ``SASL_SSL://:9094`` needs no map)::

    PLAINTEXT        nothing: anyone who reaches the port is ``User:ANONYMOUS``
    SSL              TLS; with ``ssl.client.auth=required`` the client's certificate names it
    SASL_PLAINTEXT   SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) before any other request
    SASL_SSL         TLS, then SASL

Pure functions and dataclasses, no I/O except reading the PEM files named by the config.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from trilog.net import ClientSecurity, client_ssl_context, parse_jaas_config
from trilog.errors import TrilogError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: Kafka's SecurityProtocol ids (UpdateMetadata's endpoints).
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
DEFAULT_PROTOCOL_MAP = {p: p for p in PROTOCOLS}
ANONYMOUS = "User:ANONYMOUS"


class ListenerError(TrilogError):
    """A listener setting is wrong (``ConfigError`` says which property)."""


@dataclass(frozen=True)
class Listener:
    """A place the broker listens (or, advertised, where clients are told to connect)."""

    name: str
    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_protocol_map(text: str | None) -> dict[str, str]:
    """``listener.security.protocol.map``: ``NAME:PROTOCOL,...`` (the default maps Kafka's
    four protocol names to themselves; entries given add to it)."""
    mapping = dict(DEFAULT_PROTOCOL_MAP)
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in PROTOCOLS:
            raise ListenerError(f"{item.strip()!r} is not NAME:PROTOCOL with PROTOCOL one of "
                                f"{', '.join(PROTOCOLS)}")
        mapping[name] = protocol
    return mapping


def parse_listeners(text: str, protocol_map: Mapping[str, str]) -> list[Listener]:
    """``NAME://host:port,...``; a bare ``host:port`` is PLAINTEXT (the old form).  An empty
    host means every interface."""
    listeners: list[Listener] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, address = item.partition("://")
        if not sep:
            name, address = "PLAINTEXT", item
        name = name.upper()
        if not re.fullmatch(r"[A-Z0-9_.-]+", name):
            raise ListenerError(f"listener {item!r}: {name!r} is not a listener name")
        protocol = protocol_map.get(name)
        if protocol is None:
            raise ListenerError(
                f"listener {item!r}: {name} has no security protocol; add {name}:<protocol> "
                f"to listener.security.protocol.map ({', '.join(PROTOCOLS)})")
        host, colon, port = address.rpartition(":")
        if not colon or not port.isdigit() or int(port) > 65535:
            raise ListenerError(f"listener {item!r} is not NAME://host:port")
        listeners.append(Listener(name, protocol, host.strip("[]"), int(port)))
    if not listeners:
        raise ListenerError("no listener given")
    names = [lst.name for lst in listeners]
    if len(set(names)) != len(names):
        raise ListenerError(f"listener names must be unique: {', '.join(names)}")
    ports = [lst.port for lst in listeners if lst.port]
    if len(set(ports)) != len(ports):
        raise ListenerError("two listeners share a port")
    return listeners


def inter_broker_listener(listeners: Iterable[Listener], name: str | None,
                          protocol: str | None) -> Listener:
    """The listener brokers use to talk to each other: ``inter.broker.listener.name``, or
    the one whose protocol is ``security.inter.broker.protocol``, or the first."""
    listeners = list(listeners)
    if name is not None:
        for listener in listeners:
            if listener.name == name.upper():
                return listener
        raise ListenerError(f"inter.broker.listener.name={name} is not one of the listeners "
                            f"({', '.join(lst.name for lst in listeners)})")
    if protocol is not None:
        matches = [lst for lst in listeners if lst.protocol == protocol.upper()]
        if len(matches) != 1:
            raise ListenerError(
                f"security.inter.broker.protocol={protocol} must name exactly one listener's "
                f"protocol (found {len(matches)}); set inter.broker.listener.name instead")
        return matches[0]
    return listeners[0]


# -- TLS -------------------------------------------------------------------------------------


def server_ssl_context(config: Mapping[str, Any]) -> ssl.SSLContext:
    """The TLS context of the broker's SSL and SASL_SSL listeners, from ``ssl.certfile``,
    ``ssl.keyfile`` (``ssl.key.password``), ``ssl.cafile`` (the CAs client certificates
    must chain to) and ``ssl.client.auth`` (``required``, ``requested`` or ``none``)."""
    certfile = config["ssl.certfile"]
    if not certfile:
        raise ListenerError("a TLS listener needs ssl.certfile (the broker's certificate, PEM; "
                            "ssl.keyfile if the key is in another file)")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile, config["ssl.keyfile"] or None,
                                password=config["ssl.key.password"] or None)
    except (OSError, ssl.SSLError) as exc:
        raise ListenerError(f"cannot load the broker's certificate from {certfile}: {exc}") \
            from None
    cafile = config["ssl.cafile"]
    if cafile:
        try:
            context.load_verify_locations(cafile)
        except (OSError, ssl.SSLError) as exc:
            raise ListenerError(f"cannot load ssl.cafile {cafile}: {exc}") from None
    auth = config["ssl.client.auth"]
    if auth != "none" and not cafile:
        raise ListenerError(f"ssl.client.auth={auth} needs ssl.cafile (the CA that signs "
                            "client certificates)")
    context.verify_mode = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL,
                           "none": ssl.CERT_NONE}[auth]
    return context


def parse_client_auth(text: str) -> str:
    value = text.strip().lower()
    if value not in ("required", "requested", "none"):
        raise ValueError("expected required, requested or none")
    return value


def inter_broker_security(config: Any) -> ClientSecurity:
    """How this broker connects to the others (replica fetches, the controller's requests,
    controlled shutdown): the inter-broker listener's protocol; TLS trusting ``ssl.cafile``
    and showing the broker's own certificate; SASL with
    ``sasl.mechanism.inter.broker.protocol`` and the login of ``sasl.jaas.config``."""
    listener = config.inter_broker_listener
    context = None
    if listener.tls:
        context = client_ssl_context(
            cafile=config["ssl.cafile"], certfile=config["ssl.certfile"],
            keyfile=config["ssl.keyfile"], password=config["ssl.key.password"],
            check_hostname=bool(config["ssl.endpoint.identification.algorithm"]))
    if not listener.sasl:
        return ClientSecurity(listener.protocol, context)
    jaas = config["sasl.jaas.config"]
    if not jaas:
        raise ListenerError(f"the inter-broker listener {listener.name} is {listener.protocol}: "
                            "set sasl.jaas.config to the broker's own login")
    login = parse_jaas_config(jaas)
    if "username" not in login or "password" not in login:
        raise ListenerError("sasl.jaas.config needs username=\"...\" and password=\"...\"")
    return ClientSecurity(listener.protocol, context,
                          config["sasl.mechanism.inter.broker.protocol"],
                          login["username"], login["password"])


# -- the principal of a TLS client -----------------------------------------------------------


def distinguished_name(cert: Mapping[str, Any]) -> str:
    """A certificate's subject as Java's ``X500Principal.getName()`` (RFC 2253) writes it,
    which is what Kafka's mapping rules see: the last RDN first, ``,`` between them."""
    short = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
             "countryName": "C", "stateOrProvinceName": "ST", "localityName": "L",
             "domainComponent": "DC", "streetAddress": "STREET", "userId": "UID"}
    rdns = []
    for rdn in cert.get("subject", ()):
        rdns.append("+".join(f"{short.get(key, key)}={_escape_dn(value)}" for key, value in rdn))
    return ",".join(reversed(rdns))


def _escape_dn(value: str) -> str:
    out = re.sub(r'([,+"\\<>;=])', r"\\\1", value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out


_RULE = re.compile(r"RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?)")


@dataclass(frozen=True)
class PrincipalRules:
    """``ssl.principal.mapping.rules``: ``RULE:pattern/replacement/[LU]`` entries tried in
    order (the first whose pattern matches the whole name wins; ``L``/``U`` lower- or
    upper-case the result) and ``DEFAULT`` (the name unchanged), as Kafka's
    ``SslPrincipalMapper``.  ``$1`` in a replacement is the first group."""

    text: str = "DEFAULT"
    rules: tuple[tuple[re.Pattern[str], str, str] | None, ...] = (None,)

    def __str__(self) -> str:
        return self.text

    @classmethod
    def parse(cls, text: str) -> "PrincipalRules":
        rules: list[tuple[re.Pattern[str], str, str] | None] = []
        rest = text.strip()
        while rest:
            if rest.startswith("DEFAULT"):
                rules.append(None)
                rest = rest[len("DEFAULT"):]
            else:
                match = _RULE.match(rest)
                if match is None:
                    raise ValueError(f"cannot read a rule at {rest[:40]!r} (expected "
                                     "RULE:pattern/replacement/[LU] or DEFAULT)")
                pattern, replacement, case = (g.replace("\\/", "/") for g in match.groups())
                try:
                    rules.append((re.compile(pattern), replacement, case))
                except re.error as exc:
                    raise ValueError(f"rule pattern {pattern!r}: {exc}") from None
                rest = rest[match.end():]
            rest = rest.lstrip()
            if rest.startswith(","):
                rest = rest[1:].lstrip()
            elif rest:
                raise ValueError(f"expected ',' before {rest[:40]!r}")
        return cls(text.strip() or "DEFAULT", tuple(rules) or (None,))

    def map(self, name: str) -> str | None:
        """The short name of ``name``, or None when no rule applies."""
        for rule in self.rules:
            if rule is None:
                return name
            pattern, replacement, case = rule
            match = pattern.fullmatch(name)
            if match is None:
                continue
            result = re.sub(r"\$(\d)", lambda m: match.group(int(m.group(1))) or "",
                            replacement)
            return result.lower() if case == "L" else result.upper() if case == "U" else result
        return None


def tls_principal(cert: Mapping[str, Any] | None, rules: PrincipalRules) -> str:
    """``User:<name>`` of a client certificate (ANONYMOUS without one)."""
    if not cert:
        return ANONYMOUS
    name = rules.map(distinguished_name(cert))
    if name is None:
        raise ListenerError("no ssl.principal.mapping.rules entry matches the client "
                            f"certificate {distinguished_name(cert)!r}")
    return f"User:{name}"
