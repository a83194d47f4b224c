"""Kafka's ACL vocabulary, as data: resource types, operations, pattern types and
permissions with their wire codes (CreateAcls, DescribeAcls, DeleteAcls), patterns, entries,
bindings, and the filters of DescribeAcls and DeleteAcls.  Pure.  The decision itself
(who may do what) is the broker's ``Authorizer``.

Names parse from Kafka's spellings in any case (``IdempotentWrite``, ``IDEMPOTENT_WRITE``);
``title`` gives Kafka's text form (``ClusterAction``, ``TransactionalId``), which is also
what its ZooKeeper nodes and tools use.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Self


class _Named(enum.IntEnum):
    """An enum whose members parse from Kafka's names in any case and spelling
    (``IdempotentWrite``, ``IDEMPOTENT_WRITE``, ``idempotent-write``)."""

    @classmethod
    def parse(cls, text: str | int) -> Self:
        if isinstance(text, int):
            try:
                return cls(text)
            except ValueError:
                raise ValueError(f"{text} is not a {cls.__name__} code") from None
        key = str(text).replace("_", "").replace("-", "").replace(" ", "").upper()
        for member in cls:
            if member.name.replace("_", "") == key:
                return member
        names = ", ".join(m.title for m in cls if m.value > 1)
        raise ValueError(f"{text!r} is not a {cls.__name__}: one of {names}")

    @property
    def title(self) -> str:
        """Kafka's name in text: ``IdempotentWrite``, ``TransactionalId``."""
        return "".join(part.capitalize() for part in self.name.split("_"))


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6


class AclOperation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: The cluster resource's one name.
CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"



@dataclass(frozen=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return f"{self.resource_type.title}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, order=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (f"{self.principal} has {self.permission_type.title} permission for "
                f"{self.operation.title} from host {self.host}")


@dataclass(frozen=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def problem(self) -> str | None:
        """Why this binding cannot be created (None: it can), as CreateAcls answers."""
        p, e = self.pattern, self.entry
        if p.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            return "the resource type must be specific"
        if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return "the pattern type must be LITERAL or PREFIXED"
        if not p.name:
            return "the resource name must not be empty"
        if p.resource_type == ResourceType.CLUSTER and (
                p.name != CLUSTER_NAME or p.pattern_type != PatternType.LITERAL):
            return f"the cluster resource is LITERAL {CLUSTER_NAME}"
        if p.pattern_type == PatternType.PREFIXED and p.name == WILDCARD:
            return "a PREFIXED pattern cannot be '*' (use LITERAL '*')"
        if e.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            return "the operation must be specific"
        if e.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            return "the permission must be ALLOW or DENY"
        kind, sep, name = e.principal.partition(":")
        if not sep or not kind or not name:
            return f"principal {e.principal!r} is not Type:name (e.g. User:alice)"
        if not e.host:
            return "the host must not be empty (use '*' for any host)"
        return None


@dataclass(frozen=True)
class AclBindingFilter:
    """Which bindings DescribeAcls and DeleteAcls mean.  ``None`` matches any value; type
    ANY matches every type; pattern type MATCH matches what would apply to a resource of
    that name (its literal ACLs, the wildcard, and prefixes of it)."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def problem(self) -> str | None:
        for value in (self.resource_type, self.pattern_type, self.operation,
                      self.permission_type):
            if value.value == 0:
                return f"{type(value).__name__} UNKNOWN matches nothing"
        return None

    def matches(self, binding: AclBinding) -> bool:
        p, e = binding.pattern, binding.entry
        if self.resource_type not in (ResourceType.ANY, p.resource_type):
            return False
        if not self._matches_pattern(p):
            return False
        return ((self.principal is None or self.principal == e.principal)
                and (self.host is None or self.host == e.host)
                and self.operation in (AclOperation.ANY, e.operation)
                and self.permission_type in (AclPermissionType.ANY, e.permission_type))

    def _matches_pattern(self, p: ResourcePattern) -> bool:
        kind = self.pattern_type
        if kind == PatternType.MATCH:
            if self.name is None:
                return True
            if p.pattern_type == PatternType.LITERAL:
                return p.name in (self.name, WILDCARD)
            return p.pattern_type == PatternType.PREFIXED and self.name.startswith(p.name)
        if kind not in (PatternType.ANY, p.pattern_type):
            return False
        return self.name is None or self.name == p.name
