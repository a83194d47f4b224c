"""examples/page_views runs: batch counts, a re-run from a point in time, the streaming twin."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

import trilog.sync as ts

EXAMPLE = Path(__file__).parents[2] / "examples" / "page_views" / "page_views.py"
HOUR = 3_600_000
START = 1_714_564_800_000  # 2024-05-01T12:00:00Z


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("page_views_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _events(bootstrap, topic="page_views"):
    with ts.SimpleConsumer(bootstrap) as consumer:
        for p in consumer.partitions_for(topic):
            end = consumer.offsets_before(topic, p)[0]
            for record in consumer.iterate(topic, p, 0, end_offset=end):
                yield json.loads(record.value)


def _expected(events, since=0, before=None):
    return Counter((e["member_id"], (e["ts"] // HOUR) * HOUR) for e in events
                   if e["ts"] >= since and (before is None or e["ts"] < before))


def _got(spark, path):
    return {(r.member_id, int(r.hour.timestamp() * 1000)): r.views
            for r in spark.read.parquet(str(path)).collect()}


def test_page_views_batch_and_stream(spark, broker, example, tmp_path):
    example.produce(broker.bootstrap, 1500, members=20, start_ms=START, span_hours=4)
    events = list(_events(broker.bootstrap))
    assert len(events) == 1500

    example.run_batch(spark, broker.bootstrap, str(tmp_path / "all"))
    assert _got(spark, tmp_path / "all") == _expected(events)
    since = START + 2 * HOUR
    example.run_batch(spark, broker.bootstrap, str(tmp_path / "recent"), since_ms=since)
    assert _got(spark, tmp_path / "recent") == _expected(events, since=since)

    out, ckpt = tmp_path / "stream", tmp_path / "ckpt"
    query = example.start_stream(spark, broker.bootstrap, str(out), str(ckpt), once=True,
                                 max_per_trigger=400)
    query.awaitTermination(120)
    assert query.exception() is None
    # Hours the watermark (newest event - 10 min) has passed are final; the last is open.
    assert _got(spark, out) == _expected(events, before=START + 3 * HOUR)

    example.produce(broker.bootstrap, 300, members=20, start_ms=START + 4 * HOUR, span_hours=1,
                    seed=8)
    events = list(_events(broker.bootstrap))
    query = example.start_stream(spark, broker.bootstrap, str(out), str(ckpt), once=True)
    query.awaitTermination(120)
    assert query.exception() is None
    assert _got(spark, out) == _expected(events, before=START + 4 * HOUR)
