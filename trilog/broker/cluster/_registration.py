"""What a starting broker does when ``/brokers/ids/<id>`` is already there.

A broker restarted at once after a crash (SIGKILL, a supervisor's ``Restart=always``) finds
its own registration still in place: it is an ephemeral node of the dead process's
ZooKeeper session, which lives until ``zookeeper.session.timeout.ms`` passes.  Refusing to
start then (Kafka's later versions) makes the supervisor's restart a second crash; a
second live broker with the same id must still be refused, and at once.  The occupant is
judged in this order (``judge_occupant``, pure):

1. **Our own dead predecessor: delete it.**  After registering, a broker records its
   session id in each of its log dirs (``SESSION_FILE``).  The log dirs are locked
   (``flock`` on ``.lock``, held by the ``LogManager`` for the life of the process) before
   the broker registers, so when the node's owner is the session recorded there, the
   process that registered it held these log dirs, and this process holds them now: that
   process is gone (the kernel released its lock when it died).  Its node is a dead
   process's, which any client may delete (ZooKeeper lets any session delete another's
   ephemeral node); nothing else can own that session.  The one window left: the old
   session expires between the read of the node's owner and the delete, and a *different*
   broker with the same id registers in that window (a misconfiguration, within one
   ZooKeeper round trip); its node would then be deleted, and its next re-registration puts
   it back.
2. **The same advertised endpoints: wait for it to go (Kafka 0.8's choice).**  Without a
   record (an older version wrote the node, the log dirs were replaced), a node that names
   exactly this broker's endpoints is most likely its own earlier life: this process has
   bound those ports, so no other process on this host listens there.  The broker waits
   for the node to vanish, for at most the session timeout plus a margin, then refuses.
3. **Anything else: refuse at once** with ``BrokerIdInUseError`` (a second live broker
   with this id, elsewhere).
"""

from __future__ import annotations

import enum
import os

from trilog.storage import write_atomically

#: the file in each log dir that names the ZooKeeper session this broker last registered in
SESSION_FILE = "zookeeper-session"


class Occupant(enum.Enum):
    """What to do about the node found at this broker's ``/brokers/ids/<id>``."""

    OURS = "ours"  # this very session's (a create retried after a lost connection)
    DEAD = "dead"  # our previous life's, which is gone: delete it
    WAIT = "wait"  # probably our previous life's: wait until it expires
    REFUSE = "refuse"  # another live broker's: refuse to start


def judge_occupant(owner: int, endpoints: tuple[tuple[str, str, int], ...],
                   *, session: int | None, recorded: int | None,
                   ours: tuple[tuple[str, str, int], ...]) -> Occupant:
    """Judge the node at our ``/brokers/ids/<id>`` (see the module): ``owner`` is its
    ephemeral owner, ``endpoints`` the ones it names; ``session`` is ours now, ``recorded``
    the one our log dirs name, ``ours`` the endpoints we are about to register."""
    if session is not None and owner == session:
        return Occupant.OURS
    if recorded is not None and owner == recorded:
        return Occupant.DEAD
    if tuple(endpoints) == tuple(ours):
        return Occupant.WAIT
    return Occupant.REFUSE


def read_recorded_session(log_dirs: list[str]) -> int | None:
    """The session the log dirs say this broker last registered in (None: no record).
    Blocking (file reads)."""
    for d in log_dirs:
        try:
            with open(os.path.join(d, SESSION_FILE), encoding="ascii") as f:
                text = f.read().strip()
        except (OSError, UnicodeDecodeError):
            continue
        try:
            return int(text, 16)
        except ValueError:
            continue
    return None


def record_session(log_dirs: list[str], session_id: int) -> None:
    """Write ``session_id`` into every log dir (``SESSION_FILE``).  Blocking."""
    for d in log_dirs:
        write_atomically(os.path.join(d, SESSION_FILE), f"{session_id:#x}\n".encode())
