"""Frames, headers, and whole requests/responses (seed 003, "Common Request and Response
Structure").

Byte layouts::

    frame            = size:int32  payload:size bytes          (size excludes itself)
    request payload  = request header, then the request body
    request header   v0: api_key:int16 api_version:int16 correlation_id:int32
                     v1: v0 + client_id:nullable string        (non-flexible versions)
                     v2: v1 + tagged fields                    (flexible versions)
    response payload = response header, then the response body
    response header  v0: correlation_id:int32                  (non-flexible versions)
                     v1: v0 + tagged fields                    (flexible versions)

The header versions follow from (api_key, api_version) alone (``request_header_version``,
``response_header_version``): v2 / v1 for a flexible version of the API, v1 / v0 otherwise;
and ApiVersions' response header is v0 at every version (Kafka's rule: a client that does
not know which versions the broker speaks must be able to read its answer). client_id stays
a non-compact string in header v2. The headers' tagged fields are written empty and skipped
when read (none is defined that trilog uses).

A response does not say which API it answers: the caller decodes it with the api key and
version of the request it sent (matched by correlation id). All of this is sans-I/O: the
functions take and return bytes; :class:`FrameSplitter` is fed whatever the socket gave and
hands back complete frames.

Zero-copy fetch: :func:`encode_fetch_response_parts` returns the framed response as a list of
``bytes`` and the caller's own records objects (e.g. a file slice), in wire order; the size
prefix and each records length already count those objects' sizes, so the broker writes the
``bytes`` and ``sendfile``s the rest.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

from trilog.errors import NO_ERROR, RemoteProtocolError, UnsupportedVersionError
from trilog.protocol._messages import (
    API_VERSIONS,
    REQUEST_CLASSES,
    RESPONSE_CLASSES,
    ApiKey,
    ApiVersionsResponse,
    FetchResponse,
)
from trilog.protocol._primitives import (
    DEFAULT_MAX_LENGTH,
    INT16,
    INT32,
    NULLABLE_STRING,
    Reader,
    Writer,
)
from trilog.protocol._schema import Message

_API_VERSIONS_KEY = int(ApiKey.API_VERSIONS)

#: Kafka's ``socket.request.max.bytes`` default; a larger frame closes the connection.
DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024

_SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhi")
_UNSUPPORTED_VERSION = UnsupportedVersionError.code


class RecordsRef(Protocol):
    """What a ``records`` field may hold in a ``*_parts`` encoding instead of bytes.

    Anything with an int ``size`` or ``length`` attribute (or ``__len__``) giving its byte
    length; the encoder writes that length and passes the object through untouched.
    """

    size: int


def request_header_version(api_key: int, api_version: int) -> int:
    """The request header version of ``api_key`` at ``api_version``: 2 for a flexible
    version, else 1 (also for an API trilog does not implement)."""
    cls = REQUEST_CLASSES.get(api_key)
    return 2 if cls is not None and api_version >= cls.FIRST_FLEXIBLE else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """The response header version of ``api_key`` at ``api_version``: 1 for a flexible
    version, else 0; always 0 for ApiVersions."""
    cls = RESPONSE_CLASSES.get(api_key)
    if cls is None or api_key == _API_VERSIONS_KEY:
        return 0
    return 1 if api_version >= cls.FIRST_FLEXIBLE else 0


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """A request header; ``client_id`` is absent (None) in header v0."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None

    def write(self, w: Writer, header_version: int = 1) -> None:
        INT16.write(w, self.api_key)
        INT16.write(w, self.api_version)
        INT32.write(w, self.correlation_id)
        if header_version >= 1:
            NULLABLE_STRING.write(w, self.client_id)
        if header_version >= 2:
            w.buf.append(0)  # no tagged fields

    def encode(self, header_version: int = 1) -> bytes:
        w = Writer()
        self.write(w, header_version)
        return w.getvalue()

    @classmethod
    def read(cls, r: Reader, header_version: int = 1) -> RequestHeader:
        if r.remaining >= _HEADER_FIXED.size:
            api_key, api_version, correlation_id = _HEADER_FIXED.unpack_from(r._view, r.pos)
            r.pos += _HEADER_FIXED.size
        else:  # raises the truncation error
            api_key, api_version, correlation_id = r.int16(), r.int16(), r.int32()
        client_id = r.nullable_string() if header_version >= 1 else None
        if header_version >= 2:
            r.skip_tagged_fields()
        return cls(api_key, api_version, correlation_id, client_id)

    @property
    def api_name(self) -> str:
        try:
            return ApiKey(self.api_key).name
        except ValueError:
            return f"UNKNOWN_API_{self.api_key}"


@dataclass(frozen=True, slots=True)
class ResponseHeader:
    """A response header: the correlation id (v0), then tagged fields (v1)."""

    correlation_id: int

    def encode(self, header_version: int = 0) -> bytes:
        data = _SIZE.pack(self.correlation_id)
        return data + b"\0" if header_version >= 1 else data

    @classmethod
    def read(cls, r: Reader, header_version: int = 0) -> ResponseHeader:
        correlation_id = r.int32()
        if header_version >= 1:
            r.skip_tagged_fields()
        return cls(correlation_id)


# -- Frames -----------------------------------------------------------------------------------


class FrameSplitter:
    """Turns a byte stream into frames (payloads without their size prefix).

    Two ways to give it bytes:

    - ``feed(data)`` returns the frames completed by ``data``, in order;
    - ``read_buffer()`` / ``advance(n)``, for ``recv_into``: receive into the buffer it
      hands out, then say how many bytes arrived.  A large frame (``LARGE_FRAME`` bytes or
      more) is then received straight into its own ``bytearray``, which becomes the frame:
      the body of a 1 MiB produce request or fetch response is copied by nobody.

    Memory follows the bytes that arrived, never the size a peer announces: a large frame's
    buffer starts at ``LARGE_FRAME`` bytes (or twice what arrived with its prefix) and doubles
    as it fills, so a 4-byte prefix announcing 100 MiB costs 64 KiB until the bytes come.  A
    frame of at most ``LARGE_AT_ONCE`` (1 MiB and 64 KiB: a produce request of Kafka's default
    ``max.request.size`` fits) gets its whole buffer once ``LARGE_FRAME`` bytes of it are in:
    at once if they came with its prefix, else when its first buffer is full (either way at
    most 17 times what arrived), on both ways of feeding it: doubling a buffer up to a MiB
    wrote each byte twice more (zeros, then a copy), 7 % of a broker's CPU under 1 MB
    produce requests.  A view that ``read_buffer`` handed out must be released before the
    next call (the buffer may be replaced).

    The scratch buffer that small frames are received into may be the caller's
    (``read_buffer(scratch)``: one buffer shared by many connections of one thread, as long
    as ``advance`` follows the receive with no checkpoint between them); otherwise it is
    allocated on first use.

    A declared size that is negative or above ``max_frame_size`` raises
    :class:`RemoteProtocolError` as soon as the 4-byte prefix arrives (before buffering the
    body), and every later call raises again: the stream cannot be resynchronised, so the
    connection must be closed.  Frames are ``bytes`` or ``bytearray``.  Not thread-safe.
    """

    LARGE_FRAME = 64 * 1024
    LARGE_AT_ONCE = 1024 * 1024 + 64 * 1024
    SCRATCH_SIZE = 256 * 1024

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._need: int | None = None  # payload size of the frame being assembled
        self._error: RemoteProtocolError | None = None
        self._large: bytearray | None = None  # a large frame being received in place
        self._large_got = 0
        self._scratch: memoryview | None = None  # what the last read_buffer() handed out
        self._own_scratch: memoryview | None = None  # allocated when no scratch is given

    @property
    def buffered(self) -> int:
        """Bytes received that do not yet form a complete frame (size prefix included)."""
        if self._large is not None:
            return 4 + self._large_got
        return len(self._buf) + (4 if self._need is not None else 0)

    @property
    def frame_remaining(self) -> int | None:
        """Bytes the frame being received still lacks; None between frames (or while its
        size prefix is incomplete)."""
        if self._need is None:
            return None
        got = self._large_got if self._large is not None else len(self._buf)
        return self._need - got

    @property
    def at_frame_boundary(self) -> bool:
        """True when no partial frame is held (a clean place for the peer to hang up)."""
        return not self._buf and self._need is None and self._large is None

    def read_buffer(self, scratch: memoryview | None = None) -> memoryview:
        """Where the next ``recv_into`` should write; follow it with ``advance(n)``.

        While a large frame is being received this is the rest of its buffer (grown first if
        it is full); otherwise ``scratch`` if given, else a buffer of ``SCRATCH_SIZE`` bytes
        kept by this splitter.  Release the view before the next call (the large frame's
        buffer cannot grow while a view of it is alive).
        """
        if self._error is not None:
            raise self._error
        large = self._large
        if large is not None:
            self._scratch = None
            if self._large_got == len(large):
                large = self._grow(len(large) + 1)
            return memoryview(large)[self._large_got :]
        if scratch is None:
            if self._own_scratch is None:
                self._own_scratch = memoryview(bytearray(self.SCRATCH_SIZE))
            scratch = self._own_scratch
        self._scratch = scratch
        return scratch

    def _grow(self, at_least: int) -> bytearray:
        """Make the large frame's buffer hold ``at_least`` bytes or more: the whole frame when
        it is at most ``LARGE_AT_ONCE`` (a new buffer with the bytes so far copied in: a fresh
        allocation reuses freed heap memory, where growing this one would fault in new pages
        and write zeros over them first), else twice as much."""
        large, need = self._large, self._need
        assert large is not None and need is not None
        if need <= self.LARGE_AT_ONCE:
            whole = bytearray(need)
            whole[: self._large_got] = memoryview(large)[: self._large_got]
            self._large = whole
            return whole
        large.extend(bytes(min(need, max(at_least, 2 * len(large))) - len(large)))
        return large

    def advance(self, n: int) -> list[bytes | bytearray]:
        """``n`` bytes were written into the last ``read_buffer()``; return completed frames."""
        scratch = self._scratch
        if scratch is None:
            assert self._large is not None
            self._large_got += n
            return self._large_done()
        self._scratch = None
        return self.feed(scratch[:n])

    def _large_done(self) -> list[bytes | bytearray]:
        if self._large_got < self._need:  # type: ignore[operator]
            return []
        frame, self._large, self._need = self._large, None, None
        return [frame]  # type: ignore[list-item]

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | bytearray]:
        if self._error is not None:
            raise self._error
        if self._large is not None:
            return self._feed_large(data)
        buf = self._buf
        buf += data
        frames: list[bytes | bytearray] = []
        pos = 0
        with memoryview(buf) as view:
            while True:
                need = self._need
                if need is None:
                    if len(buf) - pos < 4:
                        break
                    need = _SIZE.unpack_from(buf, pos)[0]
                    if need < 0 or need > self.max_frame_size:
                        self._error = RemoteProtocolError(
                            f"frame size {need} is outside 0..{self.max_frame_size}"
                        )
                        raise self._error
                    pos += 4
                    self._need = need
                available = len(buf) - pos
                if available < need:
                    if need >= self.LARGE_FRAME:
                        # Receive the rest of this frame in place (see read_buffer); its
                        # buffer grows with what arrives, not with what was announced.
                        if need <= self.LARGE_AT_ONCE and available >= self.LARGE_FRAME:
                            size = need  # (at most 17 times what arrived)
                        else:
                            size = min(need, max(self.LARGE_FRAME, 2 * available))
                        self._large = large = bytearray(size)
                        large[:available] = view[pos:]
                        self._large_got = available
                        pos = len(buf)
                    break
                frames.append(bytes(view[pos : pos + need]))
                pos += need
                self._need = None
        del buf[:pos]
        return frames

    def _feed_large(self, data: bytes | bytearray | memoryview) -> list[bytes | bytearray]:
        large = self._large
        assert large is not None and self._need is not None
        take = min(len(data), self._need - self._large_got)
        end = self._large_got + take
        if end > len(large):
            large = self._grow(end)
        large[self._large_got : end] = data[:take]
        self._large_got = end
        done = self._large_done()
        if done and take < len(data):
            return [*done, *self.feed(data[take:])]
        return done


#: The same class under the name the broker's network layer uses.
FrameDecoder = FrameSplitter


def frame(payload: bytes | bytearray | memoryview) -> bytes:
    """Prefix ``payload`` with its int32 size."""
    return _SIZE.pack(len(payload)) + payload


def _framed(w: Writer) -> bytes:
    # The writer started with a 4-byte placeholder; patch in the size of what follows.
    _SIZE.pack_into(w.buf, 0, len(w.buf) - 4)
    return w.getvalue()


# -- Requests ---------------------------------------------------------------------------------


def encode_request(
    request: Message,
    api_version: int,
    correlation_id: int,
    client_id: str | None = "trilog",
    *,
    header_version: int | None = None,
    framed: bool = True,
) -> bytes:
    """Header + body of ``request`` at ``api_version``, size-prefixed unless ``framed=False``.

    The header's version is the one of ``api_version`` (2 if it is flexible, else 1)
    unless ``header_version`` says otherwise."""
    w = Writer()
    if framed:
        w.buf += b"\0\0\0\0"
    if header_version is None:
        header_version = 2 if api_version >= request.FIRST_FLEXIBLE else 1
    RequestHeader(request.API_KEY, api_version, correlation_id, client_id).write(w, header_version)
    request.write_to(w, api_version)
    return _framed(w) if framed else w.getvalue()


def decode_request(
    payload: bytes | bytearray | memoryview, *, max_length: int = DEFAULT_MAX_LENGTH
) -> tuple[RequestHeader, Message]:
    """Decode a request frame's payload (no size prefix) into its header and body.

    Raises :class:`UnsupportedVersionError` for a known API at a version trilog does not
    implement (the broker answers ApiVersions with :func:`encode_api_versions_fallback` and
    closes the connection otherwise), and :class:`RemoteProtocolError` for an unknown API key
    or bytes that do not decode. :func:`peek_request_header` still works on such payloads.
    The body's ``records`` are memoryviews into ``payload``. The header's version follows
    from its api key and version (``request_header_version``).
    """
    r = Reader(payload, max_length=max_length)
    header = RequestHeader.read(r)
    cls = REQUEST_CLASSES.get(header.api_key)
    if cls is None:
        raise RemoteProtocolError(f"unknown or unsupported api key {header.api_key}")
    if not cls.MIN_VERSION <= header.api_version <= cls.MAX_VERSION:
        raise UnsupportedVersionError(
            f"{cls.API_NAME} v{header.api_version} is not supported "
            f"(supported: {cls.MIN_VERSION}..{cls.MAX_VERSION})"
        )
    if header.api_version >= cls.FIRST_FLEXIBLE:  # header v2: tagged fields after client_id
        r.skip_tagged_fields()
    at = r.pos
    try:
        body = cls.decode(r, header.api_version)
        r.expect_end(f"{cls.__name__} v{header.api_version}")
    except RemoteProtocolError:
        if not _librdkafka_all_topics(header, payload, at):
            raise
        # librdkafka 2.x writes the null topic array of an all-topics Metadata v9+ request
        # as the 4-byte count it reserved and never finalized: one 0 byte (null), then 3
        # too many.  Kafka reads those 3 as the request's booleans and ignores the bytes
        # left over; what librdkafka meant is read here instead.
        r = Reader(bytes(payload[:at + 1]) + bytes(payload[at + 4:]), max_length=max_length)
        r.pos = at
        body = cls.decode(r, header.api_version)
        r.expect_end(f"{cls.__name__} v{header.api_version}")
    return header, body


def _librdkafka_all_topics(header: RequestHeader, payload: Any, at: int) -> bool:
    """Is this the all-topics Metadata request librdkafka 2.x sends at v9+ (see
    ``decode_request``)?  Only tried on a request that does not decode otherwise."""
    return (header.api_key == ApiKey.METADATA and header.api_version >= 9
            and bytes(payload[at:at + 4]) == b"\0\0\0\0")


def peek_request_header(payload: bytes | bytearray | memoryview) -> RequestHeader:
    """The header of a request payload whose body may be garbage or of an unknown version.

    Needs only the 8 fixed bytes (api_key, api_version, correlation_id); ``client_id`` is
    read when it is well-formed and is None otherwise. Raises :class:`RemoteProtocolError`
    only when fewer than 8 bytes are given.
    """
    view = memoryview(payload).cast("B")
    if view.nbytes < _HEADER_FIXED.size:
        raise RemoteProtocolError(
            f"request of {view.nbytes} bytes is too short for a request header"
        )
    api_key, api_version, correlation_id = _HEADER_FIXED.unpack_from(view, 0)
    client_id = None
    r = Reader(view)
    r.pos = _HEADER_FIXED.size
    try:
        client_id = r.nullable_string()
    except RemoteProtocolError:
        pass
    return RequestHeader(api_key, api_version, correlation_id, client_id)


# -- Responses --------------------------------------------------------------------------------


def encode_response(
    response: Message, api_version: int, correlation_id: int, *, framed: bool = True
) -> bytes:
    """Header + body of ``response`` at ``api_version``, size-prefixed by default."""
    w = Writer()
    if framed:
        w.buf += b"\0\0\0\0"
    INT32.write(w, correlation_id)
    if api_version >= response.FIRST_FLEXIBLE and response.API_KEY != _API_VERSIONS_KEY:
        w.buf.append(0)  # header v1: no tagged fields
    response.write_to(w, api_version)
    return _framed(w) if framed else w.getvalue()


def encode_response_parts(
    response: Message, api_version: int, correlation_id: int
) -> list[bytes | Any]:
    """Like :func:`encode_response` (framed), but ``records`` may be size-known references.

    Returns ``bytes`` pieces and the reference objects themselves, in wire order; joining
    them with each reference's bytes gives exactly ``encode_response`` of the same data.
    """
    w = Writer()
    w.buf += b"\0\0\0\0"
    INT32.write(w, correlation_id)
    if api_version >= response.FIRST_FLEXIBLE and response.API_KEY != _API_VERSIONS_KEY:
        w.buf.append(0)  # header v1 (see encode_response)
    response.write_to(w, api_version)
    size = w.size() - 4
    parts = w.parts()
    first = bytearray(parts[0])
    _SIZE.pack_into(first, 0, size)
    parts[0] = bytes(first)
    return parts


def encode_fetch_response_parts(
    version: int, correlation_id: int, response: Message
) -> list[bytes | Any]:
    """A Fetch response for ``sendfile``: see :func:`encode_response_parts`.

    Each partition's ``records`` may be bytes, None, or an object with ``size``, ``length``
    or ``__len__``; such objects come back in the list where their bytes belong.
    """
    if not isinstance(response, FetchResponse):
        raise TypeError(f"expected a FetchResponse, got {type(response).__name__}")
    return encode_response_parts(response, version, correlation_id)


def read_correlation_id(payload: bytes | bytearray | memoryview) -> int:
    """The correlation id of a response payload (to find which request it answers)."""
    view = memoryview(payload).cast("B")
    if view.nbytes < 4:
        raise RemoteProtocolError(f"response of {view.nbytes} bytes has no correlation id")
    correlation_id: int = _SIZE.unpack_from(view, 0)[0]
    return correlation_id


def decode_response(
    payload: bytes | bytearray | memoryview,
    api_key: int,
    api_version: int,
    *,
    max_length: int = DEFAULT_MAX_LENGTH,
) -> tuple[ResponseHeader, Message]:
    """Decode a response payload (no size prefix) for a request of ``api_key``/``api_version``.

    An ApiVersions response that does not decode at ``api_version`` is decoded as v0, as
    Kafka's clients do: that is how a broker answers a version it does not know.
    """
    cls = RESPONSE_CLASSES.get(api_key)
    if cls is None:
        raise RemoteProtocolError(f"unknown or unsupported api key {api_key}")
    r = Reader(payload, max_length=max_length)
    header = ResponseHeader(r.int32())
    if api_version >= cls.FIRST_FLEXIBLE and api_key != _API_VERSIONS_KEY:
        r.skip_tagged_fields()  # header v1 (response_header_version)
    start = r.pos
    try:
        body = cls.decode(r, api_version)
        r.expect_end(f"{cls.__name__} v{api_version}")
    except RemoteProtocolError:
        # Kafka's clients retry an undecodable ApiVersions response as v0: a broker that does
        # not know the version we asked for answers UNSUPPORTED_VERSION in v0 format.
        if api_key != ApiKey.API_VERSIONS or api_version == 0:
            raise
        r.pos = start
        body = cls.decode(r, 0)
        r.expect_end(f"{cls.__name__} v0")
    return header, body


# -- ApiVersions ------------------------------------------------------------------------------


def api_versions_response(
    error_code: int = NO_ERROR,
    throttle_time_ms: int = 0,
    versions: Mapping[int, tuple[int, int]] | None = None,
) -> Message:
    """An ApiVersionsResponse listing ``versions`` (default: all of ``API_VERSIONS``)."""
    keys = [
        ApiVersionsResponse.ApiVersion(api_key=int(k), min_version=lo, max_version=hi)
        for k, (lo, hi) in sorted((API_VERSIONS if versions is None else versions).items())
    ]
    return ApiVersionsResponse(
        error_code=error_code, api_keys=keys, throttle_time_ms=throttle_time_ms
    )


def encode_api_versions_fallback(
    correlation_id: int, versions: Mapping[int, tuple[int, int]] | None = None
) -> bytes:
    """The framed answer to an ApiVersions request of an unsupported version.

    Kafka's rule: UNSUPPORTED_VERSION (35) plus the supported ranges, always encoded as v0 so
    any client can read it and retry with a version from the list.
    """
    return encode_response(
        api_versions_response(error_code=_UNSUPPORTED_VERSION, versions=versions), 0, correlation_id
    )
