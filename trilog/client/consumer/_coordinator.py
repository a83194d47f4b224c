"""Kafka's consumer coordinator: one member of a broker-coordinated group, for the consumer
around it (Kafka's consumer, or the seeds' broker-coordinated connector).

``ConsumerCoordinator.run`` is a member's life while its subscription lasts, on
``_membership.GroupMembership`` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup on the wire):

- **join**: give up the partitions owned (eager assignors; cooperative ones, KIP-429, keep
  them and give up only what the new assignment leaves out), join with the subscribed
  topics (a pattern's as it matches the cluster now), take the assignment into the
  ``SubscriptionState``, let the consumer take it (``partitions_assigned``), tell the
  rebalance listener;
- **heartbeat** every ``heartbeat_interval_ms`` from a completed join until the next
  JoinGroup goes out.  REBALANCE_IN_PROGRESS asks for a rejoin and the heartbeats **go on**
  while the member revokes and rejoins, as Kafka's consumer: a slow revoke (a listener, a
  commit) does not cost the member its session.  ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID
  mean the group went on without us: the partitions are *lost* (nothing is committed); a
  coordinator error means find it again; either stops the heartbeats and asks for a rejoin;
- **watch** the metadata every ``metadata_max_age_ms`` (a pattern that matches other
  topics, or, for the leader, a subscribed topic whose partitions changed: rejoin) and the
  application's polls (``max_poll_interval_ms`` without one: give the partitions up, leave,
  and join again at the next poll);
- **give up** (``give_up``): commit what was processed (``commit_before_revoke``: the
  consumer decides whether it commits then), tell the listener (revoked, or lost), drop
  the partitions (``partitions_dropped``);
- **leave** when the subscription ends (unsubscribed, closed): give up and LeaveGroup, on
  connections of the leaving task's own (the consumer's other tasks may be cancelled).

The consumer around it is a ``CoordinatedConsumer``: a protocol, so that this module does not
import the consumers that use it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import trio

from trilog.client._client import Client
from trilog.client.consumer._membership import (
    COORDINATOR_ERRORS,
    GENERATION_ERRORS,
    GroupMembership,
)
from trilog.client.consumer._structs import (
    ConsumerRebalanceListener,
    TopicPartition,
    maybe_await,
)
from trilog.client.consumer._subscription_state import SubscriptionState
from trilog.errors import (
    ApiError,
    CoordinatorLoadInProgressError,
    RebalanceInProgressError,
    TrilogError,
)

log = logging.getLogger("trilog.consumer.group")


class CoordinatedConsumer(Protocol):
    """What a ``ConsumerCoordinator`` needs from the consumer it is a member for."""

    @property
    def failed(self) -> bool:
        """Whether the consumer stopped with an error (nothing is committed then)."""
        ...

    def fail(self, exc: BaseException) -> None:
        """Stop the consumer with ``exc`` (a listener's, or a join's that retrying cannot
        help)."""
        ...

    async def commit_before_revoke(self, partitions: set[TopicPartition]) -> None:
        """Commit what was processed of ``partitions`` before they are given up, if the
        consumer commits then (auto-commit)."""
        ...

    async def partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """A join completed: the subscription owns ``assigned``; the listener hears of it
        next.  May raise ``TrilogError``: the partitions are dropped and the member joins
        again."""
        ...

    def partitions_dropped(self, dropped: set[TopicPartition]) -> None:
        """``dropped`` left the subscription's assignment."""
        ...

    def poll_marks(self) -> Mapping[Any, int]:
        """Whatever waits on the application now (a poll returned, a stream holding a
        record), each with a count that moves when the application asks for more."""
        ...

    def poll_interval_expired(self, mark: Any) -> None:
        """``mark`` stood still for ``max_poll_interval_ms``: the member leaves its group
        until the consumer calls ``ConsumerCoordinator.resume_polls``."""
        ...

    def connections_in_this_task(self) -> AbstractAsyncContextManager[Any]:
        """Inside, the group's requests (and commits) go on connections of this task."""
        ...


async def tell_listener(listener: ConsumerRebalanceListener, callback: str,
                        partitions: Iterable[TopicPartition],
                        fail: Callable[[BaseException], None], who: str) -> None:
    """``listener.<callback>(partitions)`` (sync or async); an exception from it stops the
    consumer (``fail``)."""
    try:
        await maybe_await(getattr(listener, callback)(set(partitions)))
    except Exception as exc:
        log.error("consumer %s: the rebalance listener's %s raised %r: stopping", who,
                  callback, exc)
        fail(exc)
        await trio.lowlevel.checkpoint_if_cancelled()


class ConsumerCoordinator:
    """See the module docstring.  ``assigned_once`` is set after the first assignment
    (and listener); ``lost`` while the member's partitions are not its group's any more;
    ``poll_expired`` while it waits for the application to poll again."""

    def __init__(self, client: Client, membership: GroupMembership,
                 subscription: SubscriptionState, consumer: CoordinatedConsumer, *,
                 session_timeout_ms: int, max_poll_interval_ms: int,
                 metadata_max_age_ms: int, retry_backoff_ms: int) -> None:
        self._client = client
        self.membership = membership
        self._subscription = subscription
        self._consumer = consumer
        self._commit_timeout_s = session_timeout_ms / 2000
        self._max_poll_s = max_poll_interval_ms / 1000
        self._metadata_age_s = metadata_max_age_ms / 1000
        self._backoff_s = retry_backoff_ms / 1000
        self.lost = False
        #: the last assignment (eager sticky assignors keep it in place)
        self.last_assigned: set[TopicPartition] = set()
        self.assigned_once = trio.Event()
        self.poll_expired = False
        self._polled = trio.Event()
        self._rejoin = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._heartbeat_scope: trio.CancelScope | None = None

    @property
    def member_name(self) -> str:
        return self.membership.member_id or self._client.client_id

    def request_rejoin(self, reason: str) -> None:
        if not self._rejoin.is_set():
            log.info("consumer %s (group %s): rejoining: %s", self.member_name,
                     self.membership.group_id, reason)
        self._rejoin.set()

    def commit_refused(self, exc: ApiError) -> None:
        """A commit was fenced (``REJOIN_ERRORS``): rejoin; after ILLEGAL_GENERATION or
        UNKNOWN_MEMBER_ID the partitions are lost."""
        if isinstance(exc, GENERATION_ERRORS):
            self.lost = True
            self.membership.in_generation = False
        self.request_rejoin(f"commit refused: {exc.name}")

    def resume_polls(self) -> None:
        """The application polls again after ``poll_expired``: join again."""
        if self.poll_expired:
            self.poll_expired = False
            self._polled.set()

    # -- a member's life -----------------------------------------------------------------------

    async def run(self) -> None:
        """Be a member while the subscription lasts (see the module docstring); leave on
        the way out, within 10 s even when cancelled.  The partitions stay the consumer's
        until they are given up, unless ``assign`` took over meanwhile."""
        membership = self.membership
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._watch_metadata)
                nursery.start_soon(self._watch_polls)
                while True:
                    await self._join()
                    await self._rejoin.wait()
                    if self.poll_expired:
                        await self.give_up()
                        self.stop_heartbeat()
                        await membership.leave()
                        await self._polled.wait()
        finally:
            self.stop_heartbeat()
            self._nursery = None
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                if self._subscription.manual:  # assign() took over: not ours to revoke
                    await membership.leave()
                else:
                    await self._leave()

    async def _join(self) -> None:
        """Join the group (again) and take the assignment.  Eager assignors: everything is
        given up first.  Cooperative ones (KIP-429): the member keeps reading while the
        group rebalances and gives up only what the new assignment leaves out, then joins
        once more so that those partitions reach their new owners."""
        membership, sub = self.membership, self._subscription
        cooperative = membership.cooperative
        while True:
            # Heartbeats go on while the partitions are given up (a slow listener must not
            # cost the member its session), and stop when the JoinGroup goes out.
            if not cooperative or self.lost:
                await self.give_up()
            self.stop_heartbeat()
            self._rejoin = trio.Event()
            try:
                meta = await self._client.refresh_metadata()
                sub.joined_topics = sub.topics_in(meta.partitions)
                owned = set(sub.assignment) if cooperative else self.last_assigned
                assigned = await membership.join(sub.joined_topics, owned)
            except TrilogError as exc:
                await self._join_failed(exc)
                continue
            self.lost = False
            self.start_heartbeat()
            tps = {TopicPartition(t, p) for t, ps in assigned.items() for p in ps}
            revoked = set(sub.assignment) - tps
            added = tps - set(sub.assignment)
            if revoked:  # cooperative: only what moves away
                await self.give_up(revoked, lost=False)
            sub.assign(tps)
            self.last_assigned = tps
            try:
                await self._consumer.partitions_assigned(tps)
            except TrilogError as exc:  # the listener has not heard of them: quietly
                self._drop(added)
                await self._join_failed(exc)
                continue
            log.info("consumer %s (group %s, generation %d%s, %s) owns %s", self.member_name,
                     membership.group_id, membership.generation_id,
                     ", leader" if membership.is_leader else "", membership.protocol,
                     _names(tps))
            await self.tell_listener("on_partitions_assigned", added if cooperative else tps)
            self.assigned_once.set()
            if revoked:
                self.request_rejoin("cooperative rebalance: what was given up goes on to "
                                    "its new owners")
            return

    async def _join_failed(self, exc: TrilogError) -> None:
        """Get ready to join again after ``exc``; ``fail`` when that cannot help."""
        if not isinstance(exc, ApiError):  # a malformed assignment, say: try again
            log.warning("consumer %s (group %s): rebalance failed: %s", self.member_name,
                        self.membership.group_id, exc)
            await trio.sleep(self._backoff_s)
            return
        if isinstance(exc, GENERATION_ERRORS):
            self.lost = True
        try:
            await self.membership.recover(exc)
        except ApiError as fatal:
            self._consumer.fail(fatal)  # ends the subscription's task
            await trio.lowlevel.checkpoint()

    # -- heartbeats ------------------------------------------------------------------------------

    def start_heartbeat(self) -> None:
        self.stop_heartbeat()
        assert self._nursery is not None
        scope = self._heartbeat_scope = trio.CancelScope()
        self._nursery.start_soon(self._heartbeat, scope)

    def stop_heartbeat(self) -> None:
        if self._heartbeat_scope is not None:
            self._heartbeat_scope.cancel()
            self._heartbeat_scope = None

    async def _heartbeat(self, scope: trio.CancelScope) -> None:
        """Heartbeats until the next JoinGroup; REBALANCE_IN_PROGRESS asks for a rejoin and
        keeps the session alive meanwhile (the group keeps a member that heartbeats while
        it gives its partitions up), any other error asks for a rejoin and stops."""
        membership = self.membership
        with scope:
            while True:
                exc = await membership.heartbeats()
                if scope.cancel_called:
                    return  # answered just as the join stopped us: stale
                self.request_rejoin(f"heartbeat: {exc.name}")
                if isinstance(exc, RebalanceInProgressError):
                    continue
                if isinstance(exc, GENERATION_ERRORS):
                    self.lost = True
                    membership.in_generation = False  # our commits would be refused
                elif isinstance(exc, COORDINATOR_ERRORS + (CoordinatorLoadInProgressError,)):
                    membership.coordinator.reset()
                return

    # -- giving partitions up --------------------------------------------------------------------

    async def give_up(self, which: set[TopicPartition] | None = None, *,
                      lost: bool | None = None) -> None:
        """Give up ``which`` (default: every partition): commit what was processed of
        them (only if the generation is still ours), tell the listener (revoked, or lost
        when the group went on without us), drop them."""
        sub = self._subscription
        owned = set(sub.assignment) if which is None else which & set(sub.assignment)
        if not owned:
            await trio.lowlevel.checkpoint()
            return
        sub.mark_revoking(owned)  # nothing more is handed out from them
        if lost is None:
            lost = self.lost or not self.membership.in_generation
        if lost:
            await self.tell_listener("on_partitions_lost", owned)
        else:
            with trio.move_on_after(self._commit_timeout_s):
                try:
                    await self._consumer.commit_before_revoke(owned)
                except TrilogError as exc:
                    log.warning("consumer %s: could not commit before rejoining: %s",
                                self.member_name, exc)
            await self.tell_listener("on_partitions_revoked", owned)
        self._drop(owned)

    def _drop(self, tps: set[TopicPartition]) -> None:
        sub = self._subscription
        dropped = tps & set(sub.assignment)
        if dropped:
            sub.assign(set(sub.assignment) - dropped)
            self._consumer.partitions_dropped(dropped)

    async def tell_listener(self, callback: str, partitions: set[TopicPartition]) -> None:
        await tell_listener(self._subscription.listener, callback, partitions,
                            self._consumer.fail, self.member_name)

    async def _leave(self) -> None:
        """Unsubscribed or closing: give up (committing what was processed) and leave, on
        connections of this task's own (the consumer's others may be cancelled)."""
        membership = self.membership
        if not membership.member_id:
            self._drop(set(self._subscription.assignment))
            return
        try:
            async with self._consumer.connections_in_this_task():
                try:
                    if not self._consumer.failed:
                        await self.give_up()
                finally:
                    await membership.leave()
        except (TrilogError, OSError) as exc:
            log.info("consumer %s: clean leave failed: %s", self.member_name, exc)
        finally:
            self._drop(set(self._subscription.assignment))

    # -- reasons to rejoin -----------------------------------------------------------------------

    async def _watch_metadata(self) -> None:
        """Every ``metadata_max_age_ms``: does a pattern match other topics now, and
        (leader) do the group's topics still have the partitions it assigned?"""
        membership, sub = self.membership, self._subscription
        while True:
            await trio.sleep(self._metadata_age_s)
            if self._rejoin.is_set():
                continue  # a join is coming anyway, with fresh metadata
            try:
                meta = await self._client.refresh_metadata()
            except TrilogError as exc:
                log.debug("metadata refresh failed: %s", exc)
                continue
            topics = sub.topics_in(meta.partitions)
            if topics != sub.joined_topics:
                self.request_rejoin(f"subscribed topics changed: {list(sub.joined_topics)} "
                                    f"-> {list(topics)}")
            elif membership.is_leader and any(
                    tuple(meta.partitions_for(t) or ()) != parts
                    for t, parts in membership.group_partitions.items()):
                self.request_rejoin("the partitions of a subscribed topic changed")

    async def _watch_polls(self) -> None:
        """Kafka's ``max.poll.interval.ms``: an application that has not asked for records
        for that long (a ``poll_marks`` mark that stood still) is out of the group (its
        partitions go to the others, from the last commit: at least once); the member
        joins again when it asks (``resume_polls``)."""
        limit = self._max_poll_s
        since: dict[Any, tuple[int, float]] = {}  # mark -> (its count, seen since)
        while True:
            await trio.sleep(min(limit / 4, 1.0))
            now = trio.current_time()
            marks = {} if self.poll_expired else self._consumer.poll_marks()
            for mark in [m for m in since if m not in marks]:
                del since[mark]
            for mark, count in marks.items():
                seen, first = since.setdefault(mark, (count, now))
                if seen != count:
                    since[mark] = (count, now)
                elif now - first >= limit:
                    self.poll_expired = True
                    self._polled = trio.Event()
                    since.clear()
                    self._consumer.poll_interval_expired(mark)
                    self.request_rejoin("max_poll_interval_ms passed")
                    break


def _names(tps: Iterable[TopicPartition]) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "]"
