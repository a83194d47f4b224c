"""Helpers shared by the group-consumer tests."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from contextlib import contextmanager

import trio

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


@contextmanager
def script_processes(script, args, n):
    """``n`` processes of ``python -c script *args``, each printing one JSON object a line:
    yields ``(procs, lines)``, ``lines[i]`` filling with process i's objects (a reader thread
    each).  On the way out each one still running is terminated, and all are waited for."""
    procs = [subprocess.Popen([sys.executable, "-c", script, *args],
                              stdout=subprocess.PIPE, text=True) for _ in range(n)]
    lines: list[list[dict]] = [[] for _ in procs]

    def pump(i: int) -> None:  # one thread per process: its stdout into lines[i]
        for line in procs[i].stdout:
            lines[i].append(json.loads(line))

    readers = [threading.Thread(target=pump, args=(i,), daemon=True) for i in range(n)]
    for reader in readers:
        reader.start()
    try:
        yield procs, lines
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
            p.wait(20)
            p.stdout.close()


async def check_cancel_mid_record_resumes_at_that_record(bootstrap, opts):
    """A consumer cancelled in the middle of record 20 has committed 0..19 (auto-commit every
    50 ms): the next one reads 20..49, so nothing is lost or seen again.  ``opts``: how the
    group is coordinated (everything but the topics and the commit interval)."""
    await produce(bootstrap, "work", 50, partitions=1)
    processed = []
    opts = {**opts, "topics": {"work": 1}, "auto_commit_interval_ms": 50}
    with trio.move_on_after(10) as scope:
        async with trilog.open_consumer_connector("c", **opts) as consumer:
            async for record in consumer.streams["work"][0]:
                if record.offset == 20:
                    scope.cancel()
                    await trio.sleep(1)  # cancelled here, mid-record: 20 is not processed
                processed.append(record.offset)
    # Messages: pytest does not rewrite the asserts of this module.
    assert scope.cancelled_caught, "the consumer stopped before it was cancelled"
    assert processed == list(range(20)), processed
    async with trilog.open_consumer_connector("c", **opts, consumer_timeout_ms=1000) as consumer:
        rest = [r.offset async for r in consumer.streams["work"][0]]
    assert rest == list(range(20, 50)), rest  # no loss, and nothing processed is seen again
