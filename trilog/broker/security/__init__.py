"""Who may do what on a broker: the ACLs (Kafka's ``AclAuthorizer``: a pure decision over
bindings kept in ZooKeeper or a file), the ``Access`` every API asks about the principal of
the request it handles, the whole-request check the dispatcher makes (``refused_request``),
SASL logins (PLAIN and SCRAM) and the SCRAM credentials they check.
"""

from trilog.broker.security._acls import (
    ALLOW_ALL,
    Access,
    AclManager,
    AclsDisabled,
    AclStore,
    FileAclStore,
    ZooKeeperAclStore,
    acls_disabled_answer,
    refused_request,
    standalone_acl_store,
)
from trilog.broker.security._authorizer import (
    CLUSTER_NAME,
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
from trilog.broker.security._sasl import BEFORE_LOGIN, SaslAuthenticator
from trilog.broker.security._users import (
    FileUserStore,
    UserStore,
    ZooKeeperUserStore,
    scram_credential,
    standalone_user_store,
)

__all__ = [
    "ALLOW_ALL",
    "BEFORE_LOGIN",
    "CLUSTER_NAME",
    "Access",
    "AccessControlEntry",
    "AclBinding",
    "AclBindingFilter",
    "AclManager",
    "AclOperation",
    "AclPermissionType",
    "AclStore",
    "AclsDisabled",
    "Authorizer",
    "FileAclStore",
    "FileUserStore",
    "PatternType",
    "ResourcePattern",
    "ResourceType",
    "SaslAuthenticator",
    "UserStore",
    "ZooKeeperAclStore",
    "ZooKeeperUserStore",
    "acls_disabled_answer",
    "refused_request",
    "scram_credential",
    "standalone_acl_store",
    "standalone_user_store",
]
