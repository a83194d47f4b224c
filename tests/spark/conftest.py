"""A real local Spark for the data source's tests: one session for the whole run.

``local[2, 2]``: two cores, and a task may fail once and be retried (the retry test needs it;
Spark's local mode otherwise never retries).  Python workers run this interpreter.
"""

from __future__ import annotations

import os
import sys

import pytest

pyspark = pytest.importorskip("pyspark")



@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import trilog.spark

    session = (
        SparkSession.builder.master("local[2, 2]")
        .appName("trilog-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("spark-warehouse")))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    trilog.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def broker(broker_process):
    """A broker whose auto-created topics have 4 partitions."""
    return broker_process(overrides={"num.partitions": 4})
