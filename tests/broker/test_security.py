"""TLS and SASL on a real broker process, with kafka-python, confluent-kafka (librdkafka)
and trilog's own client: every listener kind, every SASL mechanism, wrong passwords,
missing client certificates, requests before the login.  The certificates come from a
private CA made here (trustme)."""

from __future__ import annotations

import socket
import ssl
import struct
import time
import uuid
import warnings

import pytest
import trio
from broker_helpers import roundtrip, send_request, wait_closed
from security_helpers import USERS, add_users, make_certs

import trilog
from trilog import protocol as p
from trilog.errors import AuthenticationError, SaslAuthenticationFailedError

pytestmark = pytest.mark.slow

#: (listener, mechanism) pairs the clients are run over
CASES = [
    ("SSL", None),
    ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ("SASL_SSL", "SCRAM-SHA-256"),
    ("SASL_SSL", "PLAIN"),
]
CASE_IDS = [f"{lst}-{mech or 'cert'}" for lst, mech in CASES]


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


def secured_settings(certs, **extra) -> dict:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,"
                     "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.certfile": certs["server"],
        "ssl.cafile": certs["ca"],
        "num.partitions": 1,
        **extra,
    }


@pytest.fixture(scope="module")
def broker(module_broker_process, certs, tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("secured-data")
    add_users("--log-dir", str(log_dir))
    return module_broker_process(log_dir, overrides=secured_settings(certs))


# -- kafka-python ------------------------------------------------------------------------------


def kafka_python_security(listener: str, mechanism: str | None, certs, *,
                          password: str | None = None) -> dict:
    settings: dict = {"security_protocol": listener}
    if "SSL" in listener:
        settings["ssl_cafile"] = certs["ca"]
    if mechanism:
        settings.update(sasl_mechanism=mechanism, sasl_plain_username="alice",
                        sasl_plain_password=password or USERS["alice"])
    return settings


@pytest.mark.parametrize("listener, mechanism", CASES, ids=CASE_IDS)
def test_kafka_python_over(broker, certs, listener, mechanism):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    bootstrap = broker.listener(listener)
    security = kafka_python_security(listener, mechanism, certs)
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=15000,
                             max_block_ms=15000, **security)
    try:
        for i in range(20):
            producer.send(topic, b"v%d" % i).get(timeout=15)
    finally:
        producer.close(timeout=5)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             consumer_timeout_ms=10000, **security)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        values = []
        for record in consumer:
            values.append(record.value)
            if len(values) == 20:
                break
    finally:
        consumer.close()
    assert values == [b"v%d" % i for i in range(20)]


def test_kafka_python_with_a_wrong_password_is_refused(broker, certs, caplog):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

    # A KafkaProducer whose constructor raises never closes its network client (kafka-python's
    # leak): keep hold of the client to close it, or its wake-up socketpair's ResourceWarning
    # fails whichever later test the garbage collector happens to run in.
    clients = []

    def kafka_client(**configs):
        clients.append(KafkaProducer.DEFAULT_CONFIG["kafka_client"](**configs))
        return clients[-1]

    security = kafka_python_security("SASL_PLAINTEXT", "SCRAM-SHA-256", certs,
                                     password="wrong")
    # kafka-python 3 retries its bootstrap for bootstrap_timeout_ms (30 s) whatever max_block_ms
    bootstrap_timeout = ({"bootstrap_timeout_ms": 3000}
                         if "bootstrap_timeout_ms" in KafkaProducer.DEFAULT_CONFIG else {})
    try:
        with caplog.at_level("WARNING", logger="kafka"), pytest.raises(KafkaError):
            # kafka-python retries the bootstrap until max_block_ms, then says so; why it
            # failed is in its log.
            KafkaProducer(bootstrap_servers=broker.listener("SASL_PLAINTEXT"),
                          max_block_ms=3000, kafka_client=kafka_client, **bootstrap_timeout,
                          **security).close()
    finally:
        for client in clients:
            client.close()
    assert clients and "SaslAuthenticationFailedError" in caplog.text


# -- confluent-kafka (librdkafka) -------------------------------------------------------------


def librdkafka_security(listener: str, mechanism: str | None, certs, *,
                        password: str | None = None) -> dict:
    settings = {"security.protocol": listener}
    if "SSL" in listener:
        settings["ssl.ca.location"] = certs["ca"]
    if mechanism:
        settings.update({"sasl.mechanism": mechanism, "sasl.username": "alice",
                         "sasl.password": password or USERS["alice"]})
    return settings


@pytest.mark.parametrize("listener, mechanism", CASES, ids=CASE_IDS)
def test_confluent_kafka_over(broker, certs, listener, mechanism):
    from confluent_kafka import Consumer, Producer, TopicPartition

    bootstrap = broker.listener(listener)
    security = librdkafka_security(listener, mechanism, certs)
    topic = f"ck-{uuid.uuid4().hex[:8]}"
    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, **security})
    for i in range(20):
        producer.produce(topic, b"v%d" % i,
                         on_delivery=lambda err, _msg: err and errors.append(err))
    assert producer.flush(30) == 0 and not errors
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         **security})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values = []
        for _ in range(100):
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values.append(msg.value())
            if len(values) == 20:
                break
    finally:
        consumer.close()
    assert values == [b"v%d" % i for i in range(20)]


def _librdkafka_errors(config: dict, seconds: float = 10.0) -> list:
    """The errors a librdkafka producer with ``config`` reports while it tries to connect
    (its error callback runs from ``poll``)."""
    from confluent_kafka import Producer

    errors: list = []
    producer = Producer({**config, "error_cb": errors.append, "log_level": 0})
    deadline = time.monotonic() + seconds
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    return errors


def test_confluent_kafka_with_a_wrong_password_is_refused(broker, certs):
    from confluent_kafka import KafkaError

    errors = _librdkafka_errors({"bootstrap.servers": broker.listener("SASL_SSL"),
                                 **librdkafka_security("SASL_SSL", "SCRAM-SHA-512", certs,
                                                       password="wrong")})
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "invalid credentials" in errors[0].str()


def test_confluent_kafka_without_a_certificate_is_refused_when_one_is_required(
        broker_process, certs, tmp_path):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    strict = broker_process(tmp_path / "data", overrides={
        "listeners": "SSL://127.0.0.1:0", "ssl.certfile": certs["server"],
        "ssl.cafile": certs["ca"], "ssl.client.auth": "required"})
    bootstrap = strict.listener("SSL")
    errors = _librdkafka_errors({"bootstrap.servers": bootstrap,
                                 **librdkafka_security("SSL", None, certs)})
    assert errors and errors[0].code() in (KafkaError._SSL, KafkaError._TRANSPORT,
                                           KafkaError._ALL_BROKERS_DOWN), errors
    # The broker's TLS alert says why (not only "connection closed by peer").
    assert "certificate" in errors[0].str(), errors
    with_cert = AdminClient({"bootstrap.servers": bootstrap,
                             **librdkafka_security("SSL", None, certs),
                             "ssl.certificate.location": certs["client_cert"],
                             "ssl.key.location": certs["client_key"]})
    assert with_cert.list_topics(timeout=10).brokers


# -- trilog's client ---------------------------------------------------------------------------


#: trilog's client takes kafka-python's option names
trilog_security = kafka_python_security


@pytest.mark.parametrize("listener, mechanism", CASES, ids=CASE_IDS)
async def test_trilog_client_over(broker, certs, listener, mechanism):
    bootstrap = broker.listener(listener)
    security = trilog_security(listener, mechanism, certs)
    topic = f"tl-{uuid.uuid4().hex[:8]}"
    async with trilog.open_producer(bootstrap, linger_ms=1, **security) as producer:
        for i in range(20):
            await producer.send(topic, b"v%d" % i)
    async with trilog.open_simple_consumer(bootstrap, **security) as consumer:
        got = []
        with trio.fail_after(30):
            offset = 0
            while len(got) < 20:
                fetched = await consumer.fetch(topic, 0, offset)
                got.extend(r.value for r in fetched)
                offset = fetched.next_offset
    assert got == [b"v%d" % i for i in range(20)]


async def test_trilog_client_with_a_wrong_password_is_refused(broker, certs):
    security = trilog_security("SASL_SSL", "SCRAM-SHA-256", certs, password="wrong")
    with pytest.raises(SaslAuthenticationFailedError), trio.fail_after(20):
        async with trilog.open_admin(broker.listener("SASL_SSL"), **security) as admin:
            await admin.list_topics()


async def test_trilog_client_that_does_not_trust_the_broker_is_refused(broker, tmp_path):
    import trustme

    other_ca = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(other_ca)
    with pytest.raises(AuthenticationError, match="TLS handshake"), trio.fail_after(20):
        async with trilog.open_admin(broker.listener("SSL"), security_protocol="SSL",
                                     ssl_cafile=str(other_ca)) as admin:
            await admin.list_topics()


def test_a_bad_security_option_is_a_clear_error():
    with pytest.raises(trilog.client.SecurityConfigError, match="security_protocol"):
        trilog.ClientSecurity.from_options("TLS")
    with pytest.raises(trilog.client.SecurityConfigError, match="sasl_plain_username"):
        trilog.ClientSecurity.from_options("SASL_PLAINTEXT", sasl_mechanism="PLAIN")
    with pytest.raises(trilog.client.SecurityConfigError, match="sasl_mechanism"):
        trilog.ClientSecurity.from_options("SASL_PLAINTEXT", sasl_mechanism="GSSAPI",
                                           sasl_plain_username="u", sasl_plain_password="p")


# -- the protocol, by hand ---------------------------------------------------------------------


def _connect(address: str, context: ssl.SSLContext | None = None) -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    return context.wrap_socket(sock, server_hostname=host) if context else sock


def test_a_request_before_the_login_closes_the_connection(broker):
    with _connect(broker.listener("SASL_PLAINTEXT")) as sock:
        api = roundtrip(sock, p.ApiVersionsRequest(), 0)  # allowed before the login
        assert api.error_code == 0
        send_request(sock, p.MetadataRequest(topics=None), 1)
        assert wait_closed(sock)


def test_an_unknown_mechanism_is_refused_with_the_enabled_ones(broker):
    with _connect(broker.listener("SASL_PLAINTEXT")) as sock:
        answer = roundtrip(sock, p.SaslHandshakeRequest(mechanism="GSSAPI"), 1)
        assert answer.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
        assert set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert wait_closed(sock)


def test_sasl_on_a_plaintext_listener_is_an_illegal_state(broker):
    with _connect(broker.listener("PLAINTEXT")) as sock:
        answer = roundtrip(sock, p.SaslHandshakeRequest(mechanism="PLAIN"), 1)
        assert answer.error_code == 34  # ILLEGAL_SASL_STATE


def test_a_wrong_plain_password_answers_sasl_authentication_failed(broker):
    with _connect(broker.listener("SASL_PLAINTEXT")) as sock:
        assert roundtrip(sock, p.SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
        answer = roundtrip(sock, p.SaslAuthenticateRequest(
            auth_bytes=b"\0alice\0wrong"), 1)
        assert answer.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert wait_closed(sock)


def test_a_legacy_handshake_takes_bare_tokens(broker):
    """SaslHandshake v0 (Kafka 0.10's clients): the PLAIN token follows as a bare frame."""
    with _connect(broker.listener("SASL_PLAINTEXT")) as sock:
        assert roundtrip(sock, p.SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == 0
        token = b"\0alice\0" + USERS["alice"].encode()
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert sock.recv(4) == b"\0\0\0\0"  # an empty answer: logged in
        meta = roundtrip(sock, p.MetadataRequest(topics=None), 1)
        assert meta.brokers


def test_metadata_advertises_each_clients_own_listener(broker, certs):
    context = ssl.create_default_context(cafile=certs["ca"])
    for name in ("PLAINTEXT", "SSL"):
        address = broker.listener(name)
        with _connect(address, context if name == "SSL" else None) as sock:
            meta = roundtrip(sock, p.MetadataRequest(topics=None), 1)
        assert [f"{b.host}:{b.port}" for b in meta.brokers] == [address]


def test_the_sasl_exchange_survives_fuzzing_and_never_logs_anyone_in(broker):
    """Random, truncated, oversized and out-of-order tokens: the broker answers or closes,
    never crashes, and a connection it did not log in cannot send anything else."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    rng = random.Random(20261124)
    address = broker.listener("SASL_PLAINTEXT")
    good_first = b"n,,n=alice,r=" + b"x" * 24
    tokens = [b"", b"\0", b"\0alice", b"\0alice\0", b"\0\0\0", b"n,,", good_first,
              b"c=biws,r=abc,p=AAAA", b"\xff" * 64, b"x" * 70_000]
    rounds = []  # (mechanism or None: no handshake, [(token, version)]), drawn in order
    for _ in range(60):
        mechanism = rng.choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "plain", ""])
        handshake = mechanism if rng.random() < 0.8 else None
        sends = []
        for _ in range(rng.randint(1, 3)):
            token = rng.choice(tokens + [rng.randbytes(rng.randint(0, 300))])
            if rng.random() < 0.3:
                token = token[: rng.randint(0, len(token))]
            sends.append((token, rng.choice([0, 1])))
        rounds.append((handshake, sends))

    def attempt(numbered) -> None:
        round_, (handshake, sends) = numbered
        with _connect(address) as sock:
            if handshake is not None:
                send_request(sock, p.SaslHandshakeRequest(mechanism=handshake), 1)
            for token, version in sends:
                send_request(sock, p.SaslAuthenticateRequest(auth_bytes=token), version)
            send_request(sock, p.MetadataRequest(topics=None), 1)
            sock.settimeout(5)
            data = b""
            try:
                while chunk := sock.recv(65536):
                    data += chunk
            except (ConnectionResetError, TimeoutError):
                pass
            # The Metadata answer would be the last frame: a logged-out connection never
            # gets one (it is closed first).  Find it by its correlation id's answer size.
            assert b"127.0.0.1" not in data, f"round {round_}: a Metadata answer came back"

    # Ten at a time: the broker holds each failed login's close (its delay, then the
    # client's FIN) for about a second.
    with ThreadPoolExecutor(10) as pool:
        list(pool.map(attempt, enumerate(rounds)))
    # Still alive, and still serving good logins.
    with _connect(address) as sock:
        assert roundtrip(sock, p.SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
        token = b"\0bob\0" + USERS["bob"].encode()
        assert roundtrip(sock, p.SaslAuthenticateRequest(auth_bytes=token), 1).error_code == 0
        assert roundtrip(sock, p.MetadataRequest(topics=None), 1).brokers


async def test_mutual_tls_names_the_principal_by_its_certificate(broker_process, certs,
                                                                 tmp_path):
    """ssl.client.auth=required: trilog's client with a certificate gets in, and the
    mapping rule makes its subject (CN=alice,...) the principal User:alice, whom the ACLs
    name; a client without one is refused at the handshake."""
    strict = broker_process(tmp_path / "data", overrides={
        "listeners": "SSL://127.0.0.1:0", "ssl.certfile": certs["server"],
        "ssl.cafile": certs["ca"], "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": r"RULE:^CN=([^,]*),.*$/$1/,DEFAULT",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:alice"})
    address = strict.listener("SSL")
    with trio.fail_after(30):
        async with trilog.open_admin(address, security_protocol="SSL", ssl_cafile=certs["ca"],
                                     ssl_certfile=certs["client_cert"],
                                     ssl_keyfile=certs["client_key"]) as admin:
            await admin.create_topic("mtls", 1)  # Create: alice is a super user
            assert "mtls" in await admin.list_topics()
    with pytest.raises((AuthenticationError, trilog.errors.NetworkError)), trio.fail_after(30):
        async with trilog.open_admin(address, security_protocol="SSL",
                                     ssl_cafile=certs["ca"]) as admin:
            await admin.list_topics()
