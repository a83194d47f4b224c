"""trilog's exception tree.

    TrilogError
    ├── ProtocolError                bytes that do not follow Kafka's protocol
    │   ├── LocalProtocolError       we were asked to encode something the protocol cannot carry
    │   └── RemoteProtocolError      bytes from a peer (or a file) do not decode
    ├── UnsupportedCodecError        a compression codec whose library is not installed
    ├── AuthenticationError          a TLS handshake or SASL login failed (also the parent
    │                                of the SASL ApiErrors: codes 33, 34, 58)
    └── ApiError                     an error with a Kafka error code (seed 003, "Error Codes")
        ├── OffsetOutOfRangeError    code 1
        ├── CorruptMessageError      code 2
        └── ...                      one class per code in ``ERROR_CODES``

An ``ApiError`` is what a broker answers with, so the same class is raised by the broker's
own storage (and turned into the code on the wire) and by the client when a response
carries the code. Each class knows its ``code``, its protocol ``name``, its ``description``
and whether it is ``retriable``.  This module is pure (stdlib only) so every layer may
import it.

The table holds every code of Kafka's ``Errors`` enum from -1 to 127 (Kafka 4.x names,
descriptions and retriable flags, the latter being "is a RetriableException"; NONE = 0 has
no class). Class names are the Kafka name in CamelCase plus ``Error``, a trailing
``_EXCEPTION`` or ``_ERROR`` dropped (``NETWORK_EXCEPTION`` -> ``NetworkError``,
``KAFKA_STORAGE_ERROR`` -> ``KafkaStorageError``). Older names of renamed codes are aliases
(``NotLeaderForPartitionError`` is ``NotLeaderOrFollowerError``, code 6).

A class registers its code in its own header and gives Kafka's description as the first
paragraph of its docstring::

    class CorruptMessageError(ApiError, code=2, retriable=True):
        \"\"\"This message has failed its CRC checksum, ...\"\"\"

``name`` is spelled out only where the class name does not give it back (``NetworkError``,
``name="NETWORK_EXCEPTION"``); ``retriable`` is False unless given.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

__all__ = [
    "AuthenticationError",
    "ERROR_CODES",
    "NO_ERROR",
    "ApiError",
    "BrokerIdNotRegisteredError",
    "BrokerNotAvailableError",
    "BrokerUnreachableError",
    "ClusterAuthorizationFailedError",
    "ConcurrentTransactionsError",
    "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError",
    "CorruptMessageError",
    "DelegationTokenAuthDisabledError",
    "DelegationTokenAuthorizationFailedError",
    "DelegationTokenExpiredError",
    "DelegationTokenNotFoundError",
    "DelegationTokenOwnerMismatchError",
    "DelegationTokenRequestNotAllowedError",
    "DuplicateBrokerRegistrationError",
    "DuplicateResourceError",
    "DuplicateSequenceNumberError",
    "DuplicateVoterError",
    "ElectionNotNeededError",
    "EligibleLeadersNotAvailableError",
    "FeatureUpdateFailedError",
    "FencedInstanceIdError",
    "FencedLeaderEpochError",
    "FencedMemberEpochError",
    "FencedStateEpochError",
    "FetchSessionIdNotFoundError",
    "FetchSessionTopicIdError",
    "GroupAuthorizationFailedError",
    "GroupCoordinatorNotAvailableError",
    "GroupIdNotFoundError",
    "GroupLoadInProgressError",
    "GroupMaxSizeReachedError",
    "GroupSubscribedToTopicError",
    "IllegalGenerationError",
    "IllegalSaslStateError",
    "InconsistentClusterIdError",
    "InconsistentGroupProtocolError",
    "InconsistentTopicIdError",
    "InconsistentVoterSetError",
    "IneligibleReplicaError",
    "InvalidCommitOffsetSizeError",
    "InvalidConfigError",
    "InvalidFetchSessionEpochError",
    "InvalidFetchSizeError",
    "InvalidGroupIdError",
    "InvalidPartitionsError",
    "InvalidPrincipalTypeError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "InvalidRecordError",
    "InvalidRecordStateError",
    "InvalidRegistrationError",
    "InvalidReplicaAssignmentError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidRequiredAcksError",
    "InvalidSessionTimeoutError",
    "InvalidShareSessionEpochError",
    "InvalidTimestampError",
    "InvalidTopicError",
    "InvalidTransactionTimeoutError",
    "InvalidTxnStateError",
    "InvalidUpdateVersionError",
    "InvalidVoterKeyError",
    "KafkaStorageError",
    "LeaderNotAvailableError",
    "ListenerNotFoundError",
    "LocalProtocolError",
    "LogDirNotFoundError",
    "MemberIdRequiredError",
    "MessageTooLargeError",
    "MismatchedEndpointTypeError",
    "NetworkError",
    "NewLeaderElectedError",
    "NoBrokersAvailableError",
    "NoReassignmentInProgressError",
    "NonEmptyGroupError",
    "NotControllerError",
    "NotCoordinatorError",
    "NotCoordinatorForGroupError",
    "NotEnoughReplicasAfterAppendError",
    "NotEnoughReplicasError",
    "NotLeaderForPartitionError",
    "NotLeaderOrFollowerError",
    "OffsetMetadataTooLargeError",
    "OffsetMovedToTieredStorageError",
    "OffsetNotAvailableError",
    "OffsetOutOfRangeError",
    "OperationNotAttemptedError",
    "OutOfOrderSequenceNumberError",
    "PolicyViolationError",
    "PositionOutOfRangeError",
    "PreferredLeaderNotAvailableError",
    "PrincipalDeserializationFailureError",
    "ProducerFencedError",
    "ProtocolError",
    "ReassignmentInProgressError",
    "RebalanceInProgressError",
    "RecordListTooLargeError",
    "RemoteProtocolError",
    "ReplicaNotAvailableError",
    "RequestTimedOutError",
    "ResourceNotFoundError",
    "SaslAuthenticationFailedError",
    "SecurityDisabledError",
    "ShareSessionNotFoundError",
    "SnapshotNotFoundError",
    "StaleBrokerEpochError",
    "StaleControllerEpochError",
    "StaleMemberEpochError",
    "TelemetryTooLargeError",
    "ThrottlingQuotaExceededError",
    "TopicAlreadyExistsError",
    "TopicAuthorizationFailedError",
    "TopicDeletionDisabledError",
    "TransactionAbortableError",
    "TransactionCoordinatorFencedError",
    "TransactionalIdAuthorizationFailedError",
    "TransactionalIdNotFoundError",
    "TrilogError",
    "UnacceptableCredentialError",
    "UnknownControllerIdError",
    "UnknownLeaderEpochError",
    "UnknownMemberIdError",
    "UnknownProducerIdError",
    "UnknownServerError",
    "UnknownSubscriptionIdError",
    "UnknownTopicIdError",
    "UnknownTopicOrPartitionError",
    "UnreleasedInstanceIdError",
    "UnstableOffsetCommitError",
    "UnsupportedAssignorError",
    "UnsupportedCodecError",
    "UnsupportedCompressionTypeError",
    "UnsupportedEndpointTypeError",
    "UnsupportedForMessageFormatError",
    "UnsupportedSaslMechanismError",
    "UnsupportedVersionError",
    "VoterNotFoundError",
    "error_for_code",
    "raise_for_code",
]


class TrilogError(Exception):
    """Root of every error trilog raises on purpose."""


class ProtocolError(TrilogError):
    """Bytes that do not follow Kafka's wire or record format."""


class LocalProtocolError(ProtocolError):
    """We were asked to encode something the protocol cannot carry (a bug on our side)."""


class RemoteProtocolError(ProtocolError):
    """Bytes received from a peer (or read from a file) do not decode."""


class UnsupportedCodecError(TrilogError):
    """A compression codec is named whose library is not installed."""


class AuthenticationError(TrilogError):
    """A connection could not authenticate: its TLS handshake or SASL login failed.  Not
    retriable: the same certificate or credentials would fail again."""


#: Kafka's code 0 (``NONE``): the request succeeded.  It has no class.
NO_ERROR = 0

#: code -> ApiError subclass, filled as each class of the table below is defined.
ERROR_CODES: dict[int, type[ApiError]] = {}


class ApiError(TrilogError):
    """An error that has a Kafka error code.

    Raised locally (the broker's storage raises these; the broker puts ``code`` on the wire)
    and remotely (a client raises the class matching a response's error code).

    A subclass with ``code=`` in its header is that code's class (see the module's
    docstring); one without refines its parent and keeps the parent's code (the record
    layer's ``CorruptRecordsError`` is a ``CorruptMessageError``).
    """

    code: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False
    description: ClassVar[str] = "The server experienced an unexpected error."

    def __init_subclass__(
        cls,
        *,
        code: int | None = None,
        name: str | None = None,
        retriable: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        if code is None:
            if name is not None or retriable:
                raise TypeError(f"{cls.__name__}: name= and retriable= go with code=")
            return
        if code in ERROR_CODES:
            raise TypeError(f"error code {code} registered twice")
        cls.code = code
        cls.name = name or _kafka_name(cls.__name__)
        cls.retriable = retriable
        # The first paragraph of the docstring is Kafka's description (the class name
        # stands in when ``python -OO`` strips docstrings).
        doc = cls.__doc__ or cls.name
        cls.description = " ".join(doc.split("\n\n", 1)[0].split())
        ERROR_CODES[code] = cls

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.description)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r}, code={self.code})"


def _kafka_name(class_name: str) -> str:
    """``UnknownTopicOrPartitionError`` -> ``UNKNOWN_TOPIC_OR_PARTITION``."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", class_name.removesuffix("Error")).upper()


def error_for_code(code: int, message: str | None = None) -> ApiError:
    """The exception instance for a Kafka error code (``UnknownServerError`` for unknown codes)."""
    cls = ERROR_CODES.get(code)
    if cls is None:
        return UnknownServerError(message or f"unknown error code {code}")
    return cls(message)


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise the matching ``ApiError`` unless ``code`` is ``NO_ERROR``."""
    if code != NO_ERROR:
        raise error_for_code(code, message)


# -- The table.  Codes, names, retriable flags and descriptions are Kafka's. ----------------


class UnknownServerError(ApiError, code=-1, name="UNKNOWN_SERVER_ERROR"):
    """The server experienced an unexpected error."""


class OffsetOutOfRangeError(ApiError, code=1):
    """The requested offset is not within the range of offsets maintained by the server.

    Carries the valid range when it is known: ``log_start_offset`` .. ``log_end_offset``.
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        log_start_offset: int | None = None,
        log_end_offset: int | None = None,
    ) -> None:
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class CorruptMessageError(ApiError, code=2, retriable=True):
    """This message has failed its CRC checksum, exceeds the valid size, has a null key for a
    compacted topic, or is otherwise corrupt."""


class UnknownTopicOrPartitionError(ApiError, code=3, retriable=True):
    """This server does not host this topic-partition."""


class InvalidFetchSizeError(ApiError, code=4):
    """The requested fetch size is invalid."""


class LeaderNotAvailableError(ApiError, code=5, retriable=True):
    """There is no leader for this topic-partition as we are in the middle of a leadership
    election."""


class NotLeaderOrFollowerError(ApiError, code=6, retriable=True):
    """For requests intended only for the leader, this error indicates that the broker is not the
    current leader. For requests intended for any replica, this error indicates that the broker
    is not a replica of the topic partition."""


class RequestTimedOutError(ApiError, code=7, retriable=True):
    """The request timed out."""


class BrokerNotAvailableError(ApiError, code=8):
    """The broker is not available."""


class ReplicaNotAvailableError(ApiError, code=9, retriable=True):
    """The replica is not available for the requested topic-partition. Produce/Fetch requests and
    other requests intended only for the leader or follower return NOT_LEADER_OR_FOLLOWER if the
    broker is not a replica of the topic-partition."""


class MessageTooLargeError(ApiError, code=10):
    """The request included a message larger than the max message size the server will accept."""


class StaleControllerEpochError(ApiError, code=11):
    """The controller moved to another broker."""


class OffsetMetadataTooLargeError(ApiError, code=12):
    """The metadata field of the offset request was too large."""


class NetworkError(ApiError, code=13, name="NETWORK_EXCEPTION", retriable=True):
    """The server disconnected before a response was received."""


class BrokerUnreachableError(NetworkError):
    """No connection to a broker could be made: refused, unreachable or timed out (nothing
    listens there, or not yet)."""


class NoBrokersAvailableError(NetworkError):
    """No bootstrap server answered while a client was opening (within its
    ``bootstrap_timeout_ms``): kafka-python's ``NoBrokersAvailable``.  The message names each
    server and why it did not answer."""


class CoordinatorLoadInProgressError(ApiError, code=14, retriable=True):
    """The coordinator is loading and hence can't process requests."""


class CoordinatorNotAvailableError(ApiError, code=15, retriable=True):
    """The coordinator is not available."""


class NotCoordinatorError(ApiError, code=16, retriable=True):
    """This is not the correct coordinator."""


class InvalidTopicError(ApiError, code=17, name="INVALID_TOPIC_EXCEPTION"):
    """The request attempted to perform an operation on an invalid topic."""


class RecordListTooLargeError(ApiError, code=18):
    """The request included message batch larger than the configured segment size on the server."""


class NotEnoughReplicasError(ApiError, code=19, retriable=True):
    """Messages are rejected since there are fewer in-sync replicas than required."""


class NotEnoughReplicasAfterAppendError(ApiError, code=20, retriable=True):
    """Messages are written to the log, but to fewer in-sync replicas than required."""


class InvalidRequiredAcksError(ApiError, code=21):
    """Produce request specified an invalid value for required acks."""


class IllegalGenerationError(ApiError, code=22):
    """Specified group generation id is not valid."""


class InconsistentGroupProtocolError(ApiError, code=23):
    """The group member's supported protocols are incompatible with those of existing members or
    first group member tried to join with empty protocol type or empty protocol list."""


class InvalidGroupIdError(ApiError, code=24):
    """The group id is invalid."""


class UnknownMemberIdError(ApiError, code=25):
    """The coordinator is not aware of this member."""


class InvalidSessionTimeoutError(ApiError, code=26):
    """The session timeout is not within the range allowed by the broker (as configured by
    group.min.session.timeout.ms and group.max.session.timeout.ms)."""


class RebalanceInProgressError(ApiError, code=27):
    """The group is rebalancing, so a rejoin is needed."""


class InvalidCommitOffsetSizeError(ApiError, code=28):
    """The committing offset data size is not valid."""


class TopicAuthorizationFailedError(ApiError, code=29):
    """Topic authorization failed."""


class GroupAuthorizationFailedError(ApiError, code=30):
    """Group authorization failed."""


class ClusterAuthorizationFailedError(ApiError, code=31):
    """Cluster authorization failed."""


class InvalidTimestampError(ApiError, code=32):
    """The timestamp of the message is out of acceptable range."""


class UnsupportedSaslMechanismError(ApiError, AuthenticationError, code=33):
    """The broker does not support the requested SASL mechanism."""


class IllegalSaslStateError(ApiError, AuthenticationError, code=34):
    """Request is not valid given the current SASL state."""


class UnsupportedVersionError(ApiError, code=35):
    """The version of API is not supported."""


class TopicAlreadyExistsError(ApiError, code=36):
    """Topic with this name already exists."""


class InvalidPartitionsError(ApiError, code=37):
    """Number of partitions is below 1."""


class InvalidReplicationFactorError(ApiError, code=38):
    """Replication factor is below 1 or larger than the number of available brokers."""


class InvalidReplicaAssignmentError(ApiError, code=39):
    """Replica assignment is invalid."""


class InvalidConfigError(ApiError, code=40):
    """Configuration is invalid."""


class NotControllerError(ApiError, code=41, retriable=True):
    """This is not the correct controller for this cluster."""


class InvalidRequestError(ApiError, code=42):
    """This most likely occurs because of a request being malformed by the client library or the
    message was sent to an incompatible broker. See the broker logs for more details."""


class UnsupportedForMessageFormatError(ApiError, code=43):
    """The message format version on the broker does not support the request."""


class PolicyViolationError(ApiError, code=44):
    """Request parameters do not satisfy the configured policy."""


class OutOfOrderSequenceNumberError(ApiError, code=45):
    """The broker received an out of order sequence number."""


class DuplicateSequenceNumberError(ApiError, code=46):
    """The broker received a duplicate sequence number."""


class InvalidProducerEpochError(ApiError, code=47):
    """Producer attempted to produce with an old epoch."""


class InvalidTxnStateError(ApiError, code=48):
    """The producer attempted a transactional operation in an invalid state."""


class InvalidProducerIdMappingError(ApiError, code=49):
    """The producer attempted to use a producer id which is not currently assigned to its
    transactional id."""


class InvalidTransactionTimeoutError(ApiError, code=50):
    """The transaction timeout is larger than the maximum value allowed by the broker (as
    configured by transaction.max.timeout.ms)."""


class ConcurrentTransactionsError(ApiError, code=51, retriable=True):
    """The producer attempted to update a transaction while another concurrent operation on the
    same transaction was ongoing."""


class TransactionCoordinatorFencedError(ApiError, code=52):
    """Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the
    current coordinator for a given producer."""


class TransactionalIdAuthorizationFailedError(ApiError, code=53):
    """Transactional Id authorization failed."""


class SecurityDisabledError(ApiError, code=54):
    """Security features are disabled."""


class OperationNotAttemptedError(ApiError, code=55):
    """The broker did not attempt to execute this operation. This may happen for batched RPCs
    where some operations in the batch failed, causing the broker to respond without trying the
    rest."""


class KafkaStorageError(ApiError, code=56, name="KAFKA_STORAGE_ERROR", retriable=True):
    """Disk error when trying to access log file on the disk."""


class LogDirNotFoundError(ApiError, code=57):
    """The user-specified log directory is not found in the broker config."""


class SaslAuthenticationFailedError(ApiError, AuthenticationError, code=58):
    """SASL Authentication failed."""


class UnknownProducerIdError(ApiError, code=59):
    """This exception is raised by the broker if it could not locate the producer metadata
    associated with the producerId in question. This could happen if, for instance, the
    producer's records were deleted because their retention time had elapsed. Once the last
    records of the producerId are removed, the producer's metadata is removed from the broker,
    and future appends by the producer will return this exception."""


class ReassignmentInProgressError(ApiError, code=60):
    """A partition reassignment is in progress."""


class DelegationTokenAuthDisabledError(ApiError, code=61):
    """Delegation Token feature is not enabled."""


class DelegationTokenNotFoundError(ApiError, code=62):
    """Delegation Token is not found on server."""


class DelegationTokenOwnerMismatchError(ApiError, code=63):
    """Specified Principal is not valid Owner/Renewer."""


class DelegationTokenRequestNotAllowedError(ApiError, code=64):
    """Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels and on
    delegation token authenticated channels."""


class DelegationTokenAuthorizationFailedError(ApiError, code=65):
    """Delegation Token authorization failed."""


class DelegationTokenExpiredError(ApiError, code=66):
    """Delegation Token is expired."""


class InvalidPrincipalTypeError(ApiError, code=67):
    """Supplied principalType is not supported."""


class NonEmptyGroupError(ApiError, code=68):
    """The group is not empty."""


class GroupIdNotFoundError(ApiError, code=69):
    """The group id does not exist."""


class FetchSessionIdNotFoundError(ApiError, code=70, retriable=True):
    """The fetch session ID was not found."""


class InvalidFetchSessionEpochError(ApiError, code=71, retriable=True):
    """The fetch session epoch is invalid."""


class ListenerNotFoundError(ApiError, code=72, retriable=True):
    """There is no listener on the leader broker that matches the listener on which metadata
    request was processed."""


class TopicDeletionDisabledError(ApiError, code=73):
    """Topic deletion is disabled."""


class FencedLeaderEpochError(ApiError, code=74, retriable=True):
    """The leader epoch in the request is older than the epoch on the broker."""


class UnknownLeaderEpochError(ApiError, code=75, retriable=True):
    """The leader epoch in the request is newer than the epoch on the broker."""


class UnsupportedCompressionTypeError(ApiError, code=76):
    """The requesting client does not support the compression type of given partition."""


class StaleBrokerEpochError(ApiError, code=77):
    """Broker epoch has changed."""


class OffsetNotAvailableError(ApiError, code=78, retriable=True):
    """The leader high watermark has not caught up from a recent leader election so the offsets
    cannot be guaranteed to be monotonically increasing."""


class MemberIdRequiredError(ApiError, code=79):
    """The group member needs to have a valid member id before actually entering a consumer
    group."""


class PreferredLeaderNotAvailableError(ApiError, code=80, retriable=True):
    """The preferred leader was not available."""


class GroupMaxSizeReachedError(ApiError, code=81):
    """The group has reached its maximum size."""


class FencedInstanceIdError(ApiError, code=82):
    """The broker rejected this static consumer since another consumer with the same
    group.instance.id has registered with a different member.id."""


class EligibleLeadersNotAvailableError(ApiError, code=83, retriable=True):
    """Eligible topic partition leaders are not available."""


class ElectionNotNeededError(ApiError, code=84, retriable=True):
    """Leader election not needed for topic partition."""


class NoReassignmentInProgressError(ApiError, code=85):
    """No partition reassignment is in progress."""


class GroupSubscribedToTopicError(ApiError, code=86):
    """Deleting offsets of a topic is forbidden while the consumer group is actively subscribed
    to it."""


class InvalidRecordError(ApiError, code=87):
    """This record has failed the validation on broker and hence will be rejected."""


class UnstableOffsetCommitError(ApiError, code=88, retriable=True):
    """There are unstable offsets that need to be cleared."""


class ThrottlingQuotaExceededError(ApiError, code=89, retriable=True):
    """The throttling quota has been exceeded."""


class ProducerFencedError(ApiError, code=90):
    """There is a newer producer with the same transactionalId which fences the current one."""


class ResourceNotFoundError(ApiError, code=91):
    """A request illegally referred to a resource that does not exist."""


class DuplicateResourceError(ApiError, code=92):
    """A request illegally referred to the same resource twice."""


class UnacceptableCredentialError(ApiError, code=93):
    """Requested credential would not meet criteria for acceptability."""


class InconsistentVoterSetError(ApiError, code=94):
    """Indicates that the either the sender or recipient of a voter-only request is not one of
    the expected voters."""


class InvalidUpdateVersionError(ApiError, code=95):
    """The given update version was invalid."""


class FeatureUpdateFailedError(ApiError, code=96):
    """Unable to update finalized features due to an unexpected server error."""


class PrincipalDeserializationFailureError(ApiError, code=97):
    """Request principal deserialization failed during forwarding. This indicates an internal
    error on the broker cluster security setup."""


class SnapshotNotFoundError(ApiError, code=98):
    """Requested snapshot was not found."""


class PositionOutOfRangeError(ApiError, code=99):
    """Requested position is not greater than or equal to zero, and less than the size of the
    snapshot."""


class UnknownTopicIdError(ApiError, code=100, retriable=True):
    """This server does not host this topic ID."""


class DuplicateBrokerRegistrationError(ApiError, code=101):
    """This broker ID is already in use."""


class BrokerIdNotRegisteredError(ApiError, code=102):
    """The given broker ID was not registered."""


class InconsistentTopicIdError(ApiError, code=103, retriable=True):
    """The log's topic ID did not match the topic ID in the request."""


class InconsistentClusterIdError(ApiError, code=104):
    """The clusterId in the request does not match that found on the server."""


class TransactionalIdNotFoundError(ApiError, code=105):
    """The transactionalId could not be found."""


class FetchSessionTopicIdError(
    ApiError, code=106, name="FETCH_SESSION_TOPIC_ID_ERROR", retriable=True
):
    """The fetch session encountered inconsistent topic ID usage."""


class IneligibleReplicaError(ApiError, code=107):
    """The new ISR contains at least one ineligible replica."""


class NewLeaderElectedError(ApiError, code=108):
    """The AlterPartition request successfully updated the partition state but the leader has
    changed."""


class OffsetMovedToTieredStorageError(ApiError, code=109):
    """The requested offset is moved to tiered storage."""


class FencedMemberEpochError(ApiError, code=110):
    """The member epoch is fenced by the group coordinator. The member must abandon all its
    partitions and rejoin."""


class UnreleasedInstanceIdError(ApiError, code=111):
    """The instance ID is still used by another member in the consumer group. That member must
    leave first."""


class UnsupportedAssignorError(ApiError, code=112):
    """The assignor or its version range is not supported by the consumer group."""


class StaleMemberEpochError(ApiError, code=113):
    """The member epoch is stale. The member must retry after receiving its updated member epoch
    via the ConsumerGroupHeartbeat API."""


class MismatchedEndpointTypeError(ApiError, code=114):
    """The request was sent to an endpoint of the wrong type."""


class UnsupportedEndpointTypeError(ApiError, code=115):
    """This endpoint type is not supported yet."""


class UnknownControllerIdError(ApiError, code=116):
    """This controller ID is not known."""


class UnknownSubscriptionIdError(ApiError, code=117):
    """Client sent a push telemetry request with an invalid or outdated subscription ID."""


class TelemetryTooLargeError(ApiError, code=118):
    """Client sent a push telemetry request larger than the maximum size the broker will accept."""


class InvalidRegistrationError(ApiError, code=119):
    """The controller has considered the broker registration to be invalid."""


class TransactionAbortableError(ApiError, code=120):
    """The server encountered an error with the transaction. The client can abort the transaction
    to continue using this transactional ID."""


class InvalidRecordStateError(ApiError, code=121):
    """The record state is invalid. The acknowledgement of delivery could not be completed."""


class ShareSessionNotFoundError(ApiError, code=122, retriable=True):
    """The share session was not found."""


class InvalidShareSessionEpochError(ApiError, code=123, retriable=True):
    """The share session epoch is invalid."""


class FencedStateEpochError(ApiError, code=124):
    """The share coordinator rejected the request because the share-group state epoch did not
    match."""


class InvalidVoterKeyError(ApiError, code=125):
    """The voter key doesn't match the receiving replica's key."""


class DuplicateVoterError(ApiError, code=126):
    """The voter is already part of the set of voters."""


class VoterNotFoundError(ApiError, code=127):
    """The voter is not part of the set of voters."""


# Older names of the same codes, as the seed's guide and older clients spell them.
NotLeaderForPartitionError = NotLeaderOrFollowerError
GroupLoadInProgressError = CoordinatorLoadInProgressError
GroupCoordinatorNotAvailableError = CoordinatorNotAvailableError
NotCoordinatorForGroupError = NotCoordinatorError
