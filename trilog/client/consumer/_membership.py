"""One member of a broker-coordinated consumer group: Kafka's group protocol, on the wire.

``GroupMembership`` speaks for the member to the group's coordinator and holds what the
group knows of it (``member_id``, ``generation_id``, ``leader_id``, the chosen assignor);
the consumer around it decides when to (re)join and what to do with partitions.

- ``join(topics)``: JoinGroup offering the consumer's assignors (in preference order) with
  a subscription to ``topics``; the coordinator answers once every member has (re)joined,
  the leader with everyone's subscriptions; the leader assigns with the assignor the group
  chose (``_assignment.ASSIGNORS``, Kafka's protocol names, so trilog, kafka-python,
  librdkafka and Java consumers share a group); SyncGroup carries the plan and brings each
  member its share.
- ``heartbeats()``: every ``heartbeat_interval_ms`` until the coordinator answers with an
  error, which it returns (REBALANCE_IN_PROGRESS: rejoin; ILLEGAL_GENERATION or
  UNKNOWN_MEMBER_ID: the partitions are lost; a coordinator error: find it again).
- ``recover(error)``: what a failed join or heartbeat needs before the next join.
- ``leave()``: LeaveGroup, so the others rebalance now rather than a session later.

A new member joining a broker that speaks JoinGroup v4+ is first given its member id
(MEMBER_ID_REQUIRED) and joins again with it at once.  A **static member**
(``group_instance_id``, KIP-345; JoinGroup v5+) names its instance in every request; when
it restarts within its session timeout it gets its partitions back without a rebalance,
and it never sends LeaveGroup (its session timeout, not its shutdown, ends its membership),
as Kafka's consumer.

A JoinGroup parks on the coordinator for the whole join phase: requests go on the
``Coordinator``'s own connection, with a timeout of the rebalance timeout plus a margin.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

import trio

from trilog.client._assignment import (
    ASSIGNORS,
    COOPERATIVE_ASSIGNORS,
    STICKY_ASSIGNORS,
    check_assignors,
)
from trilog.client._client import Client
from trilog.client._coordinator import Coordinator
from trilog.errors import (
    ApiError,
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    MemberIdRequiredError,
    NetworkError,
    NotCoordinatorError,
    ProtocolError,
    RebalanceInProgressError,
    RequestTimedOutError,
    TrilogError,
    UnknownMemberIdError,
    UnsupportedVersionError,
    error_for_code,
)
from trilog.protocol import (
    CONSUMER_PROTOCOL_TYPE,
    ApiKey,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

log = logging.getLogger("trilog.consumer.group")

#: Errors after which the coordinator must be found again.
COORDINATOR_ERRORS = (NotCoordinatorError, CoordinatorNotAvailableError, NetworkError,
                      RequestTimedOutError)
#: Errors that end the member's generation: its partitions are lost, not revoked.
GENERATION_ERRORS = (IllegalGenerationError, UnknownMemberIdError)
#: Errors that mean "rejoin", not "fail".
REJOIN_ERRORS = (RebalanceInProgressError, *GENERATION_ERRORS)


class GroupMembership:
    """See the module docstring.  ``assignors``: protocol names of ``ASSIGNORS``, the
    preferred first."""

    def __init__(self, client: Client, coordinator: Coordinator, group_id: str, *,
                 assignors: Sequence[str], session_timeout_ms: int,
                 rebalance_timeout_ms: int, heartbeat_interval_ms: int,
                 retry_backoff_ms: int, group_instance_id: str | None = None) -> None:
        self._client = client
        self.coordinator = coordinator
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.assignors = check_assignors(assignors)
        self._session_timeout_ms = session_timeout_ms
        self._rebalance_timeout_ms = rebalance_timeout_ms
        self._heartbeat_s = heartbeat_interval_ms / 1000
        self._backoff_s = retry_backoff_ms / 1000
        # Kafka allows a JoinGroup the rebalance timeout plus a margin.
        self._join_timeout_s = max(client.request_timeout_s, rebalance_timeout_ms / 1000 + 5)
        self.member_id = ""
        self.generation_id = -1
        self.leader_id = ""
        self.protocol = ""
        #: True between a completed SyncGroup and an answer that ends the generation: our
        #: commits count.
        self.in_generation = False
        #: the leader's: topic -> the partitions its last plan was made from
        self.group_partitions: dict[str, tuple[int, ...]] = {}

    @property
    def is_leader(self) -> bool:
        return bool(self.member_id) and self.member_id == self.leader_id

    @property
    def cooperative(self) -> bool:
        """KIP-429's protocol: every assignor offered is cooperative (as Kafka decides: one
        eager assignor among them makes the member eager, the path to upgrade a group)."""
        return all(a in COOPERATIVE_ASSIGNORS for a in self.assignors)

    async def join(self, topics: Sequence[str], owned: Iterable[tuple[str, int]] = ()
                   ) -> dict[str, tuple[int, ...]]:
        """JoinGroup and SyncGroup: our share, ``{topic: partitions}`` (only of ``topics``).
        ``owned``: what the member owns now (sticky assignors keep it in place).  Raises
        the ``ApiError`` the coordinator answered (see ``recover``)."""
        self.in_generation = False
        conn = await self.coordinator.connection()
        sticky = any(a in STICKY_ASSIGNORS for a in self.assignors)
        subscription = encode_subscription(topics, owned=list(owned) if sticky else None)
        J = JoinGroupRequest
        version = None
        if self.group_instance_id is not None:
            # JoinGroup v5 is the first to carry the instance: no silent downgrade.
            try:
                version = conn.version_for(ApiKey.JOIN_GROUP, (5, J.MAX_VERSION))
            except UnsupportedVersionError as exc:
                raise UnsupportedVersionError(
                    f"static membership (group_instance_id) needs JoinGroup v5+: {exc}"
                ) from None
        for _ in range(2):  # once more with the member id a MEMBER_ID_REQUIRED hands out
            join = await conn.request(J(
                group_id=self.group_id, session_timeout_ms=self._session_timeout_ms,
                rebalance_timeout_ms=self._rebalance_timeout_ms, member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocols=[J.JoinGroupRequestProtocol(name=name, metadata=subscription)
                           for name in self.assignors],
            ), version=version, timeout_s=self._join_timeout_s)
            if join.error_code != MemberIdRequiredError.code:
                break
            self.member_id = join.member_id
        if join.error_code:
            raise error_for_code(join.error_code)
        self.member_id = join.member_id
        self.generation_id = join.generation_id
        self.leader_id = join.leader
        self.protocol = join.protocol_name
        plan = await self._plan(join.members) if self.is_leader else []
        sync = await conn.request(SyncGroupRequest(
            group_id=self.group_id, generation_id=self.generation_id,
            member_id=self.member_id, group_instance_id=self.group_instance_id,
            assignments=plan,
        ), timeout_s=self._join_timeout_s)
        if sync.error_code:
            raise error_for_code(sync.error_code)
        self.in_generation = True
        assigned = decode_assignment(sync.assignment).partitions
        unwanted = set(assigned) - set(topics)
        if unwanted:
            log.warning("member %s of group %s: the leader assigned topics it did not "
                        "subscribe to: %s", self.member_id, self.group_id, sorted(unwanted))
        return {t: ps for t, ps in assigned.items() if t in topics}

    async def _plan(self, members: list[Any]) -> list[Any]:
        """The leader's assignment of every member, as SyncGroup carries them."""
        subscriptions: dict[str, tuple[str, ...]] = {}
        owned: dict[str, tuple[tuple[str, int], ...]] = {}
        for member in members:
            try:
                subscription = decode_subscription(member.metadata)
            except ProtocolError as exc:
                log.warning("member %s of group %s sent a bad subscription (%s); it gets "
                            "nothing", member.member_id, self.group_id, exc)
                subscriptions[member.member_id] = ()
                continue
            subscriptions[member.member_id] = subscription.topics
            owned[member.member_id] = subscription.owned
        meta = await self._client.refresh_metadata()  # the join phase may have been long
        wanted = {t for topics in subscriptions.values() for t in topics}
        self.group_partitions = {t: tuple(meta.partitions_for(t) or ()) for t in wanted}
        plan = ASSIGNORS[self.protocol](subscriptions, self.group_partitions, owned)
        A = SyncGroupRequest.SyncGroupRequestAssignment
        return [A(member_id=m, assignment=encode_assignment(plan.get(m, {})))
                for m in subscriptions]

    async def heartbeats(self) -> ApiError:
        """Heartbeat until the coordinator answers with an error (or cannot be reached):
        that error (a failure that is not the coordinator's answer comes as a
        ``NetworkError``: find the coordinator again)."""
        request = HeartbeatRequest(group_id=self.group_id, generation_id=self.generation_id,
                                   member_id=self.member_id,
                                   group_instance_id=self.group_instance_id)
        timeout_s = min(self._client.request_timeout_s, self._session_timeout_ms / 1000)
        while True:
            await trio.sleep(self._heartbeat_s)
            try:
                conn = await self.coordinator.connection()
                response = await conn.request(request, timeout_s=timeout_s)
            except ApiError as exc:
                return exc
            except TrilogError as exc:  # a garbled answer, a failed TLS or SASL login
                return NetworkError(f"heartbeat to the coordinator failed: {exc}")
            if response.error_code:
                return error_for_code(response.error_code)

    async def recover(self, exc: ApiError) -> None:
        """Get ready to join again after ``exc`` (from ``join`` or ``heartbeats``); raises
        ``exc`` when joining again cannot help (an inconsistent protocol; another process
        with the same ``group_instance_id``: FENCED_INSTANCE_ID)."""
        if isinstance(exc, FencedInstanceIdError):
            raise FencedInstanceIdError(
                f"group {self.group_id!r}: another member took group_instance_id "
                f"{self.group_instance_id!r}")
        if isinstance(exc, GENERATION_ERRORS):
            self.in_generation = False
        if isinstance(exc, UnknownMemberIdError):
            self.member_id = ""  # join as a new member
            self.generation_id = -1
            await trio.lowlevel.checkpoint()
        elif isinstance(exc, (RebalanceInProgressError, IllegalGenerationError)):
            await trio.lowlevel.checkpoint()  # the next join is what the group waits for
        elif exc.retriable:
            if isinstance(exc, COORDINATOR_ERRORS):
                self.coordinator.reset()
            log.info("member %s of group %s: %s; retrying", self.member_id or "(new)",
                     self.group_id, exc)
            await trio.sleep(self._backoff_s)
        else:
            raise exc

    async def leave(self) -> None:
        """LeaveGroup (within 5 s; a failure is only logged), and forget the membership.
        A static member sends nothing: its session timeout ends its membership, so that a
        restart within it moves no partition."""
        member_id, self.member_id = self.member_id, ""
        self.generation_id = -1
        self.in_generation = False
        if not member_id or self.group_instance_id is not None:
            await trio.lowlevel.checkpoint()
            return
        try:
            with trio.move_on_after(5):
                conn = await self.coordinator.connection()
                # v0-2 name the member alone, v3+ in a list (the encoder takes the field of
                # the version it speaks).
                response = await conn.request(LeaveGroupRequest(
                    group_id=self.group_id, member_id=member_id,
                    members=[LeaveGroupRequest.MemberIdentity(member_id=member_id)]))
                if response.error_code:
                    log.info("member %s: LeaveGroup: %s", member_id,
                             error_for_code(response.error_code))
        except ApiError as exc:
            log.info("member %s: LeaveGroup failed: %s", member_id, exc)
