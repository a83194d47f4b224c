"""The client-facing APIs that read and write partitions and topics, over the broker's parts:
Produce and Fetch and ListOffsets (the replica manager), Metadata and CreateTopics /
DeleteTopics / CreatePartitions (the cluster view), DeleteRecords and DescribeLogDirs (the
logs), the config APIs (the topics' configs), InitProducerId.  Each class is an
``ApiService``: its ``apis()`` go to the request dispatcher.  (The group, ACL, SASL,
replication and controller APIs are served by those parts themselves.)
"""

from trilog.broker.apis._admin import AdminApis
from trilog.broker.apis._configs import ConfigApis
from trilog.broker.apis._fetch import FetchApi
from trilog.broker.apis._list_offsets import ListOffsetsApi
from trilog.broker.apis._metadata import MetadataApi
from trilog.broker.apis._produce import ProduceApi
from trilog.broker.apis._producer_ids import ProducerIdApi, ProducerIds
from trilog.broker.apis._topics import TopicApis

__all__ = [
    "AdminApis",
    "ConfigApis",
    "FetchApi",
    "ListOffsetsApi",
    "MetadataApi",
    "ProduceApi",
    "ProducerIdApi",
    "ProducerIds",
    "TopicApis",
]
