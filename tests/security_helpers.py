"""Certificates and SASL users for the security tests (``tests/`` is on ``sys.path``, as
for ``kafka_helpers``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
_CLI = "import sys; from trilog.cli import main; sys.exit(main())"


def make_certs(base: Path) -> dict[str, str]:
    """A private CA (trustme), a broker certificate for localhost and 127.0.0.1, and a
    client certificate (``CN=alice,O=trilog``), as PEM files: ``ca``, ``server`` (key and
    chain in one file), ``client_cert``, ``client_key``."""
    import trustme

    ca = trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1")
    client = ca.issue_cert("alice.clients.test", common_name="alice",
                           organization_name="trilog")
    paths = {name: base / f"{name}.pem" for name in
             ("ca", "server", "client_cert", "client_key")}
    ca.cert_pem.write_to_path(paths["ca"])
    server.private_key_and_cert_chain_pem.write_to_path(paths["server"])
    client.cert_chain_pems[0].write_to_path(paths["client_cert"])
    client.private_key_pem.write_to_path(paths["client_key"])
    return {name: str(path) for name, path in paths.items()}


def trilog_users(*args: str) -> str:
    """Run ``trilog users ARGS``; its output."""
    done = subprocess.run([sys.executable, "-c", _CLI, "users", *args], check=True,
                          capture_output=True, text=True, timeout=60)
    return done.stdout


def add_users(*where: str, users: dict[str, str] = USERS) -> None:
    """Add ``users`` with ``trilog users`` (``where``: ``--log-dir DIR`` or
    ``--zookeeper ZK``)."""
    for user, password in users.items():
        trilog_users(*where, "--add", user, "--password", password)
