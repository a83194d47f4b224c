"""Transactions end to end, against a real broker process: trilog's transactional producer
commits and aborts, and trilog's, kafka-python's and confluent-kafka's consumers read what
their isolation level lets them; a second producer with the same transactional id fences
the first; a consume-transform-produce loop moves its input offsets and its output records
together (``send_offsets_to_transaction``); a prepared transaction, left open at close, is
ended by its ids without its producer (``prepare_transaction``, ``end_transaction``).

The broker needs its transaction coordinator (and, for read_committed, the log's last stable
offset and aborted-transaction index): against one without, the module is skipped.
"""

from __future__ import annotations

import pytest
import trio
from client_helpers import create_topic
from kafka_helpers import consume_partitions, kafka_consumer

import trilog
from trilog.client import (
    AbortableTransactionError,
    TopicPartition,
    TransactionAbortedError,
    TransactionStateError,
    end_transaction,
    open_client,
)
from trilog.errors import InvalidTxnStateError, ProducerFencedError
from trilog.protocol import ApiKey

TP = TopicPartition


@pytest.fixture
async def txn_broker(broker_process):
    """A standalone broker with a transaction coordinator (else the test is skipped)."""
    broker = broker_process(overrides={"num.partitions": 1})
    async with open_client(broker.bootstrap) as client:
        conn = await client.any_connection()
        if ApiKey.END_TXN not in conn.api_versions:
            pytest.skip("the broker has no transaction coordinator (EndTxn)")
    return broker


def producer(broker, transactional_id: str, **kw):
    return trilog.open_producer(broker.bootstrap, transactional_id=transactional_id,
                                linger_ms=1, request_timeout_ms=15_000, **kw)


async def committed_and_aborted(broker, topic: str, tid: str) -> tuple[set, set]:
    """Commit c0..c4 in two transactions around an aborted one (a0..a2, written before
    the abort): the committed values and every value."""
    await create_topic(broker.bootstrap, topic, 2)
    async with producer(broker, tid) as p:
        await p.init_transactions()
        p.begin_transaction()
        for i in range(4):
            await p.send(topic, b"c%d" % i, partition=i % 2)
        await p.commit_transaction()
        p.begin_transaction()
        aborted = [await p.send(topic, b"a%d" % i, partition=i % 2) for i in range(3)]
        await p.flush()  # in the log, then aborted
        assert all(d.result().offset >= 0 for d in aborted)
        await p.abort_transaction()
        p.begin_transaction()
        await p.send(topic, b"c4", partition=0)
        await p.commit_transaction()
    committed = {b"c%d" % i for i in range(5)}
    return committed, committed | {b"a0", b"a1", b"a2"}


async def read_all(broker, topic: str, isolation_level: str) -> list[bytes]:
    """Every record of both partitions, with trilog's simple consumer."""
    async with trilog.open_simple_consumer(broker.bootstrap,
                                           isolation_level=isolation_level) as consumer:
        out = []
        for p in (0, 1):
            (end,) = await consumer.offsets_before(topic, p)
            offset = 0
            while offset < end:
                fetched = await consumer.fetch(topic, p, offset)
                out += [r.value for r in fetched]
                assert fetched.next_offset > offset
                offset = fetched.next_offset
        return out


async def test_each_isolation_level_sees_what_it_should(txn_broker):
    committed, everything = await committed_and_aborted(txn_broker, "views", "tx-views")
    assert sorted(await read_all(txn_broker, "views", "read_committed")) == sorted(committed)
    assert sorted(await read_all(txn_broker, "views", "read_uncommitted")) == \
        sorted(everything)
    # Kafka's consumer, read_committed: the records, then positioned past the last marker
    async with trilog.open_consumer(bootstrap_servers=txn_broker.bootstrap,
                                    isolation_level="read_committed",
                                    auto_offset_reset="earliest") as consumer:
        consumer.assign([TP("views", 0), TP("views", 1)])
        seen = []
        with trio.fail_after(20):
            while len(seen) < len(committed):
                seen += [r.value for rs in (await consumer.getmany(timeout_ms=500)).values()
                         for r in rs]
        assert sorted(seen) == sorted(committed)
        assert await consumer.getmany(timeout_ms=300) == {}  # nothing aborted comes later
        ends = await consumer.end_offsets([TP("views", 0), TP("views", 1)])
        for tp, end in ends.items():
            assert await consumer.position(tp) == end  # past the COMMIT marker
    # kafka-python
    for level, expected in (("read_committed", committed), ("read_uncommitted", everything)):
        consumer = kafka_consumer(txn_broker.bootstrap, isolation_level=level)
        try:
            got = await trio.to_thread.run_sync(
                consume_partitions, consumer, "views", [0, 1], len(expected))
        finally:
            consumer.close()
        assert sorted(r.value for rs in got.values() for r in rs) == sorted(expected), level
    # confluent-kafka
    for level, expected in (("read_committed", committed), ("read_uncommitted", everything)):
        got = await trio.to_thread.run_sync(confluent_read, txn_broker.bootstrap, "views",
                                            level, len(expected))
        assert sorted(got) == sorted(expected), level


def confluent_read(bootstrap: str, topic: str, level: str, expected: int) -> list[bytes]:
    import time

    from confluent_kafka import Consumer, TopicPartition as CTP

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{level}",
                         "isolation.level": level, "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100})
    consumer.assign([CTP(topic, p, 0) for p in (0, 1)])
    out: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(out) < expected and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and not m.error():
                out.append(m.value())
        for _ in range(3):  # nothing more than that
            m = consumer.poll(0.1)
            if m is not None and not m.error():
                out.append(m.value())
    finally:
        consumer.close()
    return out


async def test_a_second_producer_fences_the_first(txn_broker):
    await create_topic(txn_broker.bootstrap, "fenced", 1)
    async with producer(txn_broker, "tx-fence") as first:
        await first.init_transactions()
        first.begin_transaction()
        delivery = await first.send("fenced", b"zombie")
        await first.flush()
        assert delivery.result().offset == 0
        async with producer(txn_broker, "tx-fence") as second:
            await second.init_transactions()  # fences the first, aborts its transaction
            with pytest.raises(ProducerFencedError,
                               match="another producer with the same transactional id"):
                await first.commit_transaction()
            for call in (first.begin_transaction, first.abort_transaction,
                         first.commit_transaction):
                with pytest.raises(ProducerFencedError):
                    await _call(call)
            with pytest.raises(ProducerFencedError):
                first.send_nowait("fenced", b"more")
            second.begin_transaction()
            await second.send("fenced", b"survivor")
            await second.commit_transaction()
    assert await read_all_one(txn_broker, "fenced", "read_committed") == [b"survivor"]


async def _call(call):
    result = call()
    if hasattr(result, "__await__"):
        await result


async def read_all_one(broker, topic: str, level: str) -> list[bytes]:
    async with trilog.open_simple_consumer(broker.bootstrap, isolation_level=level) as c:
        (end,) = await c.offsets_before(topic, 0)
        out, offset = [], 0
        while offset < end:
            fetched = await c.fetch(topic, 0, offset)
            out += [r.value for r in fetched]
            offset = fetched.next_offset
        return out


async def test_consume_transform_produce_moves_offsets_and_output_together(txn_broker):
    b = txn_broker.bootstrap
    await create_topic(b, "ctp-in", 1)
    await create_topic(b, "ctp-out", 1)
    async with trilog.open_producer(b) as plain:
        for i in range(10):
            await plain.send("ctp-in", b"%d" % i)
    async with trilog.open_consumer("ctp-in", bootstrap_servers=b, group_id="ctp",
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    isolation_level="read_committed") as consumer, \
            producer(txn_broker, "tx-ctp") as p:
        await p.init_transactions()

        async def one_round(n: int, commit: bool) -> None:
            p.begin_transaction()
            taken = []
            with trio.fail_after(20):
                while len(taken) < n:
                    batch = await consumer.getmany(timeout_ms=200, max_records=n - len(taken))
                    taken += [r for rs in batch.values() for r in rs]
            for r in taken:
                await p.send("ctp-out", b"x" + r.value)
            await p.send_offsets_to_transaction(
                {TP("ctp-in", 0): taken[-1].offset + 1}, consumer.group_metadata())
            if commit:
                await p.commit_transaction()
            else:
                await p.flush()  # the output in the log, then aborted
                await p.abort_transaction()
                consumer.seek(TP("ctp-in", 0), taken[0].offset)  # read them again

        await one_round(4, commit=True)
        assert await consumer.committed(TP("ctp-in", 0)) == 4
        await one_round(3, commit=False)
        assert await consumer.committed(TP("ctp-in", 0)) == 4  # the abort moved nothing
        await one_round(6, commit=True)
        assert await consumer.committed(TP("ctp-in", 0)) == 10
    assert await read_all_one(txn_broker, "ctp-out", "read_committed") == \
        [b"x%d" % i for i in range(10)]
    assert len(await read_all_one(txn_broker, "ctp-out", "read_uncommitted")) == 13


async def test_the_api_says_what_is_wrong(txn_broker):
    b = txn_broker.bootstrap
    async with trilog.open_producer(b) as plain:
        assert not plain.transactional
        for call in (plain.init_transactions, plain.begin_transaction,
                     plain.commit_transaction, plain.abort_transaction):
            with pytest.raises(TransactionStateError, match="transactional_id"):
                await _call(call)
    await create_topic(b, "rules", 1)
    async with producer(txn_broker, "tx-rules", max_request_size=3_000_000) as p:
        with pytest.raises(TransactionStateError, match=r"init_transactions\(\) first"):
            p.begin_transaction()
        await p.init_transactions()
        with pytest.raises(TransactionStateError, match=r"begin_transaction\(\) first"):
            await p.send("rules", b"outside")
        with pytest.raises(TransactionStateError, match="begin_transaction"):
            await p.commit_transaction()
        p.begin_transaction()
        unsent = p.send_nowait("rules", b"never sent")
        await p.abort_transaction()
        with pytest.raises(TransactionAbortedError):
            unsent.result()
        # an abortable failure: a record the broker finds too large (message.max.bytes)
        p.begin_transaction()
        await p.send("rules", b"fine")
        big = await p.send("rules", b"x" * 2_000_000)
        with pytest.raises(AbortableTransactionError):
            await p.commit_transaction()
        assert big.exception() is not None
        await p.abort_transaction()
        p.begin_transaction()  # the producer goes on
        await p.send("rules", b"after")
        await p.commit_transaction()
    assert await read_all_one(txn_broker, "rules", "read_committed") == [b"after"]


async def test_closing_aborts_a_transaction_left_open(txn_broker):
    await create_topic(txn_broker.bootstrap, "left", 1)
    async with producer(txn_broker, "tx-left") as p:
        await p.init_transactions()
        p.begin_transaction()
        await p.send("left", b"left open")
        await p.flush()
    # aborted at close, not after transaction_timeout_ms: the partition is stable now
    async with trilog.open_simple_consumer(txn_broker.bootstrap,
                                           isolation_level="read_committed") as c:
        with trio.fail_after(10):
            while (await c.offsets_before("left", 0)) != [2]:  # the record and its marker
                await trio.sleep(0.05)
    assert await read_all_one(txn_broker, "left", "read_committed") == []


async def _stable(broker, topic: str, end: int) -> None:
    """Wait until read_committed can read up to ``end`` (the transaction has ended)."""
    async with trilog.open_simple_consumer(broker.bootstrap,
                                           isolation_level="read_committed") as c:
        with trio.fail_after(10):
            while (await c.offsets_before(topic, 0)) != [end]:
                await trio.sleep(0.05)


async def test_a_prepared_transaction_is_ended_without_its_producer(txn_broker):
    await create_topic(txn_broker.bootstrap, "two-phase", 1)
    prepared = []
    for i, tid in enumerate(("tx-2pc-commit", "tx-2pc-abort")):
        async with producer(txn_broker, tid) as p:
            await p.init_transactions()
            p.begin_transaction()
            await p.send("two-phase", b"p%d" % i)
            prepared.append(await p.prepare_transaction())
            with pytest.raises(TransactionStateError, match="prepared"):
                p.begin_transaction()
        # closed: left open, the partition stays unstable
    assert [t.transactional_id for t in prepared] == ["tx-2pc-commit", "tx-2pc-abort"]
    assert not any(t.empty for t in prepared)
    assert await read_all_one(txn_broker, "two-phase", "read_committed") == []
    async with open_client(txn_broker.bootstrap) as client:
        for _ in range(2):  # a repeat is answered as done
            await end_transaction(client, prepared[0], commit=True)
            await end_transaction(client, prepared[1], commit=False)
        with pytest.raises(InvalidTxnStateError):
            await end_transaction(client, prepared[0], commit=False)
    await _stable(txn_broker, "two-phase", 4)  # two records, two markers
    assert await read_all_one(txn_broker, "two-phase", "read_committed") == [b"p0"]


async def test_init_transactions_aborts_a_prepared_transaction(txn_broker):
    await create_topic(txn_broker.bootstrap, "two-phase-2", 1)
    async with producer(txn_broker, "tx-2pc-fenced") as p:
        await p.init_transactions()
        p.begin_transaction()
        await p.send("two-phase-2", b"prepared")
        prepared = await p.prepare_transaction()
    async with producer(txn_broker, "tx-2pc-fenced") as p:
        await p.init_transactions()  # a new attempt: aborts the prepared one
    async with open_client(txn_broker.bootstrap) as client:
        with pytest.raises(ProducerFencedError):
            await end_transaction(client, prepared, commit=True)
    await _stable(txn_broker, "two-phase-2", 2)
    assert await read_all_one(txn_broker, "two-phase-2", "read_committed") == []


async def test_the_groups_tool_counts_read_committed_lag_to_the_last_stable_offset(txn_broker):
    """``open_group_admin(isolation_level=...)`` / ``trilog groups --isolation-level``: with a
    transaction open, read_committed lag stops at the last stable offset."""
    from cli_helpers import cli

    topic, group = "lagged", "lag-group"
    await create_topic(txn_broker.bootstrap, topic, 1)
    async with trilog.open_producer(txn_broker.bootstrap, linger_ms=1) as plain:
        for i in range(3):
            await plain.send_and_wait(topic, b"p%d" % i, partition=0)
    async with trilog.open_consumer(topic, bootstrap_servers=txn_broker.bootstrap,
                                    group_id=group, auto_offset_reset="earliest",
                                    enable_auto_commit=False) as consumer:
        for _ in range(3):
            await consumer.getone()
        await consumer.commit()
    async with producer(txn_broker, "lag-tid") as p:
        await p.init_transactions()
        p.begin_transaction()
        for i in range(4):
            await p.send(topic, b"t%d" % i, partition=0)
        await p.flush()  # four records of an open transaction after the committed offset

        async def lag(level: str) -> int | None:
            async with trilog.client.open_group_admin(txn_broker.bootstrap,
                                                      isolation_level=level) as admin:
                (part,) = (await admin.describe_group(group)).partitions
                return part.lag

        assert await lag("read_uncommitted") == 4
        assert await lag("read_committed") == 0
        shown = await cli("groups", "--bootstrap-server", txn_broker.bootstrap, "--describe",
                          "--group", group, "--isolation-level", "read_committed")
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        header = next(line.split() for line in lines if "LAG" in line.split())
        row = next(line.split() for line in lines if topic in line.split())
        assert row[header.index("LOG-END-OFFSET")] == "3"  # the last stable offset
        assert row[header.index("LAG")] == "0"  # the open transaction is not counted
        await p.abort_transaction()
    with pytest.raises(ValueError, match="isolation_level"):
        trilog.client.open_group_admin(txn_broker.bootstrap, isolation_level="dirty")
