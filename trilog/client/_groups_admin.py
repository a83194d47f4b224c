"""Consumer-group administration: list groups, describe their offsets and lag, reset
offsets, delete groups and committed offsets.

Two kinds of groups, two backends behind one ``GroupAdmin`` interface:

- ``open_group_admin(bootstrap_servers="h:9092")``: groups coordinated by brokers (Kafka's
  group protocol; offsets in ``__consumer_offsets``).  Each broker coordinates some groups,
  so listing asks every broker (ListGroups); describing asks the group's coordinator
  (FindCoordinator, DescribeGroups, OffsetFetch with null topics); a reset commits with
  generation -1 and an empty member id, which a coordinator accepts only from outside an
  inactive group.
- ``open_group_admin(zookeeper="h:2181/chroot")``: the seeds' ZooKeeper consumer connector
  (``/consumers/<group>/{ids,owners,offsets}``), read and written directly; log offsets
  come from a broker registered under ``/brokers/ids``.

Log start/end offsets and offsets by time come from ListOffsets to each partition's leader.
A reset is planned first (``ResetPlan``) and written only with ``execute=True``; a group
with live members is refused (``NonEmptyGroupError``), as Kafka refuses it: its consumers
would overwrite the new offsets with their next commit.  For the same reason only a group
without live members can be deleted (DeleteGroups; ``/consumers/<group>`` removed), and
committed offsets of a topic its live members consume cannot be (OffsetDelete:
``GROUP_SUBSCRIBED_TO_TOPIC``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Unpack

import json
import re

import trio

from trilog._topic import PartitionKey
from trilog.client._brokers import registered_brokers
from trilog.client._client import Client, open_client
from trilog.client._simple_consumer import EARLIEST, LATEST
from trilog.client._coordinator import Coordinator
from trilog.client._metadata import Node
from trilog.client._offsets import (
    BrokerOffsetStore,
    ZooKeeperOffsetStore,
    parse_zookeeper_offset,
)
from trilog.client._isolation import READ_UNCOMMITTED, isolation_level_id
from trilog.client._retry import REQUEST_RETRY
from trilog.client._settings import config_from_options
from trilog.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    IllegalGenerationError,
    NetworkError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    RemoteProtocolError,
    RequestTimedOutError,
    UnknownMemberIdError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from trilog.net import ClientSecurity, SecurityOptions
from trilog.protocol import (
    CONSUMER_PROTOCOL_TYPE,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    ListOffsetsRequest,
    OffsetDeleteRequest,
    decode_assignment,
)

if TYPE_CHECKING:  # trilog.zk imports kazoo: only a client that uses ZooKeeper pays for it
    from trilog.zk import ZooKeeper


#: Broker group states in which the group has (or is gathering) members.
_ACTIVE_STATES = ("PreparingRebalance", "CompletingRebalance", "Stable")
#: The states a broker reports for a group it knows nothing about.
_UNKNOWN_STATES = ("Dead", "")


@dataclass(frozen=True)
class GroupMember:
    """A live member: a broker group's member, or a ZooKeeper connector's registration."""

    member_id: str
    client_id: str = ""
    host: str = ""
    #: the partitions it owns (broker groups: from its ConsumerProtocol assignment, known
    #: only while the group is Stable; ZooKeeper groups: from the owner nodes)
    assignment: tuple[PartitionKey, ...] = ()
    #: a static member's instance (KIP-345; broker groups, DescribeGroups v4+)
    group_instance_id: str | None = None


@dataclass(frozen=True)
class PartitionOffsets:
    """One partition of a group: committed offset, log end, and who consumes it."""

    topic: str
    partition: int
    current_offset: int | None  # None: nothing committed
    log_end_offset: int | None  # None: unknown (topic gone, no leader)
    consumer_id: str | None = None  # member id (broker) or consumer thread id (ZooKeeper)
    host: str | None = None
    client_id: str | None = None

    @property
    def lag(self) -> int | None:
        if self.current_offset is None or self.log_end_offset is None:
            return None
        return max(self.log_end_offset - self.current_offset, 0)


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    #: "broker" or "zookeeper": where the group's offsets live
    storage: str
    #: Kafka's state (Empty, PreparingRebalance, CompletingRebalance, Stable) for broker
    #: groups; "Active" (registered consumers) or "Empty" for ZooKeeper groups
    state: str
    members: tuple[GroupMember, ...]
    partitions: tuple[PartitionOffsets, ...]
    protocol_type: str = ""
    protocol: str = ""  # the assignor, e.g. "range" (broker groups, while Stable)
    coordinator: Node | None = None

    @property
    def active(self) -> bool:
        return _is_active(self.state, len(self.members))


@dataclass(frozen=True)
class OffsetReset:
    topic: str
    partition: int
    current_offset: int | None
    new_offset: int
    log_start_offset: int
    log_end_offset: int
    #: the offset the target asked for, before it was kept within the log's start..end
    requested_offset: int | None = None

    @property
    def clamped(self) -> bool:
        """Whether the requested offset lay outside the log and was moved into it."""
        return self.requested_offset is not None and self.requested_offset != self.new_offset


@dataclass(frozen=True)
class ResetPlan:
    group_id: str
    state: str
    active_members: int
    resets: tuple[OffsetReset, ...]
    executed: bool

    @property
    def active(self) -> bool:
        """Whether the group had live members (an ``execute`` would be refused)."""
        return _is_active(self.state, self.active_members)


def decode_consumer_assignment(data: bytes) -> list[PartitionKey]:
    """The partitions of a ConsumerProtocol assignment (what a ``consumer`` group's leader
    hands each member in SyncGroup, and DescribeGroups shows), sorted.  Empty input (a
    group not Stable) is no assignment; anything malformed raises ``RemoteProtocolError``."""
    return decode_assignment(data).topic_partitions()


class GroupAdmin:
    """See the module docstring.  Create with ``open_group_admin``."""

    storage = ""

    def __init__(self, client: Client | None, isolation: int = READ_UNCOMMITTED) -> None:
        self._client = client
        #: the isolation level of the end offsets (lag, ``--to-latest``): read_committed's
        #: is the last stable offset
        self._isolation = isolation

    async def list_groups(self) -> list[str]:
        raise NotImplementedError

    async def describe_group(self, group_id: str) -> GroupDescription:
        """Members, state and every partition with committed offsets or an owner.
        ``GroupIdNotFoundError`` if the group does not exist."""
        raise NotImplementedError

    async def reset_offsets(self, group_id: str, topic: str | None,
                            partitions: Iterable[int] | None = None, *,
                            offset: int | None = None, timestamp_ms: int | None = None,
                            shift_by: int | None = None, execute: bool = False) -> ResetPlan:
        """Plan new committed offsets for ``topic`` (all its partitions, or ``partitions``;
        ``topic=None``: every partition the group has a committed offset for), and write
        them if ``execute``.

        Exactly one target: ``offset`` (clamped to the partition's log start..end, as Kafka
        does); ``shift_by``, added to the committed offset (negative: back) and clamped the
        same way (``ValueError`` for a partition with no committed offset); or
        ``timestamp_ms``: ``EARLIEST``, ``LATEST``, or a time in ms (the first offset whose
        record timestamp is at or after it; the log end if there is none).
        With ``execute``, a group that has live members raises ``NonEmptyGroupError``.
        """
        if sum(x is not None for x in (offset, timestamp_ms, shift_by)) != 1:
            raise ValueError("give exactly one of offset, timestamp_ms and shift_by")
        if topic is None:
            if partitions is not None:
                raise ValueError("partitions go with a topic")
            tps = sorted((p.topic, p.partition)
                         for p in (await self.describe_group(group_id)).partitions
                         if p.current_offset is not None)
        else:
            tps = [(topic, p) for p in await self._partitions_to_reset(topic, partitions)]
        state, members = await self._activity(group_id)
        current = await self._committed(group_id, tps)
        starts = await self._list_offsets(tps, EARLIEST)
        ends = await self._list_offsets(tps, LATEST)
        unknown = [tp for tp in tps if tp not in starts or tp not in ends]
        if unknown:
            raise UnknownTopicOrPartitionError(
                f"cannot find the log offsets of {unknown[0][0]}-{unknown[0][1]} "
                "(no leader now?)")
        if shift_by is not None:
            uncommitted = [tp for tp in tps if tp not in current]
            if uncommitted:
                raise ValueError(
                    f"cannot shift the offset of {uncommitted[0][0]}-{uncommitted[0][1]}: "
                    f"group {group_id!r} has no committed offset for it")
            wanted = {tp: current[tp] + shift_by for tp in tps}
        elif offset is not None:
            wanted = dict.fromkeys(tps, offset)
        elif timestamp_ms == EARLIEST:
            wanted = dict(starts)
        elif timestamp_ms == LATEST:
            wanted = dict(ends)
        else:
            assert timestamp_ms is not None  # exactly one target, checked above
            found = await self._list_offsets(tps, timestamp_ms)
            wanted = {tp: found[tp] if found.get(tp, -1) >= 0 else ends[tp] for tp in tps}
        new = {tp: min(max(wanted[tp], starts[tp]), ends[tp]) for tp in tps}
        resets = tuple(OffsetReset(t, p, current.get((t, p)), new[(t, p)], starts[(t, p)],
                                   ends[(t, p)], wanted[(t, p)]) for t, p in tps)
        if execute:
            if _is_active(state, members):
                raise _not_inactive(group_id, state, members)
            await self._commit(group_id, {(r.topic, r.partition): r.new_offset for r in resets})
        return ResetPlan(group_id, state, members, resets, executed=execute)

    async def _partitions_to_reset(self, topic: str, partitions: Iterable[int] | None
                                   ) -> list[int]:
        all_partitions = await self._partitions_of(topic)
        if partitions is None:
            return list(all_partitions)
        wanted = sorted(set(partitions))
        missing = [p for p in wanted if p not in all_partitions]
        if missing:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has no partition {missing[0]} (it has "
                f"{_ranges(all_partitions)})")
        return wanted

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, str | None]:
        """Delete each group that has no live members, with its committed offsets:
        ``{group: None}`` when deleted, else Kafka's error name (``"NON_EMPTY_GROUP"``,
        ``"GROUP_ID_NOT_FOUND"``, ...), as Kafka answers DeleteGroups per group."""
        raise NotImplementedError

    async def delete_offsets(self, group_id: str, topic: str,
                             partitions: Iterable[int] | None = None) -> dict[int, str | None]:
        """Delete the group's committed offsets of ``topic`` (all its partitions, or
        ``partitions``): ``{partition: None}`` when gone (or never committed), else Kafka's
        error name: ``"GROUP_SUBSCRIBED_TO_TOPIC"`` while live members consume the topic,
        ``"UNKNOWN_TOPIC_OR_PARTITION"``.  ``GroupIdNotFoundError`` if the group does not
        exist; ``NonEmptyGroupError`` for a group with members whose subscriptions are
        unknown (not a consumer group)."""
        raise NotImplementedError

    # -- what each backend provides ----------------------------------------------------------

    async def _activity(self, group_id: str) -> tuple[str, int]:
        """``(state, number of live members)``."""
        raise NotImplementedError

    async def _committed(self, group_id: str, tps: list[PartitionKey]
                         ) -> dict[PartitionKey, int]:
        raise NotImplementedError

    async def _commit(self, group_id: str, offsets: dict[PartitionKey, int]) -> None:
        raise NotImplementedError

    # -- log offsets through the brokers ---------------------------------------------------------

    def _need_client(self) -> Client:
        if self._client is None:
            raise NetworkError("no brokers are registered in ZooKeeper: cannot read log offsets")
        return self._client

    async def _partitions_of(self, topic: str) -> tuple[int, ...]:
        meta = await self._need_client().refresh_metadata([topic])
        parts = meta.partitions_for(topic)
        if parts:
            return parts
        code = meta.topic_errors.get(topic)
        if code is None or code == UnknownTopicOrPartitionError.code:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        err = error_for_code(code)
        raise type(err)(f"topic {topic!r}: {err}")

    async def list_offsets(self, partitions: Iterable[PartitionKey], timestamp: int = LATEST
                           ) -> dict[PartitionKey, int]:
        """Each partition's offset for ``timestamp`` (``LATEST``: the log end at the admin's
        isolation level, ``EARLIEST``: the log start, or ms: the first record at or after),
        one ListOffsets per leader; -1 where no record is that recent, and a partition
        that keeps failing (no leader, gone) is left out.  Needs brokers."""
        return await self._list_offsets(list(partitions), timestamp)

    async def _list_offsets(self, tps: list[PartitionKey], timestamp: int
                            ) -> dict[PartitionKey, int]:
        """ListOffsets to each partition's leader (one request per leader).  A partition
        that keeps failing is left out; ``-1`` means no record at or after ``timestamp``."""
        client = self._need_client()
        out: dict[PartitionKey, int] = {}
        todo = sorted(set(tps))
        if not todo:
            await trio.lowlevel.checkpoint()
            return out
        tries = REQUEST_RETRY.attempts()
        async for _ in tries:
            meta = await client.refresh_metadata(sorted({t for t, _ in todo}))
            by_leader, leaderless = meta.group_by_leader(todo)
            # A partition of a topic that exists may be between leaders: ask again.
            retry = [tp for tp in leaderless if tp[1] in (meta.partitions_for(tp[0]) or ())]
            for node, wanted in by_leader.items():
                retry += await self._list_offsets_from(client, node, wanted, timestamp, out,
                                                       self._isolation)
            if not retry or tries.last:
                break
            todo = sorted(retry)
        return out

    @staticmethod
    async def _list_offsets_from(client: Client, node: Node, wanted: list[PartitionKey],
                                 timestamp: int, out: dict[PartitionKey, int],
                                 isolation: int = READ_UNCOMMITTED
                                 ) -> list[PartitionKey]:
        R = ListOffsetsRequest
        by_topic: dict[str, list[Any]] = {}
        for topic, partition in wanted:
            by_topic.setdefault(topic, []).append(R.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=partition, timestamp=timestamp))
        try:
            conn = await client.connection(node)
            response = await conn.request(R(replica_id=-1, isolation_level=isolation, topics=[
                R.ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()]))
        except (NetworkError, RequestTimedOutError):
            return wanted
        retry = []
        for t in response.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                if p.error_code == 0:
                    out[tp] = p.offset
                elif error_for_code(p.error_code).retriable:
                    retry.append(tp)
        return retry


# -- groups coordinated by brokers -----------------------------------------------------------------


class _BrokerGroupAdmin(GroupAdmin):
    storage = "broker"

    def __init__(self, client: Client, isolation: int = READ_UNCOMMITTED) -> None:
        super().__init__(client, isolation)
        self._stores: dict[str, BrokerOffsetStore] = {}

    async def list_groups(self) -> list[str]:
        client = self._need_client()
        meta = await client.refresh_metadata([])
        groups: set[str] = set()
        for node in sorted(meta.brokers.values(), key=lambda n: n.node_id):
            groups.update(await self._list_groups_of(client, node))
        return sorted(groups)

    @staticmethod
    async def _list_groups_of(client: Client, node: Node) -> list[str]:
        tries = REQUEST_RETRY.attempts()
        async for _ in tries:
            try:
                conn = await client.connection(node)
                response = await conn.request(ListGroupsRequest())
            except (NetworkError, RequestTimedOutError) as exc:
                raise NetworkError(f"cannot list the groups of broker {node.node_id} "
                                   f"({node.host}:{node.port}): {exc}") from None
            if response.error_code == 0:
                return [g.group_id for g in response.groups]
            err = error_for_code(response.error_code)
            if not err.retriable or tries.last:
                raise type(err)(f"broker {node.node_id} cannot list its groups: {err}")
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _store(self, group_id: str) -> BrokerOffsetStore:
        """The group's offsets, through its coordinator (a tool: when no broker answers at
        all, it says so at once instead of retrying)."""
        store = self._stores.get(group_id)
        if store is None:
            client = self._need_client()
            store = self._stores[group_id] = BrokerOffsetStore(
                client, group_id,
                coordinator=Coordinator(client, group_id, retry_unreachable=False))
        return store

    async def _describe(self, group_id: str) -> Any:
        response = await self._store(group_id).coordinator.request(
            DescribeGroupsRequest(groups=[group_id]), lambda r: r.groups[0].error_code)
        return response.groups[0]

    async def describe_group(self, group_id: str) -> GroupDescription:
        described = await self._describe(group_id)
        committed = await self._store(group_id).fetch(None)
        if described.group_state in _UNKNOWN_STATES and not committed \
                and not described.members:
            raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
        members = []
        owners: dict[PartitionKey, GroupMember] = {}
        for m in described.members:
            assignment: list[PartitionKey] = []
            if described.protocol_type == CONSUMER_PROTOCOL_TYPE:
                try:
                    assignment = decode_consumer_assignment(bytes(m.member_assignment))
                except RemoteProtocolError:
                    assignment = []  # a client's own format: show the member without it
            member = GroupMember(m.member_id, m.client_id, m.client_host,
                                 tuple(sorted(assignment)), m.group_instance_id)
            members.append(member)
            for tp in assignment:
                owners[tp] = member
        tps = sorted(set(committed) | set(owners))
        ends = await self._list_offsets(tps, LATEST)
        rows = []
        for tp in tps:
            owner = owners.get(tp)
            rows.append(PartitionOffsets(
                tp[0], tp[1], committed.get(tp), ends.get(tp) if ends.get(tp, -1) >= 0 else None,
                owner.member_id if owner else None, owner.host if owner else None,
                owner.client_id if owner else None))
        return GroupDescription(
            group_id, self.storage, described.group_state, tuple(members), tuple(rows),
            described.protocol_type, described.protocol_data,
            self._store(group_id).coordinator.known)

    async def _activity(self, group_id: str) -> tuple[str, int]:
        described = await self._describe(group_id)
        return described.group_state, len(described.members)

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for gid in group_ids:
            response = await self._store(gid).coordinator.request(
                DeleteGroupsRequest(groups_names=[gid]),
                _retriable(lambda r: r.results[0].error_code))
            code = response.results[0].error_code
            out[gid] = error_for_code(code).name if code else None
        return out

    async def delete_offsets(self, group_id: str, topic: str,
                             partitions: Iterable[int] | None = None) -> dict[int, str | None]:
        wanted = (sorted(await self._partitions_of(topic)) if partitions is None
                  else sorted(set(partitions)))
        R = OffsetDeleteRequest
        T = R.OffsetDeleteRequestTopic
        response = await self._store(group_id).coordinator.request(
            R(group_id=group_id, topics=[T(name=topic, partitions=[
                T.OffsetDeleteRequestPartition(partition_index=p) for p in wanted])]),
            _retriable(lambda r: r.error_code))
        if response.error_code:
            err = error_for_code(response.error_code)
            raise type(err)(f"cannot delete the offsets of group {group_id!r}: {err}")
        return {x.partition_index: error_for_code(x.error_code).name if x.error_code else None
                for t in response.topics for x in t.partitions}

    async def _committed(self, group_id: str, tps: list[PartitionKey]
                         ) -> dict[PartitionKey, int]:
        return await self._store(group_id).fetch(tps)

    async def _commit(self, group_id: str, offsets: dict[PartitionKey, int]) -> None:
        try:
            await self._store(group_id).commit(offsets)
        except (UnknownMemberIdError, IllegalGenerationError, RebalanceInProgressError):
            # The coordinator refuses a commit from outside a group with members: one
            # joined after we looked.
            state, members = await self._activity(group_id)
            raise _not_inactive(group_id, state, members) from None


# -- groups of the ZooKeeper consumer connector ----------------------------------------------------


class _ZooKeeperGroupAdmin(GroupAdmin):
    storage = "zookeeper"

    def __init__(self, zk: ZooKeeper, client: Client | None,
                 isolation: int = READ_UNCOMMITTED) -> None:
        super().__init__(client, isolation)
        self._zk = zk

    async def _children(self, path: str) -> list[str]:
        from trilog.zk import NoNodeError

        try:
            return sorted(await self._zk.get_children(path))
        except NoNodeError:
            return []

    async def _get(self, path: str) -> bytes | None:
        from trilog.zk import NoNodeError

        try:
            return await self._zk.get(path)
        except NoNodeError:
            return None

    async def list_groups(self) -> list[str]:
        from trilog.zk import CONSUMERS

        return await self._children(CONSUMERS)

    async def _members(self, group_id: str) -> list[str]:
        from trilog.zk import consumer_ids_path

        return await self._children(consumer_ids_path(group_id))

    async def _tree(self, base: str) -> dict[PartitionKey, bytes]:
        """``{(topic, partition): data}`` of ``base/<topic>/<partition>`` nodes."""
        out = {}
        for topic in await self._children(base):
            for child in await self._children(f"{base}/{topic}"):
                if not child.isdigit():
                    continue
                data = await self._get(f"{base}/{topic}/{child}")
                if data is not None:
                    out[(topic, int(child))] = data
        return out

    async def describe_group(self, group_id: str) -> GroupDescription:
        from trilog.zk import CONSUMERS

        if not await self._zk.exists(f"{CONSUMERS}/{group_id}"):
            raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
        members = await self._members(group_id)
        owners = {tp: data.decode("utf-8", "replace")
                  for tp, data in (await self._tree(f"{CONSUMERS}/{group_id}/owners")).items()}
        committed = {tp: offset for tp, data in
                     (await self._tree(f"{CONSUMERS}/{group_id}/offsets")).items()
                     if (offset := parse_zookeeper_offset(data)) is not None}
        # An owner node holds a consumer thread id, "<consumer id>-<n>".
        described = [GroupMember(member, assignment=tuple(sorted(
            tp for tp, thread in owners.items() if thread.rpartition("-")[0] == member)))
            for member in members]
        tps = sorted(set(committed) | set(owners))
        ends = await self._list_offsets(tps, LATEST) if tps else {}
        rows = tuple(PartitionOffsets(
            t, p, committed.get((t, p)),
            ends.get((t, p)) if ends.get((t, p), -1) >= 0 else None,
            owners.get((t, p))) for t, p in tps)
        return GroupDescription(group_id, self.storage, "Active" if described else "Empty",
                                tuple(described), rows)

    async def _activity(self, group_id: str) -> tuple[str, int]:
        members = await self._members(group_id)
        return ("Active" if members else "Empty"), len(members)

    async def _committed(self, group_id: str, tps: list[PartitionKey]
                         ) -> dict[PartitionKey, int]:
        return await ZooKeeperOffsetStore(self._zk, group_id).fetch(tps)

    async def _commit(self, group_id: str, offsets: dict[PartitionKey, int]) -> None:
        await ZooKeeperOffsetStore(self._zk, group_id).commit(offsets)

    async def delete_groups(self, group_ids: Iterable[str]) -> dict[str, str | None]:
        from trilog.zk import CONSUMERS, NoNodeError

        out: dict[str, str | None] = {}
        for gid in group_ids:
            if not gid or not await self._zk.exists(f"{CONSUMERS}/{gid}"):
                out[gid] = GroupIdNotFoundError.name
            elif await self._members(gid):
                out[gid] = NonEmptyGroupError.name
            else:
                try:
                    await self._zk.delete(f"{CONSUMERS}/{gid}", recursive=True)
                    out[gid] = None
                except NoNodeError:
                    out[gid] = GroupIdNotFoundError.name
        return out

    async def delete_offsets(self, group_id: str, topic: str,
                             partitions: Iterable[int] | None = None) -> dict[int, str | None]:
        from trilog.zk import CONSUMERS, NoNodeError, consumer_offset_path

        if not await self._zk.exists(f"{CONSUMERS}/{group_id}"):
            raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
        if partitions is None:
            wanted = sorted(int(c) for c in await self._children(
                consumer_offset_path(group_id, topic)) if c.isdigit())
        else:
            wanted = sorted(set(partitions))
        if await self._subscribed(group_id, topic):
            return {p: GroupSubscribedToTopicError.name for p in wanted}
        for p in wanted:
            try:
                await self._zk.delete(consumer_offset_path(group_id, topic, p))
            except NoNodeError:
                pass  # never committed: nothing to delete
        return {p: None for p in wanted}

    async def _subscribed(self, group_id: str, topic: str) -> bool:
        """Whether a live member consumes ``topic`` (a registration that does not parse
        counts as one that does, as Kafka counts an unknown subscription)."""
        from trilog.zk import NoNodeError, consumer_ids_path

        for member in await self._members(group_id):
            try:
                reg = json.loads(await self._zk.get(f"{consumer_ids_path(group_id)}/{member}"))
                patterns = [str(k) for k in reg["subscription"]]
                kind = reg.get("pattern", "static")
            except NoNodeError:
                continue
            except (ValueError, KeyError, TypeError, AttributeError):
                return True
            try:
                hit = any(re.fullmatch(p, topic) for p in patterns)
            except re.error:
                return True
            if kind == "static":
                matched = topic in patterns
            else:  # a filter never matches internal topics
                matched = not topic.startswith("__") and hit == (kind == "white_list")
            if matched:
                return True
        return False


def _retriable(code_of: Callable[[Any], int]) -> Callable[[Any], int]:
    """An error-code reader for ``Coordinator.request`` that lets only retriable codes
    through (the coordinator moving or loading): the others are the answer."""
    def code(response: Any) -> int:
        found = code_of(response)
        return found if found and error_for_code(found).retriable else 0
    return code


def _is_active(state: str, members: int) -> bool:
    return members > 0 or state in _ACTIVE_STATES


def _not_inactive(group_id: str, state: str, members: int) -> NonEmptyGroupError:
    return NonEmptyGroupError(
        f"offsets of group {group_id!r} can only be reset while it is inactive, but it has "
        f"{members} active member(s) (state {state}): stop its consumers first")


def _ranges(partitions: Iterable[int]) -> str:
    ps = sorted(partitions)
    return f"0..{ps[-1]}" if ps == list(range(len(ps))) and ps else \
        ", ".join(map(str, ps)) or "none"


@dataclass(frozen=True)
class GroupAdminConfig:
    """``open_group_admin``'s settings (where the cluster is comes apart:
    ``bootstrap_servers``); ``ValueError`` for a bad one."""

    #: ``"host:port[/chroot]"``: the ZooKeeper connector's groups instead of the brokers'
    zookeeper: str | None = None
    client_id: str = "trilog-groups"
    request_timeout_ms: int = 30_000
    #: how long connecting to a broker (or to ZooKeeper) may take
    connect_timeout_ms: int = 10_000
    #: how long opening tries to reach a bootstrap server (kafka-python's; then
    #: ``NoBrokersAvailableError``)
    bootstrap_timeout_ms: int = 30_000
    #: whose lag: "read_committed" counts to the last stable offset (what a read_committed
    #: consumer can read: no transaction still open), "read_uncommitted" to the high
    #: watermark (Kafka's tool)
    isolation_level: str = "read_uncommitted"
    #: TLS and SASL of the connections to the brokers (None: PLAINTEXT)
    security: ClientSecurity | None = None

    def __post_init__(self) -> None:
        for name in ("request_timeout_ms", "connect_timeout_ms", "bootstrap_timeout_ms"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)!r}")
        isolation_level_id(self.isolation_level)  # ValueError for another name


class GroupAdminOptions(SecurityOptions, total=False):
    """``open_group_admin``'s keyword arguments (``GroupAdminConfig``'s fields, the security
    ones as ``SecurityOptions``), for ``Unpack``; tests/client/test_producer_settings.py
    keeps the two the same."""

    zookeeper: str | None
    client_id: str
    request_timeout_ms: int
    connect_timeout_ms: int
    bootstrap_timeout_ms: int
    isolation_level: str


def open_group_admin(bootstrap_servers: str | list[str] | None = None,
                     **options: Unpack[GroupAdminOptions]
                     ) -> AbstractAsyncContextManager[GroupAdmin]:
    """A ``GroupAdmin`` for broker-coordinated groups (``bootstrap_servers``) or for the
    ZooKeeper connector's groups (``zookeeper``); connections close on exit.  An unknown
    keyword is a ``TypeError``, a bad value a ``ValueError``, here."""
    config = config_from_options(GroupAdminConfig, options, "open_group_admin")
    if (bootstrap_servers is None) == (config.zookeeper is None):
        raise ValueError("give exactly one of bootstrap_servers and zookeeper")
    return _running_group_admin(bootstrap_servers, config)


@asynccontextmanager
async def _running_group_admin(bootstrap_servers: str | list[str] | None,
                               config: GroupAdminConfig) -> AsyncIterator[GroupAdmin]:
    def client_of(servers: str | list[str]) -> AbstractAsyncContextManager[Client]:
        return open_client(servers, client_id=config.client_id,
                           request_timeout_ms=config.request_timeout_ms,
                           connect_timeout_ms=config.connect_timeout_ms,
                           bootstrap_timeout_ms=config.bootstrap_timeout_ms,
                           allow_auto_create_topics=False, security=config.security)

    isolation = isolation_level_id(config.isolation_level)
    async with AsyncExitStack() as stack:
        if bootstrap_servers is not None:
            yield _BrokerGroupAdmin(await stack.enter_async_context(client_of(bootstrap_servers)),
                                    isolation)
            return
        assert config.zookeeper is not None  # exactly one of the two, checked by the opener
        from trilog.zk import open_zookeeper

        zk = await stack.enter_async_context(open_zookeeper(
            config.zookeeper, connection_timeout_ms=config.connect_timeout_ms))
        brokers = [f"{b.host}:{b.port}" for b in await registered_brokers(zk)]
        client = await stack.enter_async_context(client_of(brokers)) if brokers else None
        yield _ZooKeeperGroupAdmin(zk, client, isolation)
