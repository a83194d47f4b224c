"""How the suite is scheduled under pytest-xdist (``tests/conftest.py`` uses it)."""

from __future__ import annotations


def work_unit(nodeid: str) -> str:
    """The unit a test is scheduled with under pytest-xdist: its module, or "spark" for
    every Spark module (one worker starts the one Spark session of the run)."""
    module = nodeid.split("::", 1)[0]
    return "spark" if module.startswith("tests/spark/") else module
