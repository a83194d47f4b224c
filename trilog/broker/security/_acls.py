"""Where ACLs live, how every broker comes to apply a change, and the ACL APIs
(CreateAcls 30, DescribeAcls 29, DeleteAcls 31).

- ZooKeeper (Kafka's layout, ``trilog.zk``): literal patterns in
  ``/kafka-acl/<ResourceType>/<name>``, prefixed ones in
  ``/kafka-acl-extended/prefixed/<ResourceType>/<name>``, each node
  ``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",
  "operation":"Read","host":"*"}]}``.  A change also writes a sequential node under
  ``/kafka-acl-changes`` (literal) or ``/kafka-acl-extended-changes`` (prefixed); every
  broker watches both and reads the ACLs again.
- Standalone: ``acls.json`` in the first log dir, replaced atomically (a ``JsonFileStore``:
  a file that cannot be read stops the broker at start, naming it).

``AclManager`` holds one broker's ``Authorizer`` and keeps it current.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextlib import aclosing
from typing import Any, Protocol

import trio

from trilog.broker._json_store import JsonFileStore
from trilog.broker.security._authorizer import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from trilog.broker.network._network import current_session
from trilog.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    InvalidRequestError,
    RemoteProtocolError,
    SecurityDisabledError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from trilog.protocol import (
    ApiKey,
    CreateAclsResponse,
    DeleteAclsResponse,
    DescribeAclsResponse,
    response_class,
)
from trilog.zk import (
    ACL_CHANGE_ROOTS,
    NoNodeError,
    ZooKeeper,
    ZooKeeperError,
    acl_change_root,
    acl_path,
    acl_roots,
    decode_acl_node,
    encode_acl_change,
    encode_acl_node,
)

log = logging.getLogger("trilog.broker.acls")

STANDALONE_FILE = "acls.json"
RETRY_S = 1.0
#: Change notifications left behind by a writer (Kafka purges them by age instead).
KEEP_NOTIFICATIONS = 100

Acls = dict[ResourcePattern, frozenset[AccessControlEntry]]


def _entry_json(e: AccessControlEntry) -> dict[str, str]:
    return {"principal": e.principal, "permissionType": e.permission_type.title,
            "operation": e.operation.title, "host": e.host}


def _entry_of(item: Any, what: str) -> AccessControlEntry:
    try:
        return AccessControlEntry(str(item["principal"]), str(item["host"]),
                                  AclOperation.parse(item["operation"]),
                                  AclPermissionType.parse(item["permissionType"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise RemoteProtocolError(f"{what}: malformed ACL {item!r} ({exc})") from None


class AclStore(Protocol):
    async def load_all(self) -> Acls: ...

    async def write(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry]
                    ) -> None: ...


class FileAclStore:
    """A standalone broker's ACLs: one JSON file, rewritten atomically on each change
    (``{"version":1,"acls":[{"resourceType", "name", "patternType", "entries"}, ...]}``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file = JsonFileStore(path, "acls", kind=list)
        self._all: Acls = {}

    async def load_all(self) -> Acls:
        self._all = await trio.to_thread.run_sync(self._read)
        return dict(self._all)

    def _read(self) -> Acls:
        acls: Acls = {}
        for item in self._file.read():
            try:
                pattern = ResourcePattern(ResourceType.parse(item["resourceType"]),
                                          str(item["name"]),
                                          PatternType.parse(item["patternType"]))
                acls[pattern] = frozenset(_entry_of(e, self.path)
                                          for e in item.get("entries", []))
            except (KeyError, TypeError, ValueError, AttributeError,
                    RemoteProtocolError) as exc:
                raise self._file.error(f"has a malformed ACL {item!r} ({exc})") from None
        return acls

    async def write(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry]
                    ) -> None:
        acls = {**self._all, pattern: entries}
        if not entries:
            del acls[pattern]
        section = [{"resourceType": p.resource_type.title, "name": p.name,
                    "patternType": p.pattern_type.name,
                    "entries": [_entry_json(e) for e in sorted(es)]}
                   for p, es in sorted(acls.items())]
        await trio.to_thread.run_sync(self._file.write, section)
        self._all = acls


class ZooKeeperAclStore:
    """A cluster's ACLs in Kafka's ZooKeeper layout (see the module docstring)."""

    def __init__(self, zk: ZooKeeper) -> None:
        self.zk = zk

    async def load_all(self) -> Acls:
        acls: Acls = {}
        for pattern_type, root in acl_roots().items():
            try:
                types = await self.zk.get_children(root)
            except NoNodeError:
                continue
            for type_name in types:
                try:
                    resource_type = ResourceType.parse(type_name)
                except ValueError:
                    continue
                try:
                    names = await self.zk.get_children(f"{root}/{type_name}")
                except NoNodeError:
                    continue
                for name in names:
                    pattern = ResourcePattern(resource_type, name, PatternType[pattern_type])
                    try:
                        data = await self.zk.get(acl_path(pattern_type, type_name, name))
                    except NoNodeError:
                        continue
                    entries = frozenset(_entry_of(e, str(pattern))
                                        for e in decode_acl_node(str(pattern), data))
                    if entries:
                        acls[pattern] = entries
        return acls

    async def write(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry]
                    ) -> None:
        kind, type_name = pattern.pattern_type.name, pattern.resource_type.title
        path = acl_path(kind, type_name, pattern.name)
        if entries:
            await self.zk.put(path, encode_acl_node([_entry_json(e) for e in sorted(entries)]))
        else:
            try:
                await self.zk.delete(path)
            except NoNodeError:
                pass
        root = acl_change_root(kind)
        await self.zk.ensure_path(root)
        await self.zk.create(f"{root}/acl_changes_",
                             encode_acl_change(kind, type_name, pattern.name), sequence=True)
        # Every broker reads all ACLs on any change: old notifications serve nobody.
        for old in sorted(await self.zk.get_children(root))[:-KEEP_NOTIFICATIONS]:
            try:
                await self.zk.delete(f"{root}/{old}")
            except NoNodeError:
                pass

    async def follow_changes(self, on_change) -> None:
        """Call ``on_change()`` whenever a change node appears (under either root)."""
        async with trio.open_nursery() as nursery:
            for root in ACL_CHANGE_ROOTS:
                nursery.start_soon(self._follow, root, on_change)

    async def _follow(self, root: str, on_change) -> None:
        while True:
            try:
                await self.zk.ensure_path(root)
                value = await self.zk.watch_children(root)
                async with aclosing(value.eventual_values(lambda v: v is not None)) as values:
                    async for _children in values:
                        await on_change()
            except ZooKeeperError as exc:
                log.warning("watching %s failed (%s); retrying", root, exc)
                await trio.sleep(RETRY_S)


class Access:
    """``access(operation, resource_type, name)``: may the connection whose request is
    being handled do that?  Without an authorizer (``authorizer.class.name`` unset) the
    answer is always yes, as in Kafka."""

    def __init__(self, authorizer: Authorizer | None = None) -> None:
        self.authorizer = authorizer

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def __call__(self, operation: AclOperation, resource_type: ResourceType,
                 name: str = CLUSTER_NAME) -> bool:
        if self.authorizer is None:
            return True
        session = current_session.get()
        return self.authorizer.authorize(session.principal, session.host, operation,
                                         resource_type, name)

    def operations(self, candidates: Iterable[AclOperation], resource_type: ResourceType,
                   name: str = CLUSTER_NAME) -> int:
        """Which of ``candidates`` the connection may do to the resource, as Kafka's
        ``authorized_operations`` bit field (bit N: the operation with code N)."""
        return sum(1 << op.value for op in candidates if self(op, resource_type, name))


#: Access without an authorizer: everyone may do everything (Kafka without one).
ALLOW_ALL = Access()


class AclManager:
    """One broker's ACLs: the ``Authorizer`` the handlers ask, kept current from the
    store, and the ACL APIs."""

    def __init__(self, authorizer: Authorizer, store: AclStore) -> None:
        self.authorizer = authorizer
        self.store = store
        self._lock = trio.Lock()

    async def load(self) -> None:
        self.authorizer.replace_all(dict(await self.store.load_all()))
        log.info("%d ACL bindings loaded", len(self.authorizer.bindings()))

    async def run(self) -> None:
        if isinstance(self.store, ZooKeeperAclStore):
            await self.store.follow_changes(self.load)

    def apis(self) -> Mapping[int, Callable[[Any, Any], Awaitable[Any]]]:
        return {ApiKey.CREATE_ACLS: self.create_acls,
                ApiKey.DESCRIBE_ACLS: self.describe_acls,
                ApiKey.DELETE_ACLS: self.delete_acls}

    def _allowed(self, operation: AclOperation) -> bool:
        return Access(self.authorizer)(operation, ResourceType.CLUSTER)

    @staticmethod
    def _refusal(what: str, operation: AclOperation) -> str:
        """The message of a refused ACL request: who asked, and what it takes."""
        return (f"{current_session.get().principal} is not authorized to {what} "
                f"({operation.title} on the cluster is required)")

    async def create_acls(self, request, header):
        R = CreateAclsResponse
        if not self._allowed(AclOperation.ALTER):
            await trio.lowlevel.checkpoint()
            message = self._refusal("create ACLs", AclOperation.ALTER)
            return R(throttle_time_ms=0, results=[R.AclCreationResult(
                error_code=ClusterAuthorizationFailedError.code, error_message=message)
                for _ in request.creations])
        results = []
        async with self._lock:
            for c in request.creations:
                try:
                    binding = AclBinding(
                        ResourcePattern(ResourceType.parse(c.resource_type), c.resource_name,
                                        PatternType.parse(c.resource_pattern_type)),
                        AccessControlEntry(c.principal, c.host, AclOperation.parse(c.operation),
                                           AclPermissionType.parse(c.permission_type)))
                    problem = binding.problem()
                    if problem:
                        raise InvalidRequestError(problem)
                    current = self.authorizer.acls(binding.pattern)
                    if binding.entry not in current:
                        updated = current | {binding.entry}
                        await self.store.write(binding.pattern, updated)
                        self.authorizer.set_acls(binding.pattern, updated)
                    results.append(R.AclCreationResult(error_code=0, error_message=None))
                except ValueError as exc:
                    results.append(R.AclCreationResult(
                        error_code=InvalidRequestError.code, error_message=str(exc)))
                except InvalidRequestError as exc:
                    results.append(R.AclCreationResult(error_code=exc.code,
                                                       error_message=str(exc)))
        return R(throttle_time_ms=0, results=results)

    def _filter(self, f, pattern_field: str = "pattern_type_filter") -> AclBindingFilter:
        return AclBindingFilter(
            ResourceType.parse(f.resource_type_filter), f.resource_name_filter,
            PatternType.parse(getattr(f, pattern_field)), f.principal_filter, f.host_filter,
            AclOperation.parse(f.operation), AclPermissionType.parse(f.permission_type))

    async def describe_acls(self, request, header):
        R = DescribeAclsResponse
        await trio.lowlevel.checkpoint()
        if not self._allowed(AclOperation.DESCRIBE):
            return R(throttle_time_ms=0, error_code=ClusterAuthorizationFailedError.code,
                     error_message=self._refusal("describe ACLs", AclOperation.DESCRIBE),
                     resources=[])
        try:
            selected = self._filter(request)
            problem = selected.problem()
            if problem:
                raise ValueError(problem)
        except ValueError as exc:
            return R(throttle_time_ms=0, error_code=InvalidRequestError.code,
                     error_message=str(exc), resources=[])
        by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
        for b in self.authorizer.bindings(selected):
            by_pattern.setdefault(b.pattern, []).append(b.entry)
        return R(throttle_time_ms=0, error_code=0, error_message=None, resources=[
            R.DescribeAclsResource(resource_type=p.resource_type, resource_name=p.name,
                                   pattern_type=p.pattern_type, acls=[
                                       R.DescribeAclsResource.AclDescription(
                                           principal=e.principal, host=e.host,
                                           operation=e.operation,
                                           permission_type=e.permission_type)
                                       for e in entries])
            for p, entries in by_pattern.items()])

    async def delete_acls(self, request, header):
        R = DeleteAclsResponse
        FR = R.DeleteAclsFilterResult
        if not self._allowed(AclOperation.ALTER):
            await trio.lowlevel.checkpoint()
            message = self._refusal("delete ACLs", AclOperation.ALTER)
            return R(throttle_time_ms=0, filter_results=[FR(
                error_code=ClusterAuthorizationFailedError.code, error_message=message,
                matching_acls=[]) for _ in request.filters])
        results = []
        async with self._lock:
            for f in request.filters:
                try:
                    selected = self._filter(f)
                    problem = selected.problem()
                    if problem:
                        raise ValueError(problem)
                except ValueError as exc:
                    results.append(FR(error_code=InvalidRequestError.code,
                                      error_message=str(exc), matching_acls=[]))
                    continue
                matched = self.authorizer.bindings(selected)
                by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
                for b in matched:
                    by_pattern.setdefault(b.pattern, set()).add(b.entry)
                for pattern, gone in by_pattern.items():
                    left = self.authorizer.acls(pattern) - gone
                    await self.store.write(pattern, left)
                    self.authorizer.set_acls(pattern, left)
                results.append(FR(error_code=0, error_message=None, matching_acls=[
                    FR.DeleteAclsMatchingAcl(
                        error_code=0, error_message=None,
                        resource_type=b.pattern.resource_type, resource_name=b.pattern.name,
                        pattern_type=b.pattern.pattern_type, principal=b.entry.principal,
                        host=b.entry.host, operation=b.entry.operation,
                        permission_type=b.entry.permission_type) for b in matched]))
        return R(throttle_time_ms=0, filter_results=results)


def standalone_acl_store(log_dirs: list[str]) -> FileAclStore:
    return FileAclStore(os.path.join(log_dirs[0], STANDALONE_FILE))


class AclsDisabled:
    """The ACL APIs of a broker without an authorizer: each answers SECURITY_DISABLED."""

    def apis(self) -> Mapping[int, Callable[[Any, Any], Awaitable[Any]]]:
        return {key: self._answer for key in (ApiKey.CREATE_ACLS, ApiKey.DESCRIBE_ACLS,
                                               ApiKey.DELETE_ACLS)}

    async def _answer(self, request: Any, header: Any) -> Any:
        await trio.lowlevel.checkpoint()
        return acls_disabled_answer(header.api_key, request)


def acls_disabled_answer(api_key: int, request: Any) -> Any:
    """What the ACL APIs answer when no authorizer is configured (Kafka:
    SECURITY_DISABLED)."""
    code = SecurityDisabledError.code
    if api_key == ApiKey.CREATE_ACLS:
        R = CreateAclsResponse
        return R(throttle_time_ms=0, results=[R.AclCreationResult(
            error_code=code, error_message="no authorizer is configured")
            for _ in request.creations])
    if api_key == ApiKey.DELETE_ACLS:
        D = DeleteAclsResponse
        return D(throttle_time_ms=0, filter_results=[D.DeleteAclsFilterResult(
            error_code=code, error_message="no authorizer is configured", matching_acls=[])
            for _ in request.filters])
    return DescribeAclsResponse(throttle_time_ms=0, error_code=code,
                                error_message="no authorizer is configured", resources=[])


_GROUP_DENIED = GroupAuthorizationFailedError.code
_CLUSTER_DENIED = ClusterAuthorizationFailedError.code
_TOPIC_DENIED = TopicAuthorizationFailedError.code
#: APIs whose whole request is one act on the cluster (the inter-broker ones).
_CLUSTER_ACTIONS = frozenset({ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA,
                              ApiKey.UPDATE_METADATA, ApiKey.CONTROLLED_SHUTDOWN})
#: Group membership: Read on the group.
_GROUP_READS = frozenset({ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT,
                          ApiKey.LEAVE_GROUP})


def refused_request(access: Access, api_key: int, version: int, request: Any) -> Any:
    """The answer to a request its principal may not make at all (one resource decides the
    whole request: the cluster, or the request's group), or None when it may go on (the
    handlers then check each topic).  Kafka's checks (``KafkaApis``):

    - LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown: ClusterAction on the
      cluster, else CLUSTER_AUTHORIZATION_FAILED;
    - JoinGroup, SyncGroup, Heartbeat, LeaveGroup: Read on the group; FindCoordinator:
      Describe on the group; OffsetCommit: Read on the group, and Read on each topic;
      OffsetFetch: Describe on the group; else GROUP_AUTHORIZATION_FAILED
      (TOPIC_AUTHORIZATION_FAILED for a topic);
    - ElectLeaders: Alter on the cluster.
    """
    response = response_class(api_key)
    if api_key in _CLUSTER_ACTIONS:
        if access(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
            return None
        return response(error_code=_CLUSTER_DENIED)
    if api_key in _GROUP_READS:
        if access(AclOperation.READ, ResourceType.GROUP, request.group_id):
            return None
        return response(error_code=_GROUP_DENIED)
    if api_key == ApiKey.FIND_COORDINATOR:
        if getattr(request, "key_type", 0) == 1:
            if access(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, request.key):
                return None
            return response(error_code=TransactionalIdAuthorizationFailedError.code)
        if access(AclOperation.DESCRIBE, ResourceType.GROUP, request.key):
            return None
        return response(error_code=_GROUP_DENIED)
    if api_key == ApiKey.OFFSET_COMMIT:
        group_ok = access(AclOperation.READ, ResourceType.GROUP, request.group_id)
        codes = {t.name: _GROUP_DENIED if not group_ok else
                 0 if access(AclOperation.READ, ResourceType.TOPIC, t.name) else _TOPIC_DENIED
                 for t in request.topics}
        if not any(codes.values()):
            return None
        if group_ok and not all(codes.values()):
            return None  # some topics may commit: left to the coordinator (see below)
        R = response
        return R(topics=[R.OffsetCommitResponseTopic(name=t.name, partitions=[
            R.OffsetCommitResponseTopic.OffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=codes[t.name])
            for p in t.partitions]) for t in request.topics])
    if api_key == ApiKey.ELECT_LEADERS:
        if access(AclOperation.ALTER, ResourceType.CLUSTER):
            return None
        R = response
        E = R.ReplicaElectionResult
        return R(throttle_time_ms=0, error_code=_CLUSTER_DENIED, replica_election_results=[
            E(topic=t.topic, partition_result=[E.PartitionResult(
                partition_id=p, error_code=_CLUSTER_DENIED, error_message=None)
                for p in t.partitions])
            for t in request.topic_partitions or []])
    if api_key == ApiKey.OFFSET_FETCH:
        if access(AclOperation.DESCRIBE, ResourceType.GROUP, request.group_id):
            return None
        R = response
        if version >= 2:
            return R(error_code=_GROUP_DENIED, topics=[])
        return R(topics=[R.OffsetFetchResponseTopic(name=t.name, partitions=[
            R.OffsetFetchResponseTopic.OffsetFetchResponsePartition(
                partition_index=p, committed_offset=-1, metadata="", error_code=_GROUP_DENIED)
            for p in t.partition_indexes]) for t in request.topics or []])
    return None
