"""The README's set-up: ``make run`` installs what a broker needs and nothing more (no
pyspark, no test tools, no ZooKeeper); ``make test`` installs everything the suite needs.
Read from ``make -n -B`` (what make would run from a fresh clone), without running it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def planned(target: str) -> str:
    # Run as from a shell: under CI this suite itself runs inside `make test`, whose
    # MAKELEVEL/MAKEFLAGS would make this make a sub-make (printing "Entering directory").
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    done = subprocess.run(["make", "--no-print-directory", "-n", "-B", target], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def test_make_run_installs_only_what_a_broker_needs():
    commands = planned("run")
    installs = [line for line in commands.splitlines() if "pip install" in line]
    assert ".venv/bin/pip install -e ." in installs, commands
    assert not any(word in commands for word in ("[spark", "test]", "pyspark", "pytest")), \
        commands
    assert "zookeeper" not in commands and "kcat" not in commands
    assert commands.rstrip().endswith(".venv/bin/trilog broker")


def test_make_test_installs_everything_the_suite_needs():
    commands = planned("test")
    assert ".venv/bin/pip install -e '.[spark,test]'" in commands
    assert "trilog zookeeper --check" in commands and "kcat" in commands
    assert commands.rstrip().splitlines()[-1].startswith(".venv/bin/python -m pytest")


def test_the_extras_hold_spark_and_the_test_tools_and_the_base_does_not():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"])
    assert "pyspark" not in base and "pytest" not in base and "kafka-python" not in base
    assert any(d.startswith("pyspark") for d in project["optional-dependencies"]["spark"])
    assert any(d.startswith("pytest") for d in project["optional-dependencies"]["test"])


def test_the_ci_runs_the_readmes_test_command():
    assert (ROOT / ".ci" / "run").read_text().rstrip().endswith("make test")
    assert "    make test\n" in (ROOT / "README.md").read_text()
    assert "    make run\n" in (ROOT / "README.md").read_text()
