"""Who consumes which partition: the seed's rebalance arithmetic and topic filters (pure).

Seed 000/001, "Consumer rebalancing algorithm": for each topic, sort its partitions and the
consumer threads that subscribe to it, then give each thread a contiguous range; the first
``P mod C`` threads get one partition more (Kafka's range assignor).  Every consumer of a
group computes this from the same ZooKeeper data and so reaches the same answer.

A broker-coordinated group's leader range-assigns over members instead (``assign_members``,
Kafka's ``RangeAssignor``), and each member deals its share over its streams
(``spread_over_streams``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from collections.abc import Callable, Iterable, Mapping


def assign_ranges(partitions: Iterable[int], threads: Iterable[str]) -> dict[str, list[int]]:
    """Range-assign one topic's ``partitions`` to consumer ``threads``.

    Depends only on the sorted inputs; every partition goes to exactly one thread; the
    sizes differ by at most one; threads beyond the partition count get nothing.
    """
    parts = sorted(set(partitions))
    ids = sorted(set(threads))
    out: dict[str, list[int]] = {t: [] for t in ids}
    if not ids:
        return out
    per, extra = divmod(len(parts), len(ids))
    start = 0
    for i, thread in enumerate(ids):
        count = per + (1 if i < extra else 0)
        out[thread] = parts[start:start + count]
        start += count
    return out


def thread_ids(consumer_id: str, streams: int) -> list[str]:
    """The seed's consumer thread ids: ``<consumer id>-<n>``."""
    return [f"{consumer_id}-{n}" for n in range(streams)]


def assign_group(subscriptions: Mapping[str, Mapping[str, int]],
                 partitions: Mapping[str, Iterable[int]]) -> dict[str, dict[str, list[int]]]:
    """The whole group's assignment: ``{thread id: {topic: [partitions]}}``.

    ``subscriptions`` maps each consumer id to ``{topic: number of streams}`` (for filters,
    the topics it matched); ``partitions`` maps each topic to its partition numbers.
    """
    topics = sorted({t for sub in subscriptions.values() for t in sub})
    return _assign_topics({topic: [tid for cid, sub in subscriptions.items() if topic in sub
                                   for tid in thread_ids(cid, sub[topic])]
                           for topic in topics}, partitions)


def assign_members(subscriptions: Mapping[str, Iterable[str]],
                   partitions: Mapping[str, Iterable[int]]) -> dict[str, dict[str, list[int]]]:
    """Kafka's ``RangeAssignor``: ``{member id: {topic: [partitions]}}`` for every member.

    For each topic, the members subscribed to it, sorted by member id, get contiguous ranges
    of its sorted partitions (the first ``P mod M`` one more).  Topics without partitions
    (unknown to the cluster) assign nothing.
    """
    subs = {m: set(ts) for m, ts in subscriptions.items()}
    topics = sorted({t for ts in subs.values() for t in ts})
    assigned = _assign_topics({topic: [m for m in subs if topic in subs[m]] for topic in topics},
                              partitions)
    return {m: assigned.get(m, {}) for m in subs}


def assign_round_robin(subscriptions: Mapping[str, Iterable[str]],
                       partitions: Mapping[str, Iterable[int]]
                       ) -> dict[str, dict[str, list[int]]]:
    """Kafka's ``RoundRobinAssignor``: every topic's partitions, sorted by topic then
    partition, dealt in turn to the members sorted by id, each skipping the members not
    subscribed to its topic.  The sizes differ by at most one when every member subscribes
    to the same topics."""
    subs = {m: set(ts) for m, ts in subscriptions.items()}
    members = sorted(subs)
    out: dict[str, dict[str, list[int]]] = {m: {} for m in members}
    turn = 0
    for topic in sorted({t for ts in subs.values() for t in ts}):
        for partition in sorted(set(partitions.get(topic, ()))):
            while topic not in subs[members[turn % len(members)]]:
                turn += 1
            out[members[turn % len(members)]].setdefault(topic, []).append(partition)
            turn += 1
    return out


def assign_sticky(subscriptions: Mapping[str, Iterable[str]],
                  partitions: Mapping[str, Iterable[int]],
                  owned: Mapping[str, Iterable[tuple[str, int]]] | None = None
                  ) -> dict[str, dict[str, list[int]]]:
    """A sticky assignment (Kafka's ``StickyAssignor`` goals): balanced, and moving as few
    of the ``owned`` partitions (``{member id: [(topic, partition)]}``) as balance allows.

    Each member keeps what it owns that still exists and that it still subscribes to (a
    partition two members claim stays with the first by member id); what nobody keeps goes,
    in order, to the least loaded member subscribed to its topic; then, while some member
    holds two more partitions than another that could take one of them, one moves.  When
    every member subscribes to the same topics, loads end within one of each other.
    """
    subs = {m: set(ts) for m, ts in subscriptions.items()}
    members = sorted(subs)
    every = [(t, p) for t in sorted({t for ts in subs.values() for t in ts})
             for p in sorted(set(partitions.get(t, ())))]
    eligible = {tp: [m for m in members if tp[0] in subs[m]] for tp in every}
    mine: dict[str, list[tuple[str, int]]] = {m: [] for m in members}
    taken: set[tuple[str, int]] = set()
    for m in members:
        for tp in sorted(set((owned or {}).get(m, ()))):
            if tp not in taken and m in eligible.get(tp, ()):
                mine[m].append(tp)
                taken.add(tp)
    for tp in every:
        if tp not in taken and eligible[tp]:
            least = min(eligible[tp], key=lambda m: (len(mine[m]), m))
            mine[least].append(tp)
    moved = True
    while moved:  # each move lowers the sum of squared loads: this ends
        moved = False
        for donor in sorted(members, key=lambda m: (-len(mine[m]), m)):
            for tp in reversed(mine[donor]):
                takers = [m for m in eligible[tp] if len(mine[m]) < len(mine[donor]) - 1]
                if takers:
                    taker = min(takers, key=lambda m: (len(mine[m]), m))
                    mine[donor].remove(tp)
                    mine[taker].append(tp)
                    moved = True
                    break
            if moved:
                break
    out: dict[str, dict[str, list[int]]] = {m: {} for m in members}
    for m, tps in mine.items():
        for topic, partition in sorted(tps):
            out[m].setdefault(topic, []).append(partition)
    return out


def cooperative_plan(plan: Mapping[str, Mapping[str, Iterable[int]]],
                     owned: Mapping[str, Iterable[tuple[str, int]]]
                     ) -> dict[str, dict[str, list[int]]]:
    """KIP-429's cooperative step: a partition that moves to another member is left out of
    this round, so its owner gives it up first (it sees it missing and revokes it); the
    next rebalance, which that owner asks for, hands it to its new member."""
    owner = {tp: m for m, tps in owned.items() for tp in tps}
    return {m: {t: [p for p in ps if owner.get((t, p), m) == m]
                for t, ps in assigned.items()}
            for m, assigned in plan.items()}


#: An assignor: ``{member id: subscribed topics}``, ``{topic: partitions}``,
#: ``{member id: owned (topic, partition)s}`` -> ``{member id: {topic: [partitions]}}``
#: with every member present.
Assignor = Callable[[Mapping[str, Iterable[str]], Mapping[str, Iterable[int]],
                     Mapping[str, Iterable[tuple[str, int]]]],
                    dict[str, dict[str, list[int]]]]


def _cooperative_sticky(subscriptions: Mapping[str, Iterable[str]],
                        partitions: Mapping[str, Iterable[int]],
                        owned: Mapping[str, Iterable[tuple[str, int]]]
                        ) -> dict[str, dict[str, list[int]]]:
    return cooperative_plan(assign_sticky(subscriptions, partitions, owned), owned)


#: The assignors a group member can offer, by the protocol names every Kafka client uses.
ASSIGNORS: dict[str, Assignor] = {
    "range": lambda subscriptions, partitions, _owned: assign_members(subscriptions,
                                                                      partitions),
    "roundrobin": lambda subscriptions, partitions, _owned: assign_round_robin(
        subscriptions, partitions),
    "sticky": assign_sticky,
    "cooperative-sticky": _cooperative_sticky,
}
def check_assignors(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` as a tuple, or ``ValueError`` naming those trilog does not have."""
    chosen = tuple(names)
    unknown = [a for a in chosen if a not in ASSIGNORS]
    if unknown or not chosen:
        raise ValueError(f"partition_assignment_strategy: unknown assignor(s) {unknown}; "
                         f"trilog has {sorted(ASSIGNORS)}")
    return chosen


#: Assignors of KIP-429's cooperative protocol: members keep their partitions while the
#: group rebalances and give up only those that move.
COOPERATIVE_ASSIGNORS = frozenset({"cooperative-sticky"})
#: Assignors that read the owned partitions of the subscriptions (sent as v1).
STICKY_ASSIGNORS = frozenset({"sticky", "cooperative-sticky"})


def _assign_topics(subscribers: Mapping[str, Iterable[str]],
                   partitions: Mapping[str, Iterable[int]]) -> dict[str, dict[str, list[int]]]:
    """``{topic: subscriber ids}`` -> ``{subscriber: {topic: [partitions]}}``, each topic
    range-assigned over its subscribers; a subscriber that gets nothing is left out."""
    result: dict[str, dict[str, list[int]]] = {}
    for topic, ids in subscribers.items():
        for subscriber, parts in assign_ranges(partitions.get(topic, ()), ids).items():
            if parts:
                result.setdefault(subscriber, {})[topic] = parts
    return result


def spread_over_streams(assigned: Mapping[str, Iterable[int]],
                        streams: Mapping[str, int] | int) -> dict[tuple[str, int], int]:
    """Which of a member's streams gets each of its partitions: ``{(topic, p): index}``.

    Kafka assigns to members; a trilog member with several streams deals its partitions
    round robin: per topic over that topic's streams (``streams`` a mapping, ``topics=``),
    or over all its partitions in order (``streams`` a count, a topic filter).
    """
    out: dict[tuple[str, int], int] = {}
    if isinstance(streams, int):
        tps = sorted((t, p) for t, ps in assigned.items() for p in ps)
        for i, tp in enumerate(tps):
            out[tp] = i % max(streams, 1)
        return out
    for topic in sorted(assigned):
        count = streams.get(topic, 0)
        if count <= 0:
            continue  # not ours to read (a leader assigned a topic we did not ask for)
        for i, p in enumerate(sorted(assigned[topic])):
            out[(topic, p)] = i % count
    return out


@dataclass(frozen=True)
class TopicFilter:
    """A regular expression over topic names (seed: ``createMessageStreamsByFilter``)."""

    pattern: str

    def __post_init__(self) -> None:
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise ValueError(f"bad topic filter {self.pattern!r}: {exc}") from None

    #: the name written in the consumer's registration ("pattern" field)
    kind = "static"

    def matches(self, topic: str) -> bool:
        raise NotImplementedError

    def select(self, topics: Iterable[str]) -> list[str]:
        # Internal topics are never matched by a filter, as in Kafka.
        return sorted(t for t in topics if not t.startswith("__") and self.matches(t))


@dataclass(frozen=True)
class Whitelist(TopicFilter):
    """Topics whose whole name matches ``pattern``."""

    kind = "white_list"

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True)
class Blacklist(TopicFilter):
    """Every topic except those whose whole name matches ``pattern``."""

    kind = "black_list"

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is None
