"""Group membership, Kafka's state machine (``GroupMetadata`` + ``GroupCoordinator``).

::

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
      ^                 ^        |                                   |  leader's SyncGroup
      |                 |        +--no member left--> Empty          v
      |                 +---- join, leave, session expiry ------- Stable

- **PreparingRebalance** collects JoinGroups.  From Empty it waits
  ``group.initial.rebalance.delay.ms`` (again, while new members keep coming, up to the
  rebalance timeout); otherwise it ends as soon as every known member has rejoined, or when
  the largest rebalance timeout of the members passes, dropping those who did not.  The
  generation goes up, a protocol every member supports is chosen (by vote of each member's
  first choice), the leader (the first member, kept while it stays) receives every
  member's metadata, the followers none.
- **CompletingRebalance** waits for the leader's SyncGroup with the assignments; members'
  SyncGroups park until then.  Any membership change sends the group back to
  PreparingRebalance (parked SyncGroups get REBALANCE_IN_PROGRESS).
- **Stable**: heartbeats keep members alive; a member silent for its session timeout is
  removed (as by LeaveGroup), which starts a rebalance.

**Static members** (KIP-345, JoinGroup v5+) carry a ``group_instance_id``: one that joins
again with no member id (a restart) takes over its instance's member, assignment and
leadership under a new member id, and while the group is Stable (and its protocol would not
change) that causes no rebalance: the member rejoins the same generation.  Requests from
the replaced member id are fenced (FENCED_INSTANCE_ID).  A static member is removed only by
its session timeout or a LeaveGroup naming its instance.

A dynamic member joining with JoinGroup v4+ and no member id first gets one with
MEMBER_ID_REQUIRED and joins again with it (KIP-394); the id is pending until then (for
its session timeout at most).

Parked JoinGroup/SyncGroup requests wait on a ``Reply``.  The class does no I/O and reads no
clock: every method takes ``now`` (trio time, seconds), and ``poll(now)`` runs what is due;
``next_deadline()`` says when to call it next.  Runs in the trio thread only.
"""

from __future__ import annotations

import enum
import math
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import trio

from trilog.errors import (
    NO_ERROR,
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    NotCoordinatorError,
    RebalanceInProgressError,
    RemoteProtocolError,
    UnknownMemberIdError,
)
from trilog.protocol import CONSUMER_PROTOCOL_TYPE, decode_subscription


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class Reply:
    """The answer to a parked request: set once (later sets are ignored), awaited once."""

    __slots__ = ("_event", "value")

    def __init__(self) -> None:
        self._event = trio.Event()
        self.value: Any = None

    def set(self, value: Any) -> None:
        if not self._event.is_set():
            self.value = value
            self._event.set()

    @property
    def done(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> Any:
        await self._event.wait()
        return self.value


class JoinResult(NamedTuple):
    error: int
    generation: int = -1
    protocol: str = ""
    leader: str = ""
    member_id: str = ""
    #: the leader's: ``(member id, group instance id or None, metadata)`` of every member
    members: tuple[tuple[str, str | None, bytes], ...] = ()


class SyncResult(NamedTuple):
    error: int
    assignment: bytes = b""


@dataclass(eq=False)
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_s: float
    rebalance_timeout_s: float
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_reply: Reply | None = None
    sync_reply: Reply | None = None
    heartbeat_deadline: float = math.inf
    group_instance_id: str | None = None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def keep_alive(self, now: float) -> None:
        self.heartbeat_deadline = now + self.session_timeout_s


def common_protocols(members: Iterable[Member]) -> set[str]:
    """The protocols every one of ``members`` supports (none for no members)."""
    names = [set(m.protocol_names()) for m in members]
    return set.intersection(*names) if names else set()


def select_protocol(members: list[Member]) -> str | None:
    """The protocol every member supports that most members list first among those (ties:
    the order the first member lists them).  None if there is no common protocol."""
    candidates = common_protocols(members)
    if not candidates:
        return None
    votes: Counter[str] = Counter()
    for m in members:
        votes[next(n for n in m.protocol_names() if n in candidates)] += 1
    order = [n for n in members[0].protocol_names() if n in candidates]
    return max(order, key=lambda n: (votes[n], -order.index(n)))


@dataclass(eq=False)
class Group:
    group_id: str
    initial_delay_s: float
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    #: group instance id -> the member id of the static member that holds it now
    static_members: dict[str, str] = field(default_factory=dict)
    #: member ids handed out with MEMBER_ID_REQUIRED -> when they lapse unused
    pending_members: dict[str, float] = field(default_factory=dict)
    #: When the current PreparingRebalance ends at the latest.
    join_deadline: float | None = None
    #: While in the initial delay of an empty group: how much longer it may be extended.
    initial_delay_left: float | None = None
    new_member_added: bool = False

    # -- questions ------------------------------------------------------------------------------

    @property
    def is_empty(self) -> bool:
        return not self.members

    def rebalance_timeout_s(self) -> float:
        return max((m.rebalance_timeout_s for m in self.members.values()), default=0.0)

    def subscribed_topics(self) -> set[str] | None:
        """The topics the members of a consumer group subscribe to, None when unknown (no
        protocol chosen yet, another protocol type, a subscription that does not parse):
        Kafka's ``subscribedTopics``, which OffsetDelete consults."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            try:
                topics.update(decode_subscription(m.metadata(self.protocol)).topics)
            except RemoteProtocolError:
                return None
        return topics

    def supports(self, protocols: list[tuple[str, bytes]]) -> bool:
        if not self.members:
            return True
        return bool(common_protocols(self.members.values()) & {name for name, _ in protocols})

    def next_deadline(self) -> float:
        deadline = self.join_deadline if self.join_deadline is not None else math.inf
        deadline = min(deadline, *self.pending_members.values(), math.inf)
        for m in self.members.values():
            if m.join_reply is None and m.sync_reply is None:
                deadline = min(deadline, m.heartbeat_deadline)
        return deadline

    def _current_join(self, member: Member) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member.member_id == self.leader_id:
            members = tuple((m.member_id, m.group_instance_id, m.metadata(self.protocol))
                            for m in self.members.values())
        return JoinResult(NO_ERROR, self.generation, self.protocol or "", self.leader_id or "",
                          member.member_id, members)

    # -- JoinGroup ------------------------------------------------------------------------------

    def join(self, member_id: str, *, client_id: str, client_host: str,
             session_timeout_s: float, rebalance_timeout_s: float, protocol_type: str,
             protocols: list[tuple[str, bytes]], now: float,
             group_instance_id: str | None = None,
             require_known_member_id: bool = False) -> JoinResult | Reply:
        """A JoinGroup: an immediate ``JoinResult`` or a ``Reply`` to wait for.
        ``require_known_member_id`` (JoinGroup v4+): a new dynamic member first gets its
        member id with MEMBER_ID_REQUIRED."""
        if self.state is GroupState.EMPTY:
            if not protocols or not protocol_type:
                return JoinResult(InconsistentGroupProtocolError.code, member_id=member_id)
        elif protocol_type != self.protocol_type or not self.supports(protocols):
            return JoinResult(InconsistentGroupProtocolError.code, member_id=member_id)
        if self.state is GroupState.DEAD:
            return JoinResult(UnknownMemberIdError.code, member_id=member_id)
        if member_id and group_instance_id is not None:
            code = self.check_instance(member_id, group_instance_id)
            if code:
                return JoinResult(code, member_id=member_id)
        pending = self.pending_members.pop(member_id, None) is not None
        if member_id and not pending and member_id not in self.members:
            return JoinResult(UnknownMemberIdError.code, member_id=member_id)
        reply = Reply()
        if not member_id and group_instance_id is not None and \
                self.static_members.get(group_instance_id) in self.members:
            return self._replace_static(group_instance_id, reply, client_id, client_host,
                                        session_timeout_s, rebalance_timeout_s, protocols, now)
        if not member_id or pending:
            if not member_id:
                member_id = f"{group_instance_id or client_id}-{uuid.uuid4()}"
                if require_known_member_id and group_instance_id is None:
                    self.pending_members[member_id] = now + session_timeout_s
                    return JoinResult(MemberIdRequiredError.code, member_id=member_id)
            member = Member(member_id, client_id, client_host,
                            session_timeout_s, rebalance_timeout_s, protocol_type,
                            protocols, join_reply=reply, group_instance_id=group_instance_id)
            if not self.members:
                self.protocol_type = protocol_type
            if self.leader_id is None:
                self.leader_id = member.member_id
            self.members[member.member_id] = member
            if group_instance_id is not None:
                self.static_members[group_instance_id] = member.member_id
            if self.initial_delay_left is not None:
                self.new_member_added = True
            self._maybe_prepare_rebalance(now)
        else:
            member = self.members[member_id]
            state = self.state
            unchanged = member.matches(protocols)
            if state is GroupState.COMPLETING_REBALANCE and unchanged:
                # It lost our JoinGroup answer: the same again.
                return self._current_join(member)
            if (state is GroupState.STABLE and unchanged
                    and member_id != self.leader_id):
                return self._current_join(member)
            self._update(member, reply, client_id, client_host, session_timeout_s,
                         rebalance_timeout_s, protocols)
            self._maybe_prepare_rebalance(now)
        self.poll(now)
        return reply

    def _replace_static(self, instance: str, reply: Reply, client_id: str, client_host: str,
                        session_timeout_s: float, rebalance_timeout_s: float,
                        protocols: list[tuple[str, bytes]], now: float) -> JoinResult | Reply:
        """A known static member joins again with no member id (it restarted): it takes
        over its instance's member under a new id; Kafka's ``updateStaticMemberAndRebalance``."""
        old_id = self.static_members[instance]
        member = self.members.pop(old_id)
        for parked, fenced in ((member.join_reply, JoinResult(FencedInstanceIdError.code,
                                                              member_id=old_id)),
                               (member.sync_reply, SyncResult(FencedInstanceIdError.code))):
            if parked is not None:
                parked.set(fenced)
        member.join_reply = member.sync_reply = None
        member.member_id = f"{instance}-{uuid.uuid4()}"
        self.members[member.member_id] = member
        self.static_members[instance] = member.member_id
        current_leader = self.leader_id
        if self.leader_id == old_id:
            self.leader_id = member.member_id
        member.keep_alive(now)
        member.client_id, member.client_host = client_id, client_host
        member.session_timeout_s = session_timeout_s
        member.rebalance_timeout_s = rebalance_timeout_s
        member.protocols = protocols
        if self.state is GroupState.STABLE:
            if select_protocol(list(self.members.values())) == self.protocol:
                # No rebalance: the same generation and assignment.  The leader id answered
                # is the one before the swap, so that a restarted leader does not assign
                # again (a Stable group would not pass a new plan on); Kafka does the same.
                return JoinResult(NO_ERROR, self.generation, self.protocol or "",
                                  current_leader or "", member.member_id)
        self._update(member, reply, client_id, client_host, session_timeout_s,
                     rebalance_timeout_s, protocols)
        self._maybe_prepare_rebalance(now)
        self.poll(now)
        return reply

    def check_instance(self, member_id: str, group_instance_id: str | None) -> int:
        """A static member's request: its instance must be held by ``member_id``
        (FENCED_INSTANCE_ID when another member id holds it now)."""
        if group_instance_id is None:
            return NO_ERROR
        current = self.static_members.get(group_instance_id)
        if current is None:
            return UnknownMemberIdError.code
        return NO_ERROR if current == member_id else FencedInstanceIdError.code

    def _update(self, member: Member, reply: Reply, client_id: str, client_host: str,
                session_timeout_s: float, rebalance_timeout_s: float,
                protocols: list[tuple[str, bytes]]) -> None:
        if member.join_reply is not None:
            # Its earlier JoinGroup came on a connection it has given up on.
            member.join_reply.set(
                JoinResult(RebalanceInProgressError.code, member_id=member.member_id))
        member.join_reply = reply
        member.client_id, member.client_host = client_id, client_host
        member.session_timeout_s = session_timeout_s
        member.rebalance_timeout_s = rebalance_timeout_s
        member.protocols = protocols

    def _maybe_prepare_rebalance(self, now: float) -> None:
        if self.state in (GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(now)
        self._maybe_complete_join(now)

    def _prepare_rebalance(self, now: float) -> None:
        if self.state is GroupState.COMPLETING_REBALANCE:
            for m in self.members.values():
                m.assignment = b""
                if m.sync_reply is not None:
                    m.sync_reply.set(SyncResult(RebalanceInProgressError.code))
                    m.sync_reply = None
        if self.state is GroupState.EMPTY:
            delay = self.initial_delay_s
            self.initial_delay_left = max(self.rebalance_timeout_s() - delay, 0.0)
            self.new_member_added = False
            self.join_deadline = now + delay
        else:
            self.initial_delay_left = None
            self.join_deadline = now + self.rebalance_timeout_s()
        self.state = GroupState.PREPARING_REBALANCE

    def _maybe_complete_join(self, now: float) -> None:
        if (self.state is GroupState.PREPARING_REBALANCE and self.initial_delay_left is None
                and all(m.join_reply is not None for m in self.members.values())):
            self._complete_join(now)

    def _complete_join(self, now: float) -> None:
        for m in list(self.members.values()):
            if m.join_reply is None:  # did not rejoin in time
                self._remove(m)
        self.join_deadline = None
        self.initial_delay_left = None
        self.new_member_added = False
        self.generation += 1
        if not self.members:
            self.state = GroupState.EMPTY
            self.protocol = None
            return
        members = list(self.members.values())
        self.protocol = select_protocol(members) or members[0].protocol_names()[0]
        self.state = GroupState.COMPLETING_REBALANCE
        for m in members:
            reply, m.join_reply = m.join_reply, None
            assert reply is not None
            reply.set(self._current_join(m))
            m.keep_alive(now)

    # -- SyncGroup ------------------------------------------------------------------------------

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes],
             now: float, group_instance_id: str | None = None) -> SyncResult | Reply:
        fenced = self.check_instance(member_id, group_instance_id)
        if fenced:
            return SyncResult(fenced)
        member = self.members.get(member_id)
        if member is None:
            return SyncResult(UnknownMemberIdError.code)
        if generation != self.generation:
            return SyncResult(IllegalGenerationError.code)
        if self.state in (GroupState.EMPTY, GroupState.DEAD):
            return SyncResult(UnknownMemberIdError.code)
        if self.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(RebalanceInProgressError.code)
        member.keep_alive(now)
        if self.state is GroupState.STABLE:
            return SyncResult(NO_ERROR, member.assignment)
        # CompletingRebalance
        reply = Reply()
        if member.sync_reply is not None:
            member.sync_reply.set(SyncResult(RebalanceInProgressError.code))
        member.sync_reply = reply
        if member_id == self.leader_id:
            for m in self.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            self.state = GroupState.STABLE
            for m in self.members.values():
                if m.sync_reply is not None:
                    m.sync_reply.set(SyncResult(NO_ERROR, m.assignment))
                    m.sync_reply = None
                    m.keep_alive(now)
        return reply

    # -- Heartbeat, LeaveGroup, commits -----------------------------------------------------------

    def heartbeat(self, member_id: str, generation: int, now: float,
                  group_instance_id: str | None = None) -> int:
        member = self.members.get(member_id)
        if self.state is GroupState.DEAD:
            return UnknownMemberIdError.code
        fenced = self.check_instance(member_id, group_instance_id)
        if fenced or member is None:
            return fenced or UnknownMemberIdError.code
        if generation != self.generation:
            return IllegalGenerationError.code
        member.keep_alive(now)
        if self.state is GroupState.PREPARING_REBALANCE:
            return RebalanceInProgressError.code
        return NO_ERROR

    def leave(self, member_id: str, now: float, group_instance_id: str | None = None) -> int:
        """A LeaveGroup of ``member_id``, or (v3+) of the static member holding
        ``group_instance_id`` (``member_id`` may then be empty: unknown)."""
        if self.state is GroupState.DEAD:
            return UnknownMemberIdError.code
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is None:
                return UnknownMemberIdError.code
            if member_id and member_id != current:
                return FencedInstanceIdError.code
            member_id = current
        member = self.members.get(member_id)
        if member is None:
            return UnknownMemberIdError.code
        self._remove_and_rebalance(member, now)
        return NO_ERROR

    def validate_commit(self, member_id: str, generation: int, now: float,
                        group_instance_id: str | None = None) -> int:
        """The error an OffsetCommit from ``member_id`` at ``generation`` gets (0: store)."""
        if generation < 0 and self.state is GroupState.EMPTY:
            return NO_ERROR  # a "simple" consumer's commit: no group management
        if self.state is GroupState.DEAD:
            return UnknownMemberIdError.code
        fenced = self.check_instance(member_id, group_instance_id)
        if fenced:
            return fenced
        if self.state is GroupState.COMPLETING_REBALANCE:
            return RebalanceInProgressError.code
        member = self.members.get(member_id)
        if member is None:
            return UnknownMemberIdError.code
        if generation != self.generation:
            return IllegalGenerationError.code
        member.keep_alive(now)
        return NO_ERROR

    def _remove(self, member: Member) -> None:
        if member.join_reply is not None:
            member.join_reply.set(
                JoinResult(UnknownMemberIdError.code, member_id=member.member_id))
            member.join_reply = None
        if member.sync_reply is not None:
            member.sync_reply.set(SyncResult(UnknownMemberIdError.code))
            member.sync_reply = None
        del self.members[member.member_id]
        instance = member.group_instance_id
        if instance is not None and self.static_members.get(instance) == member.member_id:
            del self.static_members[instance]
        if self.leader_id == member.member_id:
            self.leader_id = next(iter(self.members), None)

    def _remove_and_rebalance(self, member: Member, now: float) -> None:
        self._remove(member)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(now)
        self._maybe_complete_join(now)

    # -- time -----------------------------------------------------------------------------------

    def poll(self, now: float) -> list[str]:
        """Run what is due at ``now``: the end of a join phase, session expiries.  Returns the
        ids of the members that expired."""
        if (self.state is GroupState.PREPARING_REBALANCE and self.join_deadline is not None
                and now >= self.join_deadline):
            left = self.initial_delay_left
            if left is not None and self.new_member_added and left > 0:
                step = min(self.initial_delay_s, left)
                self.initial_delay_left = left - step
                self.new_member_added = False
                self.join_deadline = now + step
            else:
                self._complete_join(now)
        for member_id, lapse in list(self.pending_members.items()):
            if lapse <= now:  # a member id handed out with MEMBER_ID_REQUIRED, never used
                del self.pending_members[member_id]
        expired = []
        for m in list(self.members.values()):
            if (m.join_reply is None and m.sync_reply is None and m.heartbeat_deadline <= now
                    and m.member_id in self.members):
                expired.append(m.member_id)
                self._remove_and_rebalance(m, now)
        return expired

    def shutdown(self, error: int = NotCoordinatorError.code) -> None:
        """Answer every parked request with ``error`` and forget the members (the broker
        stops coordinating this group)."""
        for m in self.members.values():
            if m.join_reply is not None:
                m.join_reply.set(JoinResult(error, member_id=m.member_id))
                m.join_reply = None
            if m.sync_reply is not None:
                m.sync_reply.set(SyncResult(error))
                m.sync_reply = None
        self.members.clear()
        self.static_members.clear()
        self.pending_members.clear()
        self.leader_id = None
        self.join_deadline = None
        self.state = GroupState.DEAD

    # -- DescribeGroups -----------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """Kafka's group summary: metadata and assignments only when Stable."""
        stable = self.state is GroupState.STABLE
        return {
            "group_state": self.state.value,
            "protocol_type": self.protocol_type or "",
            "protocol_data": (self.protocol or "") if stable else "",
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata(self.protocol) if stable else b"",
                    "member_assignment": m.assignment if stable else b"",
                }
                for m in self.members.values()
            ],
        }
