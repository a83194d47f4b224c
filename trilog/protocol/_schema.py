"""A small declarative schema language for Kafka messages, in the spirit of Kafka's JSON specs.

A message is a :class:`Struct`: a name and a list of :class:`Field` s. A field has a
snake_case name, a type (a primitive from ``_primitives``, an :class:`Array` of one, a
:class:`Struct`, or an ``Array`` of a ``Struct``), and the range of API versions it exists
in. Versions that share a field list share the declaration, so an API whose versions only
add fields is written once::

    ProduceResponse = message(0, "ProduceResponse", (0, 7), [
        Field("responses", Array(Struct("TopicProduceResponse", [
            Field("name", STRING),
            Field("partition_responses", Array(Struct("PartitionProduceResponse", [
                Field("index", INT32),
                Field("error_code", INT16),
                Field("base_offset", INT64),
                Field("log_append_time_ms", INT64, "2+", default=-1),
            ]))),
        ]))),
        Field("throttle_time_ms", INT32, "1+"),
    ])

``versions`` is ``"N+"`` (N and later), ``"N-M"`` or ``"N"``; ``nullable`` is a version
range too, because Kafka made some fields nullable only from a given version (a null where
the version has none is a :class:`~trilog.errors.LocalProtocolError`).

Each ``Struct`` generates a Python class (named as in Kafka's JSON, e.g.
``ProduceRequest.TopicProduceData``) with one attribute per field of *any* version; a
field absent from the version being encoded is skipped, and a decoded object has it set to
its default (``default=`` if given, as Kafka's JSON ``default``; else what Kafka's generated
code uses: 0, False, "", b"", [], and None for records). Objects compare by value and have
``to_dict(version=None)``. Codecs are compiled once per (struct, version) and cached.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from trilog.errors import LocalProtocolError, RemoteProtocolError
from trilog.protocol._primitives import DEFAULT_MAX_LENGTH, Array, Reader, Type, Writer

_MAX_VERSION = 0x7FFF
_MISSING: Any = object()


def parse_versions(spec: str | None) -> tuple[int, int] | None:
    """``"3+"`` -> (3, 32767), ``"0-2"`` -> (0, 2), ``"1"`` -> (1, 1), None -> None."""
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), _MAX_VERSION
    if "-" in spec:
        lo, hi = spec.split("-")
        return int(lo), int(hi)
    return int(spec), int(spec)


class Field:
    """One field: name, type, the versions it exists in, and those where it may be null."""

    __slots__ = ("_default", "name", "nullable_versions", "type", "versions")

    def __init__(
        self,
        name: str,
        type: Type | Struct,
        versions: str = "0+",
        *,
        nullable: str | None = None,
        default: Any = _MISSING,
    ) -> None:
        in_versions = parse_versions(versions)
        if in_versions is None:
            raise ValueError(f"field {name} is in no version")
        self.name = name
        self.type = type
        self.versions = in_versions
        self.nullable_versions = parse_versions(nullable)
        self._default = default

    def in_version(self, version: int) -> bool:
        lo, hi = self.versions
        return lo <= version <= hi

    def nullable_in(self, version: int) -> bool:
        nv = self.nullable_versions
        return nv is not None and nv[0] <= version <= nv[1]

    def make_default(self) -> Any:
        d = self._default
        if d is _MISSING:
            if isinstance(self.type, Struct):
                return self.type.cls()
            return self.type.default()
        return list(d) if isinstance(d, list) else d

    def type_at(self, version: int) -> Type:
        """The concrete codec of this field at ``version``."""
        t = self.type
        if isinstance(t, Struct):
            t = t.codec(version)
        elif isinstance(t, Array) and isinstance(t.item, Struct):
            t = Array(t.item.codec(version), nullable=t.nullable)
        if self.nullable_in(version):
            t = t.as_nullable()
        return t


if TYPE_CHECKING:

    class _GeneratedClass(type):
        """What a type checker knows of a generated class: the classes of its nested structs
        are attributes made at run time (``ProduceRequest.TopicProduceData``)."""

        def __getattr__(cls, name: str) -> type[StructValue]: ...

else:
    _GeneratedClass = type


class StructValue(metaclass=_GeneratedClass):
    """Base of every generated message/struct class: keyword construction, value equality."""

    __slots__ = ()
    _struct: ClassVar[Struct]

    if TYPE_CHECKING:
        # The fields are slots made at run time, one per field of any version.
        def __getattr__(self, name: str) -> Any: ...

    def __init__(self, **fields: Any) -> None:
        for f in self._struct.fields:
            name = f.name
            if name in fields:
                setattr(self, name, fields.pop(name))
            else:
                setattr(self, name, f.make_default())
        if fields:
            raise TypeError(
                f"{type(self).__name__} has no field(s) {', '.join(sorted(fields))}; "
                f"fields are {', '.join(f.name for f in self._struct.fields)}"
            )

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self._struct.field_names)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._struct.field_names)
        return f"{type(self).__name__}({inner})"

    def to_dict(self, version: int | None = None) -> dict[str, Any]:
        """Plain nested dicts/lists; only the fields of ``version`` when given.

        Records and bytes come out as ``bytes``.
        """
        out: dict[str, Any] = {}
        for f in self._struct.fields:
            if version is not None and not f.in_version(version):
                continue
            out[f.name] = _plain(getattr(self, f.name), version)
        return out


def _plain(value: Any, version: int | None) -> Any:
    if isinstance(value, StructValue):
        return value.to_dict(version)
    if isinstance(value, list):
        return [_plain(v, version) for v in value]
    if isinstance(value, (memoryview, bytearray)):
        return bytes(value)
    return value


class Struct:
    """A named list of fields; generates its Python class and per-version codecs."""

    # Lets ``Array(Struct(...))`` be built before compilation (Array reads these).
    min_size = 0
    nullable = False

    def __init__(self, name: str, fields: list[Field], doc: str | None = None) -> None:
        names = [f.name for f in fields]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate field names in {name}: {names}")
        self.name = name
        self.fields = tuple(fields)
        self.field_names = tuple(names)
        self._codecs: dict[int, _StructCodec] = {}
        self.cls = self._make_class(doc)

    def _make_class(self, doc: str | None) -> type[StructValue]:
        namespace: dict[str, Any] = {
            "__slots__": self.field_names,
            "_struct": self,
            "__doc__": doc
            or f"Kafka struct ``{self.name}``; fields: {', '.join(self.field_names)}.",
            "__module__": "trilog.protocol",
        }
        cls = type(self.name, (self._base_class(),), namespace)
        for f in self.fields:
            t = f.type
            inner = t.item if isinstance(t, Array) else t
            if isinstance(inner, Struct):
                setattr(cls, inner.name, inner.cls)
        return cls

    def _base_class(self) -> type[StructValue]:
        return StructValue

    def codec(self, version: int) -> _StructCodec:
        codec = self._codecs.get(version)
        if codec is None:
            codec = self._codecs[version] = _StructCodec(self, version)
        return codec

    def __repr__(self) -> str:
        return f"Struct({self.name})"


class _StructCodec(Type):
    """A struct's fields at one version, encoded back to back (no length prefix)."""

    def __init__(self, struct: Struct, version: int) -> None:
        self.name = struct.name
        self.cls = struct.cls
        self.steps = tuple(
            (f.name, f.type_at(version)) for f in struct.fields if f.in_version(version)
        )
        self.absent = tuple(f for f in struct.fields if not f.in_version(version))
        self.min_size = sum(t.min_size for _, t in self.steps)

    def write(self, w: Writer, value: Any) -> None:
        for name, t in self.steps:
            try:
                v = getattr(value, name)
            except AttributeError:
                raise LocalProtocolError(
                    f"{self.name}: {type(value).__name__} has no field {name!r}"
                ) from None
            try:
                t.write(w, v)
            except LocalProtocolError as exc:
                raise LocalProtocolError(f"{self.name}.{name}: {exc}") from None

    def read(self, r: Reader) -> Any:
        obj = self.cls.__new__(self.cls)
        for name, t in self.steps:
            try:
                setattr(obj, name, t.read(r))
            except RemoteProtocolError as exc:
                raise RemoteProtocolError(f"{self.name}.{name}: {exc}") from None
        for f in self.absent:
            setattr(obj, f.name, f.make_default())
        return obj


class Message(StructValue):
    """Base of generated request/response classes.

    Class attributes: ``API_KEY``, ``API_NAME`` (e.g. "Produce"), ``IS_REQUEST``,
    ``MIN_VERSION``/``MAX_VERSION`` (the versions trilog implements).
    """

    __slots__ = ()
    API_KEY: ClassVar[int]
    API_NAME: ClassVar[str]
    IS_REQUEST: ClassVar[bool]
    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]

    @classmethod
    def check_version(cls, version: int, error: type[Exception] = LocalProtocolError) -> None:
        if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            raise error(
                f"{cls.__name__} version {version} is not supported "
                f"(supported: {cls.MIN_VERSION}..{cls.MAX_VERSION})"
            )

    def encode(self, version: int) -> bytes:
        """The body only (no header, no size prefix)."""
        w = Writer()
        self.write_to(w, version)
        return w.getvalue()

    def write_to(self, w: Writer, version: int) -> None:
        self.check_version(version)
        self._struct.codec(version).write(w, self)

    @classmethod
    def decode(
        cls,
        data: bytes | bytearray | memoryview | Reader,
        version: int,
        *,
        max_length: int = DEFAULT_MAX_LENGTH,
    ) -> Any:
        """Decode a body filling ``data`` (or read one from a ``Reader``, leaving the rest).

        ``max_length`` caps every length and count read (a ``Reader`` brings its own cap).
        """
        cls.check_version(version, RemoteProtocolError)
        if isinstance(data, Reader):
            return cls._struct.codec(version).read(data)
        r = Reader(data, max_length=max_length)
        value = cls._struct.codec(version).read(r)
        r.expect_end(f"{cls.__name__} v{version} body")
        return value


class _MessageStruct(Struct):
    def _base_class(self) -> type[StructValue]:
        return Message


def message(
    api_key: int,
    name: str,
    versions: tuple[int, int],
    fields: list[Field],
    doc: str | None = None,
) -> type[Message]:
    """Declare a request or response; returns its generated class."""
    cls = _MessageStruct(name, fields, doc).cls
    assert issubclass(cls, Message)
    cls.API_KEY = api_key
    cls.IS_REQUEST = name.endswith("Request")
    cls.API_NAME = name[: -len("Request")] if cls.IS_REQUEST else name[: -len("Response")]
    cls.MIN_VERSION, cls.MAX_VERSION = versions
    return cls
