"""Page views through trilog and Spark: produce events, count views per member per hour.

Three commands, each against the broker given by ``--bootstrap-server`` (default
127.0.0.1:9092; start one with ``.venv/bin/trilog broker`` or ``make run``):

    # 1. produce page-view events to the topic page_views (keyed by member id, JSON values)
    .venv/bin/python examples/page_views/page_views.py produce --events 20000

    # 2. a batch job: views per member per hour, written as Parquet.  Re-runnable from a
    #    point in time: --since reads only records stamped at or after it (startingTimestamp)
    .venv/bin/python examples/page_views/page_views.py batch --output /tmp/page_views/hourly
    .venv/bin/python examples/page_views/page_views.py batch --output /tmp/page_views/recent \\
        --since 2024-05-01T12:00:00

    # 3. the same as a streaming query with a checkpoint: rerun it and it goes on where it
    #    stopped (--once: process what is there now and stop, i.e. Trigger.AvailableNow)
    .venv/bin/python examples/page_views/page_views.py stream --output /tmp/page_views/stream \\
        --checkpoint /tmp/page_views/checkpoint --once

Events are ``{"member_id": "m17", "page": "/jobs", "ts": 1714565123000}``; each record's
timestamp is the event's ``ts``, so ``startingTimestamp`` selects by event time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import sys
import time

TOPIC = "page_views"
PAGES = ("/", "/feed", "/jobs", "/profile", "/messages", "/search", "/notifications")
EVENT_SCHEMA = "member_id string, page string, ts long"


# -- producing -------------------------------------------------------------------------------


def produce(bootstrap: str, events: int, members: int = 100, start_ms: int | None = None,
            span_hours: float = 6, seed: int = 7, topic: str = TOPIC) -> int:
    """Send ``events`` page views spread over ``span_hours`` from ``start_ms``, in time order;
    every one acknowledged.  Returns how many were sent."""
    import trilog.sync as ts

    rng = random.Random(seed)
    if start_ms is None:
        start_ms = int(time.time() * 1000) - int(span_hours * 3_600_000)
    step = span_hours * 3_600_000 / max(events, 1)
    with ts.Producer(bootstrap, linger_ms=5) as producer:
        deliveries = []
        for i in range(events):
            member = f"m{rng.randrange(members)}"
            event_ms = start_ms + int(i * step)
            value = json.dumps({"member_id": member, "page": rng.choice(PAGES), "ts": event_ms})
            deliveries.append(producer.send(topic, value.encode(), member.encode(),
                                            timestamp_ms=event_ms))
        producer.flush()
        for delivery in deliveries:
            delivery.get(timeout=60)
    return events


# -- the Spark side --------------------------------------------------------------------------


def spark_session(master: str = "local[*]"):
    from pyspark.sql import SparkSession

    import trilog.spark

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(master).appName("page-views")
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    trilog.spark.register(spark)
    return spark


def page_views(df):
    """The trilog rows -> ``member_id, page, event_time`` (JSON values parsed)."""
    from pyspark.sql import functions as F

    event = F.from_json(F.col("value").cast("string"), EVENT_SCHEMA)
    return (df.select(event.alias("e"))
            .select("e.member_id", "e.page", F.timestamp_millis("e.ts").alias("event_time")))


def hourly_counts(views):
    """``member_id, hour, views``: page views per member per hour."""
    from pyspark.sql import functions as F

    return (views.groupBy("member_id", F.date_trunc("hour", "event_time").alias("hour"))
            .agg(F.count("*").alias("views")))


def run_batch(spark, bootstrap: str, output: str, since_ms: int | None = None,
              topic: str = TOPIC) -> int:
    """Count the whole topic (or what was stamped at or after ``since_ms``) into Parquet at
    ``output`` (replaced).  Returns the number of (member, hour) rows written."""
    reader = (spark.read.format("trilog").option("bootstrap.servers", bootstrap)
              .option("subscribe", topic))
    if since_ms is not None:
        reader = reader.option("startingTimestamp", str(since_ms))
    counts = hourly_counts(page_views(reader.load()))
    counts.write.mode("overwrite").partitionBy("hour").parquet(output)
    return spark.read.parquet(output).count()


def start_stream(spark, bootstrap: str, output: str, checkpoint: str, once: bool = False,
                 topic: str = TOPIC, max_per_trigger: int | None = None):
    """The streaming twin: hourly windows, emitted to Parquet once the watermark (10 minutes
    behind the newest event seen) passes their end.  The checkpoint makes a restart resume
    with no gap and no duplicate; the Parquet sink commits each micro-batch once."""
    from pyspark.sql import functions as F

    reader = (spark.readStream.format("trilog").option("bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    if max_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_per_trigger))
    counts = (page_views(reader.load()).withWatermark("event_time", "10 minutes")
              .groupBy("member_id", F.window("event_time", "1 hour"))
              .agg(F.count("*").alias("views"))
              .select("member_id", F.col("window.start").alias("hour"), "views"))
    writer = (counts.writeStream.format("parquet").outputMode("append")
              .option("path", output).option("checkpointLocation", checkpoint))
    writer = writer.trigger(availableNow=True) if once else \
        writer.trigger(processingTime="10 seconds")
    return writer.start()


# -- command line ----------------------------------------------------------------------------


def _time_ms(text: str) -> int:
    """Milliseconds since the epoch, or an ISO date-time (UTC unless it says otherwise)."""
    if text.isdigit():
        return int(text)
    moment = datetime.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    parser.add_argument("--topic", default=TOPIC)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("produce", help="send page-view events")
    p.add_argument("--events", type=int, default=10_000)
    p.add_argument("--members", type=int, default=100)
    p.add_argument("--start", type=_time_ms, help="first event's time (default: 6 h ago)")
    p.add_argument("--hours", type=float, default=6, help="time the events span")
    b = commands.add_parser("batch", help="count views per member per hour into Parquet")
    b.add_argument("--output", required=True)
    b.add_argument("--since", type=_time_ms, help="only records at/after this time")
    s = commands.add_parser("stream", help="the same as a streaming query")
    s.add_argument("--output", required=True)
    s.add_argument("--checkpoint", required=True)
    s.add_argument("--once", action="store_true", help="Trigger.AvailableNow, then stop")
    s.add_argument("--max-per-trigger", type=int)
    args = parser.parse_args(argv)

    if args.command == "produce":
        n = produce(args.bootstrap_server, args.events, args.members, args.start, args.hours,
                    topic=args.topic)
        print(f"sent {n} page views to {args.topic}")
        return 0
    spark = spark_session()
    spark.sparkContext.setLogLevel("WARN")
    try:
        if args.command == "batch":
            rows = run_batch(spark, args.bootstrap_server, args.output, args.since, args.topic)
            print(f"wrote {rows} (member, hour) counts to {args.output}")
        else:
            query = start_stream(spark, args.bootstrap_server, args.output, args.checkpoint,
                                 args.once, args.topic, args.max_per_trigger)
            try:
                query.awaitTermination()
            except KeyboardInterrupt:
                query.stop()
            print(f"streamed counts are in {args.output}")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
