"""The suite's own xdist scheduling (``tests/conftest.py``): a module runs whole on one
worker, so its module-scoped brokers start once; the Spark modules share one worker."""

from __future__ import annotations

import pytest
from scheduling_helpers import work_unit


def test_the_spark_modules_are_one_unit_and_every_other_module_its_own():
    assert work_unit("tests/spark/test_sink.py::test_a") == "spark"
    assert work_unit("tests/spark/test_batch_read.py::test_b[x]") == "spark"
    assert work_unit("tests/broker/test_limits.py::test_c") == "tests/broker/test_limits.py"


def test_xdist_schedules_by_those_units(request, monkeypatch):
    """The scheduler xdist is given groups by ``work_unit`` (xdist's own would not: its
    ``loadgroup`` marks do not reach pytest 9's node ids)."""
    pytest.importorskip("xdist")
    from xdist.remote import Producer

    monkeypatch.setattr(request.config.option, "tx", ["popen"] * 3)  # (a worker has none)
    monkeypatch.setattr(request.config.option, "loadscopereorder", True)
    scheduler = request.config.hook.pytest_xdist_make_scheduler(
        config=request.config, log=Producer("test", enabled=False))
    assert scheduler._split_scope("tests/spark/test_sink.py::test_a") == "spark"
    assert scheduler._split_scope("tests/broker/test_limits.py::test_c[1]") == \
        "tests/broker/test_limits.py"
