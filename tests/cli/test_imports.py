"""The ``trilog`` command loads only what the subcommand it runs needs: ``--version`` and
``--help`` nothing of trilog's layers, a client tool neither the broker, pyspark nor
prometheus_client (each cost a client command 1-2 s of imports)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trilog.zk._server import free_port

_REPORT = """
import json, sys
from trilog.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""
#: never loaded by a client command
HEAVY = ("trilog.broker", "trilog.spark", "pyspark", "prometheus_client", "pyarrow")


def loaded(*argv: str) -> tuple[int, set[str]]:
    done = subprocess.run([sys.executable, "-c", _REPORT, *argv], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return report["code"], set(report["modules"])


def heavy(modules: set[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY)}


def test_importing_the_cli_loads_no_layer():
    code = ("import sys, json, trilog.cli; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('trilog') "
            "or m.split('.')[0] in ('trio', 'pyspark', 'prometheus_client', 'kazoo'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert json.loads(done.stdout) == ["trilog", "trilog.cli", "trilog.cli._main"]


@pytest.mark.parametrize("argv", [["--version"], ["--help"], []], ids=["version", "help", "none"])
def test_version_and_help_load_no_client_and_no_broker(argv):
    code, modules = loaded(*argv)
    assert code in (0, 2)
    assert not heavy(modules)
    assert "trio" not in modules and "trilog.client" not in modules


@pytest.mark.parametrize("argv", [
    ["topics", "--list"],
    ["topics", "--describe", "--topic", "t"],
    ["configs", "--entity-type", "topics", "--entity-name", "t", "--describe"],
    ["groups", "--list"],
    ["produce", "--topic", "t"],
    ["consume", "--topic", "t", "--group", "g"],
    ["consume", "--topic", "t"],
    ["get-offsets", "--topic", "t"],
    ["perf", "produce", "--topic", "t", "--num-records", "1", "--record-size", "1"],
    ["perf", "consume", "--topic", "t", "--messages", "1"],
    ["acls", "--list"],
], ids=lambda argv: "-".join(a.strip("-") for a in argv[:2]))
def test_a_client_command_loads_neither_the_broker_nor_spark_nor_prometheus(argv):
    code, modules = loaded(*argv, "--bootstrap-server", f"127.0.0.1:{free_port()}",
                           "--bootstrap-timeout-ms", "100")
    assert code == 1  # it ran, and found no broker
    assert "trilog.client" in modules
    assert not heavy(modules), heavy(modules)


def test_the_broker_command_loads_no_client():
    code, modules = loaded("broker", "--override", "no.such.property=1")
    assert code == 2
    assert "trilog.client" not in modules and "trilog.spark" not in modules
