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

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from trilog.errors import LocalProtocolError, RemoteProtocolError
from trilog.protocol._primitives import (
    _INT16 as _INT16_STRUCT,
    _INT32 as _INT32_STRUCT,
    DEFAULT_MAX_LENGTH,
    Array,
    Reader,
    Type,
    Writer,
    _Fixed,
    _Records,
    _String,
)

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
        cls.__init__ = self._compile_init()  # type: ignore[misc]
        for f in self.fields:
            t = f.type
            inner = t.item if isinstance(t, Array) else t
            if isinstance(inner, Struct):
                setattr(cls, inner.name, inner.cls)
        return cls

    def _base_class(self) -> type[StructValue]:
        return StructValue

    def _compile_init(self) -> Callable[..., None]:
        """``__init__(self, *, field=default, ...)`` for the generated class: what
        ``StructValue.__init__`` does, without its loop (responses are built per request)."""
        env: dict[str, Any] = {"M": _MISSING, "base": StructValue.__init__}
        params = "".join(f", {name}=M" for name in self.field_names)
        lines = [f"def __init__(self{', *' if params else ''}{params}, **unknown):",
                 "    if unknown:",
                 "        base(self, **unknown)  # raises: no such field"]
        for i, f in enumerate(self.fields):
            default = f.make_default()
            if default is None or isinstance(default, (bool, int, float, str, bytes)):
                env[f"D{i}"] = default
                value = f"D{i}"
            else:  # a fresh list or struct for each object
                env[f"D{i}"] = f.make_default
                value = f"D{i}()"
            lines.append(f"    self.{f.name} = {value} if {f.name} is M else {f.name}")
        if not self.fields:
            lines.append("    pass")
        return _define("__init__", lines, env, f"{self.name}.__init__")

    def codec(self, version: int) -> _StructCodec:
        codec = self._codecs.get(version)
        if codec is None:
            codec = self._codecs[version] = _StructCodec(self, version)
        return codec

    def __repr__(self) -> str:
        return f"Struct({self.name})"


class _StructCodec(Type):
    """A struct's fields at one version, encoded back to back (no length prefix).

    ``read`` and ``write`` are compiled from the fields into one Python function each
    (``_compile_read``, ``_compile_write``): runs of fixed-width fields become one
    ``struct`` call, arrays of structs a loop over the item's compiled function.  They are
    what every request and response goes through, so this is the protocol's hot path.
    When the compiled function meets anything wrong it hands over to the field-by-field
    interpreter (``read_fields``, ``write_fields``), which raises the error with its path
    (``MetadataRequest.topics: null ...``).
    """

    def __init__(self, struct: Struct, version: int) -> None:
        self.name = struct.name
        self.cls = struct.cls
        self.steps = tuple(
            (f.name, f.type_at(version)) for f in struct.fields if f.in_version(version)
        )
        self.absent = tuple(f for f in struct.fields if not f.in_version(version))
        self.min_size = sum(t.min_size for _, t in self.steps)
        self.read = self._compile_read()  # type: ignore[method-assign,assignment]
        self.write = self._compile_write()  # type: ignore[method-assign,assignment]

    def write_fields(self, w: Writer, value: Any) -> None:
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

    def read_fields(self, r: Reader) -> Any:
        obj = self.cls.__new__(self.cls)
        for name, t in self.steps:
            try:
                setattr(obj, name, t.read(r))
            except RemoteProtocolError as exc:
                raise RemoteProtocolError(f"{self.name}.{name}: {exc}") from None
        for f in self.absent:
            setattr(obj, f.name, f.make_default())
        return obj

    # -- compilation ---------------------------------------------------------------------------

    def _plan(self) -> list[tuple[str, Any]]:
        """The steps grouped: ``("fixed", [(name, Struct), ...])`` for each run of fixed-width
        integer fields, ``("array", (name, item codec, nullable))`` for an array of structs,
        ``("string"|"records", (name, nullable, type))``, and ``("other", (name, type))``."""
        plan: list[tuple[str, Any]] = []
        for name, t in self.steps:
            if isinstance(t, _Fixed):
                if plan and plan[-1][0] == "fixed":
                    plan[-1][1].append((name, t._st))
                else:
                    plan.append(("fixed", [(name, t._st)]))
            elif isinstance(t, Array) and isinstance(t.item, _StructCodec):
                plan.append(("array", (name, t.item, t.nullable)))
            elif isinstance(t, _String):
                plan.append(("string", (name, t.nullable, t)))
            elif isinstance(t, _Records):
                plan.append(("records", (name, True, t)))
            else:
                plan.append(("other", (name, t)))
        return plan

    def _compile_read(self) -> Callable[[Reader], Any]:
        # Lengths are checked as Reader.check_length does; anything out of line (a short
        # buffer makes unpack_from raise) goes to read_fields for the error.
        env: dict[str, Any] = {"cls": self.cls, "slow": self.read_fields,
                               "I16": _INT16_STRUCT, "I32": _INT32_STRUCT}
        lines = ["def read(r):", "    start = pos = r.pos", "    try:",
                 "        view = r._view", "        end = r._end", "        cap = r.max_length",
                 "        obj = cls.__new__(cls)"]
        for i, (kind, arg) in enumerate(self._plan()):
            if kind == "fixed":
                st = _fused(arg)
                env[f"S{i}"] = st
                targets = "".join(f"obj.{name}, " for name, _ in arg)
                lines += [f"        {targets}= S{i}.unpack_from(view, pos)",
                          f"        pos += {st.size}"]
            elif kind in ("string", "records"):
                name, nullable, _t = arg
                size, lstruct = (2, "I16") if kind == "string" else (4, "I32")
                value = ("str(view[pos:pos + n], 'utf-8')" if kind == "string"
                         else "view[pos:pos + n]")
                lines += [f"        n = {lstruct}.unpack_from(view, pos)[0]",
                          f"        pos += {size}",
                          "        if n < 0:",
                          f"            if n != -1 or not {nullable}:",
                          "                raise ValueError",
                          f"            obj.{name} = None",
                          "        else:",
                          "            if n > cap or pos + n > end:",
                          "                raise ValueError",
                          f"            obj.{name} = {value}",
                          "            pos += n"]
            elif kind == "array":
                name, item, nullable = arg
                env[f"R{i}"] = item.read
                lines += ["        n = I32.unpack_from(view, pos)[0]",
                          "        pos += 4",
                          "        if n < 0:",
                          f"            if n != -1 or not {nullable}:",
                          "                raise ValueError",
                          f"            obj.{name} = None",
                          "        else:",
                          f"            if n > cap or pos + n * {item.min_size} > end:",
                          "                raise ValueError",
                          "            r.pos = pos",
                          f"            obj.{name} = [R{i}(r) for _ in range(n)]",
                          "            pos = r.pos"]
            else:
                name, t = arg
                env[f"T{i}"] = t.read
                lines += ["        r.pos = pos", f"        obj.{name} = T{i}(r)", "        pos = r.pos"]
        for j, f in enumerate(self.absent):
            env[f"D{j}"] = f.make_default
            lines.append(f"        obj.{f.name} = D{j}()")
        lines += ["        if pos > end:", "            raise ValueError",
                  "        r.pos = pos", "        return obj", "    except Exception:",
                  "        r.pos = start", "        return slow(r)"]
        return _define("read", lines, env, f"{self.name}.read")

    def _compile_write(self) -> Callable[[Writer, Any], None]:
        env: dict[str, Any] = {"slow": self.write_fields, "Writer": Writer,
                               "I16": _INT16_STRUCT, "I32": _INT32_STRUCT}
        lines = ["def write(w, value):", "    try:", "        pass"]
        for i, (kind, arg) in enumerate(self._plan()):
            if kind == "fixed":
                env[f"S{i}"] = _fused(arg)
                values = ", ".join(f"value.{name}" for name, _ in arg)
                lines.append(f"        w.buf += S{i}.pack({values})")
            elif kind == "array":
                name, item, nullable = arg
                env[f"W{i}"] = item.write
                lines += [f"        items = value.{name}",
                          "        if items is None:",
                          "            w.buf += I32.pack(-1)" if nullable else
                          "            raise TypeError('null')",
                          "        else:",
                          "            w.buf += I32.pack(len(items))",
                          "            for item in items:",
                          f"                W{i}(w, item)"]
            elif kind == "string":
                name, nullable, _t = arg
                lines += [f"        v = value.{name}",
                          "        if v is None:",
                          "            w.buf += I16.pack(-1)" if nullable else
                          "            raise TypeError('null')",
                          "        else:",
                          "            data = v.encode()",
                          "            w.buf += I16.pack(len(data))",
                          "            w.buf += data"]
            else:
                name = arg[0]
                env[f"T{i}"] = arg[-1].write
                lines.append(f"        T{i}(w, value.{name})")
        lines += ["    except Exception:",
                  "        slow(Writer(), value)  # raises the error with its path",
                  "        raise"]
        return _define("write", lines, env, f"{self.name}.write")


def _fused(run: list[tuple[str, struct.Struct]]) -> struct.Struct:
    """One big-endian Struct for a run of fixed-width fields."""
    return struct.Struct(">" + "".join(st.format.lstrip(">!") for _, st in run))


def _define(name: str, lines: list[str], env: dict[str, Any], qualname: str) -> Any:
    exec(compile("\n".join(lines), f"<trilog.protocol {qualname}>", "exec"), env)
    fn = env[name]
    fn.__qualname__ = qualname
    return fn


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
