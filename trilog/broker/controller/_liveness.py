"""Is a broker's process still there?  The fast half of failover.

A broker's ZooKeeper registration outlives its process by ``zookeeper.session.timeout.ms``
when the process is killed: that is ZooKeeper's answer to "is it alive", and it is slow.
The kernel's is fast: a killed process's sockets are closed at once, so whoever holds a
connection to it (the controller's channel, a broker watching the controller) sees the
connection end within milliseconds, and a new connection to its listener is *refused*
(nothing listens on that port any more).  ``probe`` asks that question.

A dying process can still take a connection: its sockets are closed one after another as it
exits, and its listener may be among the last, so a probe made in that window connects, then
is reset as the listener closes (seen: a follower's fetch connection reset, a probe's
connection accepted 1 ms later and reset at once).  A probe therefore waits ``QUIET_S`` on a
connection it made: a live broker says nothing before a request, a dying one's connection is
reset or ended within it, and the probe connects again.

Only a refusal counts as "gone".  A process that is merely slow, paused (SIGSTOP: the
kernel still accepts connections into its listener's backlog), or cut off by the network
(no answer at all) is "alive or unknown", and is left to the session timeout, as before.
A refusal can lie in one case: a firewall that answers with a TCP reset for a broker that
lives; such a broker is treated as gone until a probe reaches it again (the controller keeps
probing, ``_term.py``), and leader epochs (KIP-101) and the conditional ISR writes keep a
living old leader from acknowledging anything meanwhile (its followers have moved on).
"""

from __future__ import annotations

import errno

import trio

#: how long a probe waits for its connection (a refusal comes back in a round trip)
PROBE_TIMEOUT_S = 2.0
#: how long a connection a probe made must stay quiet to count as answered (see the module)
QUIET_S = 0.05
#: the pause before a probe connects again after its connection ended
RETRY_S = 0.005


def refused(exc: BaseException) -> bool:
    """Was every address of the connection refused (trio groups the attempts it made)?"""
    causes = getattr(exc.__cause__, "exceptions", None)
    if causes:
        return all(isinstance(c, OSError) and c.errno == errno.ECONNREFUSED for c in causes)
    return isinstance(exc, OSError) and exc.errno == errno.ECONNREFUSED


async def probe(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> bool | None:
    """True: something accepted a connection at ``host:port`` and held it ``QUIET_S``;
    False: it was refused (no process listens there: the broker is gone); None: no answer
    within ``timeout_s`` (unknown)."""
    with trio.move_on_after(timeout_s):
        while True:
            try:
                stream = await trio.open_tcp_stream(host, port)
            except OSError as exc:
                return False if refused(exc) else None
            data = b""
            quiet = trio.move_on_after(QUIET_S)
            try:
                with quiet:
                    data = await stream.receive_some(1)
            except trio.BrokenResourceError:
                pass  # reset
            finally:
                await stream.aclose()
            if quiet.cancelled_caught or data:
                return True  # held (a broker waits for a request), or something spoke
            # Ended or reset: a dying listener took it (or a live one closed it): again.
            await trio.sleep(RETRY_S)
    return None
