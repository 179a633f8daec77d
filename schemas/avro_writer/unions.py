"""Unions: the branch fastavro's rules pick for a datum, found once per exact class where the
value does not matter (generated as a class dispatch), else by validating each branch in order
at run time."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

from schemas.avro_writer.errors import AvroValueError, _show
from schemas.avro_writer.schema_info import (
    _DISPATCH_CLASSES,
    _NAMED,
    _describe,
    _logical,
    _record_type,
)
from schemas.avro_writer.varints import _index


class UnionEmitter:
    """The compiler's code for unions (a mixin of its ``_Compiler``: expects its ``resolve``,
    ``emit``, ``fresh``, ``const``, ``validator``, ``ns``, ``source`` and ``branch_writers``)."""


    def emit_union(self, branches: list, var: str, out: list[str], ind: str) -> None:
        resolved = [self.resolve(b) for b in branches]
        general = self.union_function(branches)
        dispatch = [(cls, self.direct_branch(resolved, branches, cls)) for cls in _DISPATCH_CLASSES]
        # bytes as an array (of ints) is fastavro's doing, not worth generated code of its own
        dispatch = [
            (cls, i)
            for cls, i in dispatch
            if i is not None and not (cls is bytes and _record_type(resolved[i]) == "array")
        ]
        keyword = "if"
        if "null" in resolved:  # only the null branch accepts None, wherever it is
            out += [f"{ind}if {var} is None:", f"{ind}    a({_index(resolved.index('null'))!r})"]
            keyword = "elif"
        cls_expr = f"{var}.__class__"
        if len(dispatch) > 1:  # look the class up once
            if keyword == "elif":
                out.append(f"{ind}else:")
                ind += "    "
            cls_expr = self.fresh("c")
            out.append(f"{ind}{cls_expr} = {var}.__class__")
            keyword = "if"
        for cls, i in dispatch:
            out.append(f"{ind}{keyword} {cls_expr} is {self.class_name(cls)}:")
            keyword = "elif"
            if resolved[i] == "boolean":  # index and value in one piece
                true, false = _index(i) + b"\x01", _index(i) + b"\x00"
                out.append(f"{ind}    a({true!r} if {var} else {false!r})")
            else:
                self.emit(branches[i], var, out, ind + "    ", known=cls, prefix=_index(i))
        if keyword == "if":
            out.append(f"{ind}{general}({var}, a)")
        else:
            out += [f"{ind}else:", f"{ind}    {general}({var}, a)"]

    def class_name(self, cls: type) -> str:
        fixed = {bool: "_bool", int: "_int_cls", float: "_float", str: "_str", bytes: "_bytes"}
        fixed |= {Decimal: "_Decimal", dict: "_dict", list: "_list"}
        return fixed.get(cls) or self.const(cls, "cls")

    def direct_branch(self, resolved: list, branches: list, cls: type) -> int | None:
        """The branch fastavro picks for *every* datum of exact class ``cls`` that it accepts
        at all, when that does not depend on the value; None when it does (or none fits)."""
        candidates = [i for i, b in enumerate(resolved) if _may_accept(b, cls)]
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]
        i = candidates[0]
        if not _always_accepts(resolved[i], cls):
            return None
        kind = _record_type(resolved[i])
        if kind == "record":
            return None
        if kind == "float":  # fastavro prefers a later double
            later = [
                j for j in range(i + 1, len(branches)) if _record_type(branches[j]) == "double"
            ]
            return later[0] if later else i
        return i

    def union_function(self, branches: list) -> str:
        """The name of a ``(datum, a)`` function resolving the branch with fastavro's rules
        (validation of each branch in order) and writing the datum: the general path."""
        key = id(branches)
        if key in self.branch_writers:
            return self.branch_writers[key]
        fn = self.branch_writers[key] = self.fresh("union")
        infos = []
        for i, branch in enumerate(branches):
            raw_type = _record_type(branch)
            name = branch["name"] if raw_type in _NAMED else raw_type
            target = self.resolve(branch)
            fields = None
            if _record_type(target) == "record":
                fields = frozenset(f["name"] for f in target["fields"])
            writer = self.branch_function(branch)
            infos.append(
                (i, name, raw_type, _record_type(target), fields, self.validator(branch), writer)
            )
        self.ns[fn] = _union_writer(infos, self.ns, _describe(branches))
        return fn

    def branch_function(self, schema: Any) -> str:
        fn = self.fresh("branch")
        lines = [f"def {fn}(v, a):"]
        self.emit(schema, "v", lines, "    ")
        self.source.append("\n".join(lines))
        return fn

    # ---- validators: fastavro's _validate, for union resolution only


def _may_accept(schema: Any, cls: type) -> bool:
    """Could some value of exact class ``cls`` pass fastavro's validation of ``schema``?"""
    kind = _record_type(schema)
    logical = _logical(schema)
    if kind in ("int", "long"):
        extra = {
            "int-date": (date, datetime, str),
            "int-time-millis": (time,),
            "long-time-micros": (time,),
            "long-timestamp-millis": (datetime,),
            "long-timestamp-micros": (datetime,),
            "long-local-timestamp-millis": (datetime,),
            "long-local-timestamp-micros": (datetime,),
        }.get(logical or "", ())
        return cls is int or cls in extra
    accepted = {
        "null": (),
        "boolean": (bool,),
        "float": (int, float),
        "double": (int, float),
        "string": (str, uuid.UUID) if logical == "string-uuid" else (str,),
        "bytes": (bytes, Decimal) if logical == "bytes-decimal" else (bytes,),
        "fixed": (bytes, Decimal) if logical == "fixed-decimal" else (bytes,),
        "enum": (str,),
        "array": (list, bytes),  # bytes are a Sequence (of ints) to fastavro's validation
        "map": (dict,),
        "record": (dict,),
        "error": (dict,),
    }.get(kind, ())
    return cls in accepted


def _always_accepts(schema: Any, cls: type) -> bool:
    """Does every value of exact class ``cls`` pass (or make fastavro raise) for ``schema``?"""
    kind = _record_type(schema)
    if kind in ("boolean", "string", "float", "double", "bytes"):
        return _may_accept(schema, cls)
    if kind in ("int", "long"):
        return cls is not int and _may_accept(schema, cls)
    return False


def _union_writer(infos: list, ns: dict, desc: str) -> Callable[[Any, Callable], None]:
    indexes = [_index(i) for i in range(len(infos))]
    by_name = {}
    for i, name, *_ in infos:
        by_name.setdefault(name, i)

    def write(v: Any, a: Callable[[bytes], None]) -> None:
        if isinstance(v, tuple):  # fastavro's tuple notation: (type name, datum)
            name, v = v
            best = by_name.get(name, -1)
            if best < 0:
                raise AvroValueError(f"union type name {name!r} is not a branch of {desc}")
        else:
            best, most, could_be_float = -1, -1, False
            for i, _name, raw_type, kind, fields, valid, _writer in infos:
                if could_be_float:
                    if raw_type == "double":
                        best = i
                        break
                    continue
                if valid(v):
                    if kind == "record":
                        matched = len(fields.intersection(v))
                        if matched > most:
                            best, most = i, matched
                    elif kind == "float":
                        best, could_be_float = i, True
                    else:
                        best = i
                        break
            if best < 0:
                raise AvroValueError(f"no branch of {desc} accepts {_show(v)}")
        a(indexes[best])
        ns[infos[best][6]](v, a)

    return write
