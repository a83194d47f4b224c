"""``trilog perf produce`` / ``trilog perf consume``: load tests in the style of Kafka's
``kafka-producer-perf-test.sh`` and ``kafka-consumer-perf-test.sh``.

The producer side sends with ``send_nowait`` (``send`` only when ``buffer_memory`` is full)
and measures each record's latency from just before its send to its acknowledgement.  Cheaply:
the send time of every record goes into a list beside its ``Delivery``, and a collector task
walks the deliveries in send order, waiting only on the oldest unfinished one; when it wakes,
every delivery already done is stamped with that one clock reading.  Within a partition
batches complete in order, so this is exact per batch; with several partitions a record can
be stamped late by the time an earlier-sent record of another partition took (the figure
never under-reports).  Percentiles come from at most 500,000 samples, as Kafka's.  Python's
cyclic garbage collector is paused meanwhile (see ``run_produce``).
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import string
import sys
import time
from array import array
from collections.abc import Iterator
from contextlib import contextmanager

import trio

from trilog.cli._common import (
    UsageError,
    add_cluster_args,
    add_producer_args,
    cancel_on_sigint,
    cluster_kwargs,
    producer_kwargs,
    run_tool,
)
from trilog.cli._consume import resolve_offsets
from trilog.client import (
    EARLIEST,
    LATEST,
    BufferFullError,
    Delivery,
    Producer,
    open_producer,
    open_simple_consumer,
)
from trilog.errors import TrilogError

MB = 1024 * 1024
_MAX_SAMPLES = 500_000
#: seconds between progress lines: redrawn in place on a terminal, and printed to stderr,
#: one under the other, when stdout is not a terminal (a log, a CI job)
_PROGRESS_S = 1.0
_LOGGED_PROGRESS_S = 5.0


def add_parser(sub) -> None:
    p = sub.add_parser(
        "perf",
        description="Load tests in the style of Kafka's kafka-producer-perf-test.sh and "
        "kafka-consumer-perf-test.sh. `trilog perf produce --help` and "
        "`trilog perf consume --help` for each.",
    )
    which = p.add_subparsers(dest="perf_command", metavar="{produce,consume}", required=True)

    pp = which.add_parser(
        "produce",
        help="send records as fast as allowed; report throughput and latency",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Send --num-records records of --record-size bytes (one random payload of\n"
            "letters, no key) to --topic, at most --throughput records/s, then print:\n\n"
            "  N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency,\n"
            "  P50 ms 50th, P95 ms 95th, P99 ms 99th, P999 ms 99.9th.\n\n"
            "Latency is from the send to the acknowledgement (acks=0: to the request's\n"
            "write). MB is 2**20 bytes of values. Progress (done/total, rate, time left)\n"
            "is a line updated every second on a terminal, else a line on stderr every 5 s.\n"
            "Ctrl-C stops the run and prints the summary of what was sent (exit status\n"
            "130). Exit status 1 if any record failed."
        ),
    )
    pp.add_argument("--topic", required=True, help="the topic to write")
    pp.add_argument("--num-records", type=int, required=True, metavar="N",
                    help="how many records to send")
    pp.add_argument("--record-size", type=int, required=True, metavar="BYTES",
                    help="the size of each record's value")
    pp.add_argument("--throughput", type=float, default=-1, metavar="R",
                    help="at most R records/s; -1 for no limit (default -1)")
    add_cluster_args(pp)
    add_producer_args(pp)
    pp.add_argument("--buffer-memory", type=int, default=32 << 20, metavar="BYTES",
                    help="bytes of records waiting to be sent (default 33554432)")
    pp.set_defaults(run=run_produce)

    pc = which.add_parser(
        "consume",
        help="read records as fast as possible; report throughput",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Read --messages records of --topic (every partition, or --partition), from the\n"
            "earliest offset (--from-latest: only new records), with one multifetch per\n"
            "round for all partitions, each record decoded. Then print:\n\n"
            "  N records consumed, R records/sec (M MB/sec), S MB in T s, F fetches.\n\n"
            "MB counts keys and values (2**20 bytes). Progress (done/total, rate, time\n"
            "left) is a line updated every second on a terminal, else a line on stderr\n"
            "every 5 s. Ctrl-C stops the run and prints the summary of what was read (exit\n"
            "status 130). Exit status 1 if --timeout-ms passed without a record before\n"
            "--messages were read."
        ),
    )
    pc.add_argument("--topic", required=True, help="the topic to read")
    pc.add_argument("--messages", type=int, required=True, metavar="N",
                    help="how many records to read")
    add_cluster_args(pc)
    pc.add_argument("--partition", type=int, metavar="P", help="read only partition P")
    pc.add_argument("--from-latest", action="store_true",
                    help="start at the end of each partition (default: the earliest offset)")
    pc.add_argument("--fetch-size", type=int, default=1 << 20, metavar="BYTES",
                    help="bytes per partition per fetch (default 1048576)")
    pc.add_argument("--timeout-ms", type=int, default=10_000, metavar="MS",
                    help="give up when no record arrived for MS ms (default 10000)")
    pc.set_defaults(run=run_consume)


def _check_positive(**values) -> None:
    for name, value in values.items():
        if value is not None and value <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive")


def _on_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """Where progress lines go: redrawn in place on stdout when it is a terminal (every
    second), else printed to stderr every few seconds, so that stdout keeps only the
    summary."""

    def __init__(self) -> None:
        self.terminal = _on_terminal()
        self.interval = _PROGRESS_S if self.terminal else _LOGGED_PROGRESS_S
        self.started = time.perf_counter()

    def show(self, line: str) -> None:
        if self.terminal:
            sys.stdout.write("\r\x1b[K" + line)
            sys.stdout.flush()
        else:
            print(line, file=sys.stderr, flush=True)

    def end(self) -> None:
        """Before the summary: the terminal's progress line is cleared."""
        if self.terminal:
            sys.stdout.write("\r\x1b[K")


def progress_line(done: int, total: int, what: str, rate: float, elapsed: float,
                  detail: str = "") -> str:
    """``1500/3000 records sent (50.0%), 1498.2 records/sec<detail>, 1 s left``: the rate
    is the last interval's, the time left comes from the run's average so far."""
    share = 100.0 * done / total if total else 100.0
    average = done / elapsed if elapsed > 0 else 0.0
    left = (total - done) / average if average > 0 else None
    return (f"{done}/{total} records {what} ({share:.1f}%), {rate:.1f} records/sec{detail}, "
            f"{time_left(left)}")


def time_left(seconds: float | None) -> str:
    if seconds is None:
        return "time left unknown"
    s = round(seconds)
    if s < 60:
        return f"{s} s left"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s left"
    return f"{s // 3600} h {s % 3600 // 60:02d} min left"


# -- perf produce -------------------------------------------------------------------------------


def run_produce(args) -> int:
    # The tool keeps one Delivery per record in flight (hundreds of thousands at full speed)
    # to time each record.  Python's cyclic garbage collector would walk them over and over,
    # halving the rate it measures; the tool makes no reference cycles worth collecting, so
    # the collector is off while it runs.  (An application that keeps a Delivery per record
    # pays that cost too; see docs/client.md.)
    with _cyclic_gc_paused():
        return run_tool("trilog perf produce", _produce, args)


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class LatencyStats:
    """Latencies in seconds: count, sum, max, a window for progress lines, and samples
    (every ``sample_every``-th record) for percentiles."""

    def __init__(self, num_records: int) -> None:
        self.sample_every = max(1, math.ceil(num_records / _MAX_SAMPLES))
        self.samples = array("d")
        self.count = 0
        self.total = 0.0
        self.max = 0.0
        self.failed = 0
        self.window_count = 0
        self.window_total = 0.0
        self.window_max = 0.0

    def percentiles(self, *ps: float) -> list[float]:
        ordered = sorted(self.samples)
        if not ordered:
            return [0.0] * len(ps)
        return [ordered[min(len(ordered) - 1, int(p * len(ordered)))] for p in ps]

    def take_window(self) -> tuple[int, float, float]:
        window = (self.window_count, self.window_total, self.window_max)
        self.window_count, self.window_total, self.window_max = 0, 0.0, 0.0
        return window


async def _collect(stats: LatencyStats, sent_at: list, deliveries: list, sending_done,
                   on_error) -> None:
    """Stamp acknowledgements in send order (see the module docstring).

    ``sent_at[i]`` and ``deliveries[i]`` are record i's send time and ``Delivery``; the
    stamped prefix is cut off both lists now and then.  Per record only ``done()`` and
    ``exception()`` run in Python: sums, maxima and samples are taken over slices.
    """
    pc = time.perf_counter
    every = stats.sample_every
    head = 0  # the first record not stamped yet
    while True:
        if head == len(deliveries):
            if sending_done() and head == len(deliveries):
                return
            await trio.sleep(0.001)
            continue
        first = deliveries[head]
        if not first.done():
            try:
                await first.wait()
            except TrilogError:
                pass
        else:
            await trio.lowlevel.checkpoint()
        now = pc()
        end, limit = head, len(deliveries)
        while end < limit and deliveries[end].done():
            end += 1
        failed = {i for i in range(head, end) if deliveries[i].exception() is not None}
        for i in sorted(failed):
            on_error(deliveries[i].exception())
        times = sent_at[head:end]
        if failed:  # failed records count in no latency figure
            times = [t for i, t in enumerate(times, head) if i not in failed]
        count = len(times)
        total = now * count - sum(times)
        peak = now - times[0] if times else 0.0  # the oldest: records are in send order
        stats.samples.extend(now - t for t in times[(-stats.count - 1) % every::every])
        stats.count += count
        stats.window_count += count
        stats.window_total += total
        stats.window_max = max(stats.window_max, peak)
        stats.max = max(stats.max, peak)
        stats.total += total
        stats.failed += len(failed)
        head = end
        if head >= 65536:  # drop the stamped prefix (amortized: once per 64 Ki records)
            del deliveries[:head], sent_at[:head]
            head = 0


def produce_summary(sent: int, elapsed: float, record_size: int, stats: LatencyStats) -> str:
    rate = sent / elapsed if elapsed > 0 else 0.0
    avg = stats.total / stats.count * 1000 if stats.count else 0.0
    p50, p95, p99, p999 = (x * 1000 for x in stats.percentiles(0.5, 0.95, 0.99, 0.999))
    return (f"{sent} records sent, {rate:.1f} records/sec ({rate * record_size / MB:.2f} MB/sec), "
            f"{avg:.2f} ms avg latency, {stats.max * 1000:.2f} ms max latency, "
            f"{p50:.2f} ms 50th, {p95:.2f} ms 95th, {p99:.2f} ms 99th, {p999:.2f} ms 99.9th.")


async def _produce(args) -> int:
    _check_positive(num_records=args.num_records, record_size=None,
                    buffer_memory=args.buffer_memory)
    if args.record_size < 0:
        raise UsageError("--record-size must not be negative")
    if args.throughput == 0:
        raise UsageError("--throughput must be positive, or -1 for no limit")
    kwargs = producer_kwargs(args)
    n, topic = args.num_records, args.topic
    payload = "".join(random.choices(string.ascii_uppercase, k=args.record_size)).encode()
    stats = LatencyStats(n)
    sent_at: list[float] = []
    deliveries: list[Delivery] = []
    errors: dict[str, int] = {}
    progress = Progress()
    state = {"sent": 0}

    def on_error(exc: BaseException) -> None:
        text = str(exc)
        errors[text] = errors.get(text, 0) + 1
        if errors[text] == 1 and len(errors) <= 10:
            print(f"\ntrilog perf produce: {text}", file=sys.stderr, flush=True)

    # Ctrl-C cancels `stop`: whatever is under way (finding the topic, sending, the final
    # flush) ends there, the records not acknowledged yet are no longer timed, and the
    # summary says what was done.  The producer's close still delivers what it holds.
    stop = trio.CancelScope()
    finished = trio.Event()  # every record is sent and flushed: the progress line ends too
    elapsed = 0.0
    async with trio.open_nursery() as outer:
        await outer.start(cancel_on_sigint, stop)
        async with open_producer(**kwargs, buffer_memory=args.buffer_memory,
                                 client_id="trilog-perf-producer") as producer:
            pc = time.perf_counter
            t0 = None
            with stop:
                # connect and learn the partitions off the clock
                await producer.partitions_for(topic)
                t0 = pc()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_collect, stats, sent_at, deliveries, finished.is_set,
                                       on_error)
                    nursery.start_soon(_produce_progress, progress, stats, state, n,
                                       args.record_size, finished)
                    await _send_paced(producer, topic, payload, n, args.throughput, t0,
                                      sent_at, deliveries, state)
                    await producer.flush()
                    finished.set()
                    # the collector stamps the last acknowledgements and returns
            if t0 is not None:
                elapsed = pc() - t0
        outer.cancel_scope.cancel()
    progress.end()
    sent = state["sent"]
    print(produce_summary(sent, elapsed, args.record_size, stats), flush=True)
    if stop.cancelled_caught:
        print(f"trilog perf produce: interrupted after {sent} of {n} records", file=sys.stderr)
        return 130
    if stats.failed:
        print(f"trilog perf produce: {stats.failed} of {sent} records failed", file=sys.stderr)
        return 1
    return 0


async def _send_paced(producer: Producer, topic: str, payload: bytes, n: int,
                      throughput: float, t0: float, sent_at: list[float],
                      deliveries: list[Delivery], state: dict[str, int]) -> None:
    """Send ``n`` records, at most ``throughput`` a second from ``t0`` (<= 0: no limit),
    appending each one's send time and ``Delivery``; ``state["sent"]`` counts them."""
    pc = time.perf_counter
    send, send_wait = producer.send_nowait, producer.send
    add_time, add_delivery = sent_at.append, deliveries.append
    rate = throughput if throughput > 0 else None
    chunk = 256 if rate is None else max(1, min(256, int(rate // 100)))
    i = 0
    while i < n:
        end = min(n, i + chunk)
        while i < end:
            t = pc()
            try:
                d = send(topic, payload)
            except BufferFullError:
                d = await send_wait(topic, payload)
            add_time(t)
            add_delivery(d)
            i += 1
        state["sent"] = i
        if rate is not None:
            ahead = i / rate - (pc() - t0)
            if ahead > 0:
                await trio.sleep(ahead)
                continue
        await trio.lowlevel.checkpoint()


async def _produce_progress(progress: Progress, stats: LatencyStats, state: dict, total: int,
                            record_size: int, finished: trio.Event) -> None:
    last, last_t = 0, time.perf_counter()
    while await _wait_for_tick(progress, finished):
        now = time.perf_counter()
        sent = state["sent"]
        count, latency, peak = stats.take_window()
        rate = (sent - last) / (now - last_t)
        avg = latency / count * 1000 if count else 0.0
        progress.show(progress_line(
            sent, total, "sent", rate, now - progress.started,
            f" ({rate * record_size / MB:.2f} MB/sec), {avg:.1f} ms avg latency, "
            f"{peak * 1000:.1f} ms max latency"))
        last, last_t = sent, now


async def _wait_for_tick(progress: Progress, finished: trio.Event) -> bool:
    """Wait for the next progress line: True when it is due, False when the run finished
    (the progress task then returns, so the run's nursery can close)."""
    with trio.move_on_after(progress.interval):
        await finished.wait()
    return not finished.is_set()


# -- perf consume -----------------------------------------------------------------------------------


def run_consume(args) -> int:
    return run_tool("trilog perf consume", _consume, args)


def consume_summary(count: int, nbytes: int, elapsed: float, fetches: int) -> str:
    rate = count / elapsed if elapsed > 0 else 0.0
    mb_rate = nbytes / MB / elapsed if elapsed > 0 else 0.0
    return (f"{count} records consumed, {rate:.1f} records/sec ({mb_rate:.2f} MB/sec), "
            f"{nbytes / MB:.2f} MB in {elapsed:.2f} s, {fetches} fetches.")


async def _consume(args) -> int:
    from trilog.cli._consume import wait_for_topic

    _check_positive(messages=args.messages, fetch_size=args.fetch_size,
                    timeout_ms=args.timeout_ms)
    topic, wanted = args.topic, args.messages
    progress = Progress()
    state = {"count": 0, "bytes": 0}
    fetches = 0
    timed_out = False
    elapsed = 0.0
    # As in perf produce: Ctrl-C cancels `stop`, and the summary says what was read.
    stop = trio.CancelScope()
    finished = trio.Event()
    async with trio.open_nursery() as outer:
        await outer.start(cancel_on_sigint, stop)
        async with open_simple_consumer(**cluster_kwargs(args),
                                        client_id="trilog-perf-consumer") as consumer:
            pc = time.perf_counter
            t0 = idle_since = None
            with stop:
                partitions, _ = await wait_for_topic(consumer, topic, args.timeout_ms,
                                                     "trilog perf consume")
                if args.partition is not None:
                    if args.partition not in partitions:
                        raise UsageError(f"topic {topic!r} has no partition {args.partition}")
                    partitions = (args.partition,)
                positions = await resolve_offsets(consumer, topic, partitions,
                                                  LATEST if args.from_latest else EARLIEST)
                size = args.fetch_size
                t0 = idle_since = pc()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_consume_progress, progress, state, wanted, finished)
                    count = nbytes = 0
                    while count < wanted:
                        left = args.timeout_ms / 1000 - (pc() - idle_since)
                        if left <= 0:
                            timed_out = True
                            break
                        results = await consumer.multifetch(
                            [(topic, p, positions[p], size) for p in partitions],
                            max_wait_ms=min(500, int(left * 1000)), min_bytes=1)
                        fetches += 1
                        before = count
                        for fetched in results:
                            for rec in fetched:
                                value, key = rec.value, rec.key
                                nbytes += (len(value) if value is not None else 0) + \
                                          (len(key) if key is not None else 0)
                                count += 1
                                if count >= wanted:
                                    break
                            positions[fetched.partition] = fetched.next_offset
                            if count >= wanted:
                                break
                        if count > before:
                            idle_since = pc()
                        state["count"], state["bytes"] = count, nbytes
                    finished.set()
            if t0 is not None and idle_since is not None:
                # a timed-out run is timed up to its last record, not through the idle wait
                elapsed = (idle_since if timed_out else pc()) - t0
        outer.cancel_scope.cancel()
    progress.end()
    count = state["count"]
    print(consume_summary(count, state["bytes"], elapsed, fetches), flush=True)
    if stop.cancelled_caught:
        print(f"trilog perf consume: interrupted after {count} of {wanted} records",
              file=sys.stderr)
        return 130
    if timed_out:
        print(f"trilog perf consume: only {count} of {wanted} records: none arrived "
              f"for {args.timeout_ms} ms", file=sys.stderr)
        return 1
    return 0


async def _consume_progress(progress: Progress, state: dict, total: int,
                            finished: trio.Event) -> None:
    last, last_bytes, last_t = 0, 0, time.perf_counter()
    while await _wait_for_tick(progress, finished):
        now = time.perf_counter()
        count, nbytes = state["count"], state["bytes"]
        dt = now - last_t
        progress.show(progress_line(count, total, "consumed", (count - last) / dt,
                                    now - progress.started,
                                    f" ({(nbytes - last_bytes) / MB / dt:.2f} MB/sec)"))
        last, last_bytes, last_t = count, nbytes, now
