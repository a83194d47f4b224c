"""A standalone broker's JSON stores (topic configs, ACLs, SCRAM users): one file format,
one error rule (a damaged file stops the broker at start, naming the file, never an empty
store), atomic writes, files only their owner reads."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from trilog.broker import open_broker
from trilog.broker._json_store import JsonFileStore, StoreError

#: Each store's file, the settings that make the broker read it, and a good document.
STORES = {
    "topic-configs.json": ({}, {"version": 1, "topics": {"t": {"retention.ms": "60000"}}}),
    "acls.json": ({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"},
                  {"version": 1, "acls": []}),
    "users.json": ({}, {"version": 1, "users": {}}),
}

DAMAGE = {
    "not JSON": "{\"version\": 1, \"topics\": {",
    "not an object": "[1, 2, 3]",
    "a wrong section": json.dumps({"version": 1, "topics": 7, "acls": 7, "users": 7}),
    "a future version": json.dumps({"version": 9}),
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
@pytest.mark.parametrize("name", STORES)
async def test_a_damaged_store_stops_the_broker_naming_the_file(tmp_path, name, damage):
    data = tmp_path / "data"
    data.mkdir()
    (data / name).write_text(DAMAGE[damage])
    settings, _good = STORES[name]
    with pytest.raises(StoreError) as raised:
        async with open_broker({"port": 0, "log.dirs": str(data), **settings}):
            pass  # pragma: no cover - it must not start
    assert str(data / name) in str(raised.value)


@pytest.mark.parametrize("name", STORES)
async def test_a_good_or_missing_store_starts(tmp_path, name):
    data = tmp_path / "data"
    data.mkdir()
    settings, good = STORES[name]
    async with open_broker({"port": 0, "log.dirs": str(data), **settings}) as broker:
        assert broker.port > 0
    (data / name).write_text(json.dumps(good))
    async with open_broker({"port": 0, "log.dirs": str(data), **settings}) as broker:
        assert broker.port > 0


async def test_a_topic_override_survives_a_restart(tmp_path):
    """What an unreadable file used to lose silently: the override is there after a
    restart, and a damaged file is an error instead of an empty store."""
    from trilog.client import open_admin

    data = tmp_path / "data"
    config = {"port": 0, "log.dirs": str(data)}
    async with open_broker(config) as broker:
        async with open_admin(broker.bootstrap) as admin:
            await admin.create_topic("kept", 1, configs={"retention.ms": "60000"})
    async with open_broker(config) as broker:
        async with open_admin(broker.bootstrap) as admin:
            (described,) = await admin.describe_configs(["kept"])
            assert described.overrides == {"retention.ms": "60000"}


def test_the_command_says_which_file_and_exits_1(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "topic-configs.json").write_text("garbage")
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from trilog.cli import main; sys.exit(main())",
         "broker", "--port", "0", "--log-dir", str(data)],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"{data / 'topic-configs.json'} is not valid JSON" in done.stderr
    assert "Traceback" not in done.stderr


def test_writes_are_atomic_and_private(tmp_path):
    store = JsonFileStore(str(tmp_path / "sub" / "users.json"), "users")
    assert store.read() == {}
    store.write({"alice": {"SCRAM-SHA-256": "x"}})
    assert store.read() == {"alice": {"SCRAM-SHA-256": "x"}}
    mode = stat.S_IMODE(os.stat(store.path).st_mode)
    assert mode == 0o600
    assert not os.path.exists(store.path + ".tmp")
    # A temporary file a crash left behind is replaced, not trusted.
    with open(store.path + ".tmp", "w") as f:
        f.write("half")
    os.chmod(store.path + ".tmp", 0o644)
    store.write({})
    assert store.read() == {} and stat.S_IMODE(os.stat(store.path).st_mode) == 0o600


def test_an_array_section_and_its_shape(tmp_path):
    store = JsonFileStore(str(tmp_path / "acls.json"), "acls", kind=list)
    assert store.read() == []
    store.write([{"a": 1}])
    assert store.read() == [{"a": 1}]
    (tmp_path / "acls.json").write_text(json.dumps({"version": 1, "acls": {}}))
    with pytest.raises(StoreError, match="is not an array"):
        store.read()
