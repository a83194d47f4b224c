"""Optional native modules: the C accelerator ``trilog.records._speedups`` and the
compression libraries, each either a module or ``None``.

The C module holds the per-record hot paths (record encoding and decoding, murmur2); the
pure-Python code beside each use is the reference and gives the same results.  It is built
by ``pip install`` when a C compiler is at hand.  ``TRILOG_NO_SPEEDUPS=1`` in the
environment makes trilog ignore it (for tests of the fallback, and for debugging).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType


def optional_import(name: str) -> ModuleType | None:
    """The module ``name``, or ``None`` when it is not installed (or not built)."""
    try:
        return importlib.import_module(name)
    except ImportError:  # pragma: no cover - depends on the environment
        return None


speedups = (
    None
    if os.environ.get("TRILOG_NO_SPEEDUPS", "") not in ("", "0")
    else optional_import("trilog.records._speedups")
)

#: ``"C"`` when the accelerator is in use, ``"Python"`` otherwise.
IMPLEMENTATION = "C" if speedups is not None else "Python"
