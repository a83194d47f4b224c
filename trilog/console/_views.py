"""The console's HTML: one function per page, each taking the dict ``_data`` (or
``_records``) made and returning the page's text.  No template engine: f-strings, with
every value from the cluster passed through ``html.escape`` (``e``) or a URL quoter."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from html import escape
from typing import Any, NamedTuple
from urllib.parse import quote, urlencode


def e(value: Any) -> str:
    """Text for HTML: escaped; None as a dash."""
    return "–" if value is None else escape(str(value), quote=True)


def topic_url(name: str, *rest: str) -> str:
    return "/topics/" + "/".join([quote(name, safe=""), *rest])


def group_url(name: str) -> str:
    return "/groups/" + quote(name, safe="")


def rate(value: float | None) -> str:
    return "–" if value is None else f"{value:,.1f}/s"


def size(n: int | None) -> str:
    if n is None:
        return "–"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def when(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "–"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


_NAV = (("/", "Overview"), ("/topics", "Topics"), ("/groups", "Consumer groups"))


class Page(NamedTuple):
    """A page's title, its body (HTML) and the navigation entry it belongs to; ``layout``
    makes the document."""

    title: str
    body: str
    active: str = ""


def layout(page: Page, cluster: str = "") -> str:
    title, body, active = page
    nav = "".join(f'<a href="{href}"{" class=active" if href == active else ""}>{e(text)}</a>'
                  for href, text in _NAV)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(title)} · trilog console</title>
<link rel="stylesheet" href="/static/console.css">
<script src="/static/chart.js" defer></script>
</head><body>
<header><span class="brand">trilog console</span><nav>{nav}</nav>
<span class="cluster">{e(cluster)}</span></header>
<main><h1>{e(title)}</h1>
{body}
</main></body></html>
"""


def _table(headers: list[str], rows: list[list[str]], *, cls: str = "") -> str:
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    if not rows:
        body = f'<tr><td colspan="{len(headers)}" class="empty">none</td></tr>'
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _chart(src: str, title: str) -> str:
    return (f'<figure class="chart" data-chart="{e(src)}"><figcaption>{e(title)}'
            f'</figcaption><div class="plot">waiting for samples…</div></figure>')


def _card(label: str, value: str, *, bad: bool = False) -> str:
    return (f'<div class="card{" bad" if bad else ""}"><div class="value">{value}</div>'
            f'<div class="label">{e(label)}</div></div>')


def _sampling_note(d: dict[str, Any]) -> str:
    if d.get("sample_error"):
        return f'<p class="warning">The last sample failed: {e(d["sample_error"])}</p>'
    if d.get("sampled_at") is None:
        return '<p class="note">Rates appear after the console\'s first two samples.</p>'
    return f'<p class="note">Last sampled {e(when(d["sampled_at"]))}.</p>'


def overview_page(d: dict[str, Any]) -> Page:
    cards = "".join([
        _card("brokers", e(len(d["brokers"]))), _card("topics", e(d["topics"])),
        _card("partitions", e(d["partitions"])),
        _card("under-replicated", e(d["under_replicated"]), bad=d["under_replicated"] > 0),
        _card("offline", e(d["offline"]), bad=d["offline"] > 0),
        _card("produced", e(rate(d["produce_rate"]))),
        _card("consumed", e(rate(d["consume_rate"])))])
    brokers = _table(["ID", "Address", "Rack", "Controller"], [
        [e(b["id"]), e(f'{b["host"]}:{b["port"]}'), e(b["rack"]),
         "yes" if b["controller"] else ""] for b in d["brokers"]], cls="brokers")
    body = (f'<div class="cards">{cards}</div>{_sampling_note(d)}'
            f'{_chart("/api/charts/cluster", "Records per second, all topics")}'
            f'<h2>Brokers</h2>{brokers}'
            f'<p class="note">Cluster id {e(d["cluster_id"])}; controller '
            f'{e(d["controller_id"] if d["controller_id"] >= 0 else None)}.</p>')
    return Page("Overview", body, active="/")


def topics_page(d: dict[str, Any]) -> Page:
    rows = [[f'<a href="{e(topic_url(t["name"]))}">{e(t["name"])}</a>'
             + (' <span class="tag">internal</span>' if t["internal"] else ""),
             e(t["partitions"]), e(t["replication_factor"]),
             _health(t), e(size(t["size"])), e(rate(t["produce_rate"])),
             e(rate(t["consume_rate"]))] for t in d["topics"]]
    body = (_table(["Topic", "Partitions", "Replication", "Health", "Size", "Produced",
                    "Consumed"], rows, cls="topics")
            + _sampling_note(d)
            + _chart("/api/charts/throughput", "Records produced per second, by topic"))
    return Page("Topics", body, active="/topics")


def _health(t: dict[str, Any]) -> str:
    if t["offline"]:
        return f'<span class="bad">{e(t["offline"])} offline</span>'
    if t["under_replicated"]:
        return f'<span class="warn">{e(t["under_replicated"])} under-replicated</span>'
    return '<span class="good">ok</span>'


def topic_page(d: dict[str, Any], *, records: bool) -> Page:
    name = d["name"]
    parts = _table(["Partition", "Leader", "Replicas", "In sync", "Log start", "Log end",
                    "Size"] + (["Records"] if records else []), [
        [e(p["partition"]), e(p["leader"] if p["leader"] >= 0 else "none"),
         e(",".join(map(str, p["replicas"]))),
         _isr(p), e(p["log_start_offset"]), e(p["log_end_offset"]), e(size(p["size"]))]
        + ([f'<a href="{e(topic_url(name, "records"))}?partition={p["partition"]}">'
            "browse</a>"] if records else [])
        for p in d["partition_list"]], cls="partitions")
    configs = _table(["Config", "Value", "Source"], [
        [e(c["name"]), e("(sensitive)" if c["sensitive"] else c["value"]),
         e(c["source"])] for c in d["configs"] if not c["default"]], cls="configs")
    defaults = _table(["Config", "Value", "Source"], [
        [e(c["name"]), e("(sensitive)" if c["sensitive"] else c["value"]), e(c["source"])]
        for c in d["configs"] if c["default"]], cls="configs defaults")
    error = (f'<p class="warning">Configs: {e(d["configs_error"])}</p>'
             if d["configs_error"] else "")
    body = (f'<p>{e(d["partitions"])} partition(s), replication factor '
            f'{e(d["replication_factor"])}, {e(size(d["size"]))}; produced '
            f'{e(rate(d["produce_rate"]))}, consumed {e(rate(d["consume_rate"]))}.</p>'
            f'{_chart("/api/charts/topics/" + quote(name, safe=""), "Records per second")}'
            f"<h2>Partitions</h2>{parts}<h2>Configs set on this topic</h2>{configs}{error}"
            f"<details><summary>Defaults</summary>{defaults}</details>")
    return Page(f"Topic {name}", body, active="/topics")


def _isr(p: dict[str, Any]) -> str:
    text = e(",".join(map(str, p["isr"])))
    return text if len(p["isr"]) >= len(p["replicas"]) else f'<span class="warn">{text}</span>'


def records_page(d: dict[str, Any], partitions: int) -> Page:
    name = d["topic"]
    form = f"""<form class="browse" method="get" action="{e(topic_url(name, "records"))}">
<label>Partition <input name="partition" type="number" min="0" max="{partitions - 1}"
 value="{d["partition"]}"></label>
<label>From offset <input name="offset" type="number" min="0"
 value="{e(d["requested_offset"] if d["requested_offset"] is not None else "")}"></label>
<label>or time <input name="time" placeholder="2024-05-01T12:00:00Z"></label>
<label>Records <input name="limit" type="number" min="1" max="200" value="{d["limit"]}">
</label>
<label>Show as <select name="format">{_options(d["format"])}</select></label>
<button type="submit">Show</button></form>"""
    rows = [[e(r["offset"]), e(when(r["timestamp"])), _value(r["key"]), _value(r["value"]),
             _headers(r["headers"])] for r in d["records"]]
    more = ""
    if d["next_offset"] < d["log_end_offset"]:
        query = urlencode({"partition": d["partition"], "offset": d["next_offset"],
                           "limit": d["limit"], "format": d["format"]})
        more = (f'<p><a class="next" href="{e(topic_url(name, "records"))}?{e(query)}">'
                f"Next records from offset {e(d['next_offset'])}</a></p>")
    body = (f'<p><a href="{e(topic_url(name))}">Topic {e(name)}</a>, partition '
            f'{e(d["partition"])}: offsets {e(d["log_start_offset"])} to '
            f'{e(d["log_end_offset"])} (the log end is the next offset to be written). '
            f'Showing {len(d["records"])} record(s) from offset {e(d["start"])}.</p>'
            f"{form}{_table(['Offset', 'Timestamp', 'Key', 'Value', 'Headers'], rows, cls='records')}"
            f"{more}")
    return Page(f"Records of {name}", body, active="/topics")


def _options(chosen: str) -> str:
    return "".join(f'<option{" selected" if f == chosen else ""}>{f}</option>'
                   for f in ("auto", "text", "json", "hex"))


def _value(v: dict[str, Any]) -> str:
    if v["format"] == "null":
        return '<span class="null">null</span>'
    more = f' <span class="note">({e(v["size"])} bytes, cut)</span>' if v["truncated"] else ""
    return f'<pre class="{e(v["format"])}">{e(v["text"])}</pre>{more}'


def _headers(headers: list[dict[str, Any]]) -> str:
    return "".join(f'<div class="header"><b>{e(h["key"])}</b>: {_value(h["value"])}</div>'
                   for h in headers)


def groups_page(d: dict[str, Any]) -> Page:
    rows = [[f'<a href="{e(group_url(g["group"]))}">{e(g["group"])}</a>', e(g["state"]),
             e(g["members"]), e(", ".join(g["topics"])), e(g["lag"])] for g in d["groups"]]
    body = _table(["Group", "State", "Members", "Topics", "Lag"], rows, cls="groups")
    return Page("Consumer groups", body, active="/groups")


def group_page(d: dict[str, Any]) -> Page:
    c = d["coordinator"]
    coordinator = "–" if c is None else e(f'{c["id"]} ({c["host"]}:{c["port"]})')
    parts = _table(["Topic", "Partition", "Committed", "Log end", "Lag", "Consumer"], [
        [f'<a href="{e(topic_url(p["topic"]))}">{e(p["topic"])}</a>', e(p["partition"]),
         e(p["committed_offset"]), e(p["log_end_offset"]), e(p["lag"]),
         e(p["consumer_id"])] for p in d["partitions"]], cls="lag")
    members = _table(["Member", "Client", "Host", "Assignment"], [
        [e(m["member_id"]), e(m["client_id"]), e(m["host"]),
         e(" ".join(f"{t}-{p}" for t, p in m["assignment"]))] for m in d["members"]],
        cls="members")
    protocol = "/".join(x for x in (d["protocol_type"], d["protocol"]) if x)
    body = (f'<div class="cards">{_card("state", e(d["state"]))}'
            f'{_card("members", e(len(d["members"])))}{_card("total lag", e(d["lag"]))}</div>'
            f"<p>Coordinator {coordinator}; protocol {e(protocol or None)}.</p>"
            f'{_chart("/api/charts/groups/" + quote(d["group"], safe=""), "Lag (records)")}'
            f"{_sampling_note(d)}<h2>Lag by partition</h2>{parts}<h2>Members</h2>{members}")
    return Page(f"Group {d['group']}", body, active="/groups")


def error_page(status: int, title: str, message: str) -> Page:
    return Page(f"{status} {title}", f'<p class="error">{e(message)}</p>'
                  '<p><a href="/">Back to the overview</a></p>')


def as_json(data: Any) -> bytes:
    return json.dumps(data, indent=1, sort_keys=True).encode()
