"""ACLs on a real broker process: SASL users, ``trilog acls`` as the operator runs it,
and kafka-python and trilog's client as the principals the ACLs name.  Write on one topic
and not another, Read on a topic but not on the group, a prefixed ACL, a Deny over an
Allow, anonymous clients, and ACLs kept across a restart."""

from __future__ import annotations

import uuid
import warnings

import pytest
import trio
from security_helpers import USERS, add_users
from cli_helpers import cli

import trilog
from trilog.errors import (
    ClusterAuthorizationFailedError,
    SecurityDisabledError,
    TopicAuthorizationFailedError,
)
from trilog.protocol import AclBindingFilter

pytestmark = pytest.mark.slow

ACCOUNTS = {**USERS, "admin": "admin-secret"}


def login(user: str) -> dict:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": user, "sasl_plain_password": ACCOUNTS[user]}


def command_config(tmp_path, user: str) -> str:
    path = tmp_path / f"{user}.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                    f"sasl.username={user}\nsasl.password={ACCOUNTS[user]}\n")
    return str(path)


def start(broker_process, data):
    return broker_process(data, overrides={
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin", "num.partitions": 1,
        "offsets.topic.num.partitions": 1})


@pytest.fixture
def secured(broker_process, tmp_path):
    data = tmp_path / "data"
    add_users("--log-dir", str(data), users=ACCOUNTS)
    broker = start(broker_process, data)
    return broker, broker.listener("SASL_PLAINTEXT"), data


async def acls(address: str, tmp_path, user: str, *args: str):
    done = await cli("acls", "--bootstrap-server", address, "--command-config",
                     command_config(tmp_path, user), *args)
    return done


async def test_write_on_one_topic_prefixes_and_deny(secured, tmp_path):
    _broker, address, _data = secured
    async with trilog.open_admin(address, **login("admin")) as admin:
        for topic in ("a", "b", "logs.app", "logs.secret", "logsx"):
            await admin.create_topic(topic, 1)
    for args in (["--topic", "a"],
                 ["--topic", "logs.", "--resource-pattern-type", "prefixed"]):
        added = await acls(address, tmp_path, "admin", "--add", "--allow-principal",
                           "User:alice", "--operation", "Write", *args)
        assert added.returncode == 0, added.stderr
    denied = await acls(address, tmp_path, "admin", "--add", "--deny-principal", "User:alice",
                        "--operation", "Write", "--topic", "logs.secret")
    assert denied.returncode == 0, denied.stderr
    listed = await acls(address, tmp_path, "admin", "--list")
    assert "name=logs., patternType=PREFIXED" in listed.stdout
    assert "principal=User:alice, host=*, operation=WRITE, permissionType=DENY" in listed.stdout

    async with trilog.open_producer(address, linger_ms=1, retries=0, **login("alice")) as p:
        for topic in ("a", "logs.app"):
            await p.send_and_wait(topic, b"ok")
        for topic in ("b", "logsx", "logs.secret"):  # no ACL; outside the prefix; denied
            with pytest.raises(TopicAuthorizationFailedError), trio.fail_after(30):
                await p.send_and_wait(topic, b"no")
    # alice may not change ACLs (Alter on the cluster): CLUSTER_AUTHORIZATION_FAILED
    refused = await acls(address, tmp_path, "alice", "--add", "--allow-principal",
                         "User:alice", "--operation", "All", "--topic", "b")
    assert refused.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in refused.stderr
    async with trilog.open_admin(address, **login("alice")) as admin:
        with pytest.raises(ClusterAuthorizationFailedError):
            await admin.describe_acls()
        # Write implies Describe, not DescribeConfigs; nor may she alter a topic's partitions
        # or delete its records
        (described,) = await admin.describe_configs(["a"])
        assert "TOPIC_AUTHORIZATION_FAILED" in described.error
        with pytest.raises(TopicAuthorizationFailedError):
            await admin.alter_configs({"retention.ms": "1000"}, topic="a")
        with pytest.raises(TopicAuthorizationFailedError):
            await admin.create_partitions("a", 2)
        deleted = await admin.delete_records({("a", 0): -1})
        assert "TOPIC_AUTHORIZATION_FAILED" in str(deleted[0].error)
        # Metadata shows alice the topics she may describe (Write implies Describe; the
        # Deny of Write on logs.secret does not deny Describe)
        names = {t.name for t in await admin.describe_topics()}
        assert names == {"a", "logs.app", "logs.secret"}


def test_a_consumer_without_read_on_its_group_is_refused(secured):
    broker, address, _data = secured
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka import KafkaConsumer
        from kafka.errors import GroupAuthorizationFailedError

    async def setup():
        async with trilog.open_admin(address, **login("admin")) as admin:
            await admin.create_topic("reads", 1)
            from trilog.protocol import (AccessControlEntry, AclBinding, AclOperation,
                                         AclPermissionType, ResourcePattern, ResourceType)
            await admin.create_acls([AclBinding(
                ResourcePattern(ResourceType.TOPIC, "reads"),
                AccessControlEntry("User:bob", "*", AclOperation.READ,
                                   AclPermissionType.ALLOW))])
    trio.run(setup)
    consumer = KafkaConsumer("reads", bootstrap_servers=address, group_id="not-bobs",
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                             sasl_plain_username="bob", sasl_plain_password=USERS["bob"],
                             request_timeout_ms=15000)
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            for _ in range(20):
                consumer.poll(timeout_ms=500)
    finally:
        consumer.close()


async def test_anonymous_clients_see_and_do_nothing(secured):
    broker, _address, _data = secured
    async with trilog.open_admin(broker.bootstrap) as admin:  # PLAINTEXT: User:ANONYMOUS
        assert await admin.list_topics() == []
        with pytest.raises(TopicAuthorizationFailedError):
            await admin.create_topic(f"anon-{uuid.uuid4().hex[:6]}", 1)


async def test_acls_survive_a_restart_and_can_be_removed(broker_process, secured, tmp_path):
    broker, address, data = secured
    added = await acls(address, tmp_path, "admin", "--add", "--allow-principal", "User:bob",
                       "--operation", "Read", "--operation", "Describe", "--group", "g")
    assert added.returncode == 0, added.stderr
    broker.stop()
    again = start(broker_process, data)
    address = again.listener("SASL_PLAINTEXT")
    async with trilog.open_admin(address, **login("admin")) as admin:
        kept = await admin.describe_acls(AclBindingFilter(principal="User:bob"))
        assert {b.entry.operation.title for b in kept} == {"Read", "Describe"}
    removed = await acls(address, tmp_path, "admin", "--remove", "--allow-principal",
                         "User:bob", "--operation", "Read", "--group", "g")
    assert removed.returncode == 0 and "Removed 1 ACL(s)" in removed.stdout, removed.stdout
    async with trilog.open_admin(address, **login("admin")) as admin:
        left = await admin.describe_acls(AclBindingFilter(principal="User:bob"))
        assert [b.entry.operation.title for b in left] == ["Describe"]


async def test_add_and_remove_print_the_change_then_the_whole_list(secured, tmp_path):
    """As kafka-acls: the ACLs changed under "Adding (Removing) ACLs for resource", then
    every ACL the resource has now under "Current ACLs for resource"."""
    _broker, address, _data = secured
    resource = "`ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:"
    alice = " \t(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)"
    bob = " \t(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)"
    first = await acls(address, tmp_path, "admin", "--add", "--allow-principal", "User:alice",
                       "--operation", "Write", "--topic", "orders")
    assert first.returncode == 0, first.stderr
    second = await acls(address, tmp_path, "admin", "--add", "--allow-principal", "User:bob",
                        "--operation", "Read", "--topic", "orders")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == [
        f"Adding ACLs for resource {resource}", bob, "",
        f"Current ACLs for resource {resource}", alice, bob, "",
        "Added 1 ACL(s)."]
    removed = await acls(address, tmp_path, "admin", "--remove", "--allow-principal",
                         "User:alice", "--topic", "orders")
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.splitlines() == [
        f"Removing ACLs for resource {resource}", alice, "",
        f"Current ACLs for resource {resource}", bob, "",
        "Removed 1 ACL(s)."]


async def test_acl_apis_without_an_authorizer_say_security_is_disabled(broker_process):
    broker = broker_process()
    async with trilog.open_admin(broker.bootstrap) as admin:
        with pytest.raises(SecurityDisabledError):
            await admin.describe_acls()


async def test_offset_fetch_shows_only_the_topics_one_may_describe(secured):
    from trilog.client import ClientSecurity, open_connection
    from trilog.protocol import (
        AccessControlEntry,
        AclBinding,
        AclOperation,
        AclPermissionType,
        FindCoordinatorRequest,
        OffsetCommitRequest,
        OffsetFetchRequest,
        ResourcePattern,
        ResourceType,
    )

    _broker, address, _data = secured
    host, port = address.rsplit(":", 1)

    def allow(kind, name, operation):
        return AclBinding(ResourcePattern(kind, name), AccessControlEntry(
            "User:bob", "*", operation, AclPermissionType.ALLOW))

    async with trilog.open_admin(address, **login("admin")) as admin:
        for topic in ("seen", "hidden"):
            await admin.create_topic(topic, 1)
        await admin.create_acls([allow(ResourceType.GROUP, "g2", AclOperation.DESCRIBE),
                                 allow(ResourceType.TOPIC, "seen", AclOperation.DESCRIBE)])

    async def connection(user):
        return open_connection(host, int(port), security=ClientSecurity.from_options(
            **login(user)))

    C = OffsetCommitRequest
    with trio.fail_after(60):
        async with await connection("admin") as conn:
            while (await conn.request(FindCoordinatorRequest(key="g2"))).error_code:
                await trio.sleep(0.2)  # the offsets topic is being created
            commit = C(group_id="g2", topics=[
                C.OffsetCommitRequestTopic(name=t, partitions=[
                    C.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=7, committed_metadata="")])
                for t in ("seen", "hidden")])
            while True:  # COORDINATOR_LOAD_IN_PROGRESS while the new partition loads
                committed = await conn.request(commit, version=2)
                codes = {p.error_code for t in committed.topics for p in t.partitions}
                if codes != {14}:
                    break
                await trio.sleep(0.1)
            assert codes == {0}
        async with await connection("bob") as conn:
            every = await conn.request(OffsetFetchRequest(group_id="g2", topics=None),
                                       version=2)
            assert [(t.name, t.partitions[0].committed_offset) for t in every.topics] == \
                [("seen", 7)]
            F = OffsetFetchRequest
            named = await conn.request(F(group_id="g2", topics=[
                F.OffsetFetchRequestTopic(name="hidden", partition_indexes=[0])]), version=2)
            assert named.topics[0].partitions[0].error_code == \
                TopicAuthorizationFailedError.code


async def test_a_transactional_producer_needs_write_on_its_transactional_id(secured):
    """Kafka's checks: InitProducerId with a transactional id needs Write on it
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, fatal to the producer), FindCoordinator for it
    Describe; with Write on the id and on the topic a transaction commits."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from trilog.protocol import (AccessControlEntry, AclBinding, AclOperation,
                                 AclPermissionType, ResourcePattern, ResourceType)

    _broker, address, _data = secured
    async with trilog.open_admin(address, **login("admin")) as admin:
        await admin.create_topic("txn-out", 1)
        await admin.create_acls([AclBinding(
            ResourcePattern(ResourceType.TOPIC, "txn-out"),
            AccessControlEntry("User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW))])

    def producer(tid: str):
        return confluent_kafka.Producer({
            "bootstrap.servers": address, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice",
            "sasl.password": ACCOUNTS["alice"], "transactional.id": tid})

    refused = producer("alices-tid")
    with pytest.raises(confluent_kafka.KafkaException) as info:
        await trio.to_thread.run_sync(refused.init_transactions, 20)
    assert info.value.args[0].code() == confluent_kafka.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    async with trilog.open_admin(address, **login("admin")) as admin:
        await admin.create_acls([AclBinding(
            ResourcePattern(ResourceType.TRANSACTIONAL_ID, "alices-tid"),
            AccessControlEntry("User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW))])
    allowed = producer("alices-tid")

    def transact() -> None:
        allowed.init_transactions(20)
        allowed.begin_transaction()
        allowed.produce("txn-out", b"x", partition=0)
        allowed.commit_transaction(20)

    await trio.to_thread.run_sync(transact)
