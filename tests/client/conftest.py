"""Fixtures of the client's end-to-end tests: a real ``trilog broker`` process per test (they
start in a fraction of a second) from the shared ``broker_process`` factory."""

from __future__ import annotations

import pytest


@pytest.fixture
def broker(broker_process):
    """One standalone broker process; auto-created topics get 3 partitions."""
    return broker_process(overrides={"num.partitions": 3})
