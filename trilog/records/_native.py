"""The optional C accelerator, ``trilog.records._speedups``, or ``None``.

The C module holds the per-record hot paths (record encoding and decoding, murmur2); the
pure-Python code beside each use is the reference and gives the same results.  It is built
by ``pip install`` when a C compiler is at hand.  ``TRILOG_NO_SPEEDUPS=1`` in the
environment makes trilog ignore it (for tests of the fallback, and for debugging).
"""

from __future__ import annotations

import os

if os.environ.get("TRILOG_NO_SPEEDUPS", "") not in ("", "0"):
    speedups = None
else:
    try:
        from trilog.records import _speedups as speedups
    except ImportError:  # pragma: no cover - not built (no compiler at install time)
        speedups = None

#: ``"C"`` when the accelerator is in use, ``"Python"`` otherwise.
IMPLEMENTATION = "C" if speedups is not None else "Python"
