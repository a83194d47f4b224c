"""``trilog topics --elect-leaders`` (Kafka's ``kafka-leader-election.sh``) and
``trilog topics --reassign`` (``kafka-reassign-partitions.sh``): the output is Kafka's."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from trilog._topic import PartitionKey
from trilog.cli._common import UsageError
from trilog.client import Admin
from trilog.errors import ERROR_CODES, ApiError, RemoteProtocolError, TrilogError

#: not a failure: a valid replica leads already
ELECTION_NOT_NEEDED = "ELECTION_NOT_NEEDED"


def _error_class(name: str) -> type[ApiError] | None:
    return next((c for c in ERROR_CODES.values() if c.name == name), None)


def _names(tps) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps))


async def elect_leaders(admin: Admin, args) -> int:
    """Kafka's LeaderElectionCommand: successes, no-ops, then each failure with its reason;
    1 when any failed."""
    partitions: list[PartitionKey] | None = None
    if args.topic is not None:
        if args.partition is not None:
            partitions = [(args.topic, args.partition)]
        else:
            (info,) = await admin.describe_topics([args.topic])
            if info.error:
                cls = _error_class(info.error)
                raise (cls or TrilogError)(f"topic {args.topic!r}: {info.error}")
            partitions = [(args.topic, p.partition) for p in info.partitions]
    results = await admin.elect_leaders(partitions, args.election_type)
    kind = args.election_type.upper()
    done = [tp for tp, error in results.items() if error is None]
    noop = [tp for tp, error in results.items() if error == ELECTION_NOT_NEEDED]
    failed = {tp: error for tp, error in results.items()
              if error is not None and error != ELECTION_NOT_NEEDED}
    if done:
        print(f"Successfully completed leader election ({kind}) for partitions {_names(done)}")
    if noop:
        print(f"Valid replica already elected for partitions {_names(noop)}")
    for (topic, partition), error in sorted(failed.items()):
        cls = _error_class(error)
        reason = f": {cls.description}" if cls is not None else ""
        print(f"Error completing leader election ({kind}) for partition: {topic}-{partition}: "
              f"{error}{reason}")
    if failed:
        print(f"{len(failed)} replica(s) could not be elected")
        return 1
    return 0


def read_plan(path: str) -> dict[PartitionKey, list[int]]:
    """A ``--reassignment-json-file``: Kafka's
    ``{"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}]}``."""
    from trilog.zk import decode_reassignment

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read --reassignment-json-file {path}: "
                         f"{exc.strerror or exc}") from None
    try:
        plan = decode_reassignment(data, path)
    except RemoteProtocolError as exc:
        raise UsageError(str(exc)) from None
    if not plan:
        raise UsageError(f"{path}: the reassignment lists no partition")
    return plan


def _plan_json(plan: Mapping[PartitionKey, list[int]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(plan.items())]},
        separators=(",", ":"))


async def reassign(admin: Admin, args) -> int:
    plan = read_plan(args.reassignment_json_file)
    if args.execute:
        current = await admin.alter_partition_reassignments(plan)
        print("Current partition replica assignment\n")
        print(_plan_json(current))
        print("\nSave this to use as the --reassignment-json-file option during rollback")
        many = "s" if len(plan) > 1 else ""
        print(f"Successfully started partition reassignment{many} for "
              f"{','.join(f'{t}-{p}' for t, p in sorted(plan))}")
        return 0
    return await _verify(admin, plan)


async def _verify(admin: Admin, plan: Mapping[PartitionKey, list[int]]) -> int:
    """Each partition of the plan: complete (its replicas are the plan's), still in progress
    (listed in /admin/reassign_partitions), or failed (neither: the controller dropped it,
    its log says why).  1 when any failed."""
    pending = await admin.list_partition_reassignments()
    topics = {t.name: t for t in await admin.describe_topics(sorted({t for t, _ in plan}))}
    failed = 0
    print("Status of partition reassignment:")
    for (topic, partition), target in sorted(plan.items()):
        name = f"{topic}-{partition}"
        info = topics.get(topic)
        replicas = next((list(p.replicas) for p in info.partitions
                         if p.partition == partition), None) if info else None
        if (topic, partition) in pending:
            print(f"Reassignment of partition {name} is still in progress.")
        elif replicas == list(target):
            print(f"Reassignment of partition {name} is complete.")
        else:
            failed += 1
            now = "no such partition" if replicas is None else \
                f"its replicas are {','.join(map(str, replicas))}"
            print(f"Reassignment of partition {name} failed: {now}, not "
                  f"{','.join(map(str, target))} (see the controller's log)")
    return 1 if failed else 0
