"""The ``--command-config`` files that security.md and admin.md show work as written: each
``properties`` block that sets ``security.protocol`` is written to a file (its PEM file
names pointed at a test CA's), and ``trilog topics --list`` with it reaches the listener of
that protocol on a broker with all of them, logging in as the page's user."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cli_helpers import cli
from security_helpers import add_users, make_certs

DOCS = Path(__file__).resolve().parents[2] / "docs"
_PROPERTIES = re.compile(r"^```properties\n(.*?)^```", re.MULTILINE | re.DOTALL)


def command_configs(page: str) -> list[str]:
    return [block for block in _PROPERTIES.findall((DOCS / page).read_text())
            if "security.protocol=" in block]


def test_the_pages_show_a_file_for_scram_plain_and_tls():
    shown = command_configs("security.md")
    text = "\n".join(shown)
    for needed in ("sasl.mechanism=SCRAM-SHA-256", "sasl.mechanism=PLAIN",
                   "security.protocol=SSL", "ssl.certificate.location="):
        assert needed in text, needed
    assert command_configs("admin.md"), "admin.md shows no --command-config file"


@pytest.mark.slow
async def test_each_file_shown_reaches_its_listener(broker_process, tmp_path):
    certs = make_certs(tmp_path)
    data = tmp_path / "data"
    add_users("--log-dir", str(data), users={"alice": "alice-secret"})
    broker = broker_process(data, overrides={
        "listeners": "SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.certfile": certs["server"], "ssl.cafile": certs["ca"],
        "ssl.client.auth": "requested"})
    files = {"ca.pem": certs["ca"], "client.pem": certs["client_cert"],
             "client.key": certs["client_key"]}
    blocks = [(page, block) for page in ("security.md", "admin.md")
              for block in command_configs(page)]
    for n, (page, block) in enumerate(blocks):
        for shown, real in files.items():
            block = block.replace(f"={shown}\n", f"={real}\n")
        protocol = re.search(r"^security\.protocol=(\S+)$", block, re.MULTILINE).group(1)
        config = tmp_path / f"client-{n}.properties"
        config.write_text(block)
        done = await cli("topics", "--list", "--bootstrap-server", broker.listener(protocol),
                         "--command-config", str(config))
        assert done.returncode == 0, f"{page}'s file\n{block}\nfailed: {done.stderr}"
