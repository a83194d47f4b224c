"""The Python the data source's workers run (``trilog.spark._workers``), decided without a
Spark: the driver's own in local mode unless ``PYSPARK_PYTHON`` names another, which must
import trilog or ``register`` fails at once saying what to set.  (docs/spark.md's example,
run by tests/docs with ``PYSPARK_PYTHON`` unset, is the test with a real Spark.)"""

from __future__ import annotations

import sys

import pytest

from trilog.spark import SparkSetupError
from trilog.spark._workers import workers_python


def test_local_mode_without_pyspark_python_runs_the_drivers_python():
    assert workers_python("local[2]", "python3", {}) == sys.executable
    assert workers_python("local", "python3", {"PYSPARK_PYTHON": ""}) == sys.executable


def test_a_pyspark_python_that_has_trilog_is_kept():
    assert workers_python("local[2]", sys.executable,
                          {"PYSPARK_PYTHON": sys.executable}) == sys.executable


def test_a_pyspark_python_without_trilog_fails_at_once_in_one_line(tmp_path):
    python = tmp_path / "python3"
    python.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'trilog'\" >&2\n"
                      "exit 1\n")
    python.chmod(0o755)
    with pytest.raises(SparkSetupError) as caught:
        workers_python("local[2]", str(python), {"PYSPARK_PYTHON": str(python)})
    message = str(caught.value)
    assert "\n" not in message
    assert message == (
        f"Spark's Python workers run PYSPARK_PYTHON={python}, which cannot import trilog "
        "(ModuleNotFoundError: No module named 'trilog'): set "
        f"PYSPARK_PYTHON={sys.executable} (the driver's Python) before the SparkSession "
        "starts, or unset it, or install trilog[spark] there")
    with pytest.raises(SparkSetupError, match="No such file or directory"):
        workers_python("local[2]", "x", {"PYSPARK_PYTHON": str(tmp_path / "missing")})


def test_on_a_cluster_the_executors_python_is_the_clusters():
    assert workers_python("spark://master:7077", "python3", {}) == "python3"
    assert workers_python("yarn", "/opt/py/bin/python", {"PYSPARK_PYTHON": "/nope"}) == \
        "/opt/py/bin/python"
