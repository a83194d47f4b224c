"""``trilog broker --log-config FILE``: a dictConfig file (the one docs/operations.md shows)
routes the request log to its own file; a bad file stops the broker with the reason."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trilog.cli._broker import LogConfigError, load_log_config
from trilog.sync import Producer

DOCS = Path(__file__).resolve().parents[2] / "docs"
_BROKER_MAIN = "import sys; from trilog.cli import main; sys.exit(main())"


def documented_config() -> dict:
    text = (DOCS / "operations.md").read_text()
    section = text[text.index("### `--log-config`"):]
    match = re.search(r"```json\n(.*?)```", section, re.DOTALL)
    assert match is not None, "docs/operations.md shows no --log-config example"
    return json.loads(match.group(1))


def test_the_documented_file_routes_the_request_log(broker_process, tmp_path):
    config = documented_config()
    requests_log = tmp_path / "requests.log"
    config["handlers"]["requests"]["filename"] = str(requests_log)
    path = tmp_path / "logging.json"
    path.write_text(json.dumps(config))
    broker = broker_process(None, "--log-config", str(path))
    with Producer(broker.bootstrap, client_id="log-config-test") as producer:
        producer.send_and_wait("logged", b"value")
    broker.stop()
    lines = requests_log.read_text().splitlines()
    produce = [line for line in lines if " Produce v" in line]
    assert produce, lines
    assert "DEBUG trilog.broker.requests: Produce v" in produce[0]
    assert "client_id=log-config-test" in produce[0]
    stderr = broker.stderr_path.read_text()
    # The root handler got the INFO lines of loggers made before the file was read...
    assert "INFO trilog.broker: broker 0 listening on" in stderr
    # ... and not the request log, which does not propagate past its own handler at DEBUG.
    assert " Produce v" not in stderr


def run_broker(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _BROKER_MAIN, "broker", "--port", "0",
                           "--log-dir", str(cwd / "data"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("content, reason", [
    ('{"version": 1,', "is not valid JSON"),
    ('["version", 1]', "expected a dictConfig mapping"),
    ('{"handlers": {}}', "is not a usable logging configuration"),
    ('{"version": 1, "handlers": {"h": {"class": "no.such.Handler"}}}',
     "is not a usable logging configuration"),
])
def test_a_bad_file_is_a_clear_error(tmp_path, content, reason):
    path = tmp_path / "bad.json"
    path.write_text(content)
    done = run_broker("--log-config", str(path), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"trilog broker: --log-config: {path}" in done.stderr
    assert reason in done.stderr
    assert "Traceback" not in done.stderr
    assert "listening" not in done.stdout  # it stopped before starting


def test_a_missing_file_is_a_clear_error(tmp_path):
    done = run_broker("--log-config", str(tmp_path / "nope.json"), cwd=tmp_path)
    assert done.returncode == 2
    assert "cannot read" in done.stderr and "nope.json" in done.stderr


def test_json_errors_say_where(tmp_path):
    path = tmp_path / "logging.json"
    path.write_text('{"version": 1,\n  oops}')
    with pytest.raises(LogConfigError, match="line 2 column"):
        load_log_config(str(path))


def test_yaml_needs_pyyaml(tmp_path):
    path = tmp_path / "logging.yaml"
    path.write_text("version: 1\nroot:\n  level: INFO\n")
    if importlib.util.find_spec("yaml") is None:
        with pytest.raises(LogConfigError, match="PyYAML"):
            load_log_config(str(path))
    else:
        assert load_log_config(str(path)) == {"version": 1, "root": {"level": "INFO"}}


def test_log_level_still_works_without_a_file(broker_process):
    broker = broker_process(None, "--log-level", "WARNING")
    broker.stop()
    assert "listening on" not in broker.stderr_path.read_text()

