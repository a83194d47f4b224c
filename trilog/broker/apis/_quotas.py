"""DescribeClientQuotas (48) and AlterClientQuotas (49), KIP-546, as Kafka answers them.

Describing needs DescribeConfigs on the cluster, altering AlterConfigs on the cluster
(CLUSTER_AUTHORIZATION_FAILED otherwise).  A bad filter (an unknown entity type, a type twice,
a name with a match type that takes none) is the whole answer's INVALID_REQUEST; each altered
entity gets its own error: an unknown entity type (Kafka's ``ip`` quotas are not
supported), an unknown quota key, a key twice, a value that is not positive, or a byte rate
that is not a whole number is INVALID_REQUEST naming it, and changes nothing of that entity.
An alteration sets or removes single quotas of the entity, keeping the others; with
``validate_only`` nothing is changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio

from trilog.broker.network import ApiHandler
from trilog.broker.quotas import (
    ClientQuotas,
    Entity,
    check_filter,
    check_value,
    describe_entity,
    make_entity,
    matches,
)
from trilog.broker.security import Access, AclOperation, ResourceType
from trilog.errors import ApiError, ClusterAuthorizationFailedError, InvalidRequestError
from trilog.protocol import (
    AlterClientQuotasResponse,
    ApiKey,
    DescribeClientQuotasResponse,
    RequestHeader,
)


class QuotaApis:
    """Serves the two quota APIs over the broker's ``ClientQuotas``."""

    def __init__(self, quotas: ClientQuotas, access: Access) -> None:
        self.quotas = quotas
        self.access = access

    def apis(self) -> Mapping[int, ApiHandler]:
        return {ApiKey.DESCRIBE_CLIENT_QUOTAS: self.describe_client_quotas,
                ApiKey.ALTER_CLIENT_QUOTAS: self.alter_client_quotas}

    async def describe_client_quotas(self, request: Any, header: RequestHeader) -> Any:
        await trio.lowlevel.checkpoint()
        R = DescribeClientQuotasResponse
        if not self.access(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
            return R(error_code=ClusterAuthorizationFailedError.code, entries=None,
                     error_message="not authorized to describe the client quotas "
                                   "(DescribeConfigs on the cluster)")
        components = [(c.entity_type, c.match_type, c.match) for c in request.components]
        try:
            check_filter(components)
        except InvalidRequestError as exc:
            return R(error_code=exc.code, error_message=str(exc), entries=None)
        entries = []
        for e, quotas in sorted(self.quotas.manager.entities().items(), key=_order):
            if matches(e, components, request.strict):
                entries.append(R.EntryData(
                    entity=[R.EntryData.EntityData(entity_type=k, entity_name=n) for k, n in e],
                    values=[R.EntryData.ValueData(key=k, value=v)
                            for k, v in sorted(quotas.items())]))
        return R(error_code=0, entries=entries)

    async def alter_client_quotas(self, request: Any, header: RequestHeader) -> Any:
        R = AlterClientQuotasResponse
        allowed = self.access(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER)
        results = []
        for entry in request.entries:
            error, message = 0, None
            try:
                if not allowed:
                    raise ClusterAuthorizationFailedError(
                        "not authorized to alter client quotas (AlterConfigs on the cluster)")
                await self._alter(entry, request.validate_only)
            except ApiError as exc:
                error, message = exc.code, str(exc)
            results.append(R.EntryData(error_code=error, error_message=message, entity=[
                R.EntryData.EntityData(entity_type=d.entity_type, entity_name=d.entity_name)
                for d in entry.entity]))
        await trio.lowlevel.checkpoint()
        return R(entries=results)

    async def _alter(self, entry: Any, validate_only: bool) -> None:
        e = make_entity((d.entity_type, d.entity_name) for d in entry.entity)
        quotas = self.quotas.manager.get(e)
        seen = set()
        for op in entry.ops:
            if op.key in seen:
                raise InvalidRequestError(f"quota {op.key!r} is altered twice for "
                                          f"{describe_entity(e)}")
            seen.add(op.key)
            if op.remove:
                check_value(op.key, 1.0)  # the key must be known
                quotas.pop(op.key, None)
            else:
                quotas[op.key] = check_value(op.key, op.value)
        if not validate_only:
            await self.quotas.alter(e, quotas)


def _order(item: tuple[Entity, Any]) -> tuple:
    """Entities in a stable order: by types, then names (the default first)."""
    return tuple((kind, name is not None, name or "") for kind, name in item[0])
