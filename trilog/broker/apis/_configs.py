"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44), as Kafka answers
them.

Resources: a topic (type 2; its overrides over the broker's defaults, see
``_topic_configs.py``) or a broker (type 4, named by its id; the broker's properties, which
are static: they are described, and an alteration is refused with ``INVALID_REQUEST``).
Each resource gets its own error code; a request that decodes is always answered.

AlterConfigs replaces a topic's whole set of overrides (what it does not name goes back to
the default); IncrementalAlterConfigs sets, deletes, appends to or subtracts from single
settings.  Both validate everything first (``INVALID_CONFIG`` names what is wrong) and
change nothing with ``validate_only``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import trio

from trilog.broker.cluster._cluster import Cluster
from trilog.broker.configs._broker_config import BrokerConfig
from trilog.broker.configs._topic_properties import (
    TOPIC_PROPERTIES_BY_NAME,
    TYPE_LIST,
    ConfigEntry,
    TopicConfig,
    describe_broker,
    describe_topic,
    effective_value,
    validate_overrides,
)
from trilog.broker.network import ApiHandler
from trilog.broker.security import Access, AclOperation, ResourceType
from trilog.errors import (
    ClusterAuthorizationFailedError,
    TopicAuthorizationFailedError,
    ApiError,
    InvalidConfigError,
    InvalidRequestError,
    UnknownTopicOrPartitionError,
)
from trilog.protocol import (
    AlterConfigsResponse,
    ApiKey,
    DescribeConfigsResponse,
    IncrementalAlterConfigsResponse,
    Message,
    RequestHeader,
)

log = logging.getLogger("trilog.broker.configs")

TOPIC, BROKER = 2, 4  # Kafka's ConfigResource.Type
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs' operations


class ConfigApis:
    """The three config APIs over a cluster's ``topic_configs``; ``register`` them."""

    def __init__(self, config: BrokerConfig, cluster: Cluster, access: Access) -> None:
        self.config = config
        self.cluster = cluster
        self.access = access

    def apis(self) -> Mapping[int, ApiHandler]:
        return {ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
                ApiKey.ALTER_CONFIGS: self.alter_configs,
                ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs}

    # -- DescribeConfigs ---------------------------------------------------------------------

    async def describe_configs(self, request: Message, header: RequestHeader) -> Message:
        await trio.lowlevel.checkpoint()
        R = DescribeConfigsResponse
        results = []
        for resource in request.resources:
            try:
                entries = self._describe(resource.resource_type, resource.resource_name,
                                         resource.configuration_keys)
                error, message = 0, None
            except ApiError as exc:
                entries, error, message = [], exc.code, str(exc)
            synonyms = header.api_version >= 1 and bool(request.include_synonyms)
            documentation = header.api_version >= 3 and bool(request.include_documentation)
            results.append(R.DescribeConfigsResult(
                error_code=error, error_message=message, resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=[_described(e, synonyms, documentation) for e in entries]))
        return R(throttle_time_ms=0, results=results)

    def _authorize(self, kind: int, name: str, operation: AclOperation) -> None:
        """DescribeConfigs/AlterConfigs on the topic, or on the cluster for a broker."""
        if kind == TOPIC and not self.access(operation, ResourceType.TOPIC, name):
            raise TopicAuthorizationFailedError(f"not authorized to {operation.title} {name}")
        if kind == BROKER and not self.access(operation, ResourceType.CLUSTER):
            raise ClusterAuthorizationFailedError(f"not authorized to {operation.title}")

    def _describe(self, kind: int, name: str, keys: list[str] | None) -> list[ConfigEntry]:
        self._authorize(kind, name, AclOperation.DESCRIBE_CONFIGS)
        if kind == TOPIC:
            self._check_topic(name)
            configs = self.cluster.topic_configs
            return describe_topic(configs.config_for(name), configs.overrides(name),
                                  self.config, keys)
        if kind == BROKER:
            self._check_broker(name)
            return describe_broker(self.config, keys)
        raise InvalidRequestError(f"config resources of type {kind} are not supported")

    def _check_topic(self, name: str) -> None:
        if self.cluster.partitions(name) is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")

    def _check_broker(self, name: str) -> None:
        if name not in ("", str(self.config.broker_id)):
            raise InvalidRequestError(
                f"this is broker {self.config.broker_id}; ask broker {name} for its configs")

    # -- AlterConfigs / IncrementalAlterConfigs ----------------------------------------------

    async def alter_configs(self, request: Message, header: RequestHeader) -> Message:
        R = AlterConfigsResponse
        responses = []
        for resource in request.resources:
            error, message = await self._alter(
                resource.resource_type, resource.resource_name, request.validate_only,
                lambda _current, r=resource: {c.name: c.value for c in r.configs})
            responses.append(R.AlterConfigsResourceResponse(
                error_code=error, error_message=message,
                resource_type=resource.resource_type, resource_name=resource.resource_name))
        return R(throttle_time_ms=0, responses=responses)

    async def incremental_alter_configs(self, request: Message, header: RequestHeader
                                        ) -> Message:
        R = IncrementalAlterConfigsResponse
        responses = []
        for resource in request.resources:
            error, message = await self._alter(
                resource.resource_type, resource.resource_name, request.validate_only,
                lambda current, r=resource: _incremental(
                    current, r.configs, self.cluster.topic_configs.config_for(r.resource_name)))
            responses.append(R.AlterConfigsResourceResponse(
                error_code=error, error_message=message,
                resource_type=resource.resource_type, resource_name=resource.resource_name))
        return R(throttle_time_ms=0, responses=responses)

    async def _alter(self, kind: int, name: str, validate_only: bool,
                     new_overrides: Any) -> tuple[int, str | None]:
        """Apply ``new_overrides(current) -> overrides`` to a topic; ``(error, message)``."""
        try:
            self._authorize(kind, name, AclOperation.ALTER_CONFIGS)
            if kind == BROKER:
                self._check_broker(name)
                raise InvalidRequestError(
                    "broker configs are static here: set them in server.properties (or with "
                    "--override) and restart the broker")
            if kind != TOPIC:
                raise InvalidRequestError(f"config resources of type {kind} are not supported")
            self._check_topic(name)
            configs = self.cluster.topic_configs
            overrides = validate_overrides(new_overrides(configs.overrides(name)))
            if not validate_only:
                await configs.set(name, overrides)
                log.info("topic %s config now %s", name, overrides or "the defaults")
            else:
                await trio.lowlevel.checkpoint()
            return 0, None
        except ApiError as exc:
            await trio.lowlevel.checkpoint()
            return exc.code, str(exc)


def _incremental(current: dict[str, str], changes: list[Any], effective: TopicConfig
                 ) -> dict[str, str | None]:
    """The overrides after IncrementalAlterConfigs' ``changes`` (Kafka's rules: one change
    per name; APPEND/SUBTRACT only for list settings, starting from the value in force)."""
    names = [c.name for c in changes]
    if len(set(names)) != len(names):
        raise InvalidRequestError("a config name appears more than once in one resource")
    result: dict[str, str | None] = dict(current)
    for change in changes:
        prop = TOPIC_PROPERTIES_BY_NAME.get(change.name)
        op = change.config_operation
        if op == SET:
            result[change.name] = change.value
        elif op == DELETE:
            result.pop(change.name, None)
        elif op in (APPEND, SUBTRACT):
            if prop is None or prop.config_type != TYPE_LIST:
                raise InvalidConfigError(f"{change.name} is not a list: it cannot be appended "
                                         "to or subtracted from")
            start = result.get(change.name) or effective_value(effective, change.name)
            have = [v for v in start.split(",") if v]
            items = [v.strip() for v in (change.value or "").split(",") if v.strip()]
            if op == APPEND:
                have += [v for v in items if v not in have]
            else:
                have = [v for v in have if v not in items]
            result[change.name] = ",".join(have) if have else None
        else:
            raise InvalidRequestError(f"unknown config operation {op}")
    return result


def _described(entry: ConfigEntry, synonyms: bool, documentation: bool) -> Any:
    R = DescribeConfigsResponse.DescribeConfigsResult
    C = R.DescribeConfigsResourceResult
    return C(
        name=entry.name, value=entry.value, read_only=entry.read_only,
        config_source=entry.source, is_default=entry.is_default,
        is_sensitive=entry.is_sensitive,
        synonyms=[C.DescribeConfigsSynonym(name=n, value=v, source=s)
                  for n, v, s in entry.synonyms] if synonyms else [],
        config_type=entry.config_type,
        documentation=entry.documentation if documentation else None,
    )
