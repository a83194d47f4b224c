"""``trilog console``: a small read-mostly web console for any Kafka-protocol cluster.

Pages for the cluster (brokers, controller, partition health, produce and consume rates),
topics (partitions, in-sync replicas, offsets, sizes, configs, records), and consumer
groups (members, assignment, lag over time), each with a JSON twin under ``/api/``.
Everything is read through trilog's public clients; charts come from the console's own
samples of end and committed offsets.  HTTP is h11 on trio (the ``console`` extra); the
front end is two static files, no build step and no CDN.  See docs/console.md.
"""

from trilog.console._app import Console, ConsoleConfig, open_console
from trilog.console._auth import AuthFileError, parse_users

__all__ = ["AuthFileError", "Console", "ConsoleConfig", "open_console", "parse_users"]
