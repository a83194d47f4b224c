"""docs/operations.md's service files: each broker of the compose file gets a configuration
``trilog broker`` accepts (listeners, advertised listeners, the inter-broker listener), as
written; the systemd unit starts the command with arguments it takes.  (Running the images
and systemd is beyond the test machine.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from trilog.cli._broker import build_config
from trilog.cli._main import build_parser

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()


def _block(language: str) -> str:
    match = re.search(rf"^```{language}\n(.*?)^```", PAGE, re.MULTILINE | re.DOTALL)
    assert match is not None, f"operations.md has no {language} block"
    return match.group(1)


def _flow_sequence(text: str) -> list[str]:
    """A YAML flow sequence of plain and double-quoted scalars, as the compose file writes
    its commands."""
    return [item.strip().strip('"') for item in re.findall(r'"[^"]*"|[^,\s][^,]*', text)]


def test_the_compose_files_brokers_are_configurations_trilog_takes():
    compose = _block("yaml")
    commands = re.findall(r"command: \[(.*?)\]\n", compose, re.DOTALL)
    ports = re.findall(r'ports: \["(\d+):(\d+)"\]', compose)
    assert len(commands) == len(ports) == 3
    for n, (command, (host_port, container_port)) in enumerate(zip(commands, ports), 1):
        config = build_config(_flow_sequence(command))
        assert config.broker_id == n
        assert config.zookeeper_connect == "zookeeper:2181"
        assert config.inter_broker_listener.name == "INTERNAL"
        external = config.advertised_listeners["EXTERNAL"]
        assert (external.host, external.port) == ("localhost", int(host_port))
        assert int(container_port) in [lst.port for lst in config.listeners]
        assert f"broker-{n}:/data" in compose and config.log_dirs == ["/data"]


def test_the_systemd_unit_runs_trilog_broker_with_a_properties_file():
    unit = _block("ini")
    [exec_start] = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    program, *args = shlex.split(exec_start.removeprefix("ExecStart="))
    assert program.endswith("/bin/trilog") and args[0] == "broker"
    parsed = build_parser("broker").parse_args(args)
    assert parsed.properties == "/etc/trilog/broker-%i.properties"
    assert "KillSignal=SIGTERM" in unit and "Restart=on-failure" in unit


def test_the_dockerfile_runs_the_broker():
    dockerfile = _block("dockerfile")
    assert "pip install --no-cache-dir /src" in dockerfile
    assert 'ENTRYPOINT ["trilog", "broker"]' in dockerfile
