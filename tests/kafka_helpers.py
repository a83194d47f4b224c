"""kafka-python helpers shared by the broker's and the client's end-to-end tests.

They block: from trio, call them through ``trio.to_thread.run_sync``.  ``tests/`` is on
``sys.path`` because pytest imports ``tests/conftest.py`` (no ``__init__.py``, the default
"prepend" import mode), so ``import kafka_helpers`` works from every test folder, as
``broker_helpers`` does from tests/broker.
"""

from __future__ import annotations

import time


def kafka_producer(bootstrap: str, **kw):
    """kafka-python's producer with its defaults (acks='all', idempotence) unless overridden."""
    from kafka import KafkaProducer

    settings = {"bootstrap_servers": bootstrap, "linger_ms": 5, "request_timeout_ms": 15000,
                "max_block_ms": 15000}
    settings.update(kw)
    return KafkaProducer(**settings)


def kafka_consumer(bootstrap: str, **kw):
    """A kafka-python consumer outside any group, reading from the earliest offset."""
    from kafka import KafkaConsumer

    settings = {"bootstrap_servers": bootstrap, "group_id": None, "enable_auto_commit": False,
                "auto_offset_reset": "earliest", "request_timeout_ms": 15000}
    settings.update(kw)
    return KafkaConsumer(**settings)


def consume_partitions(consumer, topic: str, partitions, expected: int,
                       timeout: float = 60.0) -> dict[int, list]:
    """Assign ``partitions`` from the beginning and poll until ``expected`` records came,
    then poll once more to see that nothing else is there."""
    from kafka import TopicPartition

    tps = [TopicPartition(topic, p) for p in partitions]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    out: dict[int, list] = {p: [] for p in partitions}
    total = 0
    deadline = time.monotonic() + timeout
    while total < expected:
        assert time.monotonic() < deadline, f"kafka-python consumed {total} of {expected} records"
        for tp, recs in consumer.poll(timeout_ms=500, max_records=200_000).items():
            out[tp.partition].extend(recs)
            total += len(recs)
    # Nothing beyond what was produced.
    for tp, recs in consumer.poll(timeout_ms=300).items():
        out[tp.partition].extend(recs)
    return out


def lend_snappy(monkeypatch) -> bool:
    """Lend kafka-python (which wants ``python-snappy``) trilog's raw-snappy backend (cramjam
    here); the xerial framing on both sides stays each implementation's own.  True if
    kafka-python can then decode snappy."""
    import kafka.codec

    from trilog.records import _snappy

    if kafka.codec.snappy is None and _snappy.BACKEND is not None:

        class SnappyShim:
            compress = staticmethod(_snappy._compress_raw)
            decompress = staticmethod(_snappy._decompress_raw)

        monkeypatch.setattr(kafka.codec, "snappy", SnappyShim)
    return kafka.codec.has_snappy()


class _XXH32:
    """Enough of the ``xxhash`` package for kafka-python's old-Kafka LZ4 framing."""

    def __init__(self, data: bytes) -> None:
        from trilog.records._lz4 import xxh32

        self._h = xxh32(data)

    def digest(self) -> bytes:
        return self._h.to_bytes(4, "big")


class _XXHashShim:
    xxh32 = _XXH32


def lend_xxhash(monkeypatch) -> None:
    """kafka-python frames LZ4 for Kafka 0.8/0.9 (and magic 0) with the ``xxhash`` package,
    not installed here: lend it trilog's xxh32."""
    import kafka.codec

    if kafka.codec.xxhash is None:
        monkeypatch.setattr(kafka.codec, "xxhash", _XXHashShim)
