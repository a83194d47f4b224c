"""Scripts written for kafka-python and aiokafka, ported line by line to trilog (the sync
facade and the trio API), behave the same on the same topic: the same records, the same
commits, the same positions after seeks.  Each script runs in a process of its own against
one broker; only the lines that name the library (and asyncio's start/stop against trio's
``async with``) differ."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import trio
from group_helpers import produce

from trilog.broker import open_broker

pytestmark = pytest.mark.slow

# The scenario, in kafka-python's words: read 30 records, commit, look at the committed
# offset and the position, seek back, poll a few, seek to the beginning, read one.
KAFKA_PYTHON = """
import json, sys, warnings
warnings.simplefilter("ignore")
{imports}

consumer = KafkaConsumer("ported", bootstrap_servers=sys.argv[1], group_id=sys.argv[2],
                         auto_offset_reset="earliest", enable_auto_commit=False,
                         consumer_timeout_ms=10000)
records = []
for record in consumer:
    records.append([record.partition, record.offset, record.key.decode(), record.value.decode()])
    if len(records) == 30:
        break
consumer.commit()
tp = TopicPartition("ported", 0)
out = {{"records": records, "committed": consumer.committed(tp), "position": consumer.position(tp)}}
consumer.seek(tp, 5)
out["after_seek"] = consumer.position(tp)
batch = {{}}
while not batch:
    batch = consumer.poll(timeout_ms=5000, max_records=3)
out["polled"] = [[r.offset, r.value.decode()] for rs in batch.values() for r in rs]
consumer.seek_to_beginning(tp)
out["beginning"] = consumer.position(tp)
out["first"] = next(consumer).offset
out["end"] = consumer.end_offsets([tp])[tp]
consumer.close()
print(json.dumps(out))
"""

KAFKA_PYTHON_IMPORTS = "from kafka import KafkaConsumer, TopicPartition"
TRILOG_SYNC_IMPORTS = ("from trilog.sync import Consumer as KafkaConsumer\n"
                       "from trilog import TopicPartition")

# The same in aiokafka's words, and its trio port.
AIOKAFKA = """
import asyncio, json, sys
from aiokafka import AIOKafkaConsumer, TopicPartition

async def main():
    consumer = AIOKafkaConsumer("ported", bootstrap_servers=sys.argv[1], group_id=sys.argv[2],
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
{body}
    finally:
        await consumer.stop()
    print(json.dumps(out))

asyncio.run(main())
"""

TRIO = """
import json, sys, trio
import trilog
from trilog import TopicPartition

async def main():
    async with trilog.open_consumer("ported", bootstrap_servers=sys.argv[1], group_id=sys.argv[2],
                                    auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
{body}
    print(json.dumps(out))

trio.run(main)
"""

ASYNC_BODY = """
records = []
async for record in consumer:
    records.append([record.partition, record.offset, record.key.decode(), record.value.decode()])
    if len(records) == 30:
        break
await consumer.commit()
tp = TopicPartition("ported", 0)
out = {"records": records, "committed": await consumer.committed(tp),
       "position": await consumer.position(tp)}
consumer.seek(tp, 5)
out["after_seek"] = await consumer.position(tp)
batch = {}
while not batch:
    batch = await consumer.getmany(tp, timeout_ms=5000, max_records=3)
out["polled"] = [[r.offset, r.value.decode()] for rs in batch.values() for r in rs]
await consumer.seek_to_beginning(tp)
out["beginning"] = await consumer.position(tp)
out["first"] = (await consumer.getone()).offset
out["end"] = (await consumer.end_offsets([tp]))[tp]
"""


def run_script(source: str, bootstrap: str, group: str) -> dict:
    done = subprocess.run([sys.executable, "-c", source, bootstrap, group],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


EXPECTED = {
    "records": [[0, i, str(i), str(i)] for i in range(30)],
    "committed": 30, "position": 30, "after_seek": 5,
    "polled": [[5, "5"], [6, "6"], [7, "7"]],
    "beginning": 0, "first": 0, "end": 50,
}


@pytest.fixture
async def broker(tmp_path):
    async with open_broker({"port": 0, "log.dirs": str(tmp_path / "data"),
                            "group.initial.rebalance.delay.ms": 0,
                            "offsets.topic.num.partitions": 1}) as b:
        await produce(b.bootstrap, "ported", 50, partitions=1)
        yield b


@pytest.mark.parametrize("name, source", [
    ("kafka-python", KAFKA_PYTHON.format(imports=KAFKA_PYTHON_IMPORTS)),
    ("trilog.sync", KAFKA_PYTHON.format(imports=TRILOG_SYNC_IMPORTS)),
    ("aiokafka", AIOKAFKA.format(body=textwrap.indent(ASYNC_BODY, " " * 8))),
    ("trilog (trio)", TRIO.format(body=textwrap.indent(ASYNC_BODY, " " * 8))),
])
async def test_a_ported_script_behaves_as_the_original(broker, name, source):
    out = await trio.to_thread.run_sync(run_script, source, broker.bootstrap, f"g-{name}")
    assert out == EXPECTED, name
