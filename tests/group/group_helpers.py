"""Helpers shared by the group-consumer tests."""

from __future__ import annotations

import trilog


async def produce(bootstrap, topic, n, partitions=8, start=0):
    """Create ``topic`` (if new) and send values ``start .. start+n-1``, keyed by value."""
    async with trilog.open_admin(bootstrap) as admin:
        try:
            await admin.create_topic(topic, partitions)
        except trilog.ApiError as exc:
            if exc.code != 36:  # TOPIC_ALREADY_EXISTS
                raise
    async with trilog.open_producer(bootstrap) as producer:
        for i in range(start, start + n):
            await producer.send(topic, b"%d" % i, key=b"%d" % i)


async def drain(stream, out, limit=None):
    """Append a stream's records to ``out`` until it ends (or ``limit`` records)."""
    async for record in stream:
        out.append(record)
        if limit is not None and len(out) >= limit:
            return
