"""The compiler: a parsed schema → the Python source of its writer, which appends byte strings to a
list joined once; values of schemas (defaults, tables, functions) are bound through the
namespace the source runs in, never written into it."""

from __future__ import annotations

import json
import linecache
from collections.abc import Callable
from decimal import Decimal
from itertools import count
from typing import Any

import fastavro
from fastavro.write import LOGICAL_WRITERS

from schemas.avro_writer.checks import (
    _as_bytes,
    _as_list,
    _as_record,
    _bad_boolean,
    _bad_size,
    _bad_symbol,
    _check_map,
    _float_overflow,
    _map_key,
    _not_null,
    _pack_d,
    _pack_f,
    _uuid_text,
)
from schemas.avro_writer.decimals import _decimal_bytes, _decimal_fixed, _unscaler
from schemas.avro_writer.errors import _missing, _wrap, _wrap_item, _wrap_value
from schemas.avro_writer.schema_info import (
    _PRIMITIVES,
    _RECORDS,
    _describe,
    _logical,
    _record_type,
)
from schemas.avro_writer.unions import UnionEmitter
from schemas.avro_writer.validators import _make_validator
from schemas.avro_writer.varints import _LEN, _SMALL, _index, _int, _long, _prefixed_lengths

Writer = Callable[[Any], bytes]


class _Compiler(UnionEmitter):
    def __init__(self, named: dict[str, dict]):
        self.named = named
        self.ns: dict[str, Any] = {
            "_SMALL": _SMALL,
            "_LEN": _LEN,
            "_long": _long,
            "_int": _int,
            "_pf": _pack_f,
            "_pd": _pack_d,
            "_float_overflow": _float_overflow,
            "_bad_boolean": _bad_boolean,
            "_not_null": _not_null,
            "_as_bytes": _as_bytes,
            "_as_list": _as_list,
            "_check_map": _check_map,
            "_map_key": _map_key,
            "_as_record": _as_record,
            "_bad_symbol": _bad_symbol,
            "_bad_size": _bad_size,
            "_uuid_text": _uuid_text,
            "_wrap": _wrap,
            "_wrap_item": _wrap_item,
            "_wrap_value": _wrap_value,
            "_missing": _missing,
            "_float": float,
            "_dict": dict,
            "_list": list,
            "_bytes": bytes,
            "_str": str,
            "_int_cls": int,
            "_bool": bool,
            "_Decimal": Decimal,
            "_len": len,
        }
        self.source: list[str] = []
        self.records: dict[str, str] = {}  # full name -> generated function name
        self.branch_writers: dict[int, str] = {}  # id(schema) -> generated function name
        self.validators: dict[Any, Callable[[Any], bool]] = {}
        self.counter = count()

    # ---- names and constants

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self.counter)}"

    def const(self, value: Any, prefix: str = "K") -> str:
        name = self.fresh(prefix)
        self.ns[name] = value
        return name

    def resolve(self, schema: Any) -> Any:
        """A named reference replaced by its definition (anything else unchanged)."""
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            return self.named[schema]  # fastavro's parser checked that it is defined
        return schema

    # ---- code emission: lines that append the encoding of `var` with `a`

    def emit(
        self,
        schema: Any,
        var: str,
        out: list[str],
        ind: str,
        known: type | None = None,
        prefix: bytes = b"",
    ):
        """Lines appending the encoding of ``var`` (preceded by ``prefix``, a union index)
        with ``a``; ``known`` is the exact class of ``var`` when the caller checked it."""
        schema = self.resolve(schema)
        kind = _record_type(schema)
        logical = _logical(schema)
        if prefix and kind not in ("bytes", "string"):
            out.append(f"{ind}a({prefix!r})")
        if kind == "union":
            return self.emit_union(schema, var, out, ind)
        if kind == "null":
            out.append(f"{ind}if {var} is not None: _not_null({var})")
        elif kind == "boolean":
            out.append(
                f"{ind}a(b'\\x01' if {var} is True else b'\\x00' if {var} is False"
                f" else _bad_boolean({var}))"
            )
        elif kind in ("int", "long", "float", "double"):
            self.emit_number(schema, kind, logical, var, out, ind, known)
        elif kind == "bytes":
            self.emit_bytes(schema, logical, var, out, ind, known, prefix)
        elif kind == "string":
            if logical == "string-uuid" and known is not str:
                out.append(f"{ind}if {var}.__class__ is not _str: {var} = _uuid_text({var})")
            s = self.fresh("s")
            out.append(f"{ind}{s} = {var}.encode()")
            self.emit_sized(s, out, ind, prefix)
        elif kind == "fixed":
            self.emit_fixed(schema, logical, var, out, ind, known)
        elif kind == "enum":
            self.emit_enum(schema, var, out, ind)
        elif kind == "array":
            self.emit_array(schema, var, out, ind, known)
        elif kind == "map":
            self.emit_map(schema, var, out, ind, known)
        elif kind in _RECORDS:
            out.append(f"{ind}{self.record_function(schema)}({var}, a)")
        else:
            raise ValueError(f"unsupported Avro schema {schema!r}")

    def emit_number(self, schema: Any, kind: str, logical: str | None, var: str, out: list[str],
                    ind: str, known: type | None) -> None:
        if kind in ("int", "long"):
            if logical in LOGICAL_WRITERS and known is not int:
                # datetime/date/time (and ISO date strings) converted exactly as fastavro does
                prepare = LOGICAL_WRITERS[logical]
                fn = self.const(lambda v, _p=prepare, _s=schema: _p(v, _s), "prep")
                out.append(f"{ind}if {var}.__class__ is not _int_cls: {var} = {fn}({var})")
            slow = "_long" if kind == "long" else "_int"
            out.append(f"{ind}a(_SMALL[{var} + 8192] if -8192 <= {var} < 8192 else {slow}({var}))")
        elif kind == "double":
            out.append(f"{ind}a(_pd({var}))")
        else:
            out += [
                f"{ind}try:",
                f"{ind}    a(_pf({var}))",
                f"{ind}except OverflowError:",
                f"{ind}    a(_float_overflow({var}))",
            ]

    def emit_bytes(self, schema: Any, logical: str | None, var: str, out: list[str], ind: str,
                   known: type | None, prefix: bytes) -> None:
        if logical == "bytes-decimal":
            precision, scale = schema.get("precision"), schema.get("scale", 0)
            if known is Decimal:
                fn, u = self.const(_unscaler(precision, scale), "unscaled"), self.fresh("u")
                out.append(f"{ind}{u} = {fn}({var})")
                size = f"({u}.bit_length() + 8) >> 3"
                out.append(f"{ind}{var} = {u}.to_bytes({size}, 'big', signed=True)")
            elif known is not bytes:
                fn = self.const(_decimal_bytes(precision, scale), "dec")
                out.append(f"{ind}if {var}.__class__ is not _bytes: {var} = {fn}({var})")
        elif known is not bytes:
            out.append(f"{ind}if {var}.__class__ is not _bytes: {var} = _as_bytes({var})")
        self.emit_sized(var, out, ind, prefix)

    def emit_fixed(self, schema: Any, logical: str | None, var: str, out: list[str], ind: str,
                   known: type | None) -> None:
        size = schema["size"]
        if logical == "fixed-decimal":
            enc = _decimal_fixed(schema.get("precision"), schema.get("scale", 0), size)
            fn = self.const(enc, "dec")
            out.append(f"{ind}if {var}.__class__ is not _bytes: {var} = {fn}({var})")
        elif known is not bytes:
            out.append(f"{ind}if {var}.__class__ is not _bytes: {var} = _as_bytes({var})")
        out.append(f"{ind}if _len({var}) != {size!r}: raise _bad_size({var}, {size!r})")
        out.append(f"{ind}a({var})")

    def emit_enum(self, schema: Any, var: str, out: list[str], ind: str) -> None:
        symbols = schema["symbols"]
        table = self.const({s: _index(i) for i, s in enumerate(symbols)}, "enum")
        args = self.const((schema["name"], list(symbols)), "sym")
        out += [
            f"{ind}try:",
            f"{ind}    a({table}[{var}])",
            f"{ind}except KeyError:",
            f"{ind}    raise _bad_symbol({var}, *{args}) from None",
        ]

    def emit_sized(self, var: str, out: list[str], ind: str, prefix: bytes = b"") -> None:
        """Length then bytes; a union index goes into the length's piece (one append less)."""
        n = self.fresh("n")
        table, slow = "_LEN", f"_long({n})"
        if prefix:
            table, slow = self.const(_prefixed_lengths(prefix), "LEN"), f"{prefix!r} + {slow}"
        out += [
            f"{ind}{n} = _len({var})",
            f"{ind}a({table}[{n}] if {n} < 8192 else {slow})",
            f"{ind}a({var})",
        ]

    def emit_array(self, schema: dict, var: str, out: list[str], ind: str, known: type | None):
        items = schema["items"]
        n, x, e = self.fresh("n"), self.fresh("x"), self.fresh("e")
        desc = self.const(_describe(items), "desc")
        if known is not list:
            out.append(f"{ind}if {var}.__class__ is not _list: {var} = _as_list({var})")
        out += [
            f"{ind}{n} = _len({var})",
            f"{ind}if {n}:",
            f"{ind}    a(_LEN[{n}] if {n} < 8192 else _long({n}))",
            f"{ind}    for {x} in {var}:",
            f"{ind}        try:",
        ]
        self.emit(items, x, out, ind + "            ")
        out += [
            f"{ind}        except Exception as {e}:",
            f"{ind}            raise _wrap_item({e}, {var}, {x}, {desc})",
            f"{ind}a(b'\\x00')",
        ]

    def emit_map(self, schema: dict, var: str, out: list[str], ind: str, known: type | None):
        values = schema["values"]
        n, k, x, e = self.fresh("n"), self.fresh("k"), self.fresh("x"), self.fresh("e")
        desc = self.const(_describe(values), "desc")
        if known is not dict:
            out.append(f"{ind}if {var}.__class__ is not _dict: _check_map({var})")
        out += [
            f"{ind}{n} = _len({var})",
            f"{ind}if {n}:",
            f"{ind}    a(_LEN[{n}] if {n} < 8192 else _long({n}))",
            f"{ind}    for {k}, {x} in {var}.items():",
            f"{ind}        try:",
        ]
        inner = ind + "            "
        kb = self.fresh("s")
        out.append(f"{inner}{kb} = {k}.encode() if {k}.__class__ is _str else _map_key({k})")
        self.emit_sized(kb, out, inner)
        self.emit(values, x, out, inner)
        out += [
            f"{ind}        except Exception as {e}:",
            f"{ind}            raise _wrap_value({e}, {k}, {x}, {desc})",
            f"{ind}a(b'\\x00')",
        ]

    # ---- records

    def record_function(self, schema: dict) -> str:
        """The name of the generated ``(datum, a)`` function of a record (generated once per
        full name, so recursive types just call themselves)."""
        name = schema["name"]
        if name not in self.records:
            fn = self.records[name] = self.fresh("record")
            lines = [f"def {fn}(d, a):"]
            self.record_body(schema, "d", lines, "    ")
            self.source.append("\n".join(lines))
        return self.records[name]

    def record_body(self, schema: dict, d: str, out: list[str], ind: str) -> None:
        out.append(f"{ind}if {d}.__class__ is not _dict: {d} = _as_record({d}, {schema['name']!r})")
        for field in schema["fields"]:
            name, ftype = field["name"], field["type"]
            v, e = self.fresh("v"), self.fresh("e")
            if "default" in field:
                default = field["default"]
            elif (isinstance(ftype, str | list)) and "null" in ftype:
                default = None  # fastavro writes null for a missing field of a nullable type
            else:
                default = _missing
            # a dict subscript in a zero-cost try is the fastest lookup; d is a plain dict
            out += [f"{ind}try:", f"{ind}    {v} = {d}[{name!r}]", f"{ind}except KeyError:"]
            if default is _missing:
                out.append(f"{ind}    raise _missing({name!r}) from None")
            elif default is None or isinstance(default, bool | int | str):
                out.append(f"{ind}    {v} = {default!r}")
            else:
                out.append(f"{ind}    {v} = {self.const(default, 'default')}")
            out.append(f"{ind}try:")
            if ftype in ("float", "double"):
                out.append(f"{ind}    {v} = _float({v})")  # fastavro does this ("NaN" works)
            self.emit(ftype, v, out, ind + "    ")
            desc = self.const(_describe(ftype), "desc")
            out += [
                f"{ind}except Exception as {e}:",
                f"{ind}    raise _wrap({e}, {name!r}, {v}, {desc})",
            ]

    # ---- unions

    # ---- validators: fastavro's _validate, for union resolution only

    def validator(self, schema: Any) -> Callable[[Any], bool]:
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            if schema not in self.validators:
                self.validators[schema] = lambda v: True  # placeholder while recursing
                self.validators[schema] = self.validator(self.resolve(schema))
            return lambda v, _vs=self.validators, _n=schema: _vs[_n](v)
        return _make_validator(self, schema)



# --------------------------------------------------------------------------- public API


_compiled = count(1)


def compile_writer(schema: dict | str | list, prefix: bytes = b"") -> Writer:
    """A function ``write(datum) -> bytes`` giving the Avro binary encoding of ``datum`` with
    ``schema`` (what ``fastavro.schemaless_writer`` writes), preceded by ``prefix``.

    ``schema`` is what fastavro accepts (a dict, a list for a union, a type name) or its JSON
    text. Compile once per schema and reuse the function; it is thread-safe. Invalid data
    raises :class:`AvroValueError` or :class:`AvroTypeError` naming the field path. The
    generated source is in ``write.source`` (and in tracebacks).
    """
    if isinstance(schema, str) and schema.lstrip()[:1] in ("{", "[", '"'):
        schema = json.loads(schema)
    named: dict[str, dict] = {}
    parsed = fastavro.parse_schema(schema, named, _write_hint=False, _force=True)
    comp = _Compiler(named)
    lines = ["def write(d):", f"    p = [{bytes(prefix)!r}]" if prefix else "    p = []"]
    lines += ["    a = p.append", "    try:"]
    top = comp.resolve(parsed)
    if isinstance(top, dict) and top["type"] in _RECORDS:
        comp.record_body(top, "d", lines, "        ")
    else:
        comp.emit(parsed, "d", lines, "        ")
    desc = comp.const(_describe(parsed), "desc")
    lines += [
        "    except Exception as e:",
        f"        raise _wrap(e, None, d, {desc})",
        "    return b''.join(p)",
    ]
    write = _load(comp, lines, _describe(parsed))
    write.__doc__ = f"Avro binary encoding of a datum with {_describe(parsed)}."
    return write


def compile_row_writer(schema: dict | str, fields: list[tuple[int, Callable[[str], Any]]],
                       width: int, prefix: bytes = b"") -> Writer:
    """A function ``write(row) -> bytes`` for a tuple of ``width`` texts (``str``, or None for
    NULL): the encoding with the record ``schema`` whose k-th field holds
    ``fields[k][1](row[fields[k][0]])`` (a parser of ``str`` is the text itself), preceded by
    ``prefix``. The same bytes as :func:`compile_writer`'s writer given that record as a dict,
    without the dict: the row goes from its texts to its bytes in one function.

    Any exception is plain, from wherever the row failed (a parser, a NULL where the schema has
    no null): the caller that wants an error naming the column takes the dict's way then."""
    if isinstance(schema, str):
        schema = json.loads(schema)
    named: dict[str, dict] = {}
    parsed = fastavro.parse_schema(schema, named, _write_hint=False, _force=True)
    if len(parsed["fields"]) != len(fields):
        raise ValueError(f"{len(fields)} values for the {len(parsed['fields'])} fields of "
                         f"{_describe(parsed)}")
    comp = _Compiler(named)
    texts = [f"t{i}" for i in range(width)]
    lines = ["def write(r):", f"    ({', '.join(texts)},) = r" if width else "    () = r",
             f"    p = [{bytes(prefix)!r}]", "    a = p.append"]
    for field, (position, parse) in zip(parsed["fields"], fields, strict=True):
        var, ftype = texts[position], field["type"]
        if parse is not str:
            lines.append(f"    if {var} is not None: {var} = {comp.const(parse, 'parse')}({var})")
        if ftype in ("float", "double"):
            lines.append(f"    {var} = _float({var})")  # as record_body does
        comp.emit(ftype, var, lines, "    ")
    lines.append("    return b''.join(p)")
    write = _load(comp, lines, f"row of {_describe(parsed)}")
    write.__doc__ = f"Avro binary encoding of a row's texts with {_describe(parsed)}."
    return write


def _load(comp: _Compiler, lines: list[str], what: str) -> Writer:
    """The ``write`` function of ``lines`` (after the compiler's other functions), its source in
    ``write.source`` and in tracebacks."""
    comp.source.append("\n".join(lines))
    source = "\n\n".join(comp.source) + "\n"
    # Only generated identifiers and repr() literals appear in the source; schema values
    # (defaults, tables, functions) are bound through the namespace.
    filename = f"<avro writer {next(_compiled)}: {what[:60]}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # tracebacks
    exec(compile(source, filename, "exec"), comp.ns)  # noqa: S102
    write = comp.ns["write"]
    write.source = source  # type: ignore[attr-defined] - for debugging and tests
    return write
