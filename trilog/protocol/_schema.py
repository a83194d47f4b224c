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

Flexible versions (KIP-482) are declared once per message, ``message(..., flexible="3+")``
(or ``Struct(..., flexible=...)`` for a record that is not an API): from that version on,
the message and every struct in it use the compact encodings (strings, bytes, arrays and
records with uvarint lengths, see ``_primitives``) and end with a tagged-field section. A
field declared with ``tag=N`` is a tagged field in the flexible versions among its
``versions`` (and absent from the others): written only when it differs from its default,
read wherever it comes in the section. Unknown tags are skipped. Kafka's JSON spells this
``flexibleVersions``, ``tag`` and ``taggedVersions``.

Each ``Struct`` generates a Python class (named as in Kafka's JSON, e.g.
``ProduceRequest.TopicProduceData``) with one attribute per field of *any* version; a
field absent from the version being encoded is skipped, and a decoded object has it set to
its default (``default=`` if given, as Kafka's JSON ``default``; else what Kafka's generated
code uses: 0, False, "", b"", [], and None for records). Objects compare by value and have
``to_dict(version=None)``. Codecs are compiled once per (struct, version) and cached;
a non-flexible version compiles to the same code as before flexible versions existed.
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
    CompactArray,
    Reader,
    Type,
    Writer,
    _CompactRecords,
    _CompactString,
    _Fixed,
    _Records,
    _String,
    uvarint,
    write_tagged_fields,
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
    """One field: name, type, the versions it exists in, and those where it may be null;
    ``tag`` makes it a tagged field of the flexible versions among them."""

    __slots__ = ("_default", "name", "nullable_versions", "tag", "type", "versions")

    def __init__(
        self,
        name: str,
        type: Type | Struct,
        versions: str = "0+",
        *,
        nullable: str | None = None,
        default: Any = _MISSING,
        tag: int | None = None,
    ) -> None:
        in_versions = parse_versions(versions)
        if in_versions is None:
            raise ValueError(f"field {name} is in no version")
        if tag is not None and not 0 <= tag <= 0xFFFFFFFF:
            raise ValueError(f"field {name}: tag {tag} is not an unsigned varint")
        self.name = name
        self.type = type
        self.versions = in_versions
        self.nullable_versions = parse_versions(nullable)
        self._default = default
        self.tag = tag

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

    def type_at(self, version: int, flexible: bool = False) -> Type:
        """The concrete codec of this field at ``version`` (of a flexible version when
        ``flexible``: compact encodings, structs ending with tagged fields)."""
        t = self.type
        if isinstance(t, Struct):
            t = t.codec_for(version, flexible)
        elif isinstance(t, Array) and isinstance(t.item, Struct):
            item = t.item.codec_for(version, flexible)
            t = CompactArray(item, nullable=t.nullable) if flexible else Array(
                item, nullable=t.nullable)
        elif flexible:
            t = t.compact()
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

    def __init__(self, name: str, fields: list[Field], doc: str | None = None, *,
                 flexible: str | None = None) -> None:
        names = [f.name for f in fields]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate field names in {name}: {names}")
        tags = [f.tag for f in fields if f.tag is not None]
        if len(set(tags)) != len(tags):
            raise ValueError(f"duplicate tags in {name}: {tags}")
        self.name = name
        self.fields = tuple(fields)
        self.field_names = tuple(names)
        #: The versions in which this struct is flexible on its own (a message's, or a
        #: record's); a struct nested in a message follows the message (``codec_for``).
        self.flexible_versions = parse_versions(flexible)
        self._codecs: dict[int, _StructCodec] = {}
        self._nested_codecs: dict[tuple[int, bool], _StructCodec] = {}
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

    def is_flexible(self, version: int) -> bool:
        fv = self.flexible_versions
        return fv is not None and fv[0] <= version <= fv[1]

    def codec(self, version: int) -> _StructCodec:
        """The codec of ``version``, flexible if this struct's own flexible versions say so."""
        codec = self._codecs.get(version)
        if codec is None:
            codec = self._codecs[version] = _StructCodec(self, version, self.is_flexible(version))
        return codec

    def codec_for(self, version: int, flexible: bool) -> _StructCodec:
        """The codec of ``version`` inside a message that is (or is not) ``flexible`` there."""
        if flexible == self.is_flexible(version):
            return self.codec(version)
        codec = self._nested_codecs.get((version, flexible))
        if codec is None:
            codec = self._nested_codecs[version, flexible] = _StructCodec(self, version, flexible)
        return codec

    def __repr__(self) -> str:
        return f"Struct({self.name})"


class _StructCodec(Type):
    """A struct's fields at one version, encoded back to back (no length prefix), then, in
    a flexible version, its tagged-field section.

    ``read`` and ``write`` are compiled from the fields into one Python function each
    (``_compile_read``, ``_compile_write``): runs of fixed-width fields become one
    ``struct`` call, an array of fixed-width integers (``replica_nodes``) one ``struct`` call
    for its count and all its items, arrays of structs a loop over the item's compiled
    function; when writing, a run of both (a Metadata partition's ids and replica lists) is
    one ``struct`` call, chosen by the arrays' lengths.  They are what every request and
    response goes through, so this is the protocol's hot path; a non-flexible codec's
    functions have no line about flexible versions.
    When the compiled function meets anything wrong it hands over to the field-by-field
    interpreter (``read_fields``, ``write_fields``), which raises the error with its path
    (``MetadataRequest.topics: null ...``).
    """

    def __init__(self, struct: Struct, version: int, flexible: bool) -> None:
        self.name = struct.name
        self.cls = struct.cls
        self.flexible = flexible
        present = [f for f in struct.fields if f.in_version(version)]
        self.steps = tuple(
            (f.name, f.type_at(version, flexible)) for f in present if f.tag is None
        )
        #: tag -> (name, type, default factory) of the tagged fields of this version
        self.tagged: dict[int, tuple[str, Type, Callable[[], Any]]] = {
            f.tag: (f.name, f.type_at(version, True), f.make_default)
            for f in sorted(present, key=lambda f: f.tag or 0)
            if flexible and f.tag is not None
        }
        # Every field that is not a step: set to its default (a tagged one, then, if read).
        stepped = {name for name, _ in self.steps}
        self.absent = tuple(f for f in struct.fields if f.name not in stepped)
        self.min_size = sum(t.min_size for _, t in self.steps) + (1 if flexible else 0)
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
        if self.flexible:
            self.write_tags(w, value)

    def read_fields(self, r: Reader) -> Any:
        obj = self.cls.__new__(self.cls)
        for name, t in self.steps:
            try:
                setattr(obj, name, t.read(r))
            except RemoteProtocolError as exc:
                raise RemoteProtocolError(f"{self.name}.{name}: {exc}") from None
        for f in self.absent:
            setattr(obj, f.name, f.make_default())
        if self.flexible:
            self.read_tags(r, obj)
        return obj

    def write_tags(self, w: Writer, value: Any) -> None:
        """The tagged-field section: the tagged fields whose value is not their default
        (Kafka's rule), in ascending tag order."""
        fields = []
        for tag, (name, t, default) in self.tagged.items():
            v = getattr(value, name)
            if v == default():
                continue
            sub = Writer()
            try:
                t.write(sub, v)
            except LocalProtocolError as exc:
                raise LocalProtocolError(f"{self.name}.{name}: {exc}") from None
            fields.append((tag, sub.getvalue()))
        write_tagged_fields(w, fields)

    def read_tags(self, r: Reader, obj: Any) -> None:
        """Read a tagged-field section into ``obj``: known tags decode (each from exactly its
        bytes), unknown ones are skipped."""
        try:
            fields = r.tagged_fields()
        except RemoteProtocolError as exc:
            raise RemoteProtocolError(f"{self.name}: {exc}") from None
        for tag, data in fields:
            known = self.tagged.get(tag)
            if known is None:
                continue
            name, t, _ = known
            sub = Reader(data, max_length=r.max_length)
            try:
                value = t.read(sub)
                sub.expect_end(f"tagged field {tag}")
            except RemoteProtocolError as exc:
                raise RemoteProtocolError(f"{self.name}.{name} (tag {tag}): {exc}") from None
            setattr(obj, name, value)

    # -- compilation ---------------------------------------------------------------------------

    def _plan(self) -> list[tuple[str, Any]]:
        """The steps grouped: ``("fixed", [(name, Struct), ...])`` for each run of fixed-width
        integer fields, ``("array"|"carray", (name, item codec, nullable))`` for an array
        (compact array) of structs, ``("ints"|"cints", (name, item type, nullable))`` for one
        of fixed-width integers, ``("string"|"records"|"cstring", (name, nullable, type))``,
        and ``("other", (name, type))``."""
        plan: list[tuple[str, Any]] = []
        for name, t in self.steps:
            if isinstance(t, _Fixed):
                if plan and plan[-1][0] == "fixed":
                    plan[-1][1].append((name, t._st))
                else:
                    plan.append(("fixed", [(name, t._st)]))
            elif isinstance(t, Array) and isinstance(t.item, _StructCodec):
                kind = "carray" if isinstance(t, CompactArray) else "array"
                plan.append((kind, (name, t.item, t.nullable)))
            elif isinstance(t, Array) and isinstance(t.item, _Fixed):
                kind = "cints" if isinstance(t, CompactArray) else "ints"
                plan.append((kind, (name, t.item, t.nullable)))
            elif isinstance(t, _String):
                plan.append(("string", (name, t.nullable, t)))
            elif isinstance(t, _CompactString):
                plan.append(("cstring", (name, t.nullable, t)))
            elif isinstance(t, _Records) and not isinstance(t, _CompactRecords):
                plan.append(("records", (name, True, t)))
            else:
                plan.append(("other", (name, t)))
        return plan

    def _compile_read(self) -> Callable[[Reader], Any]:
        # Lengths are checked as Reader.check_length does; anything out of line (a short
        # buffer makes unpack_from raise) goes to read_fields for the error.
        env: dict[str, Any] = {"cls": self.cls, "slow": self.read_fields,
                               "I16": _INT16_STRUCT, "I32": _INT32_STRUCT, "UV": _uvarint_at,
                               "TAGS": self.read_tags}
        lines = ["def read(r):", "    start = pos = r.pos", "    try:",
                 "        view = r._view", "        end = r._end", "        cap = r.max_length",
                 "        obj = cls.__new__(cls)"]
        for i, (kind, arg) in enumerate(self._plan()):
            lines += _READ_STEPS[kind](i, arg, env)
        for j, f in enumerate(self.absent):
            env[f"D{j}"] = f.make_default
            lines.append(f"        obj.{f.name} = D{j}()")
        if self.flexible:  # the tagged-field section, most often empty: one zero byte
            lines += ["        if view[pos] == 0:", "            pos += 1", "        else:",
                      "            r.pos = pos", "            TAGS(r, obj)",
                      "            pos = r.pos"]
        lines += ["        if pos > end:", "            raise ValueError",
                  "        r.pos = pos", "        return obj", "    except Exception:",
                  "        r.pos = start", "        return slow(r)"]
        return _define("read", lines, env, f"{self.name}.read")

    def _compile_write(self) -> Callable[[Writer, Any], None]:
        env: dict[str, Any] = {"slow": self.write_fields, "Writer": Writer, "UVB": uvarint,
                               "I16": _INT16_STRUCT, "I32": _INT32_STRUCT,
                               "TAGW": self.write_tags}
        lines = ["def write(w, value):", "    try:", "        pass"]
        for i, (kind, arg) in enumerate(_packed_runs(self._plan())):
            lines += _WRITE_STEPS[kind](i, arg, env)
        if self.flexible:
            lines.append("        TAGW(w, value)" if self.tagged else "        w.buf.append(0)")
        lines += ["    except Exception:",
                  "        slow(Writer(), value)  # raises the error with its path",
                  "        raise"]
        return _define("write", lines, env, f"{self.name}.write")


# -- The compiled functions' lines, step by step ------------------------------------------------
# Each takes the step's index (to name what it puts in the environment), its argument from
# ``_StructCodec._plan`` and the environment; it returns lines at the ``try:`` body's indent.
# A read step advances the local ``pos`` over ``view`` (``r.pos`` is synchronised around
# calls that read from ``r``); anything out of line raises, and the codec starts over on the
# interpreter, which says what was wrong.


def _uvarint_at(view: memoryview, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it (IndexError past the end,
    ValueError if it is longer than 5 bytes or overflows 32 bits)."""
    byte = view[pos]
    if byte < 0x80:
        return byte, pos + 1
    result, shift = byte & 0x7F, 7
    for i in range(1, 5):
        byte = view[pos + i]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result > 0xFFFFFFFF:
                raise ValueError("unsigned varint overflows 32 bits")
            return result, pos + i + 1
        shift += 7
    raise ValueError("unsigned varint longer than 5 bytes")


def _read_fixed(i: int, arg: Any, env: dict[str, Any]) -> list[str]:
    st = _fused(arg)
    env[f"S{i}"] = st
    targets = "".join(f"obj.{name}, " for name, _ in arg)
    return [f"        {targets}= S{i}.unpack_from(view, pos)", f"        pos += {st.size}"]


def _read_sized(i: int, arg: Any, env: dict[str, Any], kind: str) -> list[str]:
    name, nullable, _t = arg
    size, lstruct = (2, "I16") if kind == "string" else (4, "I32")
    value = ("str(view[pos:pos + n], 'utf-8')" if kind == "string" else "view[pos:pos + n]")
    return [f"        n = {lstruct}.unpack_from(view, pos)[0]",
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


def _read_compact_string(i: int, arg: Any, env: dict[str, Any]) -> list[str]:
    name, nullable, _t = arg
    return ["        n, pos = UV(view, pos)",
            "        if n == 0:",
            f"            if not {nullable}:",
            "                raise ValueError",
            f"            obj.{name} = None",
            "        else:",
            "            n -= 1",
            "            if n > cap or n > 32767 or pos + n > end:",
            "                raise ValueError",
            f"            obj.{name} = str(view[pos:pos + n], 'utf-8')",
            "            pos += n"]


def _read_count(name: str, nullable: bool, min_size: int, compact: bool) -> list[str]:
    """An array's count into ``n``, then null, or the count checked against the cap and
    the bytes left (at ``min_size`` bytes an item): the lines that open an array's read."""
    if compact:
        head = ["        n, pos = UV(view, pos)", "        if n == 0:",
                f"            if not {nullable}:"]
    else:
        head = ["        n = I32.unpack_from(view, pos)[0]", "        pos += 4",
                "        if n < 0:", f"            if n != -1 or not {nullable}:"]
    return head + ["                raise ValueError",
                   f"            obj.{name} = None",
                   "        else:",
                   *(["            n -= 1"] if compact else []),
                   f"            if n > cap or pos + n * {min_size} > end:",
                   "                raise ValueError"]


def _read_array(i: int, arg: Any, env: dict[str, Any], compact: bool = False) -> list[str]:
    name, item, nullable = arg
    env[f"R{i}"] = item.read
    return _read_count(name, nullable, item.min_size, compact) + [
        "            r.pos = pos",
        f"            obj.{name} = [R{i}(r) for _ in range(n)]",
        "            pos = r.pos"]


def _read_ints(i: int, arg: Any, env: dict[str, Any], compact: bool = False) -> list[str]:
    name, item, nullable = arg
    env[f"A{i}"] = _IntArrayStructs(item, count=False)
    return _read_count(name, nullable, item.min_size, compact) + [
        f"            obj.{name} = list(A{i}[n].unpack_from(view, pos))",
        f"            pos += n * {item.min_size}"]


def _read_other(i: int, arg: Any, env: dict[str, Any]) -> list[str]:
    name, t = arg
    env[f"T{i}"] = t.read
    return ["        r.pos = pos", f"        obj.{name} = T{i}(r)", "        pos = r.pos"]


_READ_STEPS: dict[str, Callable[[int, Any, dict[str, Any]], list[str]]] = {
    "fixed": _read_fixed,
    "string": lambda i, arg, env: _read_sized(i, arg, env, "string"),
    "records": lambda i, arg, env: _read_sized(i, arg, env, "records"),
    "cstring": _read_compact_string,
    "array": _read_array,
    "carray": lambda i, arg, env: _read_array(i, arg, env, compact=True),
    "ints": _read_ints,
    "cints": lambda i, arg, env: _read_ints(i, arg, env, compact=True),
    "other": _read_other,
}


def _write_null(nullable: bool, null: str) -> str:
    return f"            w.buf += {null}" if nullable else "            raise TypeError('null')"


def _write_fixed(i: int, arg: Any, env: dict[str, Any]) -> list[str]:
    env[f"S{i}"] = _fused(arg)
    values = ", ".join(f"value.{name}" for name, _ in arg)
    return [f"        w.buf += S{i}.pack({values})"]


def _packed_runs(plan: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``plan`` with each run of fixed-width fields and (classic, not nullable) arrays of
    fixed-width integers that holds an array made one ``("packed", [(name, Struct of the
    field or of an item, is an array), ...])`` step: written with one ``struct`` call."""
    out: list[tuple[str, Any]] = []
    run: list[tuple[str, struct.Struct, bool]] = []
    for kind, arg in [*plan, ("end", None)]:
        if kind == "fixed":
            run += [(name, st, False) for name, st in arg]
            continue
        if kind == "ints" and not arg[2]:
            run.append((arg[0], arg[1]._st, True))
            continue
        if any(is_array for _, _, is_array in run):
            out.append(("packed", run))
        elif run:
            out.append(("fixed", [(name, st) for name, st, _ in run]))
        run = []
        if kind != "end":
            out.append((kind, arg))
    return out


def _write_packed(i: int, arg: Any, env: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    values: list[str] = []
    counts: list[str] = []
    fmt = ">"
    for name, st, is_array in arg:
        code = st.format.lstrip(">!")
        if is_array:
            j = len(counts)
            lines += [f"        a{j} = value.{name}", f"        n{j} = len(a{j})"]
            values += [f"n{j}", f"*a{j}"]
            counts.append(f"n{j}")
            fmt += "i{}" + code
        else:
            values.append(f"value.{name}")
            fmt += code
    env[f"P{i}"] = _PackedStructs(fmt)
    return lines + [f"        w.buf += P{i}[{', '.join(counts)}].pack({', '.join(values)})"]


def _write_count(name: str, nullable: bool, compact: bool, count: bool = True) -> list[str]:
    """The lines that open an array's write: ``items`` is the field; null, or its length
    ``n`` and (with ``count``) the count written: the mirror of ``_read_count``."""
    lines = [f"        items = value.{name}",
             "        if items is None:",
             _write_null(nullable, "b'\\0'" if compact else "I32.pack(-1)"),
             "        else:",
             "            n = len(items)"]
    if count:
        lines.append("            w.buf += UVB(n + 1)" if compact else
                     "            w.buf += I32.pack(n)")
    return lines


def _write_array(i: int, arg: Any, env: dict[str, Any], compact: bool = False) -> list[str]:
    name, item, nullable = arg
    env[f"W{i}"] = item.write
    return _write_count(name, nullable, compact) + [
        "            for item in items:",
        f"                W{i}(w, item)"]


def _write_ints(i: int, arg: Any, env: dict[str, Any], compact: bool = False) -> list[str]:
    name, item, nullable = arg
    # A classic array's int32 count goes in the same struct call as its items.
    env[f"A{i}"] = _IntArrayStructs(item, count=not compact)
    return _write_count(name, nullable, compact, count=compact) + [
        f"            w.buf += A{i}[n].pack(*items)" if compact else
        f"            w.buf += A{i}[n].pack(n, *items)"]


def _write_string(i: int, arg: Any, env: dict[str, Any]) -> list[str]:
    name, nullable, _t = arg
    return [f"        v = value.{name}",
            "        if v is None:",
            _write_null(nullable, "I16.pack(-1)"),
            "        else:",
            "            data = v.encode()",
            "            w.buf += I16.pack(len(data))",
            "            w.buf += data"]


def _write_compact_string(i: int, arg: Any, env: dict[str, Any]) -> list[str]:
    name, nullable, _t = arg
    return [f"        v = value.{name}",
            "        if v is None:",
            _write_null(nullable, "b'\\0'"),
            "        else:",
            "            data = v.encode()",
            "            if len(data) > 32767:",
            "                raise ValueError",
            "            w.buf += UVB(len(data) + 1)",
            "            w.buf += data"]


def _write_other(i: int, arg: Any, env: dict[str, Any]) -> list[str]:
    name = arg[0]
    env[f"T{i}"] = arg[-1].write
    return [f"        T{i}(w, value.{name})"]


_WRITE_STEPS: dict[str, Callable[[int, Any, dict[str, Any]], list[str]]] = {
    "fixed": _write_fixed,
    "string": _write_string,
    "cstring": _write_compact_string,
    "records": _write_other,
    "array": _write_array,
    "carray": lambda i, arg, env: _write_array(i, arg, env, compact=True),
    "ints": _write_ints,
    "cints": lambda i, arg, env: _write_ints(i, arg, env, compact=True),
    "packed": _write_packed,
    "other": _write_other,
}


def _fused(run: list[tuple[str, struct.Struct]]) -> struct.Struct:
    """One big-endian Struct for a run of fixed-width fields."""
    return struct.Struct(">" + "".join(st.format.lstrip(">!") for _, st in run))


class _IntArrayStructs(dict[int, struct.Struct]):
    """``n`` -> one big-endian Struct of ``n`` items of a fixed-width integer type (after
    their int32 count when ``count``), made when first needed; kept for the short arrays
    that make up nearly all of them (replicas, ISRs), made anew for longer ones."""

    KEPT = 64

    def __init__(self, item: _Fixed, *, count: bool) -> None:
        super().__init__()
        self._format = (">i" if count else ">") + "{}" + item._st.format.lstrip(">!")

    def __missing__(self, n: int) -> struct.Struct:
        st = struct.Struct(self._format.format(n))
        if n <= self.KEPT:
            self[n] = st
        return st


class _PackedStructs(dict[Any, struct.Struct]):
    """The lengths of a packed run's arrays (an int, or a tuple of them) -> the run's Struct
    for them (``format`` has a ``{}`` where each array's length goes), made when first
    needed; kept for short arrays, a bounded number of them."""

    KEPT = 64
    MOST = 1024

    def __init__(self, format: str) -> None:
        super().__init__()
        self._format = format

    def __missing__(self, key: int | tuple[int, ...]) -> struct.Struct:
        counts = key if isinstance(key, tuple) else (key,)
        st = struct.Struct(self._format.format(*counts))
        if max(counts) <= self.KEPT and len(self) < self.MOST:
            self[key] = st
        return st


def _define(name: str, lines: list[str], env: dict[str, Any], qualname: str) -> Any:
    exec(compile("\n".join(lines), f"<trilog.protocol {qualname}>", "exec"), env)
    fn = env[name]
    fn.__qualname__ = qualname
    return fn


class Message(StructValue):
    """Base of generated request/response classes.

    Class attributes: ``API_KEY``, ``API_NAME`` (e.g. "Produce"), ``IS_REQUEST``,
    ``MIN_VERSION``/``MAX_VERSION`` (the versions trilog implements), ``FIRST_FLEXIBLE``
    (the first flexible version, 32768 when none is).
    """

    __slots__ = ()
    API_KEY: ClassVar[int]
    API_NAME: ClassVar[str]
    IS_REQUEST: ClassVar[bool]
    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]
    FIRST_FLEXIBLE: ClassVar[int]

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        """Whether ``version`` is flexible (compact encodings, tagged fields; KIP-482)."""
        return version >= cls.FIRST_FLEXIBLE

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
    *,
    flexible: str | None = None,
) -> type[Message]:
    """Declare a request or response; returns its generated class.

    ``flexible`` is ``"N+"``: the versions from N on are flexible (Kafka's
    ``flexibleVersions``; the header versions follow from it, see ``_framing``)."""
    if flexible is not None and not flexible.endswith("+"):
        raise ValueError(f"{name}: flexible versions are 'N+', not {flexible!r}")
    cls = _MessageStruct(name, fields, doc, flexible=flexible).cls
    assert issubclass(cls, Message)
    cls.API_KEY = api_key
    cls.IS_REQUEST = name.endswith("Request")
    cls.API_NAME = name[: -len("Request")] if cls.IS_REQUEST else name[: -len("Response")]
    cls.MIN_VERSION, cls.MAX_VERSION = versions
    cls.FIRST_FLEXIBLE = _MAX_VERSION + 1 if flexible is None else int(flexible[:-1])
    return cls
