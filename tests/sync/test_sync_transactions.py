"""trilog.sync's transactions: kafka-python's names on the blocking producer, and the
blocking consumer's ``group_metadata()`` for a consume-transform-produce loop in a script.
Against a broker without a transaction coordinator the module is skipped."""

from __future__ import annotations

import pytest

import trilog.sync as ts
from trilog.client import (
    AbortableTransactionError,
    OffsetAndMetadata,
    TopicPartition,
    TransactionStateError,
)
from trilog.errors import ProducerFencedError


@pytest.fixture
def bootstrap(broker_process):
    broker = broker_process(overrides={"num.partitions": 1})
    with ts.SimpleConsumer(broker.bootstrap) as probe:
        versions = probe._portal.run(_api_versions, probe._consumer)
    if 26 not in versions:  # EndTxn
        pytest.skip("the broker has no transaction coordinator (EndTxn)")
    return broker.bootstrap


async def _api_versions(consumer):
    conn = await consumer._client.any_connection()
    return conn.api_versions


def committed_values(bootstrap: str, topic: str) -> list[bytes]:
    with ts.SimpleConsumer(bootstrap, isolation_level="read_committed") as c:
        (end,) = c.offsets_before(topic, 0)
        return [r.value for r in c.iterate(topic, 0, 0, end_offset=end)]


def test_a_script_commits_and_aborts(bootstrap):
    with ts.Producer(bootstrap, transactional_id="sync-tx", linger_ms=1) as producer:
        with pytest.raises(TransactionStateError, match="init_transactions"):
            producer.begin_transaction()
        producer.init_transactions()
        with pytest.raises(TransactionStateError, match="begin_transaction"):
            producer.send("sync-out", b"outside")  # refused at once, in the caller's thread
        producer.begin_transaction()
        kept = [producer.send("sync-out", b"kept-%d" % i) for i in range(3)]
        producer.commit_transaction()  # takes in what send() queued before it
        assert [d.get(timeout=10).offset for d in kept] == [0, 1, 2]
        producer.begin_transaction()
        producer.send("sync-out", b"dropped")
        producer.flush()
        producer.abort_transaction()
    assert committed_values(bootstrap, "sync-out") == [b"kept-0", b"kept-1", b"kept-2"]


def test_consume_transform_produce_in_a_script(bootstrap):
    with ts.Producer(bootstrap) as plain:
        for i in range(6):
            plain.send("sync-in", b"%d" % i)
    with ts.Consumer("sync-in", bootstrap_servers=bootstrap, group_id="sync-ctp",
                     enable_auto_commit=False, auto_offset_reset="earliest",
                     isolation_level="read_committed") as consumer, \
            ts.Producer(bootstrap, transactional_id="sync-ctp-tx", linger_ms=1) as producer:
        producer.init_transactions()
        metadata = consumer.group_metadata()
        assert metadata.group_id == "sync-ctp" and metadata.member_id
        assert metadata.generation_id >= 1
        taken: list = []
        while len(taken) < 6:
            for records in consumer.poll(timeout_ms=500).values():
                taken += records
        producer.begin_transaction()
        for r in taken:
            producer.send("sync-done", r.value + b"!")
        producer.send_offsets_to_transaction(
            {TopicPartition("sync-in", 0): OffsetAndMetadata(taken[-1].offset + 1)},
            consumer.group_metadata())
        producer.commit_transaction()
        assert consumer.committed(("sync-in", 0)) == 6
        # a fenced member's offsets: a stale generation makes the transaction abortable
        producer.begin_transaction()
        stale = metadata._replace(generation_id=metadata.generation_id + 100)
        with pytest.raises(AbortableTransactionError, match="moved on"):
            producer.send_offsets_to_transaction({("sync-in", 0): 3}, stale)
        producer.abort_transaction()
        assert consumer.committed(("sync-in", 0)) == 6
    assert committed_values(bootstrap, "sync-done") == [b"%d!" % i for i in range(6)]


def test_a_fenced_script_is_told_so(bootstrap):
    with ts.Producer(bootstrap, transactional_id="sync-fence", linger_ms=1) as first:
        first.init_transactions()
        first.begin_transaction()
        first.send("sync-fenced", b"zombie")
        first.flush()
        with ts.Producer(bootstrap, transactional_id="sync-fence") as second:
            second.init_transactions()
        with pytest.raises(ProducerFencedError, match="took over"):
            first.commit_transaction()
        with pytest.raises(ProducerFencedError):
            first.begin_transaction()
    assert committed_values(bootstrap, "sync-fenced") == []
