"""Fixtures for the record-format tests."""

from __future__ import annotations

import warnings

import pytest
from kafka_helpers import lend_snappy, lend_xxhash

# kafka-python (the independent implementation we test against) trips a DeprecationWarning
# inside importlib.resources at import time; pyproject's kafka.* filter does not match it
# because the warning is attributed to importlib.  Import it once here, warnings silenced.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    import kafka.record.default_records
    import kafka.record.legacy_records  # noqa: F401


@pytest.fixture
def kafka_codecs(monkeypatch):
    """Lend kafka-python what it lacks here and we have.

    It needs the ``xxhash`` package for magic 0 LZ4 (we lend our xxh32) and ``python-snappy``
    for snappy (we lend our raw-snappy backend, e.g. cramjam's; the xerial framing on both
    sides stays each implementation's own).
    """
    lend_xxhash(monkeypatch)
    lend_snappy(monkeypatch)
