"""Every page of docs/ (but five, whose examples need a cluster, Spark or a benchmark run)
starts with a runnable example: its first ```python block, run as a user would run it
against ``make run``'s broker.

The example's ``127.0.0.1:9092`` becomes a real broker process's address (a standalone broker
with the embedded defaults, as ``make run`` starts: topics auto-created, no ZooKeeper).  Each
example runs twice against the same broker, as a user runs it again against a broker that
keeps its data, and each run must end by itself with status 0.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
# Pages whose first example is not Python for the `make run` broker: shell commands and
# property tables, Spark (tested in tests/spark), and the contributors' walk through the code.
NOT_HERE = {"operations.md", "broker-config.md", "performance.md", "spark.md", "internals.md",
            # a secured broker with its certificates: tests/broker/test_security.py
            "security.md"}
PAGES = sorted(p.name for p in DOCS.glob("*.md") if p.name not in NOT_HERE)
MAKE_RUN_BROKER = "127.0.0.1:9092"
_GUARD_S = 60  # a failure guard for an example that never ends, not a speed assertion
_FIRST_PYTHON = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def first_example(page: str) -> str:
    text = (DOCS / page).read_text()
    match = _FIRST_PYTHON.search(text)
    assert match is not None, f"docs/{page} has no ```python example"
    # "starts with": in the page's introduction or its first section
    assert text[:match.start()].count("\n## ") <= 1, f"docs/{page}'s first example comes late"
    return match.group(1)


def test_the_pages_are_found():
    assert {"index.md", "client.md", "consumer.md", "sync.md", "admin.md"} <= set(PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_the_first_example_runs_against_a_standalone_broker(page, broker_process, tmp_path):
    code = first_example(page)
    broker = broker_process()
    script = tmp_path / f"example_{page.removesuffix('.md')}.py"
    script.write_text(code.replace(MAKE_RUN_BROKER, broker.bootstrap))
    for run in ("first", "second"):
        try:
            done = subprocess.run([sys.executable, str(script)], cwd=tmp_path,
                                  capture_output=True, text=True, timeout=_GUARD_S,
                                  stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"docs/{page}'s first example ({run} run) did not end within "
                                 f"{_GUARD_S} s; it printed:\n{exc.stdout}\n{exc.stderr}"
                                 ) from None
        assert done.returncode == 0, (f"docs/{page}'s first example ({run} run) failed:\n"
                                      f"{done.stdout}\n{done.stderr}")
        assert "Traceback" not in done.stderr, done.stderr
    assert MAKE_RUN_BROKER in code, f"docs/{page}'s first example does not use make run's broker"


_LINK = re.compile(r"\]\(([^)\s]+)\)")
_NAMED_PAGE = re.compile(r"`([\w./-]+\.md)`")  # a page named in code style, as `DESIGN.md`


@pytest.mark.parametrize("page", PAGES)
def test_the_pages_a_page_points_at_are_in_the_repository(page):
    """docs/index.md once sent readers to a `DESIGN.md` that is not in the repository."""
    text = (DOCS / page).read_text()
    missing = []
    for target in _LINK.findall(text):
        path = target.split("#", 1)[0]
        if path and "://" not in path and not (DOCS / path).resolve().exists():
            missing.append(target)
    for name in _NAMED_PAGE.findall(text):
        if not ((DOCS / name).exists() or (DOCS.parent / name).exists()):
            missing.append(name)
    assert missing == [], f"docs/{page} points at files that do not exist: {missing}"
