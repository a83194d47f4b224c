"""``make run``'s broker (``trilog broker`` without a properties file) is a development
broker, as Kafka's quickstart server.properties makes one; with a file the properties keep
Kafka's defaults."""

from __future__ import annotations

import subprocess
import sys

from trilog.cli._broker import DEVELOPMENT_DEFAULTS, build_config

# The program, as a kafka-python user writes it from Kafka's quickstart: 100
# records, then a group consumer that gives up after 3 s of nothing.
KAFKA_PYTHON_PROGRAM = """
from kafka import KafkaConsumer, KafkaProducer
producer = KafkaProducer(bootstrap_servers="127.0.0.1:9092")
for i in range(100):
    producer.send("t", str(i).encode())
producer.flush()
consumer = KafkaConsumer("t", group_id="g", bootstrap_servers="127.0.0.1:9092",
                         auto_offset_reset="earliest", consumer_timeout_ms=3000)
print(sum(1 for _ in consumer))
"""


def test_the_kafka_python_group_program_reads_all_100_records(broker_process, tmp_path):
    broker = broker_process()  # as `make run` starts it: no properties file, no overrides
    script = tmp_path / "count.py"
    script.write_text(KAFKA_PYTHON_PROGRAM.replace("127.0.0.1:9092", broker.bootstrap))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "100", done.stdout + done.stderr


def test_without_a_file_the_first_rebalance_waits_for_nobody():
    assert DEVELOPMENT_DEFAULTS == {"group.initial.rebalance.delay.ms": "0"}
    assert build_config([])["group.initial.rebalance.delay.ms"] == 0
    # an --override still wins
    assert build_config(["--override", "group.initial.rebalance.delay.ms=500"]
                        )["group.initial.rebalance.delay.ms"] == 500


def test_with_a_file_the_default_stays_kafkas(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("log.dirs=./data\n")
    assert build_config([str(props)])["group.initial.rebalance.delay.ms"] == 3000
