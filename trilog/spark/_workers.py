"""Registering the data source, and the Python its workers run.

Spark runs a Python data source in Python workers started with the interpreter the
``SparkContext`` names (``PYSPARK_PYTHON``, else ``python3`` from ``PATH``), which is often
not the driver's: a script run as ``.venv/bin/python job.py`` would send its reading tasks to
a system Python that cannot import trilog, and every task would fail with a
``ModuleNotFoundError`` deep in a Spark trace.  So ``register``:

- in local mode, with ``PYSPARK_PYTHON`` unset, registers the data source to run in the
  driver's own interpreter (``sys.executable``), the one that has trilog;
- in local mode, with ``PYSPARK_PYTHON`` set, checks that interpreter imports trilog, and
  raises ``SparkSetupError`` at once, in one line saying what to set, when it does not;
- on a cluster, leaves the executors' Python to the cluster: it must have trilog installed.

Only the trilog data source is affected: the context's own ``pythonExec`` (the user's UDFs)
is put back as it was.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from trilog.errors import TrilogError
from trilog.spark._source import TrilogDataSource

_CHECK = "import trilog.spark"


class SparkSetupError(TrilogError):
    """Spark's Python workers could not run the trilog data source; the message says what
    to set."""


def register(spark: Any) -> None:
    """Register the ``trilog`` format with a ``SparkSession`` (see the module docstring for
    the Python its workers run)."""
    try:
        context = spark.sparkContext
    except Exception:  # noqa: BLE001 - Spark Connect: no context here, workers are remote
        context = None
    if context is None:
        spark.dataSource.register(TrilogDataSource)
        return
    previous = context.pythonExec
    context.pythonExec = workers_python(context.master, previous, os.environ)
    try:
        spark.dataSource.register(TrilogDataSource)
    finally:
        context.pythonExec = previous


def workers_python(master: str, python_exec: str, environ: Any) -> str:
    """The interpreter the data source's workers should run (see the module docstring);
    ``SparkSetupError`` for a chosen one that cannot import trilog."""
    if not master.startswith("local"):
        return python_exec
    chosen = environ.get("PYSPARK_PYTHON")
    if not chosen:
        return sys.executable
    try:
        if os.path.samefile(_which(chosen), sys.executable):
            return chosen
    except OSError:
        pass
    reason = _cannot_import(chosen)
    if reason is not None:
        raise SparkSetupError(
            f"Spark's Python workers run PYSPARK_PYTHON={chosen}, which cannot import trilog "
            f"({reason}): set PYSPARK_PYTHON={sys.executable} (the driver's Python) before "
            "the SparkSession starts, or unset it, or install trilog[spark] there")
    return chosen


def _which(program: str) -> str:
    if os.sep in program:
        return program
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(directory, program)
        if os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(program)


def _cannot_import(python: str) -> str | None:
    """Why ``python`` cannot import trilog (its last line of error), or None."""
    try:
        done = subprocess.run([python, "-c", _CHECK], capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL, check=False)
    except OSError as exc:
        return exc.strerror or str(exc)
    except subprocess.TimeoutExpired:
        return "it did not answer within 60 s"
    if done.returncode == 0:
        return None
    lines = done.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"
