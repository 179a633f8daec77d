"""The compiler: a parsed schema → the Python source of its reader, which reads a ``bytes`` object
by integer position (see the package's docstring)."""

from __future__ import annotations

import json
import linecache
import struct
from collections.abc import Callable
from itertools import count
from typing import Any

import fastavro

from schemas.avro_reader.runtime import (
    _SIZE,
    _ZZ,
    _as_bytes,
    _bad_count,
    _bad_index,
    _index,
    _leftover,
    _logical_reader,
    _long,
    _malformed,
    _size,
    _Unsupported,
)

#: ``read(data, start) -> datum``: the datum encoded in ``data[start:]`` (all of it).
Reader = Callable[[bytes, int], Any]

# --------------------------------------------------------------------------- compiler

_PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))
_RECORDS = frozenset(("record", "error"))


def _kind(schema: Any) -> str:
    if isinstance(schema, dict):
        return schema["type"]
    return "union" if isinstance(schema, list) else schema


def _describe(schema: Any) -> str:
    if isinstance(schema, list):
        return "union [" + ", ".join(_describe(s) for s in schema) + "]"
    if isinstance(schema, dict):
        name = schema.get("name")
        return f"{schema['type']} {name}" if name else str(schema["type"])
    return str(schema)


class _Compiler:
    def __init__(self, named: dict[str, dict]):
        self.named = named
        self.ns: dict[str, Any] = {
            "_ZZ": _ZZ,
            "_SIZE": _SIZE,
            "_long": _long,
            "_size": _size,
            "_index": _index,
            "_bad_index": _bad_index,
            "_bad_count": _bad_count,
            "_malformed": _malformed,
            "_leftover": _leftover,
            "_as_bytes": _as_bytes,
            "_uf": struct.Struct("<f").unpack_from,
            "_ud": struct.Struct("<d").unpack_from,
            "_bytes": bytes,
            "_len": len,
        }
        self.source: list[str] = []
        self.records: dict[str, str] = {}  # full name -> function, for recursive records
        self.inlining: list[str] = []  # the records being inlined, outermost first
        self.min_sizes: dict[str, int] = {}
        self.loops = 0  # loops around the code being emitted (Python allows 20 in a function)
        self.counter = count()

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self.counter)}"

    def const(self, value: Any, prefix: str = "K") -> str:
        name = self.fresh(prefix)
        self.ns[name] = value
        return name

    def resolve(self, schema: Any) -> Any:
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            return self.named[schema]  # fastavro's parser checked that it is defined
        return schema

    def min_size(self, schema: Any) -> int:
        """The fewest bytes a datum of ``schema`` takes (0 for a record still being sized:
        recursion only ever lowers the bound)."""
        schema = self.resolve(schema)
        kind = _kind(schema)
        if kind == "union":
            return 1 + min(self.min_size(s) for s in schema)
        if kind in _RECORDS:
            name = schema["name"]
            if name not in self.min_sizes:
                self.min_sizes[name] = 0
                self.min_sizes[name] = sum(self.min_size(f["type"]) for f in schema["fields"])
            return self.min_sizes[name]
        if kind == "fixed":
            return schema["size"]
        return {"null": 0, "float": 4, "double": 8}.get(kind, 1)

    # ---- code emission: lines that read a datum of `schema` into `t`, starting at p + off

    def emit(self, schema: Any, t: str, out: list[str], ind: str, off: int = 0) -> None:
        """Lines reading a datum of ``schema`` at ``p + off`` into ``t``, leaving ``p`` after
        it. ``off`` is what the caller consumed without moving ``p`` (a union index byte)."""
        schema = self.resolve(schema)
        kind = _kind(schema)
        at = f"p + {off}" if off else "p"
        convert = _logical_reader(schema)
        if kind == "null":
            out.append(f"{ind}{t} = None")
            if off:
                out.append(f"{ind}p += {off}")
        elif kind == "boolean":
            out += [f"{ind}{t} = d[{at}] != 0", f"{ind}p += {off + 1}"]
        elif kind in ("int", "long"):
            self.emit_long(t, out, ind, off)
        elif kind in ("float", "double"):
            fn, size = ("_uf", 4) if kind == "float" else ("_ud", 8)
            out += [f"{ind}{t} = {fn}(d, {at})[0]", f"{ind}p += {off + size}"]
        elif kind in ("bytes", "string"):
            n = self.fresh("n")
            out += [
                f"{ind}{n} = _SIZE[d[{at}]]",
                f"{ind}if {n} < 0: {n}, p = _size(d, {at})",
                f"{ind}else: p += {off + 1}",
            ]
            value = f"d[p:p + {n}]"
            if kind == "string":
                value += ".decode()"
            out += [f"{ind}{t} = {value}", f"{ind}p += {n}"]
        elif kind == "fixed":
            size = schema["size"]
            out += [f"{ind}{t} = d[{at}:p + {off + size}]", f"{ind}p += {off + size}"]
        elif kind == "enum":
            symbols = {2 * i: s for i, s in enumerate(schema["symbols"])}
            table = self.const(symbols, "symbols")
            what = self.const(_describe(schema), "what")
            self.emit_index(out, ind, off)
            out += [
                f"{ind}if b in {table}: {t} = {table}[b]",
                f"{ind}else: raise _bad_index(b, {what})",
                f"{ind}p += 1",
            ]
        elif kind in ("union", "array", "map") and (self.loops > 7 or len(ind) > 160):
            # nested too deep for one function (Python's limits on loops and indentation)
            if off:
                out.append(f"{ind}p += {off}")
            out.append(f"{ind}{t}, p = {self.function(schema)}(d, p)")
        elif kind == "union":
            self.emit_union(schema, t, out, ind, off)
        elif kind in ("array", "map"):
            self.loops += 2
            self.emit_blocks(schema, t, out, ind, off)
            self.loops -= 2
        elif kind in _RECORDS:
            if off:
                out.append(f"{ind}p += {off}")
            name = schema["name"]
            if name in self.inlining:  # recursive: a function of its own
                out.append(f"{ind}{t}, p = {self.record_function(schema)}(d, p)")
            else:
                self.inlining.append(name)
                self.record_body(schema, t, out, ind)
                self.inlining.pop()
        else:
            raise _Unsupported(f"unsupported Avro schema {schema!r}")
        if convert is not None:
            out.append(f"{ind}{t} = {self.const(convert, 'logical')}({t})")

    def emit_long(self, t: str, out: list[str], ind: str, off: int) -> None:
        at = f"p + {off}" if off else "p"
        out += [
            f"{ind}b = d[{at}]",
            f"{ind}if b < 128:",
            f"{ind}    {t} = _ZZ[b]",
            f"{ind}    p += {off + 1}",
            f"{ind}else:",
            f"{ind}    {t}, p = _long(d, {at})",
        ]

    def emit_index(self, out: list[str], ind: str, off: int) -> None:
        """``b``: the unsigned varint of a union or enum index at ``p + off``, ``p`` moved to
        its last byte (``p + off`` stays there for one-byte indexes, as they always are)."""
        at = f"p + {off}" if off else "p"
        out.append(f"{ind}b = d[{at}]")
        if off:
            out.append(f"{ind}p += {off}")
        out.append(f"{ind}if b > 127: b, p = _index(d, p)")

    def emit_union(self, branches: list, t: str, out: list[str], ind: str, off: int) -> None:
        self.emit_index(out, ind, off)
        order = sorted(range(len(branches)), key=lambda i: branches[i] == "null")  # null last
        keyword = "if"
        for i in order:
            out.append(f"{ind}{keyword} b == {2 * i}:")
            self.emit(branches[i], t, out, ind + "    ", off=1)
            keyword = "elif"
        what = self.const(_describe(branches), "what")
        out.append(f"{ind}else: raise _bad_index(b, {what})")

    def emit_blocks(self, schema: dict, t: str, out: list[str], ind: str, off: int) -> None:
        """An array or a map: blocks of items, each block's count first (negative: then the
        block's size in bytes, which is skipped), until a zero count."""
        is_map = schema["type"] == "map"
        item_schema = schema["values"] if is_map else schema["items"]
        if not is_map and self.min_size(item_schema) == 0:
            raise _Unsupported("an array whose items take no bytes")
        n, x, k = self.fresh("n"), self.fresh("x"), self.fresh("k")
        out.append(f"{ind}{t} = {{}}" if is_map else f"{ind}{t} = []")
        self.emit_long(n, out, ind, off)
        inner = ind + "        "
        out += [
            f"{ind}while {n}:",
            f"{ind}    if {n} < 0:",
            f"{ind}        {n} = -{n}",
            f"{ind}        b, p = _long(d, p)",
            f"{ind}    if {n} > _len(d) - p: raise _bad_count({n}, p, _len(d) - p)",
            f"{ind}    for _ in range({n}):",
        ]
        if is_map:
            self.emit("string", k, out, inner)
        self.emit(item_schema, x, out, inner)
        out.append(f"{inner}{t}[{k}] = {x}" if is_map else f"{inner}{t}.append({x})")
        self.emit_long(n, out, ind + "    ", 0)

    def record_body(self, schema: dict, t: str, out: list[str], ind: str) -> None:
        """Each field into a variable of its own, then the dict (fields in schema order)."""
        items = []
        for field in schema["fields"]:
            v = self.fresh("v")
            self.emit(field["type"], v, out, ind)
            items.append(f"{field['name']!r}: {v}")
        out.append(f"{ind}{t} = {{{', '.join(items)}}}")

    def record_function(self, schema: dict) -> str:
        """The generated ``(d, p) -> (datum, p)`` function of a recursive record."""
        name = schema["name"]
        if name not in self.records:
            fn = self.records[name] = self.fresh("record")
            saved, self.inlining = self.inlining, [name]
            self.function_source(fn, lambda lines: self.record_body(schema, "r", lines, "    "))
            self.inlining = saved
        return self.records[name]

    def function(self, schema: Any) -> str:
        """A generated ``(d, p) -> (datum, p)`` function reading ``schema``."""
        fn = self.fresh("read")
        self.function_source(fn, lambda lines: self.emit(schema, "r", lines, "    "))
        return fn

    def function_source(self, fn: str, body: Callable[[list[str]], None]) -> None:
        lines = [f"def {fn}(d, p):"]
        saved, self.loops = self.loops, 0
        body(lines)
        self.loops = saved
        lines.append("    return r, p")
        self.source.append("\n".join(lines))


# --------------------------------------------------------------------------- public API

_compiled = count(1)


def compile_reader(schema: dict | str | list) -> Reader | None:
    """A function ``read(data, start) -> datum`` decoding the Avro binary encoding of one datum
    of ``schema`` in ``data[start:]``: what ``fastavro.schemaless_reader`` returns for it, or
    None for a schema not compiled (see the module docstring; read those with fastavro).

    ``schema`` is what fastavro accepts (a dict, a list for a union, a type name, a schema
    fastavro already parsed) or its JSON text. Compile once per schema and reuse the function;
    it is thread-safe. ``data`` is ``bytes`` (other bytes-like objects are copied). Data that
    is not exactly one datum of the schema raises :class:`AvroReadError`. The generated source
    is in ``read.source`` (and in tracebacks).
    """
    if isinstance(schema, str) and schema.lstrip()[:1] in ("{", "[", '"'):
        schema = json.loads(schema)
    named: dict[str, dict] = {}
    parsed = fastavro.parse_schema(schema, named, _write_hint=False, _force=True)
    comp = _Compiler(named)
    body: list[str] = []
    try:
        comp.emit(parsed, "t", body, "        ")
    except (_Unsupported, LookupError, ValueError, TypeError, ArithmeticError):
        return None  # e.g. a decimal precision no Context takes: fastavro fails on it too
    lines = [
        "def read(d, p):",
        "    if d.__class__ is not _bytes: d = _as_bytes(d)",
        "    start = p",
        "    try:",
        *body,
        "    except Exception as e:",
        "        raise _malformed(e, d, p) from None",
        "    if p != _len(d): raise _leftover(d, p, start)",
        "    return t",
    ]
    comp.source.append("\n".join(lines))
    source = "\n\n".join(comp.source) + "\n"
    # Only generated identifiers, field names as repr() literals and integers appear in the
    # source; everything else (symbols, converters) is bound through the namespace.
    filename = f"<avro reader {next(_compiled)}: {_describe(parsed)[:60]}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), comp.ns)  # noqa: S102
    read = comp.ns["read"]
    read.__doc__ = f"The datum of {_describe(parsed)[:60]} encoded in data[start:]."
    read.source = source  # type: ignore[attr-defined] - for debugging and tests
    return read
