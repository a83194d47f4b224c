"""The console's pure parts without a cluster (samples and rates, how values are shown,
the browse query, the users file, the routes) and its HTTP layer (h11 on trio) with a
stand-in handler, over real sockets."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
import trio

pytest.importorskip("h11", reason="the console needs h11 (the console extra)")

from trilog.console import AuthFileError, ConsoleConfig, parse_users  # noqa: E402
from trilog.console._app import _route  # noqa: E402
from trilog.console._auth import authorized  # noqa: E402
from trilog.console._http import Request, Response, plain, serve_http  # noqa: E402
from trilog.console._records import (  # noqa: E402
    MAX_LIMIT,
    SHOW_BYTES,
    BadInput,
    BrowseQuery,
    parse_browse,
    parse_time,
    render,
)
from trilog.console._sampler import History, Sample, Series  # noqa: E402

# -- samples and rates ----------------------------------------------------------------------


def test_rates_are_offset_deltas_over_time_and_never_negative():
    s = Series(keep_s=100)
    for t, v in [(0, 0), (2, 100), (4, 100), (5, 50)]:
        s.add(t, v)
    assert s.rates() == [(2, 50.0), (4, 0.0), (5, 0.0)]  # the drop: a topic recreated
    assert s.rate() == 0.0 and s.last() == 50


def test_a_series_keeps_only_its_window():
    s = Series(keep_s=10)
    for t in range(0, 30, 5):
        s.add(t, t)
    assert [t for t, _ in s.points] == [15, 20, 25]


def test_history_sums_partitions_by_topic_and_groups_by_topic():
    h = History(keep_s=60)
    assert h.produce_rate() is None and h.consume_rate() is None
    h.record(Sample(10.0, {("a", 0): 10, ("a", 1): 0, ("b", 0): 5},
                    {"g": {("a", 0): 4}, "h": {("a", 1): 0}}, {"g": {("a", 0): 6}},
                    {("a", 0): 100, ("a", 1): 50}))
    h.record(Sample(12.0, {("a", 0): 30, ("a", 1): 20, ("b", 0): 5},
                    {"g": {("a", 0): 10}, "h": {("a", 1): 6}}, {"g": {("a", 0): 20}}, None))
    assert h.produce_rate("a") == 20.0 and h.produce_rate("b") == 0.0
    assert h.produce_rate() == 20.0
    assert h.consume_rate("a") == 6.0  # (10 + 6 - 4 - 0) / 2 s
    assert h.topic_size("a") == 150  # the last sizes known are kept
    assert h.lag_chart("g") == {"unit": "records", "series": [
        {"name": "total", "points": [[10000, 6], [12000, 20]]}]}
    assert h.topic_chart("a")["series"] == [
        {"name": "produced", "points": [[12000, 20.0]]},
        {"name": "consumed", "points": [[12000, 6.0]]}]
    cluster = h.cluster_chart()["series"]
    assert cluster[0] == {"name": "produced", "points": [[12000, 20.0]]}
    assert h.samples == 2 and h.last_time_s == 12.0


def test_internal_topics_stay_out_of_the_totals():
    h = History()
    h.record(Sample(0.0, {("a", 0): 0, ("__consumer_offsets", 0): 0},
                    internal=frozenset({"__consumer_offsets"})))
    h.record(Sample(1.0, {("a", 0): 5, ("__consumer_offsets", 0): 100},
                    internal=frozenset({"__consumer_offsets"})))
    assert h.produce_rate() == 5.0  # the commits written to __consumer_offsets are not
    assert h.produce_rate("__consumer_offsets") == 100.0  # its own page shows them
    assert [s["name"] for s in h.throughput_chart()["series"]] == ["a"]
    assert h.cluster_chart()["series"][0]["points"] == [[1000, 5.0]]


# -- records ----------------------------------------------------------------------------------


def test_values_are_shown_as_json_text_or_hex():
    assert render(b'{"a": [1, 2]}')["format"] == "json"
    assert json.loads(render(b'{"a": [1, 2]}')["text"]) == {"a": [1, 2]}
    assert render(b"plain words") == {"format": "text", "text": "plain words", "size": 11,
                                      "truncated": False}
    binary = render(b"\xff\x00\x10")
    assert binary["format"] == "hex" and binary["text"] == "ff 00 10"
    assert render(b"\x00\x01", "text")["format"] == "text"
    assert render(b"not json", "json")["text"].startswith("not JSON: ")
    assert render(b'{"a": 1}', "hex")["text"] == b'{"a": 1}'.hex(" ")
    assert render(None)["format"] == "null"


def test_a_large_value_is_cut():
    shown = render(b"x" * (SHOW_BYTES + 10))
    assert shown["truncated"] and shown["size"] == SHOW_BYTES + 10
    assert len(shown["text"]) == SHOW_BYTES


def test_the_browse_query():
    assert parse_browse({}) == BrowseQuery()
    assert parse_browse({"partition": "2", "offset": "7", "limit": "5", "format": "hex"}) == \
        BrowseQuery(2, 7, None, 5, "hex")
    assert parse_browse({"time": "2024-05-01T12:00:00Z"}).time_ms == 1714564800000
    assert parse_time("2024-05-01T12:00:00") == 1714564800000  # no zone: UTC
    assert parse_time("1714564800000") == 1714564800000
    for query, words in [({"offset": "x"}, "not a whole number"),
                         ({"partition": "-1"}, "below 0"),
                         ({"limit": str(MAX_LIMIT + 1)}, "more than"),
                         ({"limit": "0"}, "below 1"),
                         ({"format": "yaml"}, "format 'yaml'"),
                         ({"time": "soon"}, "ISO 8601"),
                         ({"offset": "1", "time": "1"}, "not both")]:
        with pytest.raises(BadInput, match=words):
            parse_browse(query)


# -- login ------------------------------------------------------------------------------------


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_the_users_file_and_basic_auth():
    digest = hashlib.sha256(b"s3cret").hexdigest()
    users = parse_users(f"# users\n\nann:pass:with:colons\nbob:sha256:{digest.upper()}\n")
    assert authorized(users, _basic("ann", "pass:with:colons")) == "ann"
    assert authorized(users, _basic("bob", "s3cret")) == "bob"
    assert authorized(users, _basic("bob", "wrong")) is None
    assert authorized(users, _basic("eve", "s3cret")) is None
    for header in (None, "", "Bearer abc", "Basic ***", "Basic " + base64.b64encode(
            b"no-colon").decode()):
        assert authorized(users, header) is None
    for text, words in [("", "names no user"), ("ann\n", "line 1: not user:password"),
                        ("a:1\na:2\n", "line 2: user 'a' again"),
                        ("a:sha256:abc\n", "64 hex digits")]:
        with pytest.raises(AuthFileError, match=words):
            parse_users(text)


def test_a_login_without_tls_only_on_loopback():
    users = {"a": "sha256:" + "0" * 64}
    ConsoleConfig(host="127.0.0.1", users=users)
    ConsoleConfig(host="::1", users=users)
    ConsoleConfig(host="0.0.0.0")  # no login: allowed (an operator's choice)
    with pytest.raises(ValueError, match="in the clear"):
        ConsoleConfig(host="0.0.0.0", users=users)


def test_the_routes():
    def name(segments, api=False):
        route, args = _route(segments, api)
        return None if route is None else args

    assert name([]) == [] and name(["topics"]) == []
    assert name(["topics", "a.b"]) == ["a.b"]
    assert name(["topics", "a", "records"]) == ["a"]
    assert name(["groups", "x/y"]) == ["x/y"]
    assert name(["charts", "cluster"]) is None  # API only
    assert name(["charts", "topics", "t"], api=True) == ["topics", "t"]
    assert name([], api=True) is None and name(["cluster"], api=True) == []
    assert name(["topics", "a", "b"]) is None


# -- the HTTP layer -------------------------------------------------------------------------


async def _handler(request: Request) -> Response:
    if request.path == "/boom":
        raise RuntimeError("a secret detail")
    return plain(200, f"{request.path} {sorted(request.query.items())} "
                      f"{request.segments()}\n")


async def _exchange(port: int, data: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(data)
        chunks = []
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                chunks.append(chunk)
    return b"".join(chunks)


async def test_http_keep_alive_errors_and_limits(nursery, caplog):
    port = await nursery.start(serve_http, _handler, "127.0.0.1", 0)
    both = await _exchange(port, b"GET /a%2Fb/c?x=1&y=%20 HTTP/1.1\r\nHost: h\r\n\r\n"
                                 b"HEAD /h HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
    assert both.count(b"HTTP/1.1 200") == 2
    assert b"/a%2Fb/c [('x', '1'), ('y', ' ')] ['a/b', 'c']" in both
    assert not both.rstrip().endswith(b"']")  # HEAD: headers only
    boom = await _exchange(port, b"GET /boom HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
    assert boom.startswith(b"HTTP/1.1 500") and b"secret" not in boom
    assert b"Traceback" not in boom
    assert "a secret detail" in caplog.text  # in the console's log instead
    bad = await _exchange(port, b"NOT HTTP AT ALL\r\n\r\n")
    assert bad.startswith(b"HTTP/1.1 400")
    # a head that grows past 16 KiB without ending: refused, not buffered on
    huge = await _exchange(port, b"GET / HTTP/1.1\r\nHost: h\r\nX: " + b"a" * 40000)
    assert huge.startswith(b"HTTP/1.1 431")
    post = await _exchange(port, b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n"
                                 b"Connection: close\r\n\r\nabc")
    assert post.startswith(b"HTTP/1.1 405")
