"""A kafka-python script moves to ``trilog.sync`` by changing its import: its harmless
keywords are accepted (with a warning saying why they change nothing), ``close(timeout=)``
and ``flush(timeout=)`` work, and the send result has kafka-python's future methods."""

from __future__ import annotations

import threading
import time
import warnings

import pytest

import trilog
import trilog.sync as ts
from trilog.client import IgnoredSettingWarning
from trilog.errors import MessageTooLargeError
from trilog.client import ProducerClosedError


@pytest.fixture
def broker(broker_process):
    return broker_process(overrides={"num.partitions": 1})


def test_kafka_pythons_harmless_keywords_are_accepted_with_a_warning(broker):
    with pytest.warns(IgnoredSettingWarning) as w:
        producer = ts.Producer(broker.bootstrap, api_version=(2, 0), max_block_ms=1000)
    with producer:
        assert producer.send("kp", b"x").get(timeout=30).offset == 0
    assert sorted(str(r.message) for r in w) == [
        "trilog.sync.Producer(): api_version=(2, 0) has no effect: trilog asks each broker "
        "which API versions it speaks",
        "trilog.sync.Producer(): max_block_ms=1000 has no effect: a send waits for room and "
        "for metadata within delivery_timeout_ms"]
    assert all(r.filename == __file__ for r in w)  # it points at the caller's line
    with pytest.warns(IgnoredSettingWarning, match="check_crcs"):
        with ts.Consumer("kp", bootstrap_servers=broker.bootstrap, check_crcs=True,
                         auto_offset_reset="earliest", consumer_timeout_ms=5000) as consumer:
            assert [r.value for r in consumer] == [b"x"]


def test_an_unknown_keyword_names_the_function_the_caller_called():
    with pytest.raises(TypeError) as caught:
        ts.Producer("127.0.0.1:1", lingerms=5)
    assert str(caught.value) == "trilog.sync.Producer() got an unexpected keyword argument " \
                                "'lingerms'"
    with pytest.raises(TypeError, match=r"^trilog.sync.Consumer\(\) got an unexpected"):
        ts.Consumer("t", bootstrap_servers="127.0.0.1:1", groupid="g")
    with pytest.raises(TypeError, match=r"^open_producer\(\) got an unexpected"):
        trilog.open_producer("127.0.0.1:1", lingerms=5)
    with pytest.raises(TypeError, match="does not take kafka-python's sasl_kerberos_service_name: "
                                        "trilog logs in with PLAIN or SCRAM"):
        ts.SimpleConsumer("127.0.0.1:1", sasl_kerberos_service_name="kafka")


def test_the_send_result_has_kafka_pythons_future_methods(broker):
    called: list = []
    with ts.Producer(broker.bootstrap, max_request_size=2000) as producer:
        future = producer.send("futures", b"hello")
        future.add_callback(called.append).add_errback(lambda exc: called.append(("!", exc)))
        future.add_callback(lambda tag, meta, sep="": called.append((tag, meta.offset, sep)),
                            "tagged", sep=":")
        metadata = future.get(timeout=30)
        deadline = time.monotonic() + 10
        while len(called) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert called == [metadata, ("tagged", 0, ":")]
        assert future.is_done and future.succeeded() and not future.failed()
        assert future.value == metadata and future.exception is None
        late: list = []
        future.add_callback(late.append)  # already done: called at once, in this thread
        assert late == [metadata]

        too_large = producer.send("futures", b"x" * 5000)
        failures: list = []
        done = threading.Event()
        too_large.add_errback(lambda exc: (failures.append(exc), done.set()))
        too_large.add_callback(lambda meta: failures.append("called back"))
        assert done.wait(30)
        assert too_large.is_done and too_large.failed() and not too_large.succeeded()
        assert isinstance(too_large.exception, MessageTooLargeError)
        assert failures == [too_large.exception] and too_large.value is None
        pending = producer.send("futures", b"later")
        assert pending.exception is None and pending.value is None  # not done yet: nothing
        pending.get(timeout=30)


def test_a_failing_callback_is_logged_and_the_others_still_run(broker, caplog):
    ran: list = []
    with ts.Producer(broker.bootstrap) as producer:
        future = producer.send("futures", b"x")
        future.add_callback(lambda meta: 1 / 0)
        future.add_callback(ran.append)
        future.get(timeout=30)
        deadline = time.monotonic() + 10
        while not ran and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(ran) == 1
    assert "a SyncDelivery callback failed" in caplog.text


def test_close_and_flush_take_a_timeout(broker):
    with ts.Producer(broker.bootstrap) as producer:
        producer.send("closing", b"x")
        producer.flush(timeout=30)
        producer.close(timeout=5)
        assert producer.closed
    # A broker that stops answering: close(timeout=) returns in time, and the records it
    # could not deliver fail with ProducerClosedError.
    producer = ts.Producer(broker.bootstrap, delivery_timeout_ms=120_000)
    producer.send("closing", b"before").get(timeout=30)
    broker.stop()
    stuck = producer.send("closing", b"after")
    with pytest.raises(TimeoutError, match="flush did not finish within 0.5 s"):
        producer.flush(timeout=0.5)
    start = time.monotonic()
    producer.close(timeout=1)
    assert time.monotonic() - start < 5
    with pytest.raises(ProducerClosedError):
        stuck.get(timeout=5)
    assert stuck.failed()


def test_no_warning_without_such_keywords(broker):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with ts.Producer(broker.bootstrap, linger_ms=1):
            pass
