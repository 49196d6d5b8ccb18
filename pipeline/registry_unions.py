"""Avro unions of several non-null types read as Spark's ``from_avro`` reads them: a
struct with one nullable field per non-null branch, ``member0``, ``member1``, ... in
branch order, the branch written set and the others null (``["null", "int", "string"]``
-> ``struct<member0: int, member1: string>``; a union of exactly ``int`` and ``long``
is a long, of exactly ``float`` and ``double`` a double, as Spark's ``SchemaConverters``).

fastavro returns a union's value without saying which branch it was, and Python's types
cannot tell every branch apart (an ``int`` from a ``long``, a string from an enum). So
the schemas are rewritten, **byte for byte the same encoding**: an Avro record of one
field encodes exactly as that field. Each non-null branch of such a union becomes a
record holding the branch in a field named ``member<i>``, and fastavro's value for the
union is then ``{"member<i>": value}``: the Spark struct's row.

* :func:`mark_reader` rewrites the reader schema: branch ``i`` of the ``n``-th such union
  becomes record ``sparklog.u<n>.m<i>``.
* :func:`pair_writer` rewrites a writer schema against the marked reader: where the
  reader has such a union, each writer branch (or the writer's single type) becomes a
  record ``sparklog.u<n>.w<k>.m<i>``, whose unqualified name ``m<i>`` fastavro resolves
  to the reader's branch ``i``: the branch the Avro specification picks, in Java's
  order (``bestBranch``: the same type first, then a named type of the same unqualified
  name or an alias, then a promotion: int -> long -> float -> double, string <-> bytes).
  A writer type no branch takes is left as it is: fastavro then refuses the records that
  write it (undecodable), as Avro does.

A record written with the reader schema itself is read with the marked schema as its
writer (no resolution). Both functions take fastavro's parsed schemas (named types by
full name; ``named``: every named type, references' too) and return plain schemas for
``fastavro.parse_schema`` with no named types given (each defined at its first use).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
_NAMED = ("record", "enum", "fixed")
_PROMOTIONS = {"int": ("long", "float", "double"), "long": ("float", "double"),
               "float": ("double",), "string": ("bytes",), "bytes": ("string",)}
PREFIX = "sparklog.u"  # the namespace of every wrapper record: sparklog.u<n>...
_MAX_DEPTH = 200       # deeper is refused (registry_types refuses beyond 64 anyway)


def _deref(s: Any, named: Mapping[str, Any]) -> Any:
    return named[s] if isinstance(s, str) and s not in _PRIMITIVES and s in named else s


def _base(s: Any, named: Mapping[str, Any]) -> Any:
    """A schema with a named reference and a ``{"type": "int"}`` wrapper resolved."""
    s = _deref(s, named)
    while isinstance(s, dict) and not isinstance(s.get("type"), str):
        s = _deref(s["type"], named)
    if isinstance(s, dict) and s["type"] in _PRIMITIVES and "logicalType" not in s:
        return s["type"]
    return s


def _identity(s: Any) -> str:
    """A resolved branch's identity: a primitive's name, ``array``, ``map``, or a named
    type's full name."""
    if isinstance(s, str):
        return s
    return s["name"] if s["type"] in _NAMED else s["type"]


def several(union: list, named: Mapping[str, Any]) -> bool:
    """Whether a union becomes a ``member<i>`` struct: two or more non-null branches,
    other than exactly int and long, or exactly float and double."""
    kinds = [_identity(_base(b, named)) for b in union if b != "null"]
    return len(kinds) > 1 and set(kinds) not in ({"int", "long"}, {"float", "double"})


def best_branch(writer: Any, branches: list) -> int | None:
    """The index of the reader branch (resolved schemas) a resolved writer type reads
    into, in Java's ``bestBranch`` order; None when none does."""
    w = _identity(writer)
    kinds = [_identity(b) for b in branches]
    if w in kinds:
        return kinds.index(w)
    if isinstance(writer, dict) and writer["type"] in _NAMED:
        short = w.rsplit(".", 1)[-1]
        for i, b in enumerate(branches):
            if isinstance(b, dict) and b["type"] == writer["type"] and (
                    b["name"].rsplit(".", 1)[-1] == short
                    or w in b.get("aliases", ()) or short in b.get("aliases", ())):
                return i
        return None
    for promoted in _PROMOTIONS.get(w, ()):
        if promoted in kinds:
            return kinds.index(promoted)
    return None


class _Rewriter:
    """A schema copied with each named type defined at its first use in the output."""

    def __init__(self, named: Mapping[str, Any]):
        self.named = named
        self.defined: set[str] = set()

    @staticmethod
    def _clean(s: dict) -> dict:
        return {k: v for k, v in s.items() if not k.startswith("__")}  # fastavro's marks

    def _named_def(self, s: dict, body) -> Any:
        if s["name"] in self.defined:
            return s["name"]
        self.defined.add(s["name"])
        return body()

    def _field(self, f: dict, depth: int) -> dict:
        return {**f, "type": self.copy(f["type"], depth + 1)}

    def copy(self, s: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise ValueError(f"schema nested deeper than {_MAX_DEPTH} levels")
        s = _deref(s, self.named)
        if isinstance(s, str):
            return s
        if isinstance(s, list):
            return [self.copy(b, depth + 1) for b in s]
        kind = s.get("type")
        if kind == "record":
            return self._named_def(s, lambda: {**self._clean(s), "fields": [
                self._field(f, depth) for f in s["fields"]]})
        if kind in _NAMED:
            return self._named_def(s, lambda: self._clean(s))
        if kind == "array":
            return {**self._clean(s), "items": self.copy(s["items"], depth + 1)}
        if kind == "map":
            return {**self._clean(s), "values": self.copy(s["values"], depth + 1)}
        if isinstance(kind, (list, dict)):
            return {**self._clean(s), "type": self.copy(kind, depth + 1)}
        return self._clean(s)


class _Marker(_Rewriter):
    def __init__(self, named: Mapping[str, Any]):
        super().__init__(named)
        self.unions = 0

    def _field(self, f: dict, depth: int) -> dict:
        """A field; a union's default (its first branch's value) wrapped as the branch
        is, so a record written without the field reads it as ``member0``."""
        out = super()._field(f, depth)
        union = _deref(f["type"], self.named)
        if ("default" in f and isinstance(union, list) and union[0] != "null"
                and several(union, self.named)):
            out["default"] = {"member0": f["default"]}
        return out

    def copy(self, s: Any, depth: int) -> Any:
        deref = _deref(s, self.named)
        if isinstance(deref, list) and several(deref, self.named):
            n, self.unions = self.unions, self.unions + 1
            out, i = [], 0
            for b in deref:
                if b == "null":
                    out.append("null")
                    continue
                out.append({"type": "record", "name": f"{PREFIX}{n}.m{i}", "fields": [
                    {"name": f"member{i}", "type": self.copy(b, depth + 1)}]})
                i += 1
            return out
        return super().copy(s, depth)


def mark_reader(schema: Any, named: Mapping[str, Any]) -> Any | None:
    """The reader schema with its several-type unions' branches wrapped (module
    docstring), or None when it has none (read as it is). Raises ValueError (nested
    too deeply)."""
    marker = _Marker(named)
    out = marker.copy(schema, 0)
    return out if marker.unions else None


def _definitions(s: Any, out: dict[str, Any]) -> dict[str, Any]:
    """Every named type a plain schema defines, by full name (as fastavro names it)."""
    if isinstance(s, list):
        for b in s:
            _definitions(b, out)
    elif isinstance(s, dict):
        if s.get("type") in _NAMED and "name" in s:
            out[s["name"]] = s
        for key in ("type", "items", "values"):
            if isinstance(s.get(key), (list, dict)):
                _definitions(s[key], out)
        for f in s.get("fields", ()) if s.get("type") == "record" else ():
            _definitions(f["type"], out)
    return out


def _wrapper(s: Any) -> bool:
    return isinstance(s, dict) and str(s.get("name", "")).startswith(PREFIX)


class _Pairer(_Rewriter):
    def __init__(self, named: Mapping[str, Any], reader_named: Mapping[str, Any]):
        super().__init__(named)
        self.reader_named = reader_named

    def pair(self, w: Any, r: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise ValueError(f"schema nested deeper than {_MAX_DEPTH} levels")
        w, r = _deref(w, self.named), _deref(r, self.reader_named)
        if isinstance(r, list) and any(_wrapper(b) for b in r):
            wrappers = [b for b in r if b != "null"]
            if isinstance(w, list):
                return [b if b == "null" else self._wrap(b, k, wrappers, depth)
                        for k, b in enumerate(w)]
            return self._wrap(w, 0, wrappers, depth)
        if isinstance(w, list):
            return [self.pair(b, r, depth + 1) for b in w]
        if isinstance(r, list):  # null and one type: fastavro resolves to the one
            others = [b for b in r if b != "null"]
            return self.pair(w, others[0], depth + 1) if len(others) == 1 else self.copy(w, depth)
        if isinstance(w, dict) and isinstance(r, dict):
            wk, rk = w.get("type"), r.get("type")
            if wk == rk == "record":
                return self._named_def(w, lambda: self._record(w, r, depth))
            if wk == rk == "array":
                return {**self._clean(w), "items": self.pair(w["items"], r["items"], depth + 1)}
            if wk == rk == "map":
                return {**self._clean(w), "values": self.pair(w["values"], r["values"],
                                                              depth + 1)}
        return self.copy(w, depth)

    def _record(self, w: dict, r: dict, depth: int) -> dict:
        readers: dict[str, Any] = {}
        for f in r["fields"]:
            for name in (f["name"], *f.get("aliases", ())):
                readers.setdefault(name, f["type"])
        return {**self._clean(w), "fields": [
            {**f, "type": self.pair(f["type"], readers[f["name"]], depth + 1)
             if f["name"] in readers else self.copy(f["type"], depth + 1)}
            for f in w["fields"]]}

    def _wrap(self, w: Any, k: int, wrappers: list, depth: int) -> Any:
        """Writer branch ``k`` as a record named for the reader branch it resolves to."""
        inner = [wrapper["fields"][0]["type"] for wrapper in wrappers]
        i = best_branch(_base(w, self.named), [_base(t, self.reader_named) for t in inner])
        if i is None:
            return self.copy(w, depth)
        n = wrappers[i]["name"][len(PREFIX):].split(".", 1)[0]
        name = f"{PREFIX}{n}.w{k}.m{i}"
        if name in self.defined:
            return name
        self.defined.add(name)
        return {"type": "record", "name": name,
                "fields": [{"name": f"member{i}", "type": self.pair(w, inner[i], depth + 1)}]}


def pair_writer(writer: Any, named: Mapping[str, Any], marked_reader: Any) -> Any:
    """The writer schema rewritten to resolve against ``mark_reader``'s output (module
    docstring). Raises ValueError (nested too deeply)."""
    return _Pairer(named, _definitions(marked_reader, {})).pair(writer, marked_reader, 0)
