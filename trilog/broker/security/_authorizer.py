"""Kafka's ACL model as a pure decision: (principal, host, operation, resource, ACLs) ->
allow or deny.  No I/O: ``_acls.py`` keeps the ACLs (ZooKeeper or a file) and hands them
here; the request handlers ask ``Authorizer.authorize``.  The vocabulary (operations,
patterns, bindings) is ``trilog.protocol``'s, shared with the client.

An ACL binds a resource pattern to an entry::

    pattern  (resource type, name, pattern type)    Topic "orders" LITERAL,
                                                    Topic "logs." PREFIXED, Group "*" LITERAL
    entry    (principal, host, operation, allow/deny)  User:alice * Read Allow

The rules (Kafka's ``AclAuthorizer``): a super user may do anything; otherwise the ACLs
that apply to a resource are its literal ones, the literal wildcard ``*`` and every
prefixed pattern the name starts with.  A matching Deny wins over any Allow.  An entry
matches the principal if it names it or ``User:*``, the host if it names it or ``*``, the
operation if it names it or ``All``; an Allow of Read, Write, Delete or Alter also allows
Describe, and one of AlterConfigs allows DescribeConfigs.  When no ACL at all applies to
the resource (whoever it names), ``allow.everyone.if.no.acl.found`` decides.

The codes are Kafka's wire codes (CreateAcls, DescribeAcls, DeleteAcls).
"""

from __future__ import annotations

from collections.abc import Iterable

from trilog.protocol._acl import (
    CLUSTER_NAME,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

__all__ = ["CLUSTER_NAME", "AccessControlEntry", "AclBinding", "AclBindingFilter",
           "AclOperation", "AclPermissionType", "Authorizer", "PatternType",
           "ResourcePattern", "ResourceType"]


#: An Allow of one of these also allows Describe (Kafka's implied operations).
_IMPLIES_DESCRIBE = frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                               AclOperation.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.ALTER_CONFIGS})


class Authorizer:
    """The ACLs of a cluster and the decision.  Runs in the trio thread; pure.

    Lookups cost one dict access for the literal ACLs and the wildcard, and a scan of the
    prefixed patterns of the resource type (few, in practice).
    """

    def __init__(self, *, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        self._prefixed: dict[ResourceType, list[ResourcePattern]] = {}

    # -- the ACLs -------------------------------------------------------------------------

    def set_acls(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Replace the entries of ``pattern`` (none: it has no ACLs)."""
        entries = frozenset(entries)
        if entries:
            self._acls[pattern] = entries
        else:
            self._acls.pop(pattern, None)
        if pattern.pattern_type == PatternType.PREFIXED:
            self._prefixed[pattern.resource_type] = sorted(
                p for p in self._acls if p.pattern_type == PatternType.PREFIXED
                and p.resource_type == pattern.resource_type)

    def replace_all(self, acls: dict[ResourcePattern, Iterable[AccessControlEntry]]) -> None:
        self._acls = {}
        self._prefixed = {}
        for pattern, entries in acls.items():
            self.set_acls(pattern, entries)

    def acls(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._acls.get(pattern, frozenset())

    def bindings(self, selected: AclBindingFilter | None = None) -> list[AclBinding]:
        out = [AclBinding(p, e) for p, entries in self._acls.items() for e in entries]
        if selected is not None:
            out = [b for b in out if selected.matches(b)]
        return sorted(out)

    # -- the decision ---------------------------------------------------------------------

    def authorize(self, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        entries = self._applying(resource_type, name)
        if not entries:
            return self.allow_everyone_if_no_acl_found
        allowed = False
        for e in entries:
            if e.principal not in (principal, WILDCARD_PRINCIPAL) or e.host not in (host, WILDCARD):
                continue
            if e.permission_type == AclPermissionType.DENY:
                if e.operation in (operation, AclOperation.ALL):
                    return False
            elif e.permission_type == AclPermissionType.ALLOW and not allowed:
                allowed = e.operation in (operation, AclOperation.ALL) or (
                    operation == AclOperation.DESCRIBE and e.operation in _IMPLIES_DESCRIBE
                ) or (operation == AclOperation.DESCRIBE_CONFIGS
                      and e.operation in _IMPLIES_DESCRIBE_CONFIGS)
        return allowed

    def _applying(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        acls = self._acls
        entries: list[AccessControlEntry] = []
        for pattern in (ResourcePattern(resource_type, name),
                        ResourcePattern(resource_type, WILDCARD)):
            entries.extend(acls.get(pattern, ()))
        for pattern in self._prefixed.get(resource_type, ()):
            if name.startswith(pattern.name):
                entries.extend(acls[pattern])
        return entries
