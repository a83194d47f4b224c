"""Kafka's primitive wire types, and the reader/writer every codec in ``protocol/`` uses.

Byte layouts (all integers big-endian, two's complement; seed 003, "Protocol Primitive Types")::

    int8 / int16 / int32 / int64   1 / 2 / 4 / 8 bytes, signed
    uint32                          4 bytes, unsigned
    boolean                         int8, 0 = false, anything else = true
    varint / varlong                zig-zag encoded, then 7 bits per byte, low group first,
                                    high bit set on every byte but the last (<= 5 / <= 10 bytes)
    string                          int16 N, then N bytes of UTF-8          (N >= 0)
    nullable string                 int16 N, then N bytes; N = -1 means null
    bytes                           int32 N, then N bytes                   (N >= 0)
    nullable bytes                  int32 N, then N bytes; N = -1 means null
    array of T                      int32 N, then N encodings of T; N = -1 means null
    records                         nullable bytes; the records layer parses the contents

    In flexible versions (KIP-482) lengths and counts become unsigned varints of N + 1,
    where 0 means null:
    compact string                  uvarint N+1, then N bytes of UTF-8      (N <= 32767)
    compact bytes                   uvarint N+1, then N bytes
    compact array of T              uvarint N+1, then N encodings of T
    compact records                 compact nullable bytes
    tagged fields                   uvarint count, then per field: uvarint tag, uvarint
                                    size, size bytes (a struct's last part in those versions)

Decoding happens on a :class:`Reader`: a position over a bytes-like object. Every length read
from the wire is checked before anything is allocated: against the bytes that remain and
against ``Reader.max_length`` (and an array count against the smallest possible encoding of
its items times the count), so a hostile 4-byte prefix cannot make us allocate 2 GiB. Any
malformed input raises :class:`~trilog.errors.RemoteProtocolError`; a value that cannot be
encoded (out of range, a string too long, a null where the version allows none) raises
:class:`~trilog.errors.LocalProtocolError`.

Each wire type is a :class:`Type` object with ``write(writer, value)`` / ``read(reader)`` for
codecs and ``encode(value) -> bytes`` / ``decode(data)`` for standalone use; ``compact()`` is
its encoding in flexible versions (itself for the types that have only one). The schema layer
(``_schema.py``) composes the same objects.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, Protocol

from trilog.errors import LocalProtocolError, RemoteProtocolError

#: Default cap on any single length or count read from the wire. Kafka's broker caps a whole
#: request at ``socket.request.max.bytes`` = 100 MiB; no field inside one can be larger.
DEFAULT_MAX_LENGTH = 100 * 1024 * 1024

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_FLOAT64 = struct.Struct(">d")

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _bytes_len(value: Any) -> int:
    """Length of a bytes-like value (memoryview's ``len`` counts items, not bytes)."""
    return value.nbytes if isinstance(value, memoryview) else len(value)


class Reader:
    """A read position over a bytes-like buffer; slices are zero-copy memoryviews.

    Not thread-safe (it is a cursor). ``max_length`` caps every length and count read.
    """

    __slots__ = ("_end", "_view", "max_length", "pos")

    def __init__(
        self, data: bytes | bytearray | memoryview, *, max_length: int = DEFAULT_MAX_LENGTH
    ) -> None:
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        self._view = view
        self.pos = 0
        self._end = view.nbytes
        self.max_length = max_length

    @property
    def remaining(self) -> int:
        return self._end - self.pos

    def _take(self, n: int, what: str) -> int:
        """Reserve ``n`` bytes and return their start; raise if they are not there."""
        start = self.pos
        if n > self._end - start:
            raise RemoteProtocolError(
                f"truncated {what}: needs {n} bytes at offset {start}, "
                f"only {self._end - start} remain"
            )
        self.pos = start + n
        return start

    def _unpack(self, st: struct.Struct, what: str) -> int:
        start = self._take(st.size, what)
        value: int = st.unpack_from(self._view, start)[0]
        return value

    def int8(self) -> int:
        return self._unpack(_INT8, "int8")

    def int16(self) -> int:
        return self._unpack(_INT16, "int16")

    def int32(self) -> int:
        return self._unpack(_INT32, "int32")

    def int64(self) -> int:
        return self._unpack(_INT64, "int64")

    def uint32(self) -> int:
        return self._unpack(_UINT32, "uint32")

    def boolean(self) -> bool:
        return self._unpack(_INT8, "boolean") != 0

    def float64(self) -> float:
        start = self._take(8, "float64")
        value: float = _FLOAT64.unpack_from(self._view, start)[0]
        return value

    def _uvarint(self, max_bytes: int, what: str) -> int:
        result = shift = 0
        view, pos, end = self._view, self.pos, self._end
        for i in range(max_bytes):
            if pos + i >= end:
                raise RemoteProtocolError(f"truncated {what} at offset {self.pos}")
            byte = view[pos + i]
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                self.pos = pos + i + 1
                return result
            shift += 7
        raise RemoteProtocolError(f"{what} at offset {self.pos} is longer than {max_bytes} bytes")

    def varint(self) -> int:
        raw = self._uvarint(5, "varint")
        if raw > 0xFFFFFFFF:
            raise RemoteProtocolError(f"varint at offset {self.pos} overflows 32 bits")
        return (raw >> 1) ^ -(raw & 1)

    def varlong(self) -> int:
        raw = self._uvarint(10, "varlong")
        if raw > 0xFFFFFFFFFFFFFFFF:
            raise RemoteProtocolError(f"varlong at offset {self.pos} overflows 64 bits")
        return (raw >> 1) ^ -(raw & 1)

    def unsigned_varint(self) -> int:
        raw = self._uvarint(5, "unsigned varint")
        if raw > 0xFFFFFFFF:
            raise RemoteProtocolError(f"unsigned varint at offset {self.pos} overflows 32 bits")
        return raw

    def check_length(self, n: int, what: str, *, nullable: bool, item_size: int = 1) -> int:
        """Validate a length (or count of items of at least ``item_size`` bytes) just read.

        Returns ``n``; ``-1`` only when ``nullable``. This is the one place where a length
        from the wire meets memory, so every size check lives here.
        """
        if n < 0:
            if n == -1 and nullable:
                return -1
            raise RemoteProtocolError(f"invalid {what} length {n} at offset {self.pos}")
        if n > self.max_length:
            raise RemoteProtocolError(
                f"{what} length {n} at offset {self.pos} exceeds the cap of {self.max_length}"
            )
        if n * item_size > self._end - self.pos:
            raise RemoteProtocolError(
                f"truncated {what}: length {n} at offset {self.pos} needs at least "
                f"{n * item_size} bytes, only {self._end - self.pos} remain"
            )
        return n

    def raw(self, n: int, what: str = "bytes") -> memoryview:
        """The next ``n`` bytes as a zero-copy memoryview."""
        start = self._take(n, what)
        return self._view[start : start + n]

    def _text(self, n: int, what: str) -> str:
        start = self._take(n, what)
        try:
            return str(self._view[start : start + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise RemoteProtocolError(f"{what} at offset {start} is not UTF-8: {exc}") from None

    def string(self) -> str:
        n = self.check_length(self.int16(), "string", nullable=False)
        return self._text(n, "string")

    def nullable_string(self) -> str | None:
        n = self.check_length(self.int16(), "string", nullable=True)
        return None if n == -1 else self._text(n, "string")

    def bytes_(self) -> bytes:
        n = self.check_length(self.int32(), "bytes", nullable=False)
        return bytes(self.raw(n))

    def nullable_bytes(self) -> bytes | None:
        n = self.check_length(self.int32(), "bytes", nullable=True)
        return None if n == -1 else bytes(self.raw(n))

    # -- flexible versions (KIP-482) -----------------------------------------------------

    def compact_length(self, what: str, *, nullable: bool, item_size: int = 1) -> int:
        """A compact length or count (uvarint N + 1, 0 = null) checked as ``check_length``
        does; ``-1`` only when ``nullable``."""
        return self.check_length(self.unsigned_varint() - 1, what, nullable=nullable,
                                 item_size=item_size)

    def _compact_text(self, nullable: bool) -> str | None:
        n = self.compact_length("compact string", nullable=nullable)
        if n > 0x7FFF:  # Kafka's limit for every string, compact ones included
            raise RemoteProtocolError(f"compact string length {n} at offset {self.pos} "
                                      "exceeds 32767")
        return None if n == -1 else self._text(n, "compact string")

    def compact_string(self) -> str:
        text = self._compact_text(False)
        assert text is not None
        return text

    def compact_nullable_string(self) -> str | None:
        return self._compact_text(True)

    def compact_bytes(self) -> bytes:
        return bytes(self.raw(self.compact_length("compact bytes", nullable=False)))

    def compact_nullable_bytes(self) -> bytes | None:
        n = self.compact_length("compact bytes", nullable=True)
        return None if n == -1 else bytes(self.raw(n))

    def tagged_fields(self) -> list[tuple[int, memoryview]]:
        """A tagged-field section: ``(tag, bytes)`` in wire order, the bytes zero-copy.

        Every size is checked against what remains; the order of tags is not (Kafka's
        readers do not check it either)."""
        view, pos = self._view, self.pos
        if pos < self._end and view[pos] == 0:  # the usual section: empty
            self.pos = pos + 1
            return []
        count = self.check_length(self.unsigned_varint(), "tagged fields", nullable=False,
                                  item_size=2)
        fields = []
        for _ in range(count):
            tag = self.unsigned_varint()
            size = self.check_length(self.unsigned_varint(), "tagged field", nullable=False)
            fields.append((tag, self.raw(size, "tagged field")))
        return fields

    def skip_tagged_fields(self) -> None:
        """Read past a tagged-field section whose fields are all unknown to the reader."""
        self.tagged_fields()

    def expect_end(self, what: str = "message") -> None:
        if self.pos != self._end:
            raise RemoteProtocolError(
                f"{self._end - self.pos} unexpected trailing bytes after the {what}"
            )


class Writer:
    """An output buffer that may also carry size-known placeholders (see ``splice``).

    ``getvalue()`` returns the bytes; ``parts()`` returns a list of ``bytes`` and spliced
    objects in order, for zero-copy responses.
    """

    __slots__ = ("_parts", "buf")

    def __init__(self) -> None:
        self.buf = bytearray()
        self._parts: list[Any] = []

    def splice(self, obj: Any) -> None:
        """Place ``obj`` (whose bytes the caller will send itself) at the current position."""
        if self.buf:
            self._parts.append(bytes(self.buf))
            self.buf = bytearray()
        self._parts.append(obj)

    def parts(self) -> list[Any]:
        out = list(self._parts)
        if self.buf or not out:
            out.append(bytes(self.buf))
        return out

    def getvalue(self) -> bytes:
        if self._parts:
            raise LocalProtocolError(
                "the message holds records by reference; encode it with an *_parts function"
            )
        return bytes(self.buf)

    def size(self) -> int:
        return len(self.buf) + sum(
            len(p) if isinstance(p, bytes) else records_size(p) for p in self._parts
        )


def records_size(obj: Any) -> int:
    """Byte size of a records value: bytes-like, or a reference with ``size``, ``length``
    (the broker's file slices) or ``__len__``."""
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return _bytes_len(obj)
    size = getattr(obj, "size", None)
    if size is None:
        size = getattr(obj, "length", None)
    if size is None:
        try:
            size = len(obj)
        except TypeError:
            raise LocalProtocolError(
                f"records must be bytes-like or have a size: got {type(obj).__name__}"
            ) from None
    elif callable(size):
        size = size()
    if not isinstance(size, int) or size < 0:
        raise LocalProtocolError(f"records reference has an invalid size {size!r}")
    return size


# -- Type objects ----------------------------------------------------------------------------


class Type:
    """A wire type: ``write``/``read`` on a Writer/Reader, ``encode``/``decode`` standalone.

    ``min_size`` is the fewest bytes one value can take; array decoding uses it to reject a
    count that the remaining bytes cannot possibly hold.
    """

    name = "type"
    min_size = 0
    nullable = False

    def write(self, w: Writer, value: Any) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def read(self, r: Reader) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def default(self) -> Any:
        return None

    def as_nullable(self) -> Type:
        """The nullable variant of this type (itself when it has none)."""
        return self

    def compact(self) -> Type:
        """This type in flexible versions (itself unless it has a compact encoding)."""
        return self

    def _write_null(self, w: Writer, length: struct.Struct) -> None:
        """Null as Kafka writes it: length (or count) -1, if this type may be null."""
        if not self.nullable:
            raise LocalProtocolError(f"null is not allowed for a non-nullable {self.name}")
        w.buf += length.pack(-1)

    def encode(self, value: Any) -> bytes:
        w = Writer()
        self.write(w, value)
        return w.getvalue()

    def decode(self, data: bytes | bytearray | memoryview, **reader_options: Any) -> Any:
        """Decode exactly one value filling ``data``."""
        r = Reader(data, **reader_options)
        value = self.read(r)
        r.expect_end(self.name)
        return value

    def __repr__(self) -> str:
        return self.name


class _Fixed(Type):
    def __init__(self, name: str, st: struct.Struct, lo: int, hi: int, reader: str) -> None:
        self.name = name
        self._st = st
        self._lo, self._hi = lo, hi
        self.min_size = st.size
        self._reader: Callable[[Reader], int] = getattr(Reader, reader)

    def write(self, w: Writer, value: Any) -> None:
        try:
            w.buf += self._st.pack(value)
        except struct.error:
            if isinstance(value, int):
                raise LocalProtocolError(f"{value} is out of range for {self.name}") from None
            raise LocalProtocolError(
                f"{self.name} needs an int, got {type(value).__name__}"
            ) from None

    def read(self, r: Reader) -> int:
        return self._reader(r)

    def default(self) -> int:
        return 0


class _Boolean(Type):
    name = "boolean"
    min_size = 1

    def write(self, w: Writer, value: Any) -> None:
        if not isinstance(value, bool):
            raise LocalProtocolError(f"boolean needs a bool, got {type(value).__name__}")
        w.buf.append(1 if value else 0)

    def read(self, r: Reader) -> bool:
        return r.boolean()

    def default(self) -> bool:
        return False


class _Float64(Type):
    """Kafka's ``float64``: an IEEE 754 double, big-endian (DescribeClientQuotas' values)."""

    name = "float64"
    min_size = 8

    def write(self, w: Writer, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise LocalProtocolError(f"float64 needs a number, got {type(value).__name__}")
        w.buf += _FLOAT64.pack(float(value))

    def read(self, r: Reader) -> float:
        return r.float64()

    def default(self) -> float:
        return 0.0


def _zigzag_bytes(value: int, bits: int) -> bytearray:
    raw = ((value << 1) ^ (value >> (bits - 1))) & ((1 << bits) - 1)
    return _uvarint_bytes(raw)


def _uvarint_bytes(raw: int) -> bytearray:
    out = bytearray()
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return out


_ONE_BYTE = [bytes((n,)) for n in range(0x80)]


def uvarint(value: int) -> bytes:
    """The unsigned varint of ``value`` (0 <= value < 2**32): the compact lengths' prefix."""
    if value < 0x80:
        return _ONE_BYTE[value]
    if not 0 <= value <= 0xFFFFFFFF:
        raise LocalProtocolError(f"{value} is out of range for an unsigned varint")
    return bytes(_uvarint_bytes(value))


def write_tagged_fields(w: Writer, fields: list[tuple[int, bytes]]) -> None:
    """A tagged-field section of ``(tag, encoded value)`` pairs, in ascending tag order."""
    w.buf += uvarint(len(fields))
    for tag, data in sorted(fields, key=lambda field: field[0]):
        w.buf += uvarint(tag)
        w.buf += uvarint(len(data))
        w.buf += data


class _VarInt(Type):
    def __init__(self, name: str, bits: int) -> None:
        self.name = name
        self._bits = bits
        self._lo, self._hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        self.min_size = 1

    def write(self, w: Writer, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise LocalProtocolError(f"{self.name} needs an int, got {type(value).__name__}")
        if not self._lo <= value <= self._hi:
            raise LocalProtocolError(f"{value} is out of range for {self.name}")
        w.buf += _zigzag_bytes(value, self._bits)

    def read(self, r: Reader) -> int:
        return r.varint() if self._bits == 32 else r.varlong()

    def default(self) -> int:
        return 0


class _UnsignedVarInt(Type):
    name = "unsigned_varint"
    min_size = 1

    def write(self, w: Writer, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise LocalProtocolError(f"{self.name} needs an int, got {type(value).__name__}")
        if not 0 <= value <= 0xFFFFFFFF:
            raise LocalProtocolError(f"{value} is out of range for {self.name}")
        w.buf += _uvarint_bytes(value)

    def read(self, r: Reader) -> int:
        return r.unsigned_varint()

    def default(self) -> int:
        return 0


class _String(Type):
    min_size = 2

    def __init__(self, nullable: bool) -> None:
        self.nullable = nullable
        self.name = "nullable_string" if nullable else "string"

    def write(self, w: Writer, value: Any) -> None:
        if value is None:
            self._write_null(w, _INT16)
            return
        if not isinstance(value, str):
            raise LocalProtocolError(f"string needs a str, got {type(value).__name__}")
        data = value.encode("utf-8")
        if len(data) > 0x7FFF:
            raise LocalProtocolError(f"string of {len(data)} UTF-8 bytes exceeds 32767")
        w.buf += _INT16.pack(len(data))
        w.buf += data

    def read(self, r: Reader) -> str | None:
        return r.nullable_string() if self.nullable else r.string()

    def default(self) -> str | None:
        return None if self.nullable else ""

    def as_nullable(self) -> Type:
        return NULLABLE_STRING

    def compact(self) -> Type:
        return COMPACT_NULLABLE_STRING if self.nullable else COMPACT_STRING


class _Bytes(Type):
    min_size = 4

    def __init__(self, nullable: bool) -> None:
        self.nullable = nullable
        self.name = "nullable_bytes" if nullable else "bytes"

    def write(self, w: Writer, value: Any) -> None:
        if value is None:
            self._write_null(w, _INT32)
            return
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise LocalProtocolError(f"bytes needs a bytes-like value, got {type(value).__name__}")
        n = _bytes_len(value)
        if n > _INT32_MAX:
            raise LocalProtocolError(f"bytes of length {n} exceed int32")
        w.buf += _INT32.pack(n)
        w.buf += value

    def read(self, r: Reader) -> bytes | None:
        return r.nullable_bytes() if self.nullable else r.bytes_()

    def default(self) -> bytes | None:
        return None if self.nullable else b""

    def as_nullable(self) -> Type:
        return NULLABLE_BYTES

    def compact(self) -> Type:
        return COMPACT_NULLABLE_BYTES if self.nullable else COMPACT_BYTES


class _Records(Type):
    """Nullable bytes carrying a message set / record batches, kept opaque.

    Decodes to a zero-copy ``memoryview`` into the frame (``None`` for null). Encodes from a
    bytes-like value or, in ``*_parts`` encodings, from any object with ``size``, ``length``
    or ``__len__`` that the caller will send itself (e.g. a file slice for ``sendfile``).
    """

    name = "records"
    min_size = 4
    nullable = True

    def write(self, w: Writer, value: Any) -> None:
        if value is None:
            self._write_null(w, _INT32)
            return
        n = records_size(value)
        if n > _INT32_MAX:
            raise LocalProtocolError(f"records of size {n} exceed int32")
        w.buf += _INT32.pack(n)
        if isinstance(value, (bytes, bytearray, memoryview)):
            w.buf += value
        else:
            w.splice(value)

    def read(self, r: Reader) -> memoryview | None:
        n = r.check_length(r.int32(), "records", nullable=True)
        return None if n == -1 else r.raw(n, "records")

    def compact(self) -> Type:
        return COMPACT_RECORDS


class ItemDeclaration(Protocol):
    """What ``Array`` knows of an item that is not a ``Type`` yet: a schema ``Struct``,
    whose codec depends on the version (the schema layer swaps it in, ``Field.type_at``)."""

    name: str
    min_size: int


class Array(Type):
    """``int32`` count then that many items; count -1 is null (only if ``nullable``).

    Encodes and decodes when ``item`` is a ``Type``; an array of a schema ``Struct`` is a
    declaration that the schema layer compiles per version.
    """

    min_size = 4

    def __init__(self, item: Type | ItemDeclaration, *, nullable: bool = False) -> None:
        self.item = item
        self.nullable = nullable
        self.name = f"[{item.name}]" + ("?" if nullable else "")

    def _item_type(self) -> Type:
        item = self.item
        if not isinstance(item, Type):
            raise LocalProtocolError(f"{self.name} is declared, not compiled: use its schema")
        return item

    def write(self, w: Writer, value: Any) -> None:
        if value is None:
            self._write_null(w, _INT32)
            return
        try:
            n = len(value)
        except TypeError:
            raise LocalProtocolError(
                f"array needs a sequence, got {type(value).__name__}"
            ) from None
        if n > _INT32_MAX:
            raise LocalProtocolError(f"array of {n} items exceeds int32")
        w.buf += _INT32.pack(n)
        item = self._item_type()
        for i, v in enumerate(value):
            try:
                item.write(w, v)
            except LocalProtocolError as exc:
                raise LocalProtocolError(f"[{i}]: {exc}") from None

    def read(self, r: Reader) -> list[Any] | None:
        n = r.check_length(r.int32(), "array", nullable=self.nullable, item_size=self.item.min_size)
        if n == -1:
            return None
        item = self._item_type()
        return [item.read(r) for _ in range(n)]

    def default(self) -> list[Any] | None:
        return []

    def as_nullable(self) -> Type:
        return self if self.nullable else Array(self.item, nullable=True)

    def compact(self) -> Type:
        item = self.item
        return CompactArray(item.compact() if isinstance(item, Type) else item,
                            nullable=self.nullable)


# -- Compact types (flexible versions) --------------------------------------------------------


class _CompactString(Type):
    min_size = 1

    def __init__(self, nullable: bool) -> None:
        self.nullable = nullable
        self.name = "compact_nullable_string" if nullable else "compact_string"

    def write(self, w: Writer, value: Any) -> None:
        if value is None:
            if not self.nullable:
                raise LocalProtocolError(f"null is not allowed for a non-nullable {self.name}")
            w.buf.append(0)
            return
        if not isinstance(value, str):
            raise LocalProtocolError(f"string needs a str, got {type(value).__name__}")
        data = value.encode("utf-8")
        if len(data) > 0x7FFF:
            raise LocalProtocolError(f"string of {len(data)} UTF-8 bytes exceeds 32767")
        w.buf += uvarint(len(data) + 1)
        w.buf += data

    def read(self, r: Reader) -> str | None:
        return r.compact_nullable_string() if self.nullable else r.compact_string()

    def default(self) -> str | None:
        return None if self.nullable else ""

    def as_nullable(self) -> Type:
        return COMPACT_NULLABLE_STRING


class _CompactBytes(Type):
    min_size = 1

    def __init__(self, nullable: bool) -> None:
        self.nullable = nullable
        self.name = "compact_nullable_bytes" if nullable else "compact_bytes"

    def write(self, w: Writer, value: Any) -> None:
        if value is None:
            if not self.nullable:
                raise LocalProtocolError(f"null is not allowed for a non-nullable {self.name}")
            w.buf.append(0)
            return
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise LocalProtocolError(f"bytes needs a bytes-like value, got {type(value).__name__}")
        n = _bytes_len(value)
        if n >= 0xFFFFFFFF:
            raise LocalProtocolError(f"bytes of length {n} exceed an unsigned varint")
        w.buf += uvarint(n + 1)
        w.buf += value

    def read(self, r: Reader) -> bytes | None:
        return r.compact_nullable_bytes() if self.nullable else r.compact_bytes()

    def default(self) -> bytes | None:
        return None if self.nullable else b""

    def as_nullable(self) -> Type:
        return COMPACT_NULLABLE_BYTES


class _CompactRecords(_Records):
    """``records`` in flexible versions: compact nullable bytes, kept opaque like
    :class:`_Records` (a memoryview when decoded; a size-known reference may be spliced)."""

    name = "compact_records"
    min_size = 1

    def write(self, w: Writer, value: Any) -> None:
        if value is None:
            w.buf.append(0)
            return
        n = records_size(value)
        if n > _INT32_MAX:
            raise LocalProtocolError(f"records of size {n} exceed int32")
        w.buf += uvarint(n + 1)
        if isinstance(value, (bytes, bytearray, memoryview)):
            w.buf += value
        else:
            w.splice(value)

    def read(self, r: Reader) -> memoryview | None:
        n = r.compact_length("compact records", nullable=True)
        return None if n == -1 else r.raw(n, "compact records")

    def compact(self) -> Type:
        return self


class CompactArray(Array):
    """``Array`` in flexible versions: uvarint count + 1 (0 is null), then the items."""

    min_size = 1

    def __init__(self, item: Type | ItemDeclaration, *, nullable: bool = False) -> None:
        super().__init__(item, nullable=nullable)
        self.name = "compact" + self.name

    def write(self, w: Writer, value: Any) -> None:
        if value is None:
            if not self.nullable:
                raise LocalProtocolError(f"null is not allowed for a non-nullable {self.name}")
            w.buf.append(0)
            return
        try:
            n = len(value)
        except TypeError:
            raise LocalProtocolError(
                f"array needs a sequence, got {type(value).__name__}"
            ) from None
        w.buf += uvarint(n + 1)
        item = self._item_type()
        for i, v in enumerate(value):
            try:
                item.write(w, v)
            except LocalProtocolError as exc:
                raise LocalProtocolError(f"[{i}]: {exc}") from None

    def read(self, r: Reader) -> list[Any] | None:
        n = r.compact_length("compact array", nullable=self.nullable,
                             item_size=self.item.min_size)
        if n == -1:
            return None
        item = self._item_type()
        return [item.read(r) for _ in range(n)]

    def as_nullable(self) -> Type:
        return self if self.nullable else CompactArray(self.item, nullable=True)

    def compact(self) -> Type:
        return self


INT8: Type = _Fixed("int8", _INT8, -(1 << 7), (1 << 7) - 1, "int8")
INT16: Type = _Fixed("int16", _INT16, -(1 << 15), (1 << 15) - 1, "int16")
INT32: Type = _Fixed("int32", _INT32, _INT32_MIN, _INT32_MAX, "int32")
INT64: Type = _Fixed("int64", _INT64, _INT64_MIN, _INT64_MAX, "int64")
UINT32: Type = _Fixed("uint32", _UINT32, 0, 0xFFFFFFFF, "uint32")
BOOLEAN: Type = _Boolean()
FLOAT64: Type = _Float64()
VARINT: Type = _VarInt("varint", 32)
VARLONG: Type = _VarInt("varlong", 64)
UNSIGNED_VARINT: Type = _UnsignedVarInt()
STRING: Type = _String(nullable=False)
NULLABLE_STRING: Type = _String(nullable=True)
BYTES: Type = _Bytes(nullable=False)
NULLABLE_BYTES: Type = _Bytes(nullable=True)
RECORDS: Type = _Records()
COMPACT_STRING: Type = _CompactString(nullable=False)
COMPACT_NULLABLE_STRING: Type = _CompactString(nullable=True)
COMPACT_BYTES: Type = _CompactBytes(nullable=False)
COMPACT_NULLABLE_BYTES: Type = _CompactBytes(nullable=True)
COMPACT_RECORDS: Type = _CompactRecords()
