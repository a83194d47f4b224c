"""Transactions on the broker (KIP-98): the transaction coordinator (InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions), the
transactional ids' states in ``__transaction_state`` (``_state``), their state machine
(``_metadata``, pure) and the markers sent to the partitions' leaders when a transaction
ends (``_markers``).  The partition side (WriteTxnMarkers) is ``apis/_txn_markers.py``;
control batches, the last stable offset and the aborted-transaction index are storage's.
"""

from trilog.broker.transactions._coordinator import TransactionCoordinator
from trilog.broker.transactions._markers import TransactionMarkers
from trilog.broker.transactions._producer_ids import ProducerIds
from trilog.broker.transactions._metadata import (
    IllegalTransition,
    TransactionMetadata,
    TxnState,
    TxnTransit,
)
from trilog.broker.transactions._state import (
    TRANSACTION_STATE_TOPIC,
    TransactionStateManager,
    read_transactions,
)

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "IllegalTransition",
    "ProducerIds",
    "TransactionCoordinator",
    "TransactionMarkers",
    "TransactionMetadata",
    "TransactionStateManager",
    "TxnState",
    "TxnTransit",
    "read_transactions",
]
