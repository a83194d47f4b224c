"""The data source over SASL_SSL with SCRAM: Spark's Kafka options
(``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``,
``kafka.ssl.truststore.location`` as PEM) reach the executors' clients."""

from __future__ import annotations

import pytest
from security_helpers import USERS, add_users, make_certs
from spark_helpers import keyed, load, produce, read_back

pytestmark = pytest.mark.slow


@pytest.fixture
def secured(broker_process, tmp_path):
    certs = make_certs(tmp_path)
    data = tmp_path / "data"
    add_users("--log-dir", str(data))
    broker = broker_process(data, overrides={
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.certfile": certs["server"], "num.partitions": 2})
    options = {
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                                  f'required username="alice" password="{USERS["alice"]}";',
        "kafka.ssl.truststore.location": certs["ca"],
    }
    return broker, broker.listener("SASL_SSL"), options


def test_a_batch_read_over_sasl_ssl(spark, secured):
    broker, address, options = secured
    records = [(i % 2, None, b"s%d" % i) for i in range(60)]
    metas = produce(broker.bootstrap, "secret-in", records)
    df = load(spark, address, subscribe="secret-in", **options)
    assert set(keyed(df)) == {("secret-in", m.partition, m.offset, v)
                              for m, (_, _, v) in zip(metas, records)}
    wrong = {**options, "kafka.sasl.jaas.config": options["kafka.sasl.jaas.config"].replace(
        USERS["alice"], "wrong")}
    with pytest.raises(Exception, match="SASL_AUTHENTICATION_FAILED|invalid credentials"):
        load(spark, address, subscribe="secret-in", **wrong).collect()


def test_a_streaming_sink_over_sasl_ssl(spark, secured, tmp_path):
    broker, address, options = secured
    produce(broker.bootstrap, "secret-src", [(i % 2, None, b"v%d" % i) for i in range(100)])
    reader = (spark.readStream.format("trilog").option("bootstrap.servers", address)
              .option("subscribe", "secret-src").option("startingOffsets", "earliest"))
    for key, value in options.items():
        reader = reader.option(key, value)
    writer = (reader.load().selectExpr("value").writeStream.format("trilog")
              .option("bootstrap.servers", address).option("topic", "secret-copy")
              .option("checkpointLocation", str(tmp_path / "ckpt")))
    for key, value in options.items():
        writer = writer.option(key, value)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(180)
    assert query.exception() is None
    copied = read_back(broker.bootstrap, "secret-copy")
    assert sorted(r.value for r in copied) == sorted(b"v%d" % i for i in range(100))
