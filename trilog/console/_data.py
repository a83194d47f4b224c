"""What each page shows, read through the public clients and returned as plain JSON-ready
dicts: the HTML views and the ``/api/`` endpoints render the same dicts, so the two never
disagree.  ``NotFound`` for a topic or group that does not exist."""

from __future__ import annotations

from typing import Any

from trilog.client import EARLIEST, LATEST, Admin, GroupAdmin, TopicInfo
from trilog.console._records import NotFound
from trilog.console._sampler import History, describe_groups
from trilog.errors import ApiError, GroupIdNotFoundError, TrilogError


async def overview(admin: Admin, history: History) -> dict[str, Any]:
    cluster = await admin.describe_cluster()
    topics = await admin.describe_topics()
    parts = [p for t in topics for p in t.partitions]
    return {
        "cluster_id": cluster.cluster_id,
        "controller_id": cluster.controller_id,
        "brokers": [{"id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack,
                     "controller": b.node_id == cluster.controller_id}
                    for b in cluster.brokers],
        "topics": len(topics),
        "partitions": len(parts),
        "under_replicated": sum(1 for p in parts if len(p.isr) < len(p.replicas)),
        "offline": sum(1 for p in parts if p.leader < 0),
        "produce_rate": history.produce_rate(),
        "consume_rate": history.consume_rate(),
        **_sampling(history),
    }


def _sampling(history: History) -> dict[str, Any]:
    return {"sampled_at": None if history.last_time_s is None else
            round(history.last_time_s * 1000),
            "sample_error": history.last_error}


def _topic_row(t: TopicInfo, history: History) -> dict[str, Any]:
    return {"name": t.name, "internal": t.internal, "partitions": len(t.partitions),
            "replication_factor": max((len(p.replicas) for p in t.partitions), default=0),
            "under_replicated": sum(1 for p in t.partitions if len(p.isr) < len(p.replicas)),
            "offline": sum(1 for p in t.partitions if p.leader < 0),
            "size": history.topic_size(t.name),
            "produce_rate": history.produce_rate(t.name),
            "consume_rate": history.consume_rate(t.name)}


async def topics(admin: Admin, history: History) -> dict[str, Any]:
    return {"topics": [_topic_row(t, history) for t in await admin.describe_topics()
                       if t.error is None], **_sampling(history)}


async def topic_info(admin: Admin, name: str) -> TopicInfo:
    """``name``'s partitions from fresh metadata; ``NotFound`` for no such topic."""
    (info,) = await admin.describe_topics([name])
    if info.error is not None:
        if info.error in ("UNKNOWN_TOPIC_OR_PARTITION", "INVALID_TOPIC_EXCEPTION"):
            raise NotFound(f"no topic {name!r} in this cluster")
        raise TrilogError(f"topic {name!r}: {info.error}")
    return info


async def topic(admin: Admin, groups: GroupAdmin, history: History, name: str
                ) -> dict[str, Any]:
    info = await topic_info(admin, name)
    tps = [(name, p.partition) for p in info.partitions]
    starts = await groups.list_offsets(tps, EARLIEST)
    ends = await groups.list_offsets(tps, LATEST)
    sizes = await _sizes(admin, name)
    (configs,) = await admin.describe_configs([name])
    return {
        **_topic_row(info, history),
        "partition_list": [
            {"partition": p.partition, "leader": p.leader, "replicas": list(p.replicas),
             "isr": list(p.isr), "error": p.error,
             "log_start_offset": starts.get((name, p.partition)),
             "log_end_offset": ends.get((name, p.partition)),
             "size": sizes.get(p.partition) if sizes is not None else None}
            for p in info.partitions],
        "configs": [{"name": e.name, "value": e.value, "source": e.source,
                     "default": e.is_default, "sensitive": e.sensitive}
                    for e in sorted(configs.entries, key=lambda e: e.name)],
        "configs_error": configs.error_message or configs.error,
    }


async def _sizes(admin: Admin, name: str) -> dict[int, int] | None:
    """Each partition's bytes (the largest replica), or None when the brokers do not say."""
    try:
        dirs = await admin.describe_log_dirs([name])
    except TrilogError:
        return None
    out: dict[int, int] = {}
    for d in dirs:
        for p in d.partitions:
            if p.topic == name:
                out[p.partition] = max(out.get(p.partition, 0), p.size)
    return out


async def groups_list(groups: GroupAdmin) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for group_id, d in (await describe_groups(groups)).items():
        if isinstance(d, ApiError):
            rows.append({"group": group_id, "state": f"unknown ({d.name})", "members": None,
                         "topics": [], "lag": None})
            continue
        lags = [p.lag for p in d.partitions if p.lag is not None]
        rows.append({"group": group_id, "state": d.state, "members": len(d.members),
                     "topics": sorted({p.topic for p in d.partitions}),
                     "lag": sum(lags) if lags else None})
    return {"groups": rows}


async def group(groups: GroupAdmin, history: History, group_id: str) -> dict[str, Any]:
    try:
        d = await groups.describe_group(group_id)
    except GroupIdNotFoundError:
        raise NotFound(f"no consumer group {group_id!r} in this cluster") from None
    lags = [p.lag for p in d.partitions if p.lag is not None]
    coordinator = d.coordinator
    return {
        "group": d.group_id, "state": d.state, "protocol_type": d.protocol_type,
        "protocol": d.protocol,
        "coordinator": None if coordinator is None else
        {"id": coordinator.node_id, "host": coordinator.host, "port": coordinator.port},
        "members": [{"member_id": m.member_id, "client_id": m.client_id, "host": m.host,
                     "group_instance_id": m.group_instance_id,
                     "assignment": [[t, p] for t, p in m.assignment]} for m in d.members],
        "partitions": [{"topic": p.topic, "partition": p.partition,
                        "committed_offset": p.current_offset,
                        "log_end_offset": p.log_end_offset, "lag": p.lag,
                        "consumer_id": p.consumer_id, "host": p.host,
                        "client_id": p.client_id} for p in d.partitions],
        "lag": sum(lags) if lags else None,
        **_sampling(history),
    }
