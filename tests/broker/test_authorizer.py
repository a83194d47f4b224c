"""The authorizer's decision, without a server: Kafka's rules for literal, wildcard and
prefixed patterns, Deny over Allow, implied Describe, super users and the no-ACL default;
the filters of DescribeAcls and DeleteAcls; names in Kafka's spellings."""

from __future__ import annotations

import pytest

from trilog.broker.security._authorizer import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourcePattern,
    ResourceType,
)

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
O = AclOperation
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED


def acl(principal, operation, permission=ALLOW, host="*"):
    return AccessControlEntry(principal, host, operation, permission)


def authorizer(**acls_by_pattern):
    a = Authorizer()
    for pattern, entries in acls_by_pattern.items():
        a.set_acls(pattern, entries)
    return a


def test_literal_acls_allow_what_they_name_and_nothing_else():
    a = Authorizer()
    a.set_acls(ResourcePattern(TOPIC, "a"), [acl("User:alice", O.WRITE)])
    assert a.authorize("User:alice", "10.0.0.1", O.WRITE, TOPIC, "a")
    assert not a.authorize("User:alice", "10.0.0.1", O.WRITE, TOPIC, "b")  # no ACL: default no
    assert not a.authorize("User:alice", "10.0.0.1", O.READ, TOPIC, "a")
    assert not a.authorize("User:bob", "10.0.0.1", O.WRITE, TOPIC, "a")
    assert not a.authorize("User:alice", "10.0.0.1", O.WRITE, GROUP, "a")


def test_prefixed_and_wildcard_patterns():
    a = Authorizer()
    a.set_acls(ResourcePattern(TOPIC, "logs.", PREFIXED), [acl("User:alice", O.READ)])
    a.set_acls(ResourcePattern(GROUP, "*"), [acl("User:*", O.READ)])
    assert a.authorize("User:alice", "h", O.READ, TOPIC, "logs.app")
    assert a.authorize("User:alice", "h", O.READ, TOPIC, "logs.")
    assert not a.authorize("User:alice", "h", O.READ, TOPIC, "logs")
    assert not a.authorize("User:alice", "h", O.READ, TOPIC, "audit.logs.app")
    assert a.authorize("User:anyone", "h", O.READ, GROUP, "billing")


def test_a_deny_wins_over_an_allow_wherever_it_comes_from():
    a = Authorizer()
    a.set_acls(ResourcePattern(TOPIC, "logs.secret"), [acl("User:alice", O.READ)])
    a.set_acls(ResourcePattern(TOPIC, "logs.", PREFIXED), [acl("User:alice", O.READ, DENY)])
    assert not a.authorize("User:alice", "h", O.READ, TOPIC, "logs.secret")
    a.set_acls(ResourcePattern(TOPIC, "logs.", PREFIXED), [acl("User:*", O.ALL, DENY,
                                                              host="10.9.9.9")])
    assert a.authorize("User:alice", "10.0.0.1", O.READ, TOPIC, "logs.secret")
    assert not a.authorize("User:alice", "10.9.9.9", O.READ, TOPIC, "logs.secret")


def test_implied_operations_and_all():
    a = Authorizer()
    a.set_acls(ResourcePattern(TOPIC, "t"), [acl("User:w", O.WRITE), acl("User:c", O.ALTER_CONFIGS),
                                              acl("User:all", O.ALL), acl("User:x", O.READ, DENY)])
    assert a.authorize("User:w", "h", O.DESCRIBE, TOPIC, "t")  # Write implies Describe
    assert not a.authorize("User:w", "h", O.DESCRIBE_CONFIGS, TOPIC, "t")
    assert a.authorize("User:c", "h", O.DESCRIBE_CONFIGS, TOPIC, "t")
    assert a.authorize("User:all", "h", O.DELETE, TOPIC, "t")
    assert not a.authorize("User:x", "h", O.DESCRIBE, TOPIC, "t")  # a Deny implies nothing


def test_super_users_and_the_no_acl_default():
    a = Authorizer(super_users=["User:admin"])
    a.set_acls(ResourcePattern(TOPIC, "t"), [acl("User:alice", O.READ, DENY)])
    assert a.authorize("User:admin", "h", O.DELETE, TOPIC, "t")
    assert not a.authorize("User:bob", "h", O.READ, TOPIC, "free")
    open_ = Authorizer(allow_everyone_if_no_acl_found=True)
    open_.set_acls(ResourcePattern(TOPIC, "t"), [acl("User:alice", O.READ)])
    assert open_.authorize("User:bob", "h", O.READ, TOPIC, "free")  # no ACL at all
    assert not open_.authorize("User:bob", "h", O.READ, TOPIC, "t")  # ACLs exist: they decide


def test_set_acls_with_no_entries_removes_the_pattern():
    a = Authorizer()
    pattern = ResourcePattern(TOPIC, "logs.", PREFIXED)
    a.set_acls(pattern, [acl("User:alice", O.READ)])
    a.set_acls(pattern, [])
    assert a.bindings() == []
    assert not a.authorize("User:alice", "h", O.READ, TOPIC, "logs.x")


def test_filters_of_describe_and_delete():
    a = Authorizer()
    literal = ResourcePattern(TOPIC, "logs.app")
    prefixed = ResourcePattern(TOPIC, "logs.", PREFIXED)
    wildcard = ResourcePattern(TOPIC, "*")
    group = ResourcePattern(GROUP, "g")
    for pattern in (literal, prefixed, wildcard, group):
        a.set_acls(pattern, [acl("User:alice", O.READ), acl("User:bob", O.WRITE, DENY)])

    def patterns(**kw):
        return {b.pattern for b in a.bindings(AclBindingFilter(**kw))}

    assert patterns() == {literal, prefixed, wildcard, group}
    assert patterns(resource_type=TOPIC, name="logs.app", pattern_type=PatternType.MATCH) == \
        {literal, prefixed, wildcard}
    assert patterns(resource_type=TOPIC, pattern_type=PREFIXED) == {prefixed}
    assert patterns(name="logs.app") == {literal}
    assert len(a.bindings(AclBindingFilter(principal="User:bob",
                                           permission_type=DENY))) == 4
    assert a.bindings(AclBindingFilter(operation=O.ALTER)) == []


@pytest.mark.parametrize("binding, problem", [
    (AclBinding(ResourcePattern(ResourceType.ANY, "t"), acl("User:a", O.READ)), "specific"),
    (AclBinding(ResourcePattern(TOPIC, "t", PatternType.MATCH), acl("User:a", O.READ)),
     "LITERAL or PREFIXED"),
    (AclBinding(ResourcePattern(TOPIC, "t"), acl("alice", O.READ)), "Type:name"),
    (AclBinding(ResourcePattern(TOPIC, "t"), acl("User:a", O.ANY)), "operation"),
    (AclBinding(ResourcePattern(CLUSTER, "x"), acl("User:a", O.ALTER)), "kafka-cluster"),
    (AclBinding(ResourcePattern(TOPIC, "*", PREFIXED), acl("User:a", O.READ)), "PREFIXED"),
    (AclBinding(ResourcePattern(TOPIC, "t"), acl("User:a", O.READ, host="")), "host"),
])
def test_bindings_that_cannot_be_created(binding, problem):
    assert problem in binding.problem()


def test_names_parse_in_kafkas_spellings():
    assert AclOperation.parse("IdempotentWrite") is O.IDEMPOTENT_WRITE
    assert AclOperation.parse("IDEMPOTENT_WRITE") is O.IDEMPOTENT_WRITE
    assert AclOperation.parse("describe-configs") is O.DESCRIBE_CONFIGS
    assert ResourceType.parse("TransactionalId") is ResourceType.TRANSACTIONAL_ID
    assert ResourceType.parse(2) is TOPIC
    assert O.CLUSTER_ACTION.title == "ClusterAction"
    with pytest.raises(ValueError, match="one of .*Read.*Write"):
        AclOperation.parse("Eat")
    with pytest.raises(ValueError, match="code"):
        PatternType.parse(99)
