"""Every page of docs/ that has Python starts with a runnable example (its first ```python
block), and every example on it that is a program (a block that starts with its imports;
the others are fragments that continue one) runs as a user would run it against ``make
run``'s broker, in page order.

The example's ``127.0.0.1:9092`` becomes a real broker process's address (a standalone broker
with the embedded defaults, as ``make run`` starts: topics auto-created, no ZooKeeper; in
ZooKeeper mode for a page whose examples find the brokers through ``127.0.0.1:2181/trilog``,
which becomes a real ZooKeeper's).  Each example runs twice against the same broker, as a
user runs it again against a broker that keeps its data, and each run must end by itself
with status 0.

Two pages need more than ``make run``'s broker, and get it here as the page itself says:
security.md's example runs against the secured broker that the page's own shell commands
set up (openssl certificates, a SCRAM user, four listeners); spark.md's makes its own local
Spark session, with nothing set in the environment (``PYSPARK_PYTHON`` unset: the data
source must find trilog in its Python workers by itself).
"""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: Pages without a Python example: shell commands, property tables, figures, the
#: contributors' walk through the code (a test below keeps them without one).
NO_PYTHON = {"operations.md", "broker-config.md", "performance.md", "internals.md"}
#: Pages whose example needs more than make run's broker: a test of their own below.
OWN_TEST = {"security.md", "spark.md"}
PAGES = sorted(p.name for p in DOCS.glob("*.md") if p.name not in NO_PYTHON | OWN_TEST)
MAKE_RUN_BROKER = "127.0.0.1:9092"
_GUARD_S = 60  # a failure guard for an example that never ends, not a speed assertion
_FIRST_PYTHON = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
_FIRST_SH = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)
_ZOOKEEPER = "127.0.0.1:2181/trilog"  # where the pages' ZooKeeper examples find the brokers


def programs(page: str) -> list[str]:
    """The page's examples that are whole programs: blocks whose first line of code is an
    import."""
    found = []
    for block in _FIRST_PYTHON.findall((DOCS / page).read_text()):
        code = [line for line in block.splitlines() if line.strip() and
                not line.lstrip().startswith("#")]
        if code and code[0].startswith(("import ", "from ")):
            found.append(block)
    return found


def first_example(page: str) -> str:
    text = (DOCS / page).read_text()
    match = _FIRST_PYTHON.search(text)
    assert match is not None, f"docs/{page} has no ```python example"
    # "starts with": in the page's introduction or its first section
    assert text[:match.start()].count("\n## ") <= 1, f"docs/{page}'s first example comes late"
    return match.group(1)


def test_the_pages_are_found():
    assert {"index.md", "client.md", "consumer.md", "sync.md", "admin.md"} <= set(PAGES)
    assert {p.name for p in DOCS.glob("*.md")} == set(PAGES) | NO_PYTHON | OWN_TEST


@pytest.mark.parametrize("page", sorted(NO_PYTHON))
def test_the_pages_without_python_have_none(page):
    assert _FIRST_PYTHON.search((DOCS / page).read_text()) is None, \
        f"docs/{page} has a Python example now: run it here (move it out of NO_PYTHON)"


def run_example(page: str, code: str, cwd: Path, *, env: dict[str, str] | None = None,
              guard_s: float = _GUARD_S, which: str = "first example",
              runs: tuple[str, ...] = ("first", "second")) -> str:
    """Run ``code`` as a script in ``cwd``, twice (a reader runs it again); each run must
    end by itself with status 0 and no traceback.  What the last run printed."""
    script = cwd / f"example_{page.removesuffix('.md')}.py"
    script.write_text(code)
    for run in runs:
        try:
            done = subprocess.run([sys.executable, str(script)], cwd=cwd,
                                  capture_output=True, text=True, timeout=guard_s,
                                  stdin=subprocess.DEVNULL, check=False, env=env)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"docs/{page}'s {which} ({run} run) did not end within "
                                 f"{guard_s} s; it printed:\n{exc.stdout[-2000:]}\n"
                                 f"{exc.stderr}") from None
        assert done.returncode == 0, (f"docs/{page}'s {which} ({run} run) failed:\n"
                                      f"{done.stdout[-2000:]}\n{done.stderr}")
        assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


@pytest.mark.parametrize("page", PAGES)
def test_every_example_runs_against_make_runs_broker(page, broker_process, tmp_path, request):
    first = first_example(page)
    assert MAKE_RUN_BROKER in first, f"docs/{page}'s first example does not use make run's broker"
    examples = programs(page)
    assert examples[0] == first
    if any(_ZOOKEEPER in code for code in examples):
        zookeeper = request.getfixturevalue("zookeeper")
        broker = broker_process(zookeeper=zookeeper)
    else:
        zookeeper, broker = _ZOOKEEPER, broker_process()
    for n, code in enumerate(examples, 1):
        run_example(page, code.replace(MAKE_RUN_BROKER, broker.bootstrap)
                  .replace(_ZOOKEEPER, zookeeper), tmp_path,
                  which=f"example {n} of {len(examples)}")


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def test_security_md_runs_against_the_broker_its_commands_set_up(broker_process, tmp_path):
    """The page's shell block, as written (its fixed ports moved to free ones), makes the
    certificates with openssl, the user alice and secure.properties; a broker started from
    that file serves the page's Python example on its SASL_SSL listener."""
    text = (DOCS / "security.md").read_text()
    commands = _FIRST_SH.search(text)
    assert commands is not None
    *setup, start = commands.group(1).rstrip().splitlines()
    assert start == "trilog broker secure.properties"
    ports = dict(zip(("9092", "9093", "9094", "9095"), map(str, _free_ports(4))))
    shell = "\n".join(setup)
    for fixed, free in ports.items():
        shell = shell.replace(f"127.0.0.1:{fixed}", f"127.0.0.1:{free}")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    trilog = bin_dir / "trilog"  # the command, as `make` installs it into .venv/bin
    trilog.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import sys; from trilog.cli "
                      f"import main; sys.exit(main())' \"$@\"\n")
    trilog.chmod(trilog.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-euc", shell], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, f"security.md's commands failed:\n{done.stdout}\n{done.stderr}"
    broker_process(tmp_path / "trilog-data", str(tmp_path / "secure.properties"),
                   port=int(ports["9092"]), cwd=tmp_path)
    code = first_example("security.md")
    assert "127.0.0.1:9095" in code
    printed = run_example("security.md", code.replace("127.0.0.1:9095",
                                                    f"127.0.0.1:{ports['9095']}"), tmp_path)
    assert printed.splitlines()[-1] == "1 b'paid'"  # the second run reads both records


@pytest.mark.slow
def test_spark_md_runs_with_nothing_set_in_the_environment(broker_process, tmp_path):
    pytest.importorskip("pyspark")
    code = first_example("spark.md")
    assert MAKE_RUN_BROKER in code
    broker = broker_process(overrides={"num.partitions": 2})
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the test machine's, not the example's
    # Once: a Spark session takes half a minute to start, and what a second run would
    # check (the example runs again over what the first wrote) the other pages check.
    printed = run_example("spark.md", code.replace(MAKE_RUN_BROKER, broker.bootstrap), tmp_path,
                        env=env, guard_s=300, runs=("only",))
    assert "'checkout'" in printed and "Row(" in printed


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
