"""``FetchSlice``: what ``Log.read`` returns, a byte range of a segment file for sendfile."""

from __future__ import annotations

import os
import warnings


class FetchSlice:
    """A range of whole batches in one segment file, held open by a private descriptor.

    ``fd`` is the slice's own ``os.dup`` of the segment file (-1 for an empty slice), so the
    bytes stay readable after retention unlinks the segment and after the ``Log`` closes it;
    the broker can ``os.sendfile(socket, fd, position, length)`` from any thread.  The range
    starts at the batch holding the requested offset, ends on a batch boundary, and never
    reaches past the log end offset as of the ``Log.read`` call.

    Also carries the partition's ``high_watermark`` (``Log.high_watermark``: the log end
    offset unless the log is replicated), ``last_stable_offset`` (``Log.last_stable_offset``:
    below it every transaction is decided), ``log_end_offset`` and ``log_start_offset`` at the
    time of the read: what a Fetch response says of the partition.

    ``close()`` (or ``with``) releases the descriptor; a slice that is never closed warns
    with ``ResourceWarning`` when collected.  Not thread-safe to close while another thread
    uses it; reading (``read`` / sendfile) from several threads is fine.
    """

    __slots__ = (
        "fd",
        "first_offset",
        "high_watermark",
        "last_stable_offset",
        "length",
        "log_end_offset",
        "log_start_offset",
        "position",
        "segment_base_offset",
    )

    def __init__(
        self,
        fd: int,
        position: int,
        length: int,
        *,
        first_offset: int,
        segment_base_offset: int,
        high_watermark: int,
        log_end_offset: int,
        log_start_offset: int,
        last_stable_offset: int | None = None,
    ) -> None:
        self.fd = fd
        self.position = position
        self.length = length
        #: Base offset of the first batch in the slice (may be below the requested offset
        #: when that offset is inside a batch, as Kafka returns whole batches).
        self.first_offset = first_offset
        self.segment_base_offset = segment_base_offset
        self.high_watermark = high_watermark
        self.log_end_offset = log_end_offset
        self.log_start_offset = log_start_offset
        #: (The high watermark when not given: no transaction is open.)
        self.last_stable_offset = (
            high_watermark if last_stable_offset is None else last_stable_offset)

    @classmethod
    def empty(cls, offset: int, *, log_end_offset: int, log_start_offset: int,
              high_watermark: int | None = None,
              last_stable_offset: int | None = None) -> FetchSlice:
        hw = log_end_offset if high_watermark is None else high_watermark
        return cls(
            -1,
            0,
            0,
            first_offset=offset,
            segment_base_offset=-1,
            high_watermark=hw,
            log_end_offset=log_end_offset,
            log_start_offset=log_start_offset,
            last_stable_offset=last_stable_offset,
        )

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return (
            f"FetchSlice(first_offset={self.first_offset}, position={self.position}, "
            f"length={self.length}, high_watermark={self.high_watermark})"
        )

    @property
    def closed(self) -> bool:
        return self.fd < 0

    def read(self) -> bytes:
        """The slice's bytes (``pread``; shorter only if the log was truncated meanwhile)."""
        if self.length == 0:
            return b""
        if self.fd < 0:
            raise ValueError("read from a closed FetchSlice")
        first = os.pread(self.fd, self.length, self.position)
        if len(first) == self.length or not first:
            return first
        parts = [first]
        got = len(first)
        while got < self.length:
            part = os.pread(self.fd, self.length - got, self.position + got)
            if not part:
                break
            parts.append(part)
            got += len(part)
        return b"".join(parts)

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> FetchSlice:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "fd", -1) >= 0:
            description = repr(self)
            self.close()
            warnings.warn(f"unclosed {description}", ResourceWarning, stacklevel=2)
