"""Illegal topic names get INVALID_TOPIC_EXCEPTION and never touch the file system.

Every API that takes a topic name is tried with names that would escape ``log.dirs`` or
are otherwise illegal; the tree around the log dir is compared before and after.
"""

from __future__ import annotations

import os

import pytest
from broker_helpers import (
    batch,
    connect,
    create_topics_request,
    fetch_request,
    list_offsets_request,
    metadata_request,
    only_partition,
    produce_request,
    roundtrip,
)

from trilog import protocol as p

INVALID_TOPIC = 17
UNKNOWN_TOPIC_OR_PARTITION = 3

BAD_NAMES = [
    "..",
    ".",
    "",
    "../x",
    "../../escape",
    "a/b",
    "/abs",
    "a" * 250,
    "x" * 1000,
    "sp ace",
    "nul\x00byte",
    "caf\u00e9",
    "back\\slash",
]


def _tree(root) -> set[str]:
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            out.add(os.path.relpath(os.path.join(dirpath, name), root))
    return out


@pytest.fixture
def layout(tmp_path, broker_process):
    root = tmp_path / "root"
    log_dir = root / "logs" / "data"
    cwd = root / "cwd"
    cwd.mkdir(parents=True)
    broker = broker_process(log_dir, cwd=cwd)
    with connect(broker.bootstrap) as sock:
        # The broker is fully up (its own files exist) before the snapshot.
        roundtrip(sock, metadata_request(None), 1)
    return broker, root


def _check_untouched(root, before) -> None:
    after = _tree(root)
    # Only the broker's own files may appear (recovery checkpoints and the like), and only
    # inside the log dir; no directory for any bad name anywhere.
    new = after - before
    assert all(n.startswith(os.path.join("logs", "data") + os.sep) for n in new), new
    for n in new:
        assert os.path.basename(n) in {"recovery-point-offset-checkpoint",
                                       "log-start-offset-checkpoint",
                                       "replication-offset-checkpoint"}, new


def test_metadata_with_auto_create_refuses_illegal_names(layout):
    broker, root = layout
    before = _tree(root)
    with connect(broker.bootstrap) as sock:
        for version in (1, 4, 7):
            meta = roundtrip(sock, metadata_request(BAD_NAMES), version)
            got = {t.name: t.error_code for t in meta.topics}
            assert got == dict.fromkeys(BAD_NAMES, INVALID_TOPIC), version
            for t in meta.topics:
                assert t.partitions == []
        everything = roundtrip(sock, metadata_request(None), 1)
        assert everything.topics == []
    _check_untouched(root, before)


def test_create_topics_refuses_illegal_names(layout):
    broker, root = layout
    before = _tree(root)
    with connect(broker.bootstrap) as sock:
        for version in (0, 2, 3):
            response = roundtrip(sock, create_topics_request(dict.fromkeys(BAD_NAMES, 1)), version)
            got = {t.name: t.error_code for t in response.topics}
            assert got == dict.fromkeys(BAD_NAMES, INVALID_TOPIC), version
        # A legal name in the same request still works.
        response = roundtrip(sock, create_topics_request({"good": 1, "../bad": 1}), 2)
        assert {t.name: t.error_code for t in response.topics} == {"good": 0, "../bad": 17}
        assert [t.name for t in roundtrip(sock, metadata_request(None), 1).topics] == ["good"]
    _check_untouched_but_for(root, before, "good-0")


def _check_untouched_but_for(root, before, partition_dir: str) -> None:
    after = _tree(root)
    allowed = os.path.join("logs", "data", partition_dir)
    new = {n for n in after - before if not (n == allowed or n.startswith(allowed + os.sep))}
    assert all(os.path.basename(n) in {"recovery-point-offset-checkpoint",
                                       "log-start-offset-checkpoint"} for n in new), new
    assert allowed in after


def test_produce_fetch_list_offsets_delete_refuse_illegal_names(layout):
    broker, root = layout
    before = _tree(root)
    records = batch([b"payload"])
    with connect(broker.bootstrap) as sock:
        for name in BAD_NAMES:
            for version in (0, 3, 7):
                part = only_partition(roundtrip(sock, produce_request(name, 0, records), version))
                assert part.error_code in (INVALID_TOPIC, UNKNOWN_TOPIC_OR_PARTITION), (name,
                                                                                        version)
                assert part.base_offset == -1
            part = only_partition(roundtrip(sock, fetch_request(name, 0, 0), 4))
            assert part.error_code in (INVALID_TOPIC, UNKNOWN_TOPIC_OR_PARTITION), name
            assert bytes(part.records or b"") == b""
            part = only_partition(roundtrip(sock, list_offsets_request(name, 0, -1), 1))
            assert part.error_code in (INVALID_TOPIC, UNKNOWN_TOPIC_OR_PARTITION), name
        response = roundtrip(sock, p.DeleteTopicsRequest(topic_names=BAD_NAMES, timeout_ms=5000), 1)
        for r in response.responses:
            assert r.error_code in (INVALID_TOPIC, UNKNOWN_TOPIC_OR_PARTITION), r
        assert roundtrip(sock, metadata_request(None), 1).topics == []
    _check_untouched(root, before)


def test_longest_legal_name_works(layout):
    broker, root = layout
    name = "n" * 249
    with connect(broker.bootstrap) as sock:
        meta = roundtrip(sock, metadata_request([name]), 1)
        assert meta.topics[0].error_code in (0, 5)  # created (LEADER_NOT_AVAILABLE at first)
        meta = roundtrip(sock, metadata_request([name]), 1)
        assert meta.topics[0].error_code == 0
        part = only_partition(roundtrip(sock, produce_request(name, 0, batch([b"x"])), 3))
        assert part.error_code == 0
    assert (root / "logs" / "data" / f"{name}-0").is_dir()
