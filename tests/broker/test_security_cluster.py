"""Brokers that talk to each other over SASL_SSL: replica fetches and the controller's
requests go through the inter-broker listener, logged in with SCRAM as the brokers' own
user (credentials in ZooKeeper, written by ``trilog users --zookeeper``; a super user, as
ACLs are on); clients use another listener and are told only its addresses.  An ACL
created through one broker reaches the other (ZooKeeper's change notifications)."""

from __future__ import annotations

import pytest
import trio
from security_helpers import USERS, add_users, make_certs

import trilog
from trilog.protocol import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from trilog.records import iter_batches
from replication_helpers import log_bytes

pytestmark = pytest.mark.slow

ADMIN = {"admin": "admin-secret"}


def settings(certs) -> dict:
    return {
        "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "INTERNAL:SASL_SSL,EXTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule '
                            'required username="admin" password="admin-secret";',
        "ssl.certfile": certs["server"],
        "ssl.cafile": certs["ca"],
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "default.replication.factor": 2,
        "offsets.topic.replication.factor": 1,
        "zookeeper.session.timeout.ms": 6000,
    }


async def test_replication_and_control_over_sasl_ssl(broker_process, zookeeper, tmp_path):
    certs = make_certs(tmp_path)
    add_users("--zookeeper", zookeeper, users={**USERS, **ADMIN})
    brokers = [broker_process(broker_id=i, zookeeper=zookeeper, overrides=settings(certs))
               for i in (1, 2)]
    external = [b.listener("EXTERNAL") for b in brokers]
    login = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
             "sasl_plain_username": "alice", "sasl_plain_password": USERS["alice"]}
    admin_login = {**login, "sasl_plain_username": "admin",
                   "sasl_plain_password": ADMIN["admin"]}
    alice_writes = AclBinding(ResourcePattern(ResourceType.TOPIC, "replicated"),
                              AccessControlEntry("User:alice", "*", AclOperation.WRITE,
                                                 AclPermissionType.ALLOW))
    with trio.fail_after(60):
        async with trilog.open_admin(external[0], **admin_login) as admin:
            while True:  # the controller tells both brokers about each other
                brokers_seen = await admin.brokers()
                if len(brokers_seen) == 2:
                    break
                await trio.sleep(0.2)
            # Clients of EXTERNAL are told EXTERNAL addresses only.
            assert sorted(f"{b.host}:{b.port}" for b in brokers_seen) == sorted(external)
            await admin.create_topic("replicated", 1, replication_factor=2)
            await admin.create_acls([alice_writes])
        async with trilog.open_admin(external[1], **admin_login) as other:
            while alice_writes not in await other.describe_acls():  # via ZooKeeper
                await trio.sleep(0.1)
        async with trilog.open_producer(external[1], acks="all", linger_ms=1,
                                        **login) as producer:
            for i in range(10):
                await producer.send_and_wait("replicated", b"r%d" % i, partition=0)
    # Both replicas hold the records: the follower fetched them over INTERNAL (SASL_SSL).
    for b in brokers:
        with trio.fail_after(30):
            while True:
                values = [r.value for batch in iter_batches(log_bytes(b.log_dir, "replicated", 0))
                          for r in batch.records()]
                if len(values) == 10:
                    break
                await trio.sleep(0.1)
        assert values == [b"r%d" % i for i in range(10)]
    logs = "".join(b.stderr(tail=100_000) for b in brokers)
    assert "cannot reach" not in logs and "Traceback" not in logs
