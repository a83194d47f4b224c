"""``trilog broker`` puts what it holds once it serves out of the cyclic collector's sight
(``gc.freeze``): with 50,000 partitions each full collection walked over a million objects,
0.7 s of the event loop."""

from __future__ import annotations

import gc
import os
import signal
from types import SimpleNamespace

import trio

import trilog.cli._broker as cli_broker
from trilog.broker import BrokerConfig


async def test_the_broker_process_freezes_what_it_holds_once_it_serves(monkeypatch, capsys):
    events = []
    stopped = trio.Event()

    async def serve_broker(config, *, task_status=trio.TASK_STATUS_IGNORED):
        events.append("serving")
        task_status.started(SimpleNamespace(broker_id=0, host="127.0.0.1", port=1,
                                            shutdown=stopped.set))
        await stopped.wait()

    monkeypatch.setattr(cli_broker, "serve_broker", serve_broker)
    monkeypatch.setattr(gc, "freeze", lambda: events.append("frozen"))

    async def stop_soon():
        while "serving" not in events:
            await trio.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)  # (received by _main's signal receiver)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_soon)
        await cli_broker._main(BrokerConfig.from_sources())
    assert events == ["serving", "frozen"]
    assert "listening on 127.0.0.1:1" in capsys.readouterr().out
