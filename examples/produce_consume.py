"""Produce some keyed records with trilog's producer and read them back with the simple
consumer.  Starts nothing itself: run a broker first, e.g.

    trilog broker --port 9092 --log-dir /tmp/trilog-example
    python examples/produce_consume.py --bootstrap-server 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import json
import sys

import trio

import trilog


async def produce(bootstrap: str, topic: str, count: int) -> dict[int, int]:
    """Send ``count`` JSON events keyed by user; return how many went to each partition."""
    per_partition: dict[int, int] = {}

    async with trilog.open_producer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=5,  # wait up to 5 ms to fill a batch
        key_serializer=str.encode,  # keys are str here, values dicts
        value_serializer=lambda v: json.dumps(v).encode(),
    ) as producer:
        deliveries = []
        for i in range(count):
            user = f"user-{i % 4}"  # the same key always lands in the same partition
            # ``send`` queues the record and returns at once with a Delivery: a future.
            deliveries.append(await producer.send(topic, {"n": i, "user": user}, key=user))
        await producer.flush()  # everything sent so far is acknowledged (or failed)
        for delivery in deliveries:
            meta = delivery.result()  # raises the record's error if it failed
            per_partition[meta.partition] = per_partition.get(meta.partition, 0) + 1

        # One record, waiting for its acknowledgement: the synchronous style.
        meta = await producer.send_and_wait(topic, {"n": count, "user": "last"}, key="last")
        print(f"the last record is at {meta.topic}-{meta.partition}@{meta.offset}")
        per_partition[meta.partition] = per_partition.get(meta.partition, 0) + 1
    return per_partition


async def consume(bootstrap: str, topic: str) -> int:
    """Read every partition of ``topic`` from the beginning; return the records read."""
    total = 0
    async with trilog.open_simple_consumer(
        bootstrap_servers=bootstrap,
        key_deserializer=bytes.decode,
        value_deserializer=json.loads,
    ) as consumer:
        for partition in await consumer.partitions_for(topic):
            (first,) = await consumer.offsets_before(topic, partition, trilog.EARLIEST)
            (end,) = await consumer.offsets_before(topic, partition, trilog.LATEST)
            print(f"partition {partition}: offsets {first}..{end - 1}")
            offset = first
            while offset < end:  # fetch until the end seen above
                fetched = await consumer.fetch(topic, partition, offset)
                for record in fetched:
                    if total < 5:
                        print(f"  {record.partition}@{record.offset} key={record.key} "
                              f"value={record.value}")
                    total += 1
                offset = fetched.next_offset
    return total


async def main(bootstrap: str, topic: str, count: int) -> int:
    written = await produce(bootstrap, topic, count)
    print(f"produced {sum(written.values())} records: {dict(sorted(written.items()))} "
          f"per partition")
    read = await consume(bootstrap, topic)
    print(f"read {read} records back")
    return 0 if read >= sum(written.values()) else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", default="127.0.0.1:9092",
                        help="a broker (default 127.0.0.1:9092)")
    parser.add_argument("--topic", default="example-events", help="default example-events")
    parser.add_argument("--count", type=int, default=100, help="records to send (default 100)")
    args = parser.parse_args()
    try:
        sys.exit(trio.run(main, args.bootstrap_server, args.topic, args.count))
    except trilog.TrilogError as exc:
        sys.exit(f"produce_consume: {exc}")
