"""The package type-checks, and a user's script checked with ``mypy --strict`` gets real
types from the public API (``py.typed`` ships).  mypy runs as a subprocess, like a user's."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import trilog
import trilog.sync

ROOT = Path(__file__).parents[2]

pytestmark = pytest.mark.slow


def mypy(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_package_type_checks():
    result = mypy()  # the settings in pyproject.toml: every module of trilog/
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_strict_user_script_gets_real_types(tmp_path):
    script = tmp_path / "user.py"
    script.write_text(textwrap.dedent('''
        import trilog
        import trilog.sync


        async def main() -> None:
            async with trilog.open_producer("127.0.0.1:9092", acks="all") as producer:
                reveal_type(producer)
                reveal_type(await producer.send_and_wait("t", b"v", key=b"k"))
            async with trilog.open_simple_consumer("127.0.0.1:9092") as consumer:
                async for record in consumer.iterate("t"):
                    reveal_type(record.key)
            async with trilog.open_consumer_connector("g", bootstrap_servers="127.0.0.1:9092",
                                                      topics={"t": 1}) as group:
                async for message in group.streams["t"][0]:
                    reveal_type(message.value)
            async with trilog.open_consumer("t", group_id="g") as kafka_consumer:
                reveal_type(kafka_consumer)
                async for kafka_record in kafka_consumer:
                    reveal_type(kafka_record.offset)


        with trilog.sync.Producer("127.0.0.1:9092", acks="all") as sync_producer:
            reveal_type(sync_producer)
        trilog.sync.Producer("127.0.0.1:9092", lingr_ms=5)
    '''))
    # --follow-imports=silent: errors only in the user's file, as for an installed package.
    out = mypy("--strict", "--follow-imports=silent", "--no-incremental", str(script),
               cwd=tmp_path).stdout
    reveals = [line.split("Revealed type is ")[1] for line in out.splitlines()
               if "Revealed type is" in line]
    assert reveals == [
        '"trilog.client.producer._producer.Producer"',
        '"tuple[str, int, int, int, fallback=trilog.client.producer._delivery.RecordMetadata]"',
        '"bytes | None"',
        '"bytes | None"',
        '"trilog.client.consumer._consumer.Consumer"',
        '"int"',
        '"trilog.sync._facades.Producer"',
    ], out
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1 and 'Unexpected keyword argument "lingr_ms"' in errors[0], out


def test_py_typed_ships():
    assert (Path(trilog.__file__).parent / "py.typed").is_file()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'trilog = ["py.typed"' in pyproject


def test_the_sync_consumer_offers_every_method_of_the_async_one():
    from trilog.client import Consumer

    public = {name for name in vars(Consumer) if not name.startswith("_")}
    renamed = {"getmany": "poll", "getone": "__next__"}  # kafka-python's names
    assert {renamed.get(name, name) for name in public} <= set(dir(trilog.sync.Consumer))


def test_the_sync_facades_send_and_fetch_as_their_async_twins():
    from trilog.client import Producer, SimpleConsumer

    for sync_method, async_method in [
        (trilog.sync.Producer.send, Producer.send),
        (trilog.sync.Producer.send_and_wait, Producer.send_and_wait),
        (trilog.sync.SimpleConsumer.fetch, SimpleConsumer.fetch),
        (trilog.sync.SimpleConsumer.multifetch, SimpleConsumer.multifetch),
    ]:
        assert (inspect.signature(sync_method).parameters.keys()
                == inspect.signature(async_method).parameters.keys()), sync_method
