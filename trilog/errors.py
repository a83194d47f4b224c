"""trilog's exception tree.

    TrilogError
    ├── ProtocolError                bytes that do not follow Kafka's protocol
    │   ├── LocalProtocolError       we were asked to encode something the protocol cannot carry
    │   └── RemoteProtocolError      bytes from a peer (or a file) do not decode
    ├── UnsupportedCodecError        a compression codec whose library is not installed
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
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "ERROR_CODES",
    "ApiError",
    "BrokerIdNotRegisteredError",
    "BrokerNotAvailableError",
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


class ApiError(TrilogError):
    """An error that has a Kafka error code.

    Raised locally (the broker's storage raises these; the broker puts ``code`` on the wire)
    and remotely (a client raises the class matching a response's error code).
    """

    code: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False
    description: ClassVar[str] = "The server experienced an unexpected error."

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.description)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r}, code={self.code})"


#: code -> ApiError subclass, filled by :func:`_api_error`.
ERROR_CODES: dict[int, type[ApiError]] = {}


def _api_error(code: int, name: str, retriable: bool, description: str):
    """Class decorator registering an ``ApiError`` subclass under its Kafka code."""

    def register(cls: type[ApiError]) -> type[ApiError]:
        cls.code, cls.name, cls.retriable, cls.description = code, name, retriable, description
        if code in ERROR_CODES:
            raise AssertionError(f"error code {code} registered twice")
        ERROR_CODES[code] = cls
        return cls

    return register


def error_for_code(code: int, message: str | None = None) -> ApiError:
    """The exception instance for a Kafka error code (``UnknownServerError`` for unknown codes)."""
    cls = ERROR_CODES.get(code)
    if cls is None:
        err = UnknownServerError(message or f"unknown error code {code}")
        return err
    return cls(message)


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise the matching ``ApiError`` unless ``code`` is 0 (NONE)."""
    if code:
        raise error_for_code(code, message)


# -- The table.  Codes, names and retriable flags are Kafka's. ------------------------------


@_api_error(-1, "UNKNOWN_SERVER_ERROR", False, "The server experienced an unexpected error.")
class UnknownServerError(ApiError):
    pass


@_api_error(
    1,
    "OFFSET_OUT_OF_RANGE",
    False,
    "The requested offset is not within the range of offsets maintained by the server.",
)
class OffsetOutOfRangeError(ApiError):
    """Carries the valid range when it is known: ``log_start_offset`` .. ``log_end_offset``."""

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


@_api_error(
    2,
    "CORRUPT_MESSAGE",
    True,
    "This message has failed its CRC checksum, exceeds the valid size, has a null key for a "
    "compacted topic, or is otherwise corrupt.",
)
class CorruptMessageError(ApiError):
    pass


@_api_error(
    3,
    "UNKNOWN_TOPIC_OR_PARTITION",
    True,
    "This server does not host this topic-partition.",
)
class UnknownTopicOrPartitionError(ApiError):
    pass


@_api_error(4, "INVALID_FETCH_SIZE", False, "The requested fetch size is invalid.")
class InvalidFetchSizeError(ApiError):
    pass


@_api_error(
    5,
    "LEADER_NOT_AVAILABLE",
    True,
    "There is no leader for this topic-partition as we are in the middle of a leadership election.",
)
class LeaderNotAvailableError(ApiError):
    pass


@_api_error(
    6,
    "NOT_LEADER_OR_FOLLOWER",
    True,
    "For requests intended only for the leader, this error indicates that the broker is "
    "not the current leader. For requests intended for any replica, this error indicates "
    "that the broker is not a replica of the topic partition.",
)
class NotLeaderOrFollowerError(ApiError):
    pass


@_api_error(7, "REQUEST_TIMED_OUT", True, "The request timed out.")
class RequestTimedOutError(ApiError):
    pass


@_api_error(8, "BROKER_NOT_AVAILABLE", False, "The broker is not available.")
class BrokerNotAvailableError(ApiError):
    pass


@_api_error(
    9,
    "REPLICA_NOT_AVAILABLE",
    True,
    "The replica is not available for the requested topic-partition. Produce/Fetch "
    "requests and other requests intended only for the leader or follower return "
    "NOT_LEADER_OR_FOLLOWER if the broker is not a replica of the topic-partition.",
)
class ReplicaNotAvailableError(ApiError):
    pass


@_api_error(
    10,
    "MESSAGE_TOO_LARGE",
    False,
    "The request included a message larger than the max message size the server will accept.",
)
class MessageTooLargeError(ApiError):
    pass


@_api_error(11, "STALE_CONTROLLER_EPOCH", False, "The controller moved to another broker.")
class StaleControllerEpochError(ApiError):
    pass


@_api_error(
    12,
    "OFFSET_METADATA_TOO_LARGE",
    False,
    "The metadata field of the offset request was too large.",
)
class OffsetMetadataTooLargeError(ApiError):
    pass


@_api_error(
    13,
    "NETWORK_EXCEPTION",
    True,
    "The server disconnected before a response was received.",
)
class NetworkError(ApiError):
    pass


@_api_error(
    14,
    "COORDINATOR_LOAD_IN_PROGRESS",
    True,
    "The coordinator is loading and hence can't process requests.",
)
class CoordinatorLoadInProgressError(ApiError):
    pass


@_api_error(15, "COORDINATOR_NOT_AVAILABLE", True, "The coordinator is not available.")
class CoordinatorNotAvailableError(ApiError):
    pass


@_api_error(16, "NOT_COORDINATOR", True, "This is not the correct coordinator.")
class NotCoordinatorError(ApiError):
    pass


@_api_error(
    17,
    "INVALID_TOPIC_EXCEPTION",
    False,
    "The request attempted to perform an operation on an invalid topic.",
)
class InvalidTopicError(ApiError):
    pass


@_api_error(
    18,
    "RECORD_LIST_TOO_LARGE",
    False,
    "The request included message batch larger than the configured segment size on the server.",
)
class RecordListTooLargeError(ApiError):
    pass


@_api_error(
    19,
    "NOT_ENOUGH_REPLICAS",
    True,
    "Messages are rejected since there are fewer in-sync replicas than required.",
)
class NotEnoughReplicasError(ApiError):
    pass


@_api_error(
    20,
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    True,
    "Messages are written to the log, but to fewer in-sync replicas than required.",
)
class NotEnoughReplicasAfterAppendError(ApiError):
    pass


@_api_error(
    21,
    "INVALID_REQUIRED_ACKS",
    False,
    "Produce request specified an invalid value for required acks.",
)
class InvalidRequiredAcksError(ApiError):
    pass


@_api_error(22, "ILLEGAL_GENERATION", False, "Specified group generation id is not valid.")
class IllegalGenerationError(ApiError):
    pass


@_api_error(
    23,
    "INCONSISTENT_GROUP_PROTOCOL",
    False,
    "The group member's supported protocols are incompatible with those of existing "
    "members or first group member tried to join with empty protocol type or empty "
    "protocol list.",
)
class InconsistentGroupProtocolError(ApiError):
    pass


@_api_error(24, "INVALID_GROUP_ID", False, "The group id is invalid.")
class InvalidGroupIdError(ApiError):
    pass


@_api_error(25, "UNKNOWN_MEMBER_ID", False, "The coordinator is not aware of this member.")
class UnknownMemberIdError(ApiError):
    pass


@_api_error(
    26,
    "INVALID_SESSION_TIMEOUT",
    False,
    "The session timeout is not within the range allowed by the broker (as configured by "
    "group.min.session.timeout.ms and group.max.session.timeout.ms).",
)
class InvalidSessionTimeoutError(ApiError):
    pass


@_api_error(27, "REBALANCE_IN_PROGRESS", False, "The group is rebalancing, so a rejoin is needed.")
class RebalanceInProgressError(ApiError):
    pass


@_api_error(
    28,
    "INVALID_COMMIT_OFFSET_SIZE",
    False,
    "The committing offset data size is not valid.",
)
class InvalidCommitOffsetSizeError(ApiError):
    pass


@_api_error(29, "TOPIC_AUTHORIZATION_FAILED", False, "Topic authorization failed.")
class TopicAuthorizationFailedError(ApiError):
    pass


@_api_error(30, "GROUP_AUTHORIZATION_FAILED", False, "Group authorization failed.")
class GroupAuthorizationFailedError(ApiError):
    pass


@_api_error(31, "CLUSTER_AUTHORIZATION_FAILED", False, "Cluster authorization failed.")
class ClusterAuthorizationFailedError(ApiError):
    pass


@_api_error(
    32,
    "INVALID_TIMESTAMP",
    False,
    "The timestamp of the message is out of acceptable range.",
)
class InvalidTimestampError(ApiError):
    pass


@_api_error(
    33,
    "UNSUPPORTED_SASL_MECHANISM",
    False,
    "The broker does not support the requested SASL mechanism.",
)
class UnsupportedSaslMechanismError(ApiError):
    pass


@_api_error(34, "ILLEGAL_SASL_STATE", False, "Request is not valid given the current SASL state.")
class IllegalSaslStateError(ApiError):
    pass


@_api_error(35, "UNSUPPORTED_VERSION", False, "The version of API is not supported.")
class UnsupportedVersionError(ApiError):
    pass


@_api_error(36, "TOPIC_ALREADY_EXISTS", False, "Topic with this name already exists.")
class TopicAlreadyExistsError(ApiError):
    pass


@_api_error(37, "INVALID_PARTITIONS", False, "Number of partitions is below 1.")
class InvalidPartitionsError(ApiError):
    pass


@_api_error(
    38,
    "INVALID_REPLICATION_FACTOR",
    False,
    "Replication factor is below 1 or larger than the number of available brokers.",
)
class InvalidReplicationFactorError(ApiError):
    pass


@_api_error(39, "INVALID_REPLICA_ASSIGNMENT", False, "Replica assignment is invalid.")
class InvalidReplicaAssignmentError(ApiError):
    pass


@_api_error(40, "INVALID_CONFIG", False, "Configuration is invalid.")
class InvalidConfigError(ApiError):
    pass


@_api_error(41, "NOT_CONTROLLER", True, "This is not the correct controller for this cluster.")
class NotControllerError(ApiError):
    pass


@_api_error(
    42,
    "INVALID_REQUEST",
    False,
    "This most likely occurs because of a request being malformed by the client library "
    "or the message was sent to an incompatible broker. See the broker logs for more "
    "details.",
)
class InvalidRequestError(ApiError):
    pass


@_api_error(
    43,
    "UNSUPPORTED_FOR_MESSAGE_FORMAT",
    False,
    "The message format version on the broker does not support the request.",
)
class UnsupportedForMessageFormatError(ApiError):
    pass


@_api_error(
    44,
    "POLICY_VIOLATION",
    False,
    "Request parameters do not satisfy the configured policy.",
)
class PolicyViolationError(ApiError):
    pass


@_api_error(
    45,
    "OUT_OF_ORDER_SEQUENCE_NUMBER",
    False,
    "The broker received an out of order sequence number.",
)
class OutOfOrderSequenceNumberError(ApiError):
    pass


@_api_error(
    46,
    "DUPLICATE_SEQUENCE_NUMBER",
    False,
    "The broker received a duplicate sequence number.",
)
class DuplicateSequenceNumberError(ApiError):
    pass


@_api_error(47, "INVALID_PRODUCER_EPOCH", False, "Producer attempted to produce with an old epoch.")
class InvalidProducerEpochError(ApiError):
    pass


@_api_error(
    48,
    "INVALID_TXN_STATE",
    False,
    "The producer attempted a transactional operation in an invalid state.",
)
class InvalidTxnStateError(ApiError):
    pass


@_api_error(
    49,
    "INVALID_PRODUCER_ID_MAPPING",
    False,
    "The producer attempted to use a producer id which is not currently assigned to its "
    "transactional id.",
)
class InvalidProducerIdMappingError(ApiError):
    pass


@_api_error(
    50,
    "INVALID_TRANSACTION_TIMEOUT",
    False,
    "The transaction timeout is larger than the maximum value allowed by the broker (as "
    "configured by transaction.max.timeout.ms).",
)
class InvalidTransactionTimeoutError(ApiError):
    pass


@_api_error(
    51,
    "CONCURRENT_TRANSACTIONS",
    True,
    "The producer attempted to update a transaction while another concurrent operation on"
    " the same transaction was ongoing.",
)
class ConcurrentTransactionsError(ApiError):
    pass


@_api_error(
    52,
    "TRANSACTION_COORDINATOR_FENCED",
    False,
    "Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the"
    " current coordinator for a given producer.",
)
class TransactionCoordinatorFencedError(ApiError):
    pass


@_api_error(
    53,
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    False,
    "Transactional Id authorization failed.",
)
class TransactionalIdAuthorizationFailedError(ApiError):
    pass


@_api_error(54, "SECURITY_DISABLED", False, "Security features are disabled.")
class SecurityDisabledError(ApiError):
    pass


@_api_error(
    55,
    "OPERATION_NOT_ATTEMPTED",
    False,
    "The broker did not attempt to execute this operation. This may happen for batched "
    "RPCs where some operations in the batch failed, causing the broker to respond "
    "without trying the rest.",
)
class OperationNotAttemptedError(ApiError):
    pass


@_api_error(
    56,
    "KAFKA_STORAGE_ERROR",
    True,
    "Disk error when trying to access log file on the disk.",
)
class KafkaStorageError(ApiError):
    pass


@_api_error(
    57,
    "LOG_DIR_NOT_FOUND",
    False,
    "The user-specified log directory is not found in the broker config.",
)
class LogDirNotFoundError(ApiError):
    pass


@_api_error(58, "SASL_AUTHENTICATION_FAILED", False, "SASL Authentication failed.")
class SaslAuthenticationFailedError(ApiError):
    pass


@_api_error(
    59,
    "UNKNOWN_PRODUCER_ID",
    False,
    "This exception is raised by the broker if it could not locate the producer metadata "
    "associated with the producerId in question. This could happen if, for instance, the "
    "producer's records were deleted because their retention time had elapsed. Once the "
    "last records of the producerId are removed, the producer's metadata is removed from "
    "the broker, and future appends by the producer will return this exception.",
)
class UnknownProducerIdError(ApiError):
    pass


@_api_error(60, "REASSIGNMENT_IN_PROGRESS", False, "A partition reassignment is in progress.")
class ReassignmentInProgressError(ApiError):
    pass


@_api_error(61, "DELEGATION_TOKEN_AUTH_DISABLED", False, "Delegation Token feature is not enabled.")
class DelegationTokenAuthDisabledError(ApiError):
    pass


@_api_error(62, "DELEGATION_TOKEN_NOT_FOUND", False, "Delegation Token is not found on server.")
class DelegationTokenNotFoundError(ApiError):
    pass


@_api_error(
    63,
    "DELEGATION_TOKEN_OWNER_MISMATCH",
    False,
    "Specified Principal is not valid Owner/Renewer.",
)
class DelegationTokenOwnerMismatchError(ApiError):
    pass


@_api_error(
    64,
    "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",
    False,
    "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels and on "
    "delegation token authenticated channels.",
)
class DelegationTokenRequestNotAllowedError(ApiError):
    pass


@_api_error(
    65,
    "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
    False,
    "Delegation Token authorization failed.",
)
class DelegationTokenAuthorizationFailedError(ApiError):
    pass


@_api_error(66, "DELEGATION_TOKEN_EXPIRED", False, "Delegation Token is expired.")
class DelegationTokenExpiredError(ApiError):
    pass


@_api_error(67, "INVALID_PRINCIPAL_TYPE", False, "Supplied principalType is not supported.")
class InvalidPrincipalTypeError(ApiError):
    pass


@_api_error(68, "NON_EMPTY_GROUP", False, "The group is not empty.")
class NonEmptyGroupError(ApiError):
    pass


@_api_error(69, "GROUP_ID_NOT_FOUND", False, "The group id does not exist.")
class GroupIdNotFoundError(ApiError):
    pass


@_api_error(70, "FETCH_SESSION_ID_NOT_FOUND", True, "The fetch session ID was not found.")
class FetchSessionIdNotFoundError(ApiError):
    pass


@_api_error(71, "INVALID_FETCH_SESSION_EPOCH", True, "The fetch session epoch is invalid.")
class InvalidFetchSessionEpochError(ApiError):
    pass


@_api_error(
    72,
    "LISTENER_NOT_FOUND",
    True,
    "There is no listener on the leader broker that matches the listener on which "
    "metadata request was processed.",
)
class ListenerNotFoundError(ApiError):
    pass


@_api_error(73, "TOPIC_DELETION_DISABLED", False, "Topic deletion is disabled.")
class TopicDeletionDisabledError(ApiError):
    pass


@_api_error(
    74,
    "FENCED_LEADER_EPOCH",
    True,
    "The leader epoch in the request is older than the epoch on the broker.",
)
class FencedLeaderEpochError(ApiError):
    pass


@_api_error(
    75,
    "UNKNOWN_LEADER_EPOCH",
    True,
    "The leader epoch in the request is newer than the epoch on the broker.",
)
class UnknownLeaderEpochError(ApiError):
    pass


@_api_error(
    76,
    "UNSUPPORTED_COMPRESSION_TYPE",
    False,
    "The requesting client does not support the compression type of given partition.",
)
class UnsupportedCompressionTypeError(ApiError):
    pass


@_api_error(77, "STALE_BROKER_EPOCH", False, "Broker epoch has changed.")
class StaleBrokerEpochError(ApiError):
    pass


@_api_error(
    78,
    "OFFSET_NOT_AVAILABLE",
    True,
    "The leader high watermark has not caught up from a recent leader election so the "
    "offsets cannot be guaranteed to be monotonically increasing.",
)
class OffsetNotAvailableError(ApiError):
    pass


@_api_error(
    79,
    "MEMBER_ID_REQUIRED",
    False,
    "The group member needs to have a valid member id before actually entering a consumer group.",
)
class MemberIdRequiredError(ApiError):
    pass


@_api_error(80, "PREFERRED_LEADER_NOT_AVAILABLE", True, "The preferred leader was not available.")
class PreferredLeaderNotAvailableError(ApiError):
    pass


@_api_error(81, "GROUP_MAX_SIZE_REACHED", False, "The group has reached its maximum size.")
class GroupMaxSizeReachedError(ApiError):
    pass


@_api_error(
    82,
    "FENCED_INSTANCE_ID",
    False,
    "The broker rejected this static consumer since another consumer with the same "
    "group.instance.id has registered with a different member.id.",
)
class FencedInstanceIdError(ApiError):
    pass


@_api_error(
    83,
    "ELIGIBLE_LEADERS_NOT_AVAILABLE",
    True,
    "Eligible topic partition leaders are not available.",
)
class EligibleLeadersNotAvailableError(ApiError):
    pass


@_api_error(84, "ELECTION_NOT_NEEDED", True, "Leader election not needed for topic partition.")
class ElectionNotNeededError(ApiError):
    pass


@_api_error(85, "NO_REASSIGNMENT_IN_PROGRESS", False, "No partition reassignment is in progress.")
class NoReassignmentInProgressError(ApiError):
    pass


@_api_error(
    86,
    "GROUP_SUBSCRIBED_TO_TOPIC",
    False,
    "Deleting offsets of a topic is forbidden while the consumer group is actively "
    "subscribed to it.",
)
class GroupSubscribedToTopicError(ApiError):
    pass


@_api_error(
    87,
    "INVALID_RECORD",
    False,
    "This record has failed the validation on broker and hence will be rejected.",
)
class InvalidRecordError(ApiError):
    pass


@_api_error(
    88,
    "UNSTABLE_OFFSET_COMMIT",
    True,
    "There are unstable offsets that need to be cleared.",
)
class UnstableOffsetCommitError(ApiError):
    pass


@_api_error(89, "THROTTLING_QUOTA_EXCEEDED", True, "The throttling quota has been exceeded.")
class ThrottlingQuotaExceededError(ApiError):
    pass


@_api_error(
    90,
    "PRODUCER_FENCED",
    False,
    "There is a newer producer with the same transactionalId which fences the current one.",
)
class ProducerFencedError(ApiError):
    pass


@_api_error(
    91,
    "RESOURCE_NOT_FOUND",
    False,
    "A request illegally referred to a resource that does not exist.",
)
class ResourceNotFoundError(ApiError):
    pass


@_api_error(
    92,
    "DUPLICATE_RESOURCE",
    False,
    "A request illegally referred to the same resource twice.",
)
class DuplicateResourceError(ApiError):
    pass


@_api_error(
    93,
    "UNACCEPTABLE_CREDENTIAL",
    False,
    "Requested credential would not meet criteria for acceptability.",
)
class UnacceptableCredentialError(ApiError):
    pass


@_api_error(
    94,
    "INCONSISTENT_VOTER_SET",
    False,
    "Indicates that the either the sender or recipient of a voter-only request is not one"
    " of the expected voters.",
)
class InconsistentVoterSetError(ApiError):
    pass


@_api_error(95, "INVALID_UPDATE_VERSION", False, "The given update version was invalid.")
class InvalidUpdateVersionError(ApiError):
    pass


@_api_error(
    96,
    "FEATURE_UPDATE_FAILED",
    False,
    "Unable to update finalized features due to an unexpected server error.",
)
class FeatureUpdateFailedError(ApiError):
    pass


@_api_error(
    97,
    "PRINCIPAL_DESERIALIZATION_FAILURE",
    False,
    "Request principal deserialization failed during forwarding. This indicates an "
    "internal error on the broker cluster security setup.",
)
class PrincipalDeserializationFailureError(ApiError):
    pass


@_api_error(98, "SNAPSHOT_NOT_FOUND", False, "Requested snapshot was not found.")
class SnapshotNotFoundError(ApiError):
    pass


@_api_error(
    99,
    "POSITION_OUT_OF_RANGE",
    False,
    "Requested position is not greater than or equal to zero, and less than the size of "
    "the snapshot.",
)
class PositionOutOfRangeError(ApiError):
    pass


@_api_error(100, "UNKNOWN_TOPIC_ID", True, "This server does not host this topic ID.")
class UnknownTopicIdError(ApiError):
    pass


@_api_error(101, "DUPLICATE_BROKER_REGISTRATION", False, "This broker ID is already in use.")
class DuplicateBrokerRegistrationError(ApiError):
    pass


@_api_error(102, "BROKER_ID_NOT_REGISTERED", False, "The given broker ID was not registered.")
class BrokerIdNotRegisteredError(ApiError):
    pass


@_api_error(
    103,
    "INCONSISTENT_TOPIC_ID",
    True,
    "The log's topic ID did not match the topic ID in the request.",
)
class InconsistentTopicIdError(ApiError):
    pass


@_api_error(
    104,
    "INCONSISTENT_CLUSTER_ID",
    False,
    "The clusterId in the request does not match that found on the server.",
)
class InconsistentClusterIdError(ApiError):
    pass


@_api_error(105, "TRANSACTIONAL_ID_NOT_FOUND", False, "The transactionalId could not be found.")
class TransactionalIdNotFoundError(ApiError):
    pass


@_api_error(
    106,
    "FETCH_SESSION_TOPIC_ID_ERROR",
    True,
    "The fetch session encountered inconsistent topic ID usage.",
)
class FetchSessionTopicIdError(ApiError):
    pass


@_api_error(
    107,
    "INELIGIBLE_REPLICA",
    False,
    "The new ISR contains at least one ineligible replica.",
)
class IneligibleReplicaError(ApiError):
    pass


@_api_error(
    108,
    "NEW_LEADER_ELECTED",
    False,
    "The AlterPartition request successfully updated the partition state but the leader "
    "has changed.",
)
class NewLeaderElectedError(ApiError):
    pass


@_api_error(
    109,
    "OFFSET_MOVED_TO_TIERED_STORAGE",
    False,
    "The requested offset is moved to tiered storage.",
)
class OffsetMovedToTieredStorageError(ApiError):
    pass


@_api_error(
    110,
    "FENCED_MEMBER_EPOCH",
    False,
    "The member epoch is fenced by the group coordinator. The member must abandon all its"
    " partitions and rejoin.",
)
class FencedMemberEpochError(ApiError):
    pass


@_api_error(
    111,
    "UNRELEASED_INSTANCE_ID",
    False,
    "The instance ID is still used by another member in the consumer group. That member "
    "must leave first.",
)
class UnreleasedInstanceIdError(ApiError):
    pass


@_api_error(
    112,
    "UNSUPPORTED_ASSIGNOR",
    False,
    "The assignor or its version range is not supported by the consumer group.",
)
class UnsupportedAssignorError(ApiError):
    pass


@_api_error(
    113,
    "STALE_MEMBER_EPOCH",
    False,
    "The member epoch is stale. The member must retry after receiving its updated member "
    "epoch via the ConsumerGroupHeartbeat API.",
)
class StaleMemberEpochError(ApiError):
    pass


@_api_error(
    114,
    "MISMATCHED_ENDPOINT_TYPE",
    False,
    "The request was sent to an endpoint of the wrong type.",
)
class MismatchedEndpointTypeError(ApiError):
    pass


@_api_error(115, "UNSUPPORTED_ENDPOINT_TYPE", False, "This endpoint type is not supported yet.")
class UnsupportedEndpointTypeError(ApiError):
    pass


@_api_error(116, "UNKNOWN_CONTROLLER_ID", False, "This controller ID is not known.")
class UnknownControllerIdError(ApiError):
    pass


@_api_error(
    117,
    "UNKNOWN_SUBSCRIPTION_ID",
    False,
    "Client sent a push telemetry request with an invalid or outdated subscription ID.",
)
class UnknownSubscriptionIdError(ApiError):
    pass


@_api_error(
    118,
    "TELEMETRY_TOO_LARGE",
    False,
    "Client sent a push telemetry request larger than the maximum size the broker will accept.",
)
class TelemetryTooLargeError(ApiError):
    pass


@_api_error(
    119,
    "INVALID_REGISTRATION",
    False,
    "The controller has considered the broker registration to be invalid.",
)
class InvalidRegistrationError(ApiError):
    pass


@_api_error(
    120,
    "TRANSACTION_ABORTABLE",
    False,
    "The server encountered an error with the transaction. The client can abort the "
    "transaction to continue using this transactional ID.",
)
class TransactionAbortableError(ApiError):
    pass


@_api_error(
    121,
    "INVALID_RECORD_STATE",
    False,
    "The record state is invalid. The acknowledgement of delivery could not be completed.",
)
class InvalidRecordStateError(ApiError):
    pass


@_api_error(122, "SHARE_SESSION_NOT_FOUND", True, "The share session was not found.")
class ShareSessionNotFoundError(ApiError):
    pass


@_api_error(123, "INVALID_SHARE_SESSION_EPOCH", True, "The share session epoch is invalid.")
class InvalidShareSessionEpochError(ApiError):
    pass


@_api_error(
    124,
    "FENCED_STATE_EPOCH",
    False,
    "The share coordinator rejected the request because the share-group state epoch did not match.",
)
class FencedStateEpochError(ApiError):
    pass


@_api_error(
    125,
    "INVALID_VOTER_KEY",
    False,
    "The voter key doesn't match the receiving replica's key.",
)
class InvalidVoterKeyError(ApiError):
    pass


@_api_error(126, "DUPLICATE_VOTER", False, "The voter is already part of the set of voters.")
class DuplicateVoterError(ApiError):
    pass


@_api_error(127, "VOTER_NOT_FOUND", False, "The voter is not part of the set of voters.")
class VoterNotFoundError(ApiError):
    pass


# Older names of the same codes, as the seed's guide and older clients spell them.
NotLeaderForPartitionError = NotLeaderOrFollowerError
GroupLoadInProgressError = CoordinatorLoadInProgressError
GroupCoordinatorNotAvailableError = CoordinatorNotAvailableError
NotCoordinatorForGroupError = NotCoordinatorError
