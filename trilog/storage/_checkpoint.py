"""``OffsetCheckpoint``: Kafka's text file of one offset per partition.

Format (``recovery-point-offset-checkpoint``, as Kafka writes it)::

    0                      version
    2                      number of entries
    my-topic 0 1234        topic partition offset
    other 3 0

Written atomically (``write_atomically``): a crash or a full disk leaves either the old or
the new file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from trilog.storage._files import write_atomically

logger = logging.getLogger("trilog.storage")

VERSION = 0


class OffsetCheckpoint:
    """One checkpoint file.  Thread-safe as far as the file system is: concurrent writers
    each replace the whole file atomically (the last rename wins); the ``LogManager``
    serialises its own writes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        lines = [str(VERSION), str(len(offsets))]
        lines += [
            f"{topic} {partition} {offset}"
            for (topic, partition), offset in sorted(offsets.items())
        ]
        write_atomically(self.path, ("\n".join(lines) + "\n").encode("utf-8"))

    def read(self) -> dict[tuple[str, int], int]:
        """The offsets, or ``{}`` if the file is missing or malformed (logged): a lost
        checkpoint only makes the next recovery longer."""
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            return {}
        try:
            return _parse(text)
        except ValueError as exc:
            logger.warning("ignoring malformed checkpoint %s: %s", self.path, exc)
            return {}


def _parse(text: str) -> dict[tuple[str, int], int]:
    lines = text.splitlines()
    if len(lines) < 2:
        raise ValueError("missing version or count line")
    if int(lines[0]) != VERSION:
        raise ValueError(f"unknown version {lines[0]!r}")
    count = int(lines[1])
    entries = [line for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise ValueError(f"expected {count} entries, found {len(entries)}")
    offsets: dict[tuple[str, int], int] = {}
    for line in entries:
        fields = line.split()
        if len(fields) != 3:
            raise ValueError(f"malformed line {line!r}")
        topic, partition, offset = fields[0], int(fields[1]), int(fields[2])
        offsets[(topic, partition)] = offset
    return offsets
