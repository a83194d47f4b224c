"""SIGKILL a broker in the middle of a produce stream, restart it on the same log dir.

Every acknowledged record (acks=1) must survive, the log must be a valid prefix of what
was sent (contiguous offsets, valid CRCs, no garbage), and appends continue after it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import deque

import pytest
from broker_helpers import (
    connect,
    create_topic,
    fetch_all,
    only_partition,
    produce,
    produce_request,
    read_response,
    roundtrip,
    send_request,
)

from trilog import protocol as p
from trilog.records import GZIP, NONE, build_batch

TOPIC = "crash"


def _value(i: int) -> bytes:
    return b"record-%07d|" % i + bytes([i % 251]) * (i % 200)


BATCH = 25
PIPELINE = 8


@pytest.mark.parametrize("kill_after_acks, compression", [(2_000, NONE), (6_000, GZIP)])
def test_sigkill_mid_stream_keeps_every_acknowledged_record(broker_process, tmp_path,
                                                            kill_after_acks, compression):
    log_dir = tmp_path / "data"
    broker = broker_process(log_dir, overrides={"log.flush.interval.messages": 1})
    with connect(broker.bootstrap) as sock:
        create_topic(sock, TOPIC)

    acked: dict[int, int] = {}  # offset -> record number
    killer_go = threading.Event()

    def killer():
        killer_go.wait(60)
        os.kill(broker.proc.pid, signal.SIGKILL)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    # A pipelining acks=1 producer: PIPELINE requests of BATCH records in flight, so the
    # kill lands with requests half-written, written but unanswered, and answered.
    sent = 0
    inflight: deque[tuple[int, int]] = deque()  # (correlation id, first record number)
    deadline = time.monotonic() + 60
    try:
        with connect(broker.bootstrap) as sock:
            while True:
                assert time.monotonic() < deadline, f"only {len(acked)} acks after 60 s"
                while len(inflight) < PIPELINE:
                    data = build_batch([(int(time.time() * 1000), None, _value(i))
                                        for i in range(sent, sent + BATCH)],
                                       compression_type=compression)
                    inflight.append((send_request(sock, produce_request(TOPIC, 0, data), 3),
                                     sent))
                    sent += BATCH
                corr, first = inflight.popleft()
                part = only_partition(read_response(sock, p.ProduceRequest, 3, corr))
                assert part.error_code == 0, part
                for k in range(BATCH):
                    acked[part.base_offset + k] = first + k
                if len(acked) >= kill_after_acks:
                    killer_go.set()
    except (AssertionError, OSError) as exc:
        if not killer_go.is_set():
            raise
        # The broker is gone: its answer was cut short or the socket broke.
        assert isinstance(exc, OSError) or "closed the connection" in str(exc), exc
    finally:
        killer_go.set()
        thread.join(10)
    broker.proc.wait(10)
    assert broker.proc.returncode == -signal.SIGKILL
    acked_now = acked
    assert len(acked_now) >= kill_after_acks
    assert sent > len(acked_now), "the kill should have landed with records unacknowledged"

    restarted = broker_process(log_dir)
    with connect(restarted.bootstrap) as sock:
        records = fetch_all(sock, TOPIC, 0)
        n = len(records)
        # A valid prefix of what was sent: offset i holds record i, nothing else.
        assert [r.offset for r in records] == list(range(n))
        bad = [r.offset for r in records if r.value != _value(r.offset)]
        assert not bad, f"records with wrong contents at offsets {bad[:10]}"
        # Every acknowledged record is there.
        assert n >= max(acked_now) + 1, (n, max(acked_now))
        for offset, i in acked_now.items():
            assert offset == i, f"the broker acknowledged record {i} at offset {offset}"
        # Appends continue right after the recovered log.
        base = produce(sock, TOPIC, 0, [b"after-1", b"after-2"])
        assert base == n
        tail = fetch_all(sock, TOPIC, 0, start=n)
        assert [(r.offset, r.value) for r in tail] == [(n, b"after-1"), (n + 1, b"after-2")]
    assert restarted.stop() == 0

    # And once more after a clean restart: same log, nothing lost, nothing recovered away.
    again = broker_process(log_dir)
    with connect(again.bootstrap) as sock:
        assert len(fetch_all(sock, TOPIC, 0)) == n + 2


@pytest.mark.parametrize("how", ["clean", "sigkill"])
def test_an_idempotent_batch_resent_across_a_restart_is_not_written_twice(broker_process,
                                                                           tmp_path, how):
    """The broker rebuilds its producers' sequence numbers from the log when it restarts,
    so the retry of a batch whose acknowledgement was lost is recognized."""
    from trilog.records import RecordBatchBuilder

    now = int(time.time() * 1000)

    def idempotent(seq: int, n: int = 4) -> bytes:
        # Timestamps of now: a producer whose last batch is older than
        # producer.id.expiration.ms (a day) is forgotten when its log opens, as in Kafka.
        builder = RecordBatchBuilder(producer_id=4242, producer_epoch=0, base_sequence=seq)
        for i in range(n):
            builder.append(now + i, None, b"seq-%d" % (seq + i))
        return builder.build()

    log_dir = tmp_path / "idem"
    broker = broker_process(log_dir, overrides={"log.flush.interval.messages": 1})
    with connect(broker.port) as sock:
        create_topic(sock, "idem")
        for seq in (0, 4, 8):
            result = only_partition(roundtrip_produce(sock, idempotent(seq)))
            assert (result.error_code, result.base_offset) == (0, seq)
    if how == "sigkill":
        os.kill(broker.proc.pid, signal.SIGKILL)
        broker.proc.wait(10)
    else:
        assert broker.stop() == 0
    restarted = broker_process(log_dir)
    with connect(restarted.port) as sock:
        # The last batch again (its acknowledgement was "lost"): the original offset, no copy.
        again = only_partition(roundtrip_produce(sock, idempotent(8)))
        assert (again.error_code, again.base_offset) == (0, 8)
        # A gap is still refused, and the next batch goes on where the producer left off.
        gap = only_partition(roundtrip_produce(sock, idempotent(20)))
        assert gap.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        after = only_partition(roundtrip_produce(sock, idempotent(12)))
        assert (after.error_code, after.base_offset) == (0, 12)
        values = [r.value for r in fetch_all(sock, "idem", 0)]
    assert values == [b"seq-%d" % i for i in range(16)]


def roundtrip_produce(sock, records: bytes):
    return roundtrip(sock, produce_request("idem", 0, records), 3)
