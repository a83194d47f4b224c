"""The transaction coordinator's state machine (broker/transactions/_metadata.py): pure."""

from __future__ import annotations

import pytest

from trilog.broker.transactions import IllegalTransition, TransactionMetadata, TxnState

S = TxnState
TP = ("t", 0)


def new_id() -> TransactionMetadata:
    return TransactionMetadata("tid", producer_id=7, timeout_ms=1000, update_ms=0)


def init(meta: TransactionMetadata, now: int = 1) -> None:
    meta.complete(meta.prepare_increment_epoch(1000, now))


def test_a_new_id_gets_epoch_0_then_each_init_the_next():
    meta = new_id()
    init(meta)
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (7, 0, S.EMPTY)
    init(meta)
    assert meta.producer_epoch == 1


def test_a_transaction_begins_at_its_first_partition_and_keeps_its_start():
    meta = new_id()
    init(meta)
    meta.complete(meta.prepare_add_partitions(frozenset({TP}), 100))
    assert (meta.state, meta.start_ms, meta.partitions) == (S.ONGOING, 100, {TP})
    meta.complete(meta.prepare_add_partitions(frozenset({("t", 1)}), 200))
    assert meta.start_ms == 100 and meta.partitions == {TP, ("t", 1)}


def test_commit_goes_through_prepare_to_complete_and_clears_the_partitions():
    meta = new_id()
    init(meta)
    meta.complete(meta.prepare_add_partitions(frozenset({TP}), 100))
    meta.complete(meta.prepare_end(True, 150))
    assert meta.state is S.PREPARE_COMMIT and meta.partitions == {TP}
    meta.complete(meta.prepare_complete(160))
    assert meta.state is S.COMPLETE_COMMIT and meta.partitions == set()
    assert meta.producer_epoch == 0  # protocol version 0: EndTxn keeps the epoch


def test_a_pending_transition_blocks_the_next_one():
    meta = new_id()
    init(meta)
    transit = meta.prepare_add_partitions(frozenset({TP}), 100)
    with pytest.raises(IllegalTransition):
        meta.prepare_end(True, 110)
    meta.abandon()
    assert meta.state is S.EMPTY and meta.pending is None and not meta.partitions
    with pytest.raises(IllegalTransition):
        meta.complete(transit)  # (abandoned: nothing pending any more)


def test_illegal_moves_are_refused():
    meta = new_id()
    init(meta)
    with pytest.raises(IllegalTransition):
        meta.prepare_end(True, 1)  # nothing open
    with pytest.raises(IllegalTransition):
        meta.prepare_complete(1)
    with pytest.raises(IllegalTransition):
        meta.prepare_fenced_abort(1)


def test_a_fence_bumps_the_epoch_and_aborts():
    meta = new_id()
    init(meta)
    meta.complete(meta.prepare_add_partitions(frozenset({TP}), 100))
    transit = meta.prepare_fenced_abort(200)
    assert transit.state is S.PREPARE_ABORT and transit.producer_epoch == 1
    meta.complete(transit)
    meta.complete(meta.prepare_complete(210))
    assert (meta.state, meta.producer_epoch) == (S.COMPLETE_ABORT, 1)
    init(meta)  # the new producer's InitProducerId, asked again
    assert meta.producer_epoch == 2


def test_a_fence_whose_write_failed_reuses_its_epoch():
    meta = new_id()
    init(meta)
    meta.complete(meta.prepare_add_partitions(frozenset({TP}), 100))
    meta.prepare_fenced_abort(200)
    meta.abandon()
    assert meta.state is S.ONGOING and meta.failed_fence
    transit = meta.prepare_fenced_abort(300)
    assert transit.producer_epoch == 1  # not 2: no client ever had 1
    meta.complete(transit)
    assert not meta.failed_fence


def test_exhausted_epochs_rotate_the_producer_id():
    meta = new_id()
    init(meta)
    meta.producer_epoch = 0x7FFF - 1
    assert meta.epoch_exhausted
    with pytest.raises(IllegalTransition):
        meta.prepare_increment_epoch(1000, 5)
    meta.complete(meta.prepare_rotate_producer_id(8, 1000, 5))
    assert (meta.producer_id, meta.producer_epoch, meta.last_producer_id) == (8, 0, 7)


def test_dead_only_from_a_closed_state():
    meta = new_id()
    init(meta)
    meta.complete(meta.prepare_add_partitions(frozenset({TP}), 100))
    with pytest.raises(IllegalTransition):
        meta.prepare_dead()
    meta.complete(meta.prepare_end(False, 110))
    meta.complete(meta.prepare_complete(120))
    assert meta.prepare_dead().state is S.DEAD


def test_state_names():
    assert S.PREPARE_COMMIT.state_name == "PrepareCommit"
    assert S.from_state_name("CompleteAbort") is S.COMPLETE_ABORT
    assert S.from_state_name("Nope") is None
    assert TransactionMetadata.of("x", new_id().current()).current() == new_id().current()
