"""Options and planning decisions: pure functions, no Spark (except the last tests, which
check that a bad option fails the query with the message, before any task runs)."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trilog.spark._options import (
    OptionError,
    parse_duration_ms,
    parse_read_options,
    parse_write_options,
)
from trilog.spark._planning import (
    OffsetRange,
    cap_ranges,
    from_offset_json,
    hold_batch,
    plan_ranges,
    rate_limit,
    split_ranges,
    to_offset_json,
)

BASE = {"bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


@pytest.mark.parametrize("options, streaming, message", [
    ({"subscribe": "t"}, False, "exactly one of the options bootstrap.servers"),
    ({**BASE, "zookeeper.connect": "h:2181"}, False, "both were given"),
    ({"bootstrap.servers": "nohost", "subscribe": "t"}, False, "is not host:port"),
    ({"bootstrap.servers": "h:1"}, False, "exactly one of the options subscribe"),
    ({**BASE, "assign": '{"t": [0]}'}, False, "got subscribe, assign"),
    ({**BASE, "subscribe": " , "}, False, "names no topic"),
    ({"bootstrap.servers": "h:1", "subscribePattern": "("}, False, "not a regular expression"),
    ({"bootstrap.servers": "h:1", "assign": "{t: [0]}"}, False, "not valid JSON"),
    ({"bootstrap.servers": "h:1", "assign": '{"t": ["0"]}'}, False, "partition numbers"),
    ({**BASE, "startingOffsets": "latest"}, False, "startingOffsets=latest is not allowed"),
    ({**BASE, "startingOffsets": '{"t": {"0": -1}}'}, False, "-1 (latest) is not allowed"),
    ({**BASE, "startingOffsets": '{"t": {"0": -3}}'}, False, "must be an offset >= 0"),
    ({**BASE, "endingOffsets": "earliest"}, False, "endingOffsets=earliest is not allowed"),
    ({**BASE, "endingOffsets": "latest"}, True, "for batch queries"),
    ({**BASE, "maxOffsetsPerTrigger": "10"}, False, "is for streaming queries"),
    ({**BASE, "maxOffsetsPerTrigger": "0"}, True, "must be at least 1"),
    ({**BASE, "minOffsetsPerTrigger": "10"}, False,
     "option minOffsetsPerTrigger is for streaming queries"),
    ({**BASE, "minOffsetsPerTrigger": "10", "maxTriggerDelay": "5s"}, False,
     "is for streaming queries"),
    ({**BASE, "maxTriggerDelay": "5s"}, True, "maxTriggerDelay only bounds the wait of "
                                              "minOffsetsPerTrigger"),
    ({**BASE, "minOffsetsPerTrigger": "10", "maxTriggerDelay": "soon"}, True,
     "maxTriggerDelay='soon' is not a duration"),
    ({**BASE, "minOffsetsPerTrigger": "100", "maxOffsetsPerTrigger": "10"}, True,
     "minOffsetsPerTrigger=100 is more than maxOffsetsPerTrigger=10"),
    ({**BASE, "minPartitions": "many"}, False, "is not an integer"),
    ({**BASE, "failOnDataLoss": "yes"}, False, "must be true or false"),
    ({**BASE, "startingTimestamp": "soon"}, False, "startingTimestamp='soon' is not an integer"),
    ({**BASE, "startingOffsetsByTimestamp": "{x"}, False, "is not valid JSON"),
    ({**BASE, "startingOffsetsByTimestamp": '{"t": [0]}'}, False,
     "needs an object of partition -> timestamp"),
    ({**BASE, "endingOffsetsByTimestamp": '{"t": {"0": -1}}'}, False,
     "-1 of t-0 is not a timestamp"),
    ({**BASE, "endingOffsetsByTimestamp": '{"t": {"0": 5}}'}, True,
     "option endingOffsetsByTimestamp is for batch queries"),
    ({**BASE, "endingTimestamp": "5"}, True, "option endingTimestamp is for batch queries"),
    ({**BASE, "startingOffsetsByTimestampStrategy": "earliest"}, False, "must be latest or error"),
])
def test_bad_read_options_are_clear_errors(options, streaming, message):
    with pytest.raises(OptionError) as info:
        parse_read_options(options, streaming=streaming)
    assert message in str(info.value)


def test_read_defaults_and_case_insensitive_names():
    batch = parse_read_options({"Bootstrap.Servers": "h:1, h:2", "SUBSCRIBE": "b,a,a"},
                               streaming=False)
    assert batch.connection.bootstrap_servers == "h:1,h:2"
    assert batch.subscription.topics == ("a", "b")
    assert (batch.starting.kind, batch.ending.kind) == ("earliest", "latest")
    assert batch.fail_on_data_loss and not batch.include_headers
    stream = parse_read_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "e-.*",
                                 "failOnDataLoss": "False"}, streaming=True)
    assert stream.starting.kind == "latest" and not stream.fail_on_data_loss
    assert stream.subscription.matches("e-1") and not stream.subscription.matches("xe-1")
    zk = parse_read_options({"zookeeper.connect": "h:2181/c", "assign": '{"t": [1, 0]}',
                             "startingOffsets": '{"t": {"0": 5, "1": -2}}'}, streaming=False)
    assert zk.connection.kwargs() == {"zookeeper": "h:2181/c"}
    assert zk.subscription.assigned == (("t", (0, 1)),)
    assert zk.starting.as_dict() == {("t", 0): 5, ("t", 1): -2}


def test_timestamps_take_precedence_as_in_spark():
    # Spark's order: <x>Timestamp, then <x>OffsetsByTimestamp, then <x>Offsets.
    per_partition = '{"t": {"0": 1000, "1": 2000}}'
    options = parse_read_options({**BASE, "startingOffsets": "earliest",
                                  "startingOffsetsByTimestamp": per_partition,
                                  "endingOffsets": "latest",
                                  "endingOffsetsByTimestamp": per_partition,
                                  "endingTimestamp": "3000"}, streaming=False)
    assert options.starting.kind == "timestamps"
    assert options.starting.as_dict() == {("t", 0): 1000, ("t", 1): 2000}
    assert options.starting.option == "startingOffsetsByTimestamp"
    assert (options.ending.kind, options.ending.timestamp) == ("timestamp", 3000)
    both = parse_read_options({**BASE, "startingTimestamp": "7",
                               "startingOffsetsByTimestamp": per_partition}, streaming=True)
    assert (both.starting.kind, both.starting.timestamp) == ("timestamp", 7)
    # no record that recent: the query fails by default, as with Spark's Kafka source
    assert both.timestamp_strategy == "error"
    assert parse_read_options({**BASE, "startingOffsetsByTimestampStrategy": "Latest"},
                              streaming=True).timestamp_strategy == "latest"


def test_write_options():
    options = parse_write_options({"bootstrap.servers": "h:1", "topic": "out",
                                   "kafka.linger.ms": "20", "acks": "1"})
    assert options.topic == "out"
    assert options.producer == {"acks": 1, "linger_ms": 20}
    assert parse_write_options({"bootstrap.servers": "h:1"}).producer == {"acks": "all"}
    with pytest.raises(OptionError, match="acks=0 is not allowed"):
        parse_write_options({"bootstrap.servers": "h:1", "acks": "0"})


def test_delivery_guarantee_and_its_transactions():
    plain = parse_write_options({"bootstrap.servers": "h:1"})
    assert (plain.delivery_guarantee, plain.exactly_once) == ("at_least_once", False)
    eos = parse_write_options({"bootstrap.servers": "h:1", "deliveryguarantee": "Exactly-Once",
                               "transactionalIdPrefix": " etl ",
                               "kafka.transaction.timeout.ms": "90000"})
    assert (eos.delivery_guarantee, eos.exactly_once) == ("exactly_once", True)
    assert eos.transactional_id_prefix == "etl"
    assert eos.producer == {"acks": "all", "transaction_timeout_ms": 90000}
    assert parse_write_options({"bootstrap.servers": "h:1", "deliveryGuarantee": "exactly_once"}
                               ).transactional_id_prefix == "trilog-spark"
    for options, message in [
        ({"deliveryGuarantee": "twice"}, "must be at_least_once (the default) or exactly_once"),
        ({"transactionalIdPrefix": "p"}, "needs deliveryGuarantee=exactly_once"),
        ({"kafka.transaction.timeout.ms": "1"}, "needs deliveryGuarantee=exactly_once"),
        ({"deliveryGuarantee": "exactly_once", "acks": "1"}, "needs acks=all"),
        ({"deliveryGuarantee": "exactly_once", "enable.idempotence": "false"},
         "needs enable.idempotence=true"),
        ({"deliveryGuarantee": "exactly_once", "kafka.retries": "0"}, "needs retries >= 1"),
        ({"deliveryGuarantee": "exactly_once", "transactionalIdPrefix": " "}, "is empty"),
    ]:
        with pytest.raises(OptionError, match=re.escape(message)):
            parse_write_options({"bootstrap.servers": "h:1", **options})
    with pytest.raises(OptionError, match="needs bootstrap.servers, not zookeeper.connect"):
        parse_write_options({"zookeeper.connect": "h:2181", "deliveryGuarantee": "exactly_once"})


def test_isolation_level_reaches_the_consumer():
    def level(**options):
        return parse_read_options({**BASE, **options}, streaming=False).consumer.get(
            "isolation_level")

    assert level() is None  # the client's default, read_uncommitted
    assert level(**{"kafka.isolation.level": "READ_COMMITTED"}) == "read_committed"
    assert level(**{"isolation.level": "read_uncommitted"}) == "read_uncommitted"
    with pytest.raises(OptionError, match="must be read_committed or read_uncommitted"):
        level(**{"kafka.isolation.level": "serializable"})
    with pytest.raises(OptionError, match="is for reading"):
        parse_write_options({"bootstrap.servers": "h:1", "kafka.isolation.level": "x"})


@pytest.mark.parametrize("name, suggestion", [
    ("startingofsets", "startingOffsets"),  # as Spark hands it over: lower-cased
    ("startingOfsets", "startingOffsets"),
    ("maxoffsetpertrigger", "maxOffsetsPerTrigger"),
    ("subscribepatern", "subscribePattern"),
    ("failOnDataLos", "failOnDataLoss"),
    ("kafka.bootstrap.server", "kafka.bootstrap.servers"),
])
def test_an_unknown_read_option_names_the_nearest_known_one(name, suggestion):
    with pytest.raises(OptionError) as info:
        parse_read_options({**BASE, name: "earliest"}, streaming=None)
    assert str(info.value) == f"unknown option {name!r}; did you mean {suggestion!r}?"


def test_an_unknown_option_with_nothing_near_lists_what_is_taken():
    with pytest.raises(OptionError, match=r"unknown option 'colour'; a read takes assign, ") \
            as info:
        parse_read_options({**BASE, "colour": "blue"}, streaming=False)
    assert "startingOffsets" in str(info.value)
    with pytest.raises(OptionError, match="unknown option 'colour'; a write takes .*kafka.acks, "):
        parse_write_options({"bootstrap.servers": "h:1", "colour": "blue"})
    with pytest.raises(OptionError, match="did you mean 'kafka.linger.ms'"):
        parse_write_options({"bootstrap.servers": "h:1", "kafka.lingr.ms": "5"})


def test_read_options_are_refused_by_a_write_and_write_options_by_a_read():
    with pytest.raises(OptionError, match="option 'topic' is for writing; a read names its "
                                          "topics with subscribe"):
        parse_read_options({**BASE, "topic": "t"}, streaming=True)
    with pytest.raises(OptionError, match="option 'subscribe' is for reading; a write takes "
                                          "its topic from the option topic"):
        parse_write_options({**BASE, "topic": "out"})
    with pytest.raises(OptionError, match="option 'startingOffsets' is for reading"):
        parse_write_options({"bootstrap.servers": "h:1", "startingOffsets": "earliest"})
    with pytest.raises(OptionError, match="option 'acks' is for writing"):
        parse_read_options({**BASE, "acks": "all"}, streaming=False)
    # Spark hands a streaming write its checkpointLocation with the options.
    parse_write_options({"bootstrap.servers": "h:1", "checkpointlocation": "/tmp/c"})


def test_a_path_is_refused_with_the_reason():
    with pytest.raises(OptionError, match="option 'path' is not supported: the trilog source "
                                          "takes no path"):
        parse_read_options({**BASE, "path": "events"}, streaming=False)
    with pytest.raises(OptionError, match="takes no path"):
        parse_write_options({"bootstrap.servers": "h:1", "path": "/out"})


def test_kafka_client_settings_pass_through_to_the_consumer():
    options = parse_read_options({**BASE, "kafka.client.id": "reports",
                                  "kafka.request.timeout.ms": "5000",
                                  "metadata.max.age.ms": "60000",
                                  "kafka.max.partition.fetch.bytes": "65536",
                                  "kafka.fetch.max.bytes": "4096",
                                  "kafka.security.protocol": "plaintext"}, streaming=False)
    assert options.consumer == {"client_id": "reports", "request_timeout_ms": 5000,
                                "metadata_max_age_ms": 60000}
    # a task fetches one partition per request: the smaller cap wins
    assert options.max_partition_fetch_bytes == 4096
    assert parse_read_options(BASE, streaming=False).consumer == {"client_id": "trilog-spark"}


def test_security_settings_reach_the_connection():
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="alice" password="alice-secret";')
    for options in (parse_read_options({**BASE, "kafka.security.protocol": "SASL_PLAINTEXT",
                                        "kafka.sasl.mechanism": "SCRAM-SHA-256",
                                        "kafka.sasl.jaas.config": jaas}, streaming=False),
                    parse_write_options({"bootstrap.servers": "h:1",
                                         "kafka.security.protocol": "SASL_PLAINTEXT",
                                         "kafka.sasl.mechanism": "SCRAM-SHA-256",
                                         "kafka.sasl.jaas.config": jaas})):
        security = options.connection.kwargs()["security"]
        assert (security.protocol, security.sasl_mechanism, security.username,
                security.password) == ("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice",
                                       "alice-secret")
        assert "alice-secret" not in repr(options.connection.kwargs())
    assert "security" not in parse_read_options(BASE, streaming=False).connection.kwargs()


def test_group_id_and_prefix_name_the_client():
    # Spark's source names its consumers' group after them and joins no group; trilog's
    # has no group, so they name its connections, unless kafka.client.id does.
    def client_id(**extra):
        return parse_read_options({**BASE, **extra}, streaming=True).consumer["client_id"]

    assert client_id(**{"kafka.group.id": "authorized"}) == "authorized"
    assert client_id(groupidprefix="etl") == "etl"
    assert client_id(**{"kafka.group.id": "authorized", "groupIdPrefix": "etl"}) == "authorized"
    assert client_id(**{"kafka.group.id": "g", "kafka.client.id": "c"}) == "c"
    with pytest.raises(OptionError, match="option kafka.group.id is empty"):
        client_id(**{"kafka.group.id": " "})
    with pytest.raises(OptionError, match="'kafka.group.id' is not supported: a write joins no "
                                          "consumer group"):
        parse_write_options({"bootstrap.servers": "h:1", "kafka.group.id": "g"})


def test_kafka_client_settings_pass_through_to_the_producer():
    options = parse_write_options({
        "bootstrap.servers": "h:1", "kafka.client.id": "loader", "kafka.acks": "-1",
        "kafka.linger.ms": "20", "batch.size": "32768", "kafka.buffer.memory": "1048576",
        "kafka.retries": "3", "kafka.retry.backoff.ms": "50", "kafka.delivery.timeout.ms": "60000",
        "kafka.request.timeout.ms": "5000", "kafka.max.request.size": "2097152",
        "kafka.max.in.flight.requests.per.connection": "2", "kafka.metadata.max.age.ms": "1000",
        "kafka.enable.idempotence": "true", "kafka.compression.type": "GZIP",
        "kafka.security.protocol": "PLAINTEXT"})
    assert options.producer == {
        "client_id": "loader", "acks": "all", "linger_ms": 20, "batch_size": 32768,
        "buffer_memory": 1048576, "retries": 3, "retry_backoff_ms": 50,
        "delivery_timeout_ms": 60000, "request_timeout_ms": 5000, "max_request_size": 2097152,
        "max_in_flight_requests_per_connection": 2, "metadata_max_age_ms": 1000,
        "enable_idempotence": True, "compression_type": "gzip"}


@pytest.mark.parametrize("options, write, message", [
    ({"kafka.security.protocol": "TLS"}, False,
     "the kafka.security.protocol/ssl/sasl options: security_protocol='TLS' is not one of"),
    ({"kafka.security.protocol": "SASL_SSL"}, True, "needs sasl_plain_username"),
    ({"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/no/ts.pem"}, False,
     "cannot load the TLS files"),
    ({"kafka.ssl.truststore.password": "x"}, False, "trilog's client reads PEM files"),
    ({"kafka.sasl.login.class": "x"}, True, "logs in with sasl.mechanism"),
    ({"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.jaas.config": "x"}, True,
     "sasl.jaas.config is not"),
    ({"kafka.auto.offset.reset": "earliest"}, False, "set the option startingOffsets instead"),
    ({"kafka.enable.auto.commit": "true"}, False,
     "offsets to the cluster: they live in Spark's checkpoint"),
    ({"kafka.value.deserializer": "x"}, False, "deserialize them with DataFrame operations"),
    ({"kafka.key.serializer": "x"}, True, "serialize with DataFrame operations"),
    ({"kafka.transactional.id": "t"}, True, "set deliveryGuarantee=exactly_once"),
    ({"kafka.fetch.min.bytes": "1"}, False,
     "'kafka.fetch.min.bytes' is not passed to trilog's client: the source has no such "
     "setting; a read passes kafka.bootstrap.servers, kafka.client.id, "),
    ({"kafka.reconnect.backoff.ms": "1"}, True, "a write passes kafka.bootstrap.servers"),
    ({"kafka.compression.type": "brotli"}, True, "must be one of none, gzip, snappy, lz4, zstd"),
    ({"kafka.enable.idempotence": "true", "acks": "1"}, True,
     "enable.idempotence=true needs acks=all"),
    ({"kafka.request.timeout.ms": "0"}, False, "kafka.request.timeout.ms=0 must be at least 1"),
    ({"kafka.client.id": ""}, True, "option kafka.client.id is empty"),
])
def test_kafka_settings_the_client_lacks_are_refused_with_the_reason(options, write, message):
    with pytest.raises(OptionError) as info:
        if write:
            parse_write_options({"bootstrap.servers": "h:1", **options})
        else:
            parse_read_options({**BASE, **options}, streaming=False)
    assert message in str(info.value)


def test_offset_json_is_canonical():
    positions = {("b", 10): 1, ("a", 2): 3, ("b", 9): 4}
    doc = to_offset_json(positions)
    assert json.dumps(doc) == '{"a": {"2": 3}, "b": {"9": 4, "10": 1}}'
    assert from_offset_json(json.loads(json.dumps(doc))) == positions


def test_split_ranges_reaches_min_partitions_and_covers_every_offset():
    ranges = [OffsetRange("t", 0, 0, 300), OffsetRange("t", 1, 0, 100), OffsetRange("t", 2, 7, 7)]
    split = split_ranges(ranges, 16)
    assert len(split) == 16
    for p, (lo, hi) in ((0, (0, 300)), (1, (0, 100))):
        pieces = sorted((r.start, r.end) for r in split if r.partition == p)
        assert pieces[0][0] == lo and pieces[-1][1] == hi
        assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))
    assert split_ranges(ranges, None) == ranges[:2]  # empty ranges dropped
    assert len(split_ranges([OffsetRange("t", 0, 0, 3)], 10)) == 3  # not below one record


def test_max_records_per_partition_caps_every_range():
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 50, 80), OffsetRange("t", 2, 7, 7)]
    capped = cap_ranges(ranges, 30)
    assert [(r.partition, r.start, r.end) for r in capped] == [
        (0, 0, 25), (0, 25, 50), (0, 50, 75), (0, 75, 100), (1, 50, 80)]
    assert cap_ranges(ranges, None) == ranges[:2]
    # with minPartitions as well: capped first, then split until there are enough
    planned = plan_ranges(ranges, 8, 30)
    assert len(planned) == 8 and max(r.size for r in planned) <= 30
    assert parse_read_options({**BASE, "maxRecordsPerPartition": "1000"},
                              streaming=True).max_records_per_partition == 1000
    with pytest.raises(OptionError, match="maxRecordsPerPartition=0 must be at least 1"):
        parse_read_options({**BASE, "maxRecordsPerPartition": "0"}, streaming=False)


def test_trigger_options_and_durations():
    options = parse_read_options({**BASE, "minOffsetsPerTrigger": "500"}, streaming=True)
    assert (options.min_offsets_per_trigger, options.max_trigger_delay_ms) == (500, 15 * 60_000)
    options = parse_read_options({**BASE, "minoffsetspertrigger": "5", "maxtriggerdelay": "2s",
                                  "maxOffsetsPerTrigger": "5"}, streaming=True)
    assert (options.min_offsets_per_trigger, options.max_trigger_delay_ms) == (5, 2000)
    assert [parse_duration_ms("d", t) for t in ("15m", "30s", "500ms", "500", " 2 h ", "1d",
                                                 "3min", "1500us")] == [
        900_000, 30_000, 500, 500, 7_200_000, 86_400_000, 180_000, 1]
    for bad in ("-1s", "1.5s", "5 minutes", ""):
        with pytest.raises(OptionError, match="is not a duration"):
            parse_duration_ms("maxTriggerDelay", bad)


def test_hold_batch_waits_for_min_offsets_until_the_delay():
    assert not hold_batch(3, 10, None, 1000)  # the first batch never waits, as in Spark
    assert hold_batch(3, 10, 999.0, 1000)
    assert not hold_batch(10, 10, 0.0, 1000)  # enough records
    assert not hold_batch(3, 10, 1000.0, 1000)  # waited long enough
    assert not hold_batch(0, 10, 5000.0, 1000)  # (Spark then runs no batch: nothing new)


def test_rate_limit_shares_in_proportion_and_reads_exactly_the_limit():
    starts = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    ends = {("t", 0): 300, ("t", 1): 200, ("t", 2): 5}
    capped = rate_limit(starts, ends, 40)
    assert sum(capped[tp] - starts[tp] for tp in ends) == 40
    assert capped[("t", 0)] - 0 == 30 and capped[("t", 1)] - 100 == 10
    assert rate_limit(starts, ends, 10_000) == ends


# -- through Spark --------------------------------------------------------------------------


def test_bad_options_fail_the_query_with_the_message(spark, broker):
    def attempt(**options):
        reader = spark.read.format("trilog")
        for key, value in options.items():
            reader = reader.option(key, value)
        with pytest.raises(Exception) as info:
            reader.load().collect()
        return str(info.value)

    with pytest.raises(Exception, match="exactly one of the options subscribe"):
        spark.read.format("trilog").option("bootstrap.servers", broker.bootstrap).load()

    assert "exactly one of the options bootstrap.servers" in attempt(subscribe="t")
    assert "topic 'nope' (subscribe) does not exist" in attempt(
        **{"bootstrap.servers": broker.bootstrap, "subscribe": "nope"})
    assert "is not valid JSON" in attempt(
        **{"bootstrap.servers": broker.bootstrap, "subscribe": "t", "startingOffsets": "{x"})
    assert "startingOffsets=latest is not allowed" in attempt(
        **{"bootstrap.servers": broker.bootstrap, "subscribe": "t", "startingOffsets": "latest"})
    stream = (spark.readStream.format("trilog").option("bootstrap.servers", broker.bootstrap)
              .option("subscribe", "t").option("endingOffsets", "latest").load())
    with pytest.raises(Exception, match="for batch queries"):
        stream.writeStream.format("noop").start().awaitTermination(60)

    # A misspelt option fails at load(), for a batch and a stream alike (Spark lower-cases it).
    with pytest.raises(Exception, match="unknown option 'startingofsets'; did you mean "
                                        "'startingOffsets'"):
        (spark.read.format("trilog").option("bootstrap.servers", broker.bootstrap)
         .option("subscribe", "t").option("startingOfsets", "earliest").load())
    with pytest.raises(Exception, match="did you mean 'maxOffsetsPerTrigger'"):
        (spark.readStream.format("trilog").option("bootstrap.servers", broker.bootstrap)
         .option("subscribe", "t").option("maxOffsetPerTrigger", "10").load())
    with pytest.raises(Exception, match="option 'subscribe' is for reading"):
        (spark.createDataFrame([("v",)], "value string").write.format("trilog")
         .option("bootstrap.servers", broker.bootstrap).option("subscribe", "t")
         .mode("append").save())


_ranges = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 1000), st.integers(0, 300)),
                   max_size=8, unique_by=lambda t: t[0])


@given(_ranges, st.one_of(st.none(), st.integers(1, 64)))
def test_split_ranges_properties(spec, min_partitions):
    ranges = [OffsetRange("t", p, s, s + n) for p, s, n in spec]
    split = split_ranges(ranges, min_partitions)
    covered = sorted((r.partition, o) for r in split for o in range(r.start, r.end))
    assert covered == sorted((r.partition, o) for r in ranges for o in range(r.start, r.end))
    total = sum(r.size for r in ranges)
    if min_partitions:
        assert len(split) >= min(min_partitions, total)
    assert split == split_ranges(ranges, min_partitions)  # deterministic


@given(_ranges, st.one_of(st.none(), st.integers(1, 64)), st.one_of(st.none(),
                                                                   st.integers(1, 400)))
def test_plan_ranges_properties(spec, min_partitions, max_records):
    ranges = [OffsetRange("t", p, s, s + n) for p, s, n in spec]
    planned = plan_ranges(ranges, min_partitions, max_records)
    covered = sorted((r.partition, o) for r in planned for o in range(r.start, r.end))
    assert covered == sorted((r.partition, o) for r in ranges for o in range(r.start, r.end))
    if max_records:
        assert all(r.size <= max_records for r in planned)
        if not min_partitions:  # the fewest pieces that fit
            assert len(planned) == sum(-(-r.size // max_records) for r in ranges)
    if min_partitions:
        assert len(planned) >= min(min_partitions, sum(r.size for r in ranges))


@given(st.dictionaries(st.integers(0, 7), st.tuples(st.integers(0, 500), st.integers(0, 500)),
                       max_size=8), st.integers(1, 600))
def test_rate_limit_properties(spec, limit):
    starts = {("t", p): s for p, (s, _) in spec.items()}
    ends = {("t", p): s + n for p, (s, n) in spec.items()}
    capped = rate_limit(starts, ends, limit)
    assert all(starts[tp] <= capped[tp] <= ends[tp] for tp in ends)
    lag = sum(ends[tp] - starts[tp] for tp in ends)
    assert sum(capped[tp] - starts[tp] for tp in ends) == min(lag, limit)


def test_public_surface():
    import trilog.spark

    for name in trilog.spark.__all__:
        assert getattr(trilog.spark, name) is not None
    assert trilog.spark.TrilogDataSource.name() == "trilog"
    assert issubclass(trilog.spark.OptionError, ValueError)
