"""Strategies shared by the record-format tests (imported by name)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from trilog.records import GZIP, LZ4, NONE, SNAPPY, available_codecs

#: Applied to every property test here (not as a global profile, which would reach other
#: packages' tests): timing on a shared two-core machine is noisy, so no per-example deadline.
RECORDS_SETTINGS = settings(
    deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow]
)

#: Codecs usable in this environment (none, gzip, lz4 always; snappy and zstd if installed).
CODECS = available_codecs()
#: Codecs legacy messages can carry.
LEGACY_CODECS = tuple(c for c in CODECS if c in (NONE, GZIP, SNAPPY, LZ4))

maybe_bytes = st.none() | st.binary(max_size=200)
timestamps = st.integers(min_value=0, max_value=2**42)
headers = st.lists(
    st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3
).map(tuple)
