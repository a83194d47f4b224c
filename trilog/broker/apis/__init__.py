"""The client-facing APIs that read and write partitions and topics, over the broker's parts:
Produce and Fetch and ListOffsets (the replica manager), Metadata and CreateTopics /
DeleteTopics / CreatePartitions (the cluster view), DeleteRecords and DescribeLogDirs (the
logs), the config APIs (the topics' configs), the client quota APIs (the quotas' store), FindCoordinator (asking the group and the
transaction coordinators), WriteTxnMarkers (a transaction's markers, appended here).  Each
class is an ``ApiService``: its ``apis()`` go to the request dispatcher.  (The group, transaction,
ACL, SASL, replication and controller APIs are served by those parts themselves.)
"""

from trilog.broker.apis._admin import AdminApis
from trilog.broker.apis._configs import ConfigApis
from trilog.broker.apis._fetch import FetchApi
from trilog.broker.apis._find_coordinator import FindCoordinatorApi
from trilog.broker.apis._list_offsets import ListOffsetsApi
from trilog.broker.apis._metadata import MetadataApi
from trilog.broker.apis._produce import ProduceApi
from trilog.broker.apis._quotas import QuotaApis
from trilog.broker.apis._topics import TopicApis
from trilog.broker.apis._txn_markers import TxnMarkerApi

__all__ = [
    "AdminApis",
    "ConfigApis",
    "FetchApi",
    "FindCoordinatorApi",
    "ListOffsetsApi",
    "MetadataApi",
    "ProduceApi",
    "QuotaApis",
    "TxnMarkerApi",
    "TopicApis",
]
