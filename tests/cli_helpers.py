"""Running ``trilog`` as an operator does, from trio tests in any folder (``tests/`` is on
``sys.path``, as for ``kafka_helpers``)."""

from __future__ import annotations

import subprocess
import sys

import trio

_MAIN = "import sys; from trilog.cli import main; sys.exit(main())"


async def cli(*args: str, stdin: bytes = b"", timeout: float = 60
              ) -> subprocess.CompletedProcess:
    """Run ``trilog ARGS...`` in a child process; stdout/stderr as text, never a traceback."""
    with trio.fail_after(timeout):
        done = await trio.run_process([sys.executable, "-c", _MAIN, *args], stdin=stdin,
                                      capture_stdout=True, capture_stderr=True, check=False)
    result = subprocess.CompletedProcess(done.args, done.returncode,
                                         done.stdout.decode("utf-8", "replace"),
                                         done.stderr.decode("utf-8", "replace"))
    assert "Traceback" not in result.stderr, result.stderr
    return result
