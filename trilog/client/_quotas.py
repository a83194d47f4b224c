"""Client quotas through the admin: DescribeClientQuotas and AlterClientQuotas (KIP-546).

An entity is what a quota is set on, as Kafka's ``ClientQuotaEntity``: a tuple of
``(entity type, name)`` pairs, types ``"user"`` and ``"client-id"`` (in that order), a name
None for the ``<default>`` entity; ``quota_entity(user="alice", default_client=True)`` makes
``(("user", "alice"), ("client-id", None))``.  Quotas are ``producer_byte_rate``,
``consumer_byte_rate`` (bytes per second) and ``request_percentage``.

A ``QuotaFilter`` selects entities to describe: ``QuotaFilter.exact("user", "alice")``,
``QuotaFilter.default("client-id")``, ``QuotaFilter.any("user")`` (any user entity, the
default user's included).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from trilog.errors import error_for_code
from trilog.net import BrokerConnection
from trilog.protocol import AlterClientQuotasRequest, DescribeClientQuotasRequest

USER, CLIENT_ID = "user", "client-id"
QUOTA_KEYS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
_ORDER = {USER: 0, CLIENT_ID: 1}
_MATCH_TYPES = {"exact": 0, "default": 1, "any": 2}

#: ``((entity type, name or None for <default>), ...)``
QuotaEntity = tuple[tuple[str, "str | None"], ...]


def quota_entity(user: str | None = None, client_id: str | None = None, *,
                 default_user: bool = False, default_client: bool = False) -> QuotaEntity:
    """An entity: a user, a client id or both, each a name or (``default_*``) ``<default>``."""
    parts: list[tuple[str, str | None]] = []
    if user is not None or default_user:
        parts.append((USER, None if default_user else user))
    if client_id is not None or default_client:
        parts.append((CLIENT_ID, None if default_client else client_id))
    if not parts:
        raise ValueError("a quota entity needs a user, a client id or both")
    return tuple(parts)


def entity_text(entity: QuotaEntity) -> str:
    """``user 'alice', client-id <default>`` (how the tools print an entity)."""
    return ", ".join(f"{k} {'<default>' if n is None else repr(n)}" for k, n in entity)


@dataclass(frozen=True)
class QuotaFilter:
    """One component of a describe filter (see the module docstring)."""

    entity_type: str
    match: str = "any"  # "exact", "default" or "any"
    name: str | None = None

    @classmethod
    def exact(cls, entity_type: str, name: str) -> QuotaFilter:
        return cls(entity_type, "exact", name)

    @classmethod
    def default(cls, entity_type: str) -> QuotaFilter:
        return cls(entity_type, "default")

    @classmethod
    def any(cls, entity_type: str) -> QuotaFilter:
        return cls(entity_type, "any")


async def describe_client_quotas(conn: BrokerConnection, filters: Iterable[QuotaFilter],
                                 strict: bool) -> dict[QuotaEntity, dict[str, float]]:
    R = DescribeClientQuotasRequest
    components = []
    for f in filters:
        if f.match not in _MATCH_TYPES:
            raise ValueError(f"a filter's match is exact, default or any, not {f.match!r}")
        components.append(R.ComponentData(entity_type=f.entity_type,
                                          match_type=_MATCH_TYPES[f.match], match=f.name))
    response = await conn.request(R(components=components, strict=strict))
    if response.error_code:
        err = error_for_code(response.error_code)
        raise type(err)(f"cannot describe the client quotas: "
                        f"{response.error_message or err.description}")
    found: dict[QuotaEntity, dict[str, float]] = {}
    for entry in response.entries or ():
        entity = tuple(sorted(((d.entity_type, d.entity_name) for d in entry.entity),
                              key=lambda p: _ORDER.get(p[0], 9)))
        found[entity] = {v.key: v.value for v in entry.values}
    return found


async def alter_client_quotas(conn: BrokerConnection, entity: QuotaEntity,
                              changes: Mapping[str, float | None], validate_only: bool) -> None:
    R = AlterClientQuotasRequest
    E = R.EntryData
    response = await conn.request(R(entries=[E(
        entity=[E.EntityData(entity_type=k, entity_name=n) for k, n in entity],
        ops=[E.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None)
             for k, v in changes.items()])], validate_only=validate_only))
    for result in response.entries:
        if result.error_code:
            err = error_for_code(result.error_code)
            raise type(err)(f"cannot alter the quotas of {entity_text(entity)}: "
                            f"{result.error_message or err.description}")
