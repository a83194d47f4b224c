"""Every opener reaches the cluster before it returns, for at most ``bootstrap_timeout_ms``
(kafka-python's name and default, 30 s): against an address where nothing listens it raises
``NoBrokersAvailableError`` naming the address and why, never hangs; a broker that comes up
within the time is found."""

from __future__ import annotations

import functools
import threading
import time

import pytest
import trio

import trilog
import trilog.sync
from trilog.client import (
    AdminConfig,
    ConsumerConfig,
    ProducerConfig,
    SimpleConsumerConfig,
    open_group_admin,
)
from trilog.client.connector import GroupConfig
from trilog.client._groups_admin import GroupAdminConfig
from trilog.errors import NetworkError, NoBrokersAvailableError
from trilog.zk._server import free_port

from security_helpers import make_certs

_SHORT = 1000  # ms: the tests of each opener; the defaults have a test of their own


def _nothing_there() -> str:
    return f"127.0.0.1:{free_port()}"


async def _open_and_use(opener: str, where: str, **options) -> None:
    if opener == "producer":
        async with trilog.open_producer(where, **options) as producer:
            await producer.send_and_wait("t", b"x")
    elif opener == "consumer-group":
        async with trilog.open_consumer("t", group_id="g", bootstrap_servers=where,
                                        **options) as consumer:
            async for _ in consumer:
                break
    elif opener == "consumer":
        async with trilog.open_consumer("t", bootstrap_servers=where, **options) as consumer:
            async for _ in consumer:
                break
    elif opener == "simple-consumer":
        async with trilog.open_simple_consumer(where, **options) as simple:
            await simple.fetch("t", 0, 0)
    elif opener == "connector":
        async with trilog.open_consumer_connector("g", topics={"t": 1}, bootstrap_servers=where,
                                                  **options):
            pass
    elif opener == "admin":
        async with trilog.open_admin(where, **options) as admin:
            await admin.list_topics()
    elif opener == "group-admin":
        async with open_group_admin(where, **options) as groups:
            await groups.list_groups()
    else:  # pragma: no cover
        raise AssertionError(opener)


ASYNC_OPENERS = ["producer", "consumer-group", "consumer", "simple-consumer", "connector",
                 "admin", "group-admin"]


@pytest.mark.parametrize("opener", ASYNC_OPENERS)
async def test_an_async_opener_fails_clearly_when_nothing_listens(opener):
    where = _nothing_there()
    start = trio.current_time()
    with trio.fail_after(20), pytest.raises(NoBrokersAvailableError) as caught:
        await _open_and_use(opener, where, bootstrap_timeout_ms=_SHORT)
    took = trio.current_time() - start
    assert _SHORT / 1000 <= took < 10, took  # it tried for the whole time, and no longer
    message = str(caught.value)
    assert f"no broker answered at {where} within 1 s (bootstrap_timeout_ms)" in message
    assert f"cannot connect to {where}: Connection refused" in message
    assert isinstance(caught.value, NetworkError)  # what code catching a lost broker catches


def _sync_open_and_use(facade: str, where: str, **options) -> None:
    if facade == "Producer":
        with trilog.sync.Producer(where, **options) as producer:
            producer.send("t", b"x").get(timeout=60)
    elif facade == "Consumer":
        with trilog.sync.Consumer("t", group_id="g", bootstrap_servers=where,
                                  **options) as consumer:
            next(iter(consumer))
    elif facade == "SimpleConsumer":
        with trilog.sync.SimpleConsumer(where, **options) as simple:
            simple.fetch("t", 0, 0)
    elif facade == "ConsumerConnector":
        with trilog.sync.ConsumerConnector("g", topics={"t": 1}, bootstrap_servers=where,
                                           **options):
            pass
    else:  # pragma: no cover
        raise AssertionError(facade)


@pytest.mark.parametrize("facade", ["Producer", "Consumer", "SimpleConsumer",
                                    "ConsumerConnector"])
def test_a_sync_facade_fails_clearly_when_nothing_listens(facade):
    where = _nothing_there()
    start = time.monotonic()
    with pytest.raises(NoBrokersAvailableError, match=f"no broker answered at {where}"):
        _sync_open_and_use(facade, where, bootstrap_timeout_ms=_SHORT)
    assert time.monotonic() - start < 10
    assert trilog.sync._portal.loop_thread() is None  # nothing left running


def test_the_default_is_kafka_pythons_30_s():
    for config in (ProducerConfig(), ConsumerConfig(), SimpleConsumerConfig(),
                   GroupConfig(bootstrap_servers="h:1"), AdminConfig(), GroupAdminConfig()):
        assert config.bootstrap_timeout_ms == 30_000, config
    with pytest.raises(ValueError, match="bootstrap_timeout_ms must be positive"):
        ProducerConfig(bootstrap_timeout_ms=0)
    with pytest.raises(TypeError, match="open_consumer"):
        trilog.open_consumer("t", bootstrap_timeout=5)  # type: ignore[call-arg]


@pytest.mark.slow
async def test_a_group_consumer_with_the_defaults_fails_within_a_minute():
    """The issue's two hangs (``trilog.sync.Consumer`` was still blocked after 400 s), with
    nothing but the defaults: both fail after 30 s, together."""
    where = _nothing_there()
    failures: list[BaseException] = []

    def sync_consumer() -> None:
        try:
            with trilog.sync.Consumer("t", bootstrap_servers=where, group_id="g"):
                pass
        except NoBrokersAvailableError as exc:
            failures.append(exc)

    async def async_consumer() -> None:
        try:
            async with trilog.open_consumer("t", bootstrap_servers=where, group_id="g"):
                pass
        except NoBrokersAvailableError as exc:
            failures.append(exc)

    start = trio.current_time()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, sync_consumer)
            nursery.start_soon(async_consumer)
    assert 30 <= trio.current_time() - start < 60
    assert len(failures) == 2
    assert all("within 30 s (bootstrap_timeout_ms)" in str(f) for f in failures)


def test_a_broker_that_starts_late_is_found(broker_process):
    """Tried round after round: a client started with its broker (a compose file, a
    script) waits for it instead of failing at the first refused connection."""
    port = free_port()
    started = threading.Timer(1.0, lambda: broker_process(port=port))
    started.start()
    try:
        with trilog.sync.Producer(f"127.0.0.1:{port}", bootstrap_timeout_ms=20_000) as producer:
            assert producer.send("late", b"x").get(timeout=30).offset == 0
    finally:
        started.join()


async def test_a_plaintext_client_at_a_tls_listener_is_told_about_security_protocol(
        broker_process, tmp_path):
    """A broker that is there and closes the connection before answering turns the client
    away: no point in trying for 30 s, the opener fails at once with the likely cause."""
    certs = make_certs(tmp_path)
    broker = broker_process(overrides={"listeners": "SSL://127.0.0.1:0",
                                       "ssl.certfile": certs["server"],
                                       "ssl.cafile": certs["ca"], "ssl.client.auth": "required"})
    start = trio.current_time()
    with trio.fail_after(20), pytest.raises(NoBrokersAvailableError) as caught:
        await _open_and_use("producer", broker.bootstrap)  # the default: 30 s
    assert trio.current_time() - start < 10
    message = str(caught.value)
    assert message.startswith(f"no broker answered at {broker.bootstrap}: broker "
                              f"{broker.bootstrap} closed the connection")
    assert "may be a TLS or SASL listener: connect with its security_protocol" in message
    # With TLS but no client certificate, where the listener requires one: said too.
    with trio.fail_after(20), pytest.raises(NoBrokersAvailableError) as caught:
        async with trilog.open_admin(broker.bootstrap, security_protocol="SSL",
                                     ssl_cafile=certs["ca"]) as admin:
            await admin.list_topics()
    assert "or a TLS listener that requires a client certificate (ssl_certfile, " \
           "ssl_keyfile)" in str(caught.value)
    # And with everything it needs, the same address works.
    async with trilog.open_admin(broker.bootstrap, security_protocol="SSL",
                                 ssl_cafile=certs["ca"], ssl_certfile=certs["client_cert"],
                                 ssl_keyfile=certs["client_key"]) as admin:
        await admin.list_topics()


async def test_something_that_is_not_a_broker_turns_the_client_away_at_once():
    """An HTTP server's answer is not Kafka's protocol: the opener says so at once."""
    async def http(stream: trio.SocketStream) -> None:
        await stream.receive_some(1024)
        await stream.send_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(functools.partial(trio.serve_tcp, http, 0,
                                                           host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        with trio.fail_after(10), pytest.raises(NoBrokersAvailableError) as caught:
            await _open_and_use("admin", f"127.0.0.1:{port}")
        nursery.cancel_scope.cancel()
    assert str(caught.value).startswith(f"no broker answered at 127.0.0.1:{port}: ")
