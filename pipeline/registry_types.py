"""Spark (Arrow) types of registry schemas: an Avro schema or a JSON Schema as the type of
the column its records decode into.

**Avro**, as Spark's ``from_avro`` (``SchemaConverters``) maps it: record -> struct,
enum -> string, array -> array, map -> map<string, _>, fixed and bytes -> binary,
int/long/float/double/boolean/string as themselves, a union of ``null`` and one type
-> that type (nullable); logical types ``date`` -> date, ``timestamp-millis`` /
``timestamp-micros`` -> timestamp, ``local-timestamp-*`` -> timestamp_ntz, ``decimal``
-> decimal(p, s) (p <= 38), ``uuid`` -> string, ``time-millis`` -> int (ms),
``time-micros`` and the ``*-nanos`` ones -> long (their numbers: Spark has no such
type); a union of two or more non-null types -> a struct of one field per non-null
branch, ``member0``, ``member1``, ... in branch order (exactly int and long -> long,
exactly float and double -> double), as Spark's; :mod:`pipeline.registry_unions` reads
the branch written into its field. Refused (:class:`~pipeline.errors.UnusableSchema`,
naming the field): recursive records (Spark refuses them too, by default), decimals
wider than 38 digits, an int-and-long union with a logical type.

**JSON Schema**: ``object`` with ``properties`` -> struct (in ``properties`` order),
``object`` with only ``additionalProperties: {schema}`` -> map<string, _>, ``array``
with ``items`` -> array, ``string`` (and a string ``enum``) -> string, ``integer`` ->
long, ``number`` -> double, ``boolean`` -> boolean; ``type: [T, "null"]`` and ``oneOf``
/ ``anyOf`` of ``null`` and one schema -> T; ``$ref`` to ``#/...`` in the same
document, or to a reference's name. Refused, naming the path: anything else (``allOf``,
unions of several types, a schema without a type, recursion).

Every column and field is nullable: a table's schema then evolves by adding columns,
which Delta can follow (a non-null column cannot be added to a table with rows).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa

from pipeline.errors import UnusableSchema
from pipeline.registry_unions import several

#: Avro logical types decoded as their underlying numbers or text: fastavro converts by
#: the writer's logical type (``uuid`` to ``uuid.UUID``, ``time-*`` to ``datetime.time``),
#: which Arrow cannot take, so they are removed from every schema before fastavro parses it
PLAIN_LOGICAL = frozenset({"uuid", "time-millis", "time-micros", "timestamp-nanos",
                           "local-timestamp-nanos"})
_AVRO_PRIMITIVES = {
    "null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
    "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(),
    "string": pa.string(),
}
_TS = pa.timestamp("us", tz="UTC")
_MAX_DEPTH = 64  # nesting deeper than this is refused (a hostile schema, not a real one)


def plain_logical(schema: Any) -> Any:
    """A copy of an Avro schema (parsed JSON) without the logical types of
    :data:`PLAIN_LOGICAL`."""
    if isinstance(schema, list):
        return [plain_logical(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: plain_logical(v) if k in ("type", "items", "values", "fields") else v
           for k, v in schema.items() if k != "logicalType" or v not in PLAIN_LOGICAL}
    if "fields" in schema and isinstance(schema["fields"], list):
        out["fields"] = [{**f, "type": plain_logical(f.get("type"))} if isinstance(f, dict)
                         else f for f in schema["fields"]]
    return out


def avro_arrow_type(schema: Any, named: Mapping[str, Any], *, subject: str) -> pa.DataType:
    """The Arrow type of a parsed Avro schema (``fastavro.parse_schema``'s output;
    ``named``: its named types by full name). Raises UnusableSchema naming the field."""
    return _avro(schema, named, subject, "", (), 0)


def _avro(s: Any, named: Mapping[str, Any], subject: str, path: str, seen: tuple[str, ...],
          depth: int) -> pa.DataType:
    where = path or "the top level"
    if depth > _MAX_DEPTH:
        raise UnusableSchema(subject, f"{where}: nested deeper than {_MAX_DEPTH} levels")
    if isinstance(s, str):
        if s in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[s]
        if s in seen:
            raise UnusableSchema(subject, f"{where}: type {s} contains itself (a recursive "
                                 "record has no Spark type)")
        if s not in named:
            raise UnusableSchema(subject, f"{where}: unknown type {s}")
        return _avro(named[s], named, subject, path, seen, depth + 1)
    if isinstance(s, list):
        branches = [b for b in s if b != "null"]
        if len(branches) == 1:
            return _avro(branches[0], named, subject, path, seen, depth + 1)
        if not branches:
            return pa.null()
        if several(s, named):
            return pa.struct([pa.field(f"member{i}", _avro(b, named, subject,
                                                           f"{path}.member{i}".lstrip("."),
                                                           seen, depth + 1))
                              for i, b in enumerate(branches)])
        widest = [_avro(b, named, subject, path, seen, depth + 1) for b in branches]
        if not all(t in (pa.int32(), pa.int64(), pa.float32(), pa.float64()) for t in widest):
            raise UnusableSchema(subject, f"{where}: a union of int and long (or float and "
                                 "double) with a logical type has no one column type")
        return pa.int64() if pa.int64() in widest or pa.int32() in widest else pa.float64()
    if not isinstance(s, dict):
        raise UnusableSchema(subject, f"{where}: not an Avro schema")
    logical = _avro_logical(s, subject, where)
    if logical is not None:
        return logical
    kind = s.get("type")
    if kind == "record":
        name = s.get("name", "")
        inner = seen + (name,)
        return pa.struct([pa.field(f["name"], _avro(f["type"], named, subject,
                                                    f"{path}.{f['name']}".lstrip("."), inner,
                                                    depth + 1))
                          for f in s.get("fields", ())])
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    if kind == "array":
        return pa.list_(pa.field("element", _avro(s["items"], named, subject, f"{path}[]",
                                                  seen, depth + 1)))
    if kind == "map":
        return pa.map_(pa.string(), _avro(s["values"], named, subject, f"{path}{{}}", seen,
                                          depth + 1))
    return _avro(kind, named, subject, path, seen, depth + 1)


def _avro_logical(s: dict, subject: str, where: str) -> pa.DataType | None:
    logical, base = s.get("logicalType"), s.get("type")
    if logical == "date" and base == "int":
        return pa.date32()
    if logical in ("timestamp-millis", "timestamp-micros") and base == "long":
        return _TS
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and base == "long":
        return pa.timestamp("us")
    if logical == "decimal" and base in ("bytes", "fixed"):
        precision, scale = s.get("precision"), s.get("scale", 0)
        if not isinstance(precision, int) or not 0 < precision <= 38:
            raise UnusableSchema(subject, f"{where}: decimal precision {precision!r} does not "
                                 "fit Spark's decimal (at most 38 digits)")
        return pa.decimal128(precision, scale)
    return None


# -- JSON Schema ------------------------------------------------------------------------
Resolver = Callable[[str], Any]  # a $ref that is not "#/..." -> the referenced document


def json_schema_arrow_type(schema: Any, *, subject: str,
                           resolve: Resolver | None = None) -> pa.DataType:
    """The Arrow type of a JSON Schema (parsed JSON); ``resolve`` gives the document a
    ``$ref`` to another schema (a registry reference's name) names. Raises UnusableSchema
    naming the path."""
    return _json(schema, schema, subject, "$", (), resolve, 0)


def _pointer(root: Any, ref: str, subject: str, path: str) -> Any:
    node = root
    for part in ref.removeprefix("#").strip("/").split("/") if ref != "#" else ():
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            raise UnusableSchema(subject, f"{path}: $ref {ref!r} points at nothing")
        node = node[part]
    return node


def _json(s: Any, root: Any, subject: str, path: str, refs: tuple[str, ...],
          resolve: Resolver | None, depth: int) -> pa.DataType:
    if depth > _MAX_DEPTH:
        raise UnusableSchema(subject, f"{path}: nested deeper than {_MAX_DEPTH} levels")
    if not isinstance(s, dict):
        raise UnusableSchema(subject, f"{path}: a schema without a type has no column type")
    nxt = depth + 1
    if "$ref" in s:
        ref = str(s["$ref"])
        if ref in refs:
            raise UnusableSchema(subject, f"{path}: $ref {ref!r} contains itself (a recursive "
                                 "schema has no Spark type)")
        if ref.startswith("#"):
            return _json(_pointer(root, ref, subject, path), root, subject, path, refs + (ref,),
                         resolve, nxt)
        doc = resolve(ref) if resolve else None
        if doc is None:
            raise UnusableSchema(subject, f"{path}: $ref {ref!r} is not one of the schema's "
                                 "references")
        return _json(doc, doc, subject, path, refs + (ref,), resolve, nxt)
    for key in ("oneOf", "anyOf"):
        if key in s:
            options = [o for o in s[key] if not (isinstance(o, dict) and o.get("type") == "null")]
            if len(options) != 1:
                raise UnusableSchema(subject, f"{path}: {key} of several schemas has no one "
                                     "column type")
            return _json(options[0], root, subject, path, refs, resolve, nxt)
    kind = s.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) != 1:
            raise UnusableSchema(subject, f"{path}: type {kind} has no one column type")
        kind = kinds[0]
    if kind is None and "enum" in s and all(isinstance(v, str) for v in s["enum"]):
        kind = "string"
    if kind == "object":
        props = s.get("properties")
        if isinstance(props, dict) and props:
            return pa.struct([pa.field(str(name), _json(sub, root, subject, f"{path}.{name}",
                                                        refs, resolve, nxt))
                              for name, sub in props.items()])
        extra = s.get("additionalProperties")
        if isinstance(extra, dict):
            return pa.map_(pa.string(), _json(extra, root, subject, f"{path}.*", refs, resolve,
                                              nxt))
        raise UnusableSchema(subject, f"{path}: an object without properties has no columns")
    if kind == "array":
        if not isinstance(s.get("items"), dict):
            raise UnusableSchema(subject, f"{path}: an array needs one items schema")
        return pa.list_(pa.field("element", _json(s["items"], root, subject, f"{path}[]",
                                                  refs, resolve, nxt)))
    simple = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(),
              "boolean": pa.bool_()}
    if kind in simple:
        return simple[kind]
    raise UnusableSchema(subject, f"{path}: type {kind!r} has no column type")


def spark_type(arrow_type: pa.DataType):
    """The Spark type of an Arrow type, every field nullable (see the module docstring)."""
    from pyspark.sql.pandas.types import from_arrow_type

    return _nullable(from_arrow_type(arrow_type))


def _nullable(t):
    from pyspark.sql.types import ArrayType, MapType, StructField, StructType

    if isinstance(t, StructType):
        return StructType([StructField(f.name, _nullable(f.dataType), True) for f in t.fields])
    if isinstance(t, ArrayType):
        return ArrayType(_nullable(t.elementType), True)
    if isinstance(t, MapType):
        return MapType(t.keyType, _nullable(t.valueType), True)
    return copy.copy(t)
