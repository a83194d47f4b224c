"""Client quotas (KIP-13 byte rates, KIP-55 per user, KIP-124 request percentage).

``QuotaManager`` is the pure calculator: which quota applies to a (user, client id) by
Kafka's eight levels of precedence, the rate it is measured at (``Rate``: Kafka's window of
samples) and the throttle time an excess earns.  ``ClientQuotas`` keeps the quotas in their
store (``quotas.json`` standalone, ZooKeeper's ``/config/users`` and ``/config/clients``
with change notifications in a cluster) and feeds the manager; ``RequestQuotas`` is the
request dispatcher's hook that counts each request and throttles its answer; the network
only mutes a connection for the time it is given.  The APIs that describe and alter quotas
are in ``apis/_quotas.py``.
"""

from trilog.broker.quotas._entity import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    QUOTA_KEYS,
    REQUEST_PERCENTAGE,
    USER,
    Entity,
    Quotas,
    check_filter,
    check_value,
    describe_entity,
    entity,
    entity_path,
    make_entity,
    matches,
    parse_entity_path,
    sanitize,
)
from trilog.broker.quotas._manager import QuotaManager, levels
from trilog.broker.quotas._rate import Rate, RateConfig, throttle_time_ms
from trilog.broker.quotas._store import (
    ClientQuotas,
    FileQuotaStore,
    QuotaStore,
    ZooKeeperQuotaStore,
    standalone_quota_store,
)
from trilog.broker.quotas._throttle import EXEMPT, RequestQuotas, parked, user_of

__all__ = [
    "CLIENT_ID",
    "CONSUMER_BYTE_RATE",
    "DEFAULT",
    "EXEMPT",
    "PRODUCER_BYTE_RATE",
    "QUOTA_KEYS",
    "REQUEST_PERCENTAGE",
    "USER",
    "ClientQuotas",
    "Entity",
    "FileQuotaStore",
    "QuotaManager",
    "QuotaStore",
    "Quotas",
    "Rate",
    "RateConfig",
    "RequestQuotas",
    "ZooKeeperQuotaStore",
    "check_filter",
    "check_value",
    "describe_entity",
    "entity",
    "entity_path",
    "levels",
    "make_entity",
    "matches",
    "parse_entity_path",
    "parked",
    "sanitize",
    "standalone_quota_store",
    "throttle_time_ms",
    "user_of",
]
