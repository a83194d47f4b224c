"""``trilog consume --group`` and the group flags of issue 12 (``trilog groups
--reset-offsets --shift-by | --by-duration | --all-topics`` and ``--delete``), run as an
operator runs them against a real broker process; offsets checked with the groups admin."""

from __future__ import annotations

import time

import pytest

import trilog
from trilog.client import open_group_admin

from test_admin_tools import cli  # tests/cli is on sys.path, as tests/client for its helpers


@pytest.fixture
def broker(broker_process):
    return broker_process(overrides={"num.partitions": 1, "group.initial.rebalance.delay.ms": 0})


async def produce(bootstrap: str, topic: str, n: int, *, first: int = 0,
                  timestamp_ms: int | None = None) -> None:
    async with trilog.open_producer(bootstrap) as producer:
        for i in range(first, first + n):
            await producer.send(topic, b"v%d" % i, partition=0, timestamp_ms=timestamp_ms)
        await producer.flush()


async def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int | None]:
    async with open_group_admin(bootstrap) as admin:
        described = await admin.describe_group(group)
    return {(p.topic, p.partition): p.current_offset for p in described.partitions}


async def test_consume_as_a_group_commits_and_resumes(broker):
    b = broker.bootstrap
    await produce(b, "work", 10)
    first = await cli("consume", "--bootstrap-server", b, "--topic", "work", "--group", "g",
                      "--from-beginning", "--max-messages", "4")
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["v0", "v1", "v2", "v3"]
    assert "Processed a total of 4 messages" in first.stderr
    assert await committed(b, "g") == {("work", 0): 4}

    rest = await cli("consume", "--bootstrap-server", b, "--topic", "work", "--group", "g",
                     "--from-beginning", "--timeout-ms", "1500", "--format", "{offset}")
    assert rest.returncode == 0, rest.stderr
    assert rest.stdout.split() == [str(i) for i in range(4, 10)]  # the group's offsets win
    assert await committed(b, "g") == {("work", 0): 10}

    new = await cli("consume", "--bootstrap-server", b, "--topic", "work", "--group", "new",
                    "--timeout-ms", "1000")
    assert new.returncode == 0 and new.stdout == ""  # a new group starts at the end

    bad = await cli("consume", "--bootstrap-server", b, "--topic", "work", "--group", "g",
                    "--partition", "0")
    assert bad.returncode == 2 and "--partition" in bad.stderr


async def test_reset_by_shift_duration_and_all_topics_then_delete(broker):
    b = broker.bootstrap
    now = int(time.time() * 1000)
    await produce(b, "old-and-new", 5, timestamp_ms=now - 2 * 3600_000)
    await produce(b, "old-and-new", 5, first=5, timestamp_ms=now)
    await produce(b, "other", 3)
    async with open_group_admin(b) as admin:
        await admin.reset_offsets("g", "old-and-new", offset=8, execute=True)
        await admin.reset_offsets("g", "other", offset=3, execute=True)

    base = ("groups", "--bootstrap-server", b, "--reset-offsets", "--group", "g")
    shifted = await cli(*base, "--all-topics", "--shift-by", "-4", "--execute")
    assert shifted.returncode == 0, shifted.stderr
    assert "Reset 2 offset(s)" in shifted.stdout
    assert "other-0: offset -1 is below the log start; using 0" in shifted.stderr
    assert await committed(b, "g") == {("old-and-new", 0): 4, ("other", 0): 0}

    dry = await cli(*base, "--topic", "old-and-new", "--by-duration", "PT1H")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[1].split() == ["g", "old-and-new", "0", "4", "5"]
    assert await committed(b, "g") == {("old-and-new", 0): 4, ("other", 0): 0}
    short = await cli(*base, "--topic", "old-and-new", "--by-duration", "3h", "--execute")
    assert short.returncode == 0, short.stderr
    assert await committed(b, "g") == {("old-and-new", 0): 0, ("other", 0): 0}

    bad = await cli(*base, "--topic", "other", "--by-duration", "an hour")
    assert bad.returncode == 2 and "PT1H30M" in bad.stderr
    both = await cli(*base, "--topic", "other", "--all-topics", "--to-earliest")
    assert both.returncode == 2
    never = await cli("groups", "--bootstrap-server", b, "--reset-offsets", "--group", "none",
                      "--topic", "other", "--shift-by", "1")
    assert never.returncode == 1 and "no committed offset" in never.stderr

    deleted = await cli("groups", "--bootstrap-server", b, "--delete", "--group", "g")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == "Deletion of requested consumer groups ('g') was successful.\n"
    again = await cli("groups", "--bootstrap-server", b, "--delete", "--group", "g")
    assert again.returncode == 1
    assert "* Group 'g' could not be deleted due to: GROUP_ID_NOT_FOUND" in again.stdout
    no_group = await cli("groups", "--bootstrap-server", b, "--delete")
    assert no_group.returncode == 2 and "--group" in no_group.stderr
