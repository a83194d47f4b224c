"""Is a broker's process still there?  The fast half of failover.

A broker's ZooKeeper registration outlives its process by ``zookeeper.session.timeout.ms``
when the process is killed: that is ZooKeeper's answer to "is it alive", and it is slow.
The kernel's is fast: a killed process's sockets are closed at once, so whoever holds a
connection to it (the controller's channel, a broker watching the controller) sees the
connection end within milliseconds, and a new connection to its listener is *refused*
(nothing listens on that port any more).  ``probe`` asks that question.

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


def refused(exc: BaseException) -> bool:
    """Was every address of the connection refused (trio groups the attempts it made)?"""
    causes = getattr(exc.__cause__, "exceptions", None)
    if causes:
        return all(isinstance(c, OSError) and c.errno == errno.ECONNREFUSED for c in causes)
    return isinstance(exc, OSError) and exc.errno == errno.ECONNREFUSED


async def probe(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> bool | None:
    """True: something accepted a connection at ``host:port``; False: it was refused (no
    process listens there: the broker is gone); None: no answer (unknown)."""
    try:
        with trio.fail_after(timeout_s):
            stream = await trio.open_tcp_stream(host, port)
    except trio.TooSlowError:
        return None
    except OSError as exc:
        return False if refused(exc) else None
    await stream.aclose()
    return True
