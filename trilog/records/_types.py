"""Type aliases of the record layer's signatures (no runtime behaviour)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

#: What the record functions read from: any bytes-like object with a length and indexes.
BytesLike: TypeAlias = bytes | bytearray | memoryview

#: A record's headers as a producer gives them: ``(key, value)`` pairs, the key ``str``
#: (encoded as UTF-8) or ``bytes``.
RecordHeaders: TypeAlias = Sequence[tuple[str | bytes, bytes | None]]
