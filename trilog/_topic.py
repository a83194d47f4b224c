"""Topics and partitions as every layer names them: Kafka's rule for topic names, the
partition of a topic (pure)."""

from __future__ import annotations

import re
from typing import NamedTuple

from trilog.errors import InvalidTopicError

MAX_TOPIC_NAME_LENGTH = 249


class TopicPartition(NamedTuple):
    """A partition of a topic, as Kafka's clients name it (``trilog.TopicPartition``)."""

    topic: str
    partition: int


#: What the broker and storage key a partition by: a ``(topic, partition)`` tuple.  A
#: ``TopicPartition`` is one (they hash and compare alike); plain tuples are what the hot
#: paths build, for less than a named tuple costs.
PartitionKey = tuple[str, int]

_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")


def validate_topic_name(name: object) -> str:
    """Return ``name`` if it is a legal topic name, else raise ``InvalidTopicError``.

    Legal: 1-249 characters from ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``.  This is also
    what keeps a partition directory inside its log dir: no separator can get through.
    """
    if not isinstance(name, str):
        raise InvalidTopicError(f"topic name must be a string, not {type(name).__name__}")
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name is {len(name)} characters long; the limit is {MAX_TOPIC_NAME_LENGTH}"
        )
    if not _LEGAL.fullmatch(name):
        bad = sorted({c for c in name if not _LEGAL.fullmatch(c)})
        raise InvalidTopicError(
            f"topic name {name!r} contains illegal characters {''.join(bad)!r}; "
            "allowed are ASCII letters, digits, '.', '_' and '-'"
        )
    return name
