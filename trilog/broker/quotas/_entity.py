"""Quota entities and values: what a quota is set on, what it may say, and how it is named.

An entity is a user, a client id, or a user and a client id together, each part a name or
``<default>`` (Kafka's ``ClientQuotaEntity``).  Here an entity is a tuple of ``(type, name)``
pairs, types in the order ``user``, ``client-id``, a name None for the default:
``(("user", "alice"), ("client-id", None))`` is ``/config/users/alice/clients/<default>``.

Stores name an entity by its ``entity_path``, Kafka's ZooKeeper path below ``/config``
(``users/alice/clients/%3Cdefault%3E``-style names are Kafka's ``Sanitizer``: URL-encoded, so
that a name never looks like ``<default>`` or holds a ``/``).

Values (KIP-13, KIP-124): ``producer_byte_rate`` and ``consumer_byte_rate`` (bytes per
second, whole numbers), ``request_percentage`` (percent of one request handler's time per
quota window); all positive.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from urllib.parse import quote, unquote

from trilog.errors import InvalidRequestError

USER = "user"
CLIENT_ID = "client-id"
DEFAULT = "<default>"
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
#: Quotas counted in whole bytes (Kafka's LONG-typed quota configs).
_WHOLE = frozenset({PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE})
_ORDER = {USER: 0, CLIENT_ID: 1}

#: ``((type, name or None for <default>), ...)``, types in the order user, client-id.
Entity = tuple[tuple[str, "str | None"], ...]
Quotas = dict[str, float]


def entity(user: str | None = None, client_id: str | None = None, *,
           default_user: bool = False, default_client: bool = False) -> Entity:
    """An entity from its parts (``default_*``: that part is ``<default>``)."""
    parts: list[tuple[str, str | None]] = []
    if user is not None or default_user:
        parts.append((USER, None if default_user else user))
    if client_id is not None or default_client:
        parts.append((CLIENT_ID, None if default_client else client_id))
    return tuple(parts)


def make_entity(parts: Iterable[tuple[str, str | None]]) -> Entity:
    """An entity from the wire's ``(entity_type, entity_name)`` pairs; ``InvalidRequestError``
    for an unknown type (Kafka's ``ip`` quotas are not supported), a type twice, or none."""
    seen: dict[str, str | None] = {}
    for kind, name in parts:
        if kind not in _ORDER:
            raise InvalidRequestError(f"unknown quota entity type {kind!r} (this broker "
                                      f"knows {USER!r} and {CLIENT_ID!r})")
        if kind in seen:
            raise InvalidRequestError(f"quota entity type {kind!r} is given twice")
        if name == "":
            raise InvalidRequestError(f"an empty {kind} name (the default is a null name)")
        seen[kind] = name
    if not seen:
        raise InvalidRequestError("a quota entity needs a user, a client id or both")
    return tuple(sorted(seen.items(), key=lambda p: _ORDER[p[0]]))


def sanitize(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: URL-encoding, ``*`` and ``~`` encoded, space as %20."""
    return quote(name, safe="").replace("~", "%7E")


def entity_path(e: Entity) -> str:
    """The entity's path below ``/config``: ``users/alice/clients/app``, ``clients/<default>``."""
    segments = []
    for kind, name in e:
        segments.append("users" if kind == USER else "clients")
        segments.append(DEFAULT if name is None else sanitize(name))
    return "/".join(segments)


def parse_entity_path(path: str) -> Entity | None:
    """The entity a path below ``/config`` names (``entity_path``'s inverse); None for a
    path that names no quota entity (``topics/x``)."""
    segments = path.strip("/").split("/")
    if len(segments) not in (2, 4) or any(not s for s in segments):
        return None
    kinds = {"users": USER, "clients": CLIENT_ID}
    pairs = []
    for i in range(0, len(segments), 2):
        kind = kinds.get(segments[i])
        if kind is None:
            return None
        name = segments[i + 1]
        pairs.append((kind, None if name == DEFAULT else unquote(name)))
    if len(pairs) == 2 and [k for k, _ in pairs] != [USER, CLIENT_ID]:
        return None
    return tuple(pairs)


def describe_entity(e: Entity) -> str:
    """How an entity reads in messages: ``user alice, client-id <default>``."""
    return ", ".join(f"{kind} {DEFAULT if name is None else repr(name)}" for kind, name in e)


def check_value(key: str, value: float) -> float:
    """``value`` for quota ``key``, checked (``InvalidRequestError``)."""
    if key not in QUOTA_KEYS:
        raise InvalidRequestError(f"unknown quota {key!r} (the quotas are "
                                  f"{', '.join(QUOTA_KEYS)})")
    if not value > 0 or value == float("inf"):
        raise InvalidRequestError(f"{key} must be a positive number, not {value!r}")
    if key in _WHOLE and value != int(value):
        raise InvalidRequestError(f"{key} is a whole number of bytes per second, not {value!r}")
    return float(value)


def value_text(value: float) -> str:
    """A quota value as stored (Kafka's properties): ``1048576``, ``12.5``."""
    return str(int(value)) if value == int(value) else repr(value)


def parse_values(what: str, config: Mapping[str, str]) -> Quotas:
    """The quotas in a stored config (other keys, such as SCRAM credentials, are skipped);
    ``InvalidRequestError`` naming ``what`` for a value that is not a valid quota."""
    out: Quotas = {}
    for key, text in config.items():
        if key not in QUOTA_KEYS:
            continue
        try:
            out[key] = check_value(key, float(text))
        except (ValueError, InvalidRequestError) as exc:
            raise InvalidRequestError(f"{what}: {key}={text!r}: {exc}") from None
    return out


def matches(e: Entity, components: list[tuple[str, int, str | None]], strict: bool) -> bool:
    """DescribeClientQuotas' filter: each component ``(type, match_type, match)`` with
    match_type 0 (exactly ``match``; None: the default), 1 (the default) or 2 (any entity of
    that type, the default included, as ``kafka-configs --describe --entity-type users``
    lists the default user too) must hold of ``e``; ``strict``: ``e`` has no other types."""
    names = dict(e)
    for kind, match_type, match in components:
        if kind not in names:
            return False
        name = names[kind]
        if match_type == 0 and name != match:
            return False
        if match_type == 1 and name is not None:
            return False
    return not strict or len(names) == len(components)


def check_filter(components: list[tuple[str, int, str | None]]) -> None:
    """``InvalidRequestError`` for a filter Kafka refuses."""
    seen = set()
    for kind, match_type, match in components:
        if kind not in _ORDER:
            raise InvalidRequestError(f"unknown quota entity type {kind!r}")
        if kind in seen:
            raise InvalidRequestError(f"entity type {kind!r} is filtered twice")
        seen.add(kind)
        if match_type not in (0, 1, 2):
            raise InvalidRequestError(f"unknown match type {match_type}")
        if match_type in (1, 2) and match is not None:
            raise InvalidRequestError(f"match type {match_type} takes no name")
