"""Choosing a partition for a record (seed 002, "Semantic partitioning").

Keyed records go where the Java client puts them: ``murmur2(key) & 0x7fffffff % n``, so the
same key lands on the same partition whichever Kafka client wrote it.  Unkeyed records stick
to one random available partition per batch (the producer calls ``DefaultPartitioner.
batch_done`` when a batch of a topic is closed), which keeps batches full.  An application's
own partitioner takes trilog's two arguments or kafka-python's three (``positional_arity``
tells which).  Pure functions.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable, Sequence
from typing import Any

from trilog.records._native import speedups

_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def _murmur2(data: bytes) -> int:
    """Kafka's murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``), as a signed int32."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    end4 = length & ~3
    for i in range(0, end4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[end4 + 2] << 16
    if rest >= 2:
        h ^= data[end4 + 1] << 8
    if rest >= 1:
        h ^= data[end4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


#: Kafka's murmur2: the C accelerator's when it is built (the same function, ~50x faster).
murmur2 = speedups.murmur2 if speedups is not None else _murmur2


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


#: ``partitioner(key, partitions) -> partition`` (the key after serialization), or
#: kafka-python's ``partitioner(key, all_partitions, available_partitions)``
Partitioner = (Callable[[bytes | None, tuple[int, ...]], int]
               | Callable[[bytes | None, tuple[int, ...], tuple[int, ...]], int])


def positional_arity(fn: Callable[..., Any]) -> int:
    """How many positional arguments ``fn`` takes (``*args``: many)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: the two-argument form
        return 2
    kinds = [p.kind for p in parameters]
    if inspect.Parameter.VAR_POSITIONAL in kinds:
        return 3
    return sum(k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
               for k in kinds)


class DefaultPartitioner:
    """murmur2 for keys; a sticky random partition per topic for unkeyed records.

    The sticky choice is made among the partitions that have a leader, and made again each
    time a batch of the topic closes (so a partition that loses its leader is left behind
    at the next batch).
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        #: topic -> the partition unkeyed records go to until its batch closes
        self.sticky: dict[str, int] = {}
        self._rng = rng or random.Random()

    def partition(self, topic: str, key: bytes | None, partitions: Sequence[int],
                  available: Sequence[int]) -> int:
        if key is not None:
            return partitions[partition_for_key(key, len(partitions))]
        current = self.sticky.get(topic)
        if current is None:
            choices = available or partitions
            current = choices[self._rng.randrange(len(choices))]
            self.sticky[topic] = current
        return current

    def batch_done(self, topic: str, partition: int) -> None:
        """A batch of ``topic`` on ``partition`` was closed: pick another next time."""
        if self.sticky.get(topic) == partition:
            del self.sticky[topic]
