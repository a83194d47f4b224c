"""Browsing a partition's records: the query (pure), how a key or value is shown (pure),
and the bounded read through a simple consumer.

Bounds, so that a page never pulls a partition into memory: at most ``MAX_LIMIT`` records
per page, at most ``MAX_FETCHES`` fetches of ``FETCH_BYTES`` each, and each key, value and
header shown up to ``SHOW_BYTES`` (the rest is counted, not sent).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from trilog.client import EARLIEST, LATEST, SimpleConsumer

DEFAULT_LIMIT = 20
MAX_LIMIT = 200
FETCH_BYTES = 1 << 20
MAX_FETCHES = 4
SHOW_BYTES = 4096
FORMATS = ("auto", "text", "json", "hex")


class BadInput(ValueError):
    """A query the console cannot answer (a 400 page naming the parameter)."""


class NotFound(LookupError):
    """No such topic, partition or group (a 404 page)."""


@dataclass(frozen=True)
class BrowseQuery:
    partition: int = 0
    #: start here (None: from ``time_ms``, or the last ``limit`` records)
    offset: int | None = None
    #: start at the first record at or after this time (ms since the epoch)
    time_ms: int | None = None
    limit: int = DEFAULT_LIMIT
    format: str = "auto"


def parse_browse(query: dict[str, str]) -> BrowseQuery:
    """``?partition=&offset=|time=&limit=&format=`` -> ``BrowseQuery``; ``BadInput`` naming
    the parameter for a bad one."""
    partition = _int(query, "partition", 0, minimum=0)
    offset = _int(query, "offset", None, minimum=0)
    time_text = query.get("time", "").strip()
    time_ms = parse_time(time_text) if time_text else None
    if offset is not None and time_ms is not None:
        raise BadInput("give offset or time, not both")
    limit = _int(query, "limit", DEFAULT_LIMIT, minimum=1)
    assert limit is not None
    if limit > MAX_LIMIT:
        raise BadInput(f"limit {limit} is more than {MAX_LIMIT} records a page")
    fmt = query.get("format", "auto") or "auto"
    if fmt not in FORMATS:
        raise BadInput(f"format {fmt!r} is not one of {', '.join(FORMATS)}")
    assert partition is not None
    return BrowseQuery(partition, offset, time_ms, limit, fmt)


def _int(query: dict[str, str], name: str, default: int | None, *, minimum: int
         ) -> int | None:
    text = query.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadInput(f"{name} {text!r} is not a whole number") from None
    if value < minimum:
        raise BadInput(f"{name} {value} is below {minimum}")
    return value


def parse_time(text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 date-time (no zone: UTC) -> ms."""
    if text.lstrip("-").isdigit():
        value = int(text)
        if value < 0:
            raise BadInput(f"time {value} is before 1970")
        return value
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadInput(f"time {text!r} is neither milliseconds since 1970 nor an ISO 8601 "
                       "date-time (e.g. 2024-05-01T12:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def render(data: bytes | None, fmt: str = "auto") -> dict[str, Any]:
    """How a key, value or header value is shown: ``{"format", "text", "size",
    "truncated"}``; ``auto`` picks JSON, else UTF-8 text, else hex.  None stays None."""
    if data is None:
        return {"format": "null", "text": None, "size": 0, "truncated": False}
    shown = data[:SHOW_BYTES]
    truncated = len(data) > SHOW_BYTES
    if fmt in ("auto", "json") and not truncated:
        try:
            text = json.dumps(json.loads(data), indent=2, ensure_ascii=False)
            return {"format": "json", "text": text, "size": len(data), "truncated": False}
        except (ValueError, UnicodeDecodeError):
            if fmt == "json":
                return _hex(shown, len(data), truncated, "not JSON: ")
    if fmt in ("auto", "text", "json"):
        try:
            text = shown.decode("utf-8")
            if fmt == "text" or text.isprintable() or _mostly_text(text):
                return {"format": "text", "text": text, "size": len(data),
                        "truncated": truncated}
        except UnicodeDecodeError:
            if fmt == "text":
                return {"format": "text", "text": shown.decode("utf-8", "replace"),
                        "size": len(data), "truncated": truncated}
    return _hex(shown, len(data), truncated)


def _mostly_text(text: str) -> bool:
    return all(c.isprintable() or c in "\n\r\t" for c in text)


def _hex(shown: bytes, size: int, truncated: bool, note: str = "") -> dict[str, Any]:
    return {"format": "hex", "text": note + shown.hex(" "), "size": size,
            "truncated": truncated, "base64": base64.b64encode(shown).decode("ascii")}


async def browse(consumer: SimpleConsumer, topic: str, q: BrowseQuery) -> dict[str, Any]:
    """Up to ``q.limit`` records of ``topic``-``q.partition`` from ``q.offset`` (or the first
    at or after ``q.time_ms``, or else the last ``limit``), with the log's bounds.  The
    caller has checked that the partition exists and has a leader."""
    start_offset = await _one(consumer, topic, q.partition, EARLIEST)
    end_offset = await _one(consumer, topic, q.partition, LATEST)
    if q.offset is not None:
        start = q.offset
    elif q.time_ms is not None:
        found = await consumer.offsets_before(topic, q.partition, q.time_ms)
        start = found[0] if found else end_offset
    else:
        start = max(end_offset - q.limit, start_offset)
    position = max(start, start_offset)
    records: list[dict[str, Any]] = []
    fetches = 0
    while position < end_offset and len(records) < q.limit and fetches < MAX_FETCHES:
        fetched = await consumer.fetch(topic, q.partition, position, FETCH_BYTES)
        fetches += 1
        for r in fetched:
            if r.offset >= position and len(records) < q.limit:
                records.append(_record(r, q.format))
        if fetched.next_offset <= position:
            break
        position = records[-1]["offset"] + 1 if len(records) == q.limit else \
            fetched.next_offset
    return {"topic": topic, "partition": q.partition, "requested_offset": q.offset,
            "requested_time_ms": q.time_ms, "start": max(start, start_offset),
            "log_start_offset": start_offset, "log_end_offset": end_offset,
            "next_offset": position, "limit": q.limit, "format": q.format,
            "records": records}


async def _one(consumer: SimpleConsumer, topic: str, partition: int, time: int) -> int:
    offsets = await consumer.offsets_before(topic, partition, time)
    return offsets[0] if offsets else 0


def _record(r: Any, fmt: str) -> dict[str, Any]:
    return {"offset": r.offset, "timestamp": r.timestamp,
            "time": _iso(r.timestamp), "key": render(r.key, fmt),
            "value": render(r.value, fmt),
            "headers": [{"key": h.key if isinstance(h.key, str) else
                         bytes(h.key).decode("utf-8", "replace"),
                         "value": render(None if h.value is None else bytes(h.value), fmt)}
                        for h in r.headers]}


def _iso(ms: int) -> str | None:
    if ms < 0:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
