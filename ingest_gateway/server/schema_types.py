"""Schema types of the registry: parse, normalise and check compatibility.

- **AVRO**: parsed by Apache's ``avro`` package (names, namespaces, defaults, logical
  types), referenced named types made visible through a shared ``Names``;
  compatibility is ``avro.compatibility`` (the Avro specification's schema resolution
  rules, the port of Java's ``SchemaCompatibility`` that Confluent uses).
- **JSON**: the document must be a valid JSON Schema (``jsonschema``'s meta-schema
  check of its declared draft, Draft 7 by default). Compatibility covers a subset of
  Confluent's rules (see :func:`json_incompatibilities`): type narrowing, properties
  added to or removed from closed/open content models, required properties added,
  enum narrowing, recursively through properties and items. Numeric and string
  bounds, combinators (``oneOf``/``anyOf``/``allOf``), ``$ref`` and
  ``patternProperties`` are NOT compared.
- **PROTOBUF**: stored and served as given (``.proto`` text or a base64
  ``FileDescriptorProto``), compiled by ``protoc`` (``schema_protobuf``: invalid is
  42201); compatibility is Confluent's (``schema_protobuf_compat``).

Every parse is bounded: the schema text arrives inside a request body the gateway
already bounded, and nesting deeper than :data:`MAX_DEPTH` is refused before a
recursive parser could run out of stack.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

TYPES = ("AVRO", "JSON", "PROTOBUF")
#: deepest nesting of a schema's JSON accepted (Avro and JSON Schema): far past any
#: real schema, well under Python's recursion limit for the parsers that recurse
MAX_DEPTH = 64
#: Bounds on an Avro schema's shape, because Apache avro's parser is quadratic in a
#: record's fields (20,000 fields: 4.7 s) and its compatibility checker cubic in a
#: union's branches (it hashes a union's whole JSON at every memoised step: 1,000
#: branches, 67 s), all of it holding the GIL the gateway's event loop needs.
#: 5,000 fields parse in ~0.4-1.2 s here; a union of n branches costs ~n^2 steps of
#: ~30 us to compare, so the sum of n^2 over a schema's unions is bounded too (20,000:
#: 5,000 optional ["null", T] fields, or two unions of 100; at most ~0.6 s).
MAX_FIELDS, MAX_UNION, MAX_UNION_WORK = 5000, 100, 20_000


class InvalidSchemaText(ValueError):
    """The schema does not parse as its type says (the message says why)."""


def _depth(doc: Any, limit: int) -> None:
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            raise InvalidSchemaText(f"nested deeper than {limit} levels")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


def _json(text: str) -> Any:
    try:
        doc = json.loads(text)
    except RecursionError:
        raise InvalidSchemaText(f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as e:
        raise InvalidSchemaText(f"not JSON: {e}") from None
    _depth(doc, MAX_DEPTH)
    return doc


def normalize(schema_type: str, text: str) -> str:
    """The text stored for a schema: compact JSON (key order kept) for AVRO and JSON,
    the text as given for PROTOBUF. Raises InvalidSchemaText."""
    if schema_type == "PROTOBUF":
        if not text.strip():
            raise InvalidSchemaText("empty Protobuf schema")
        return text
    return json.dumps(_json(text), separators=(",", ":"), ensure_ascii=False)


def parse(schema_type: str, text: str, referenced: list[tuple[str, str]]) -> Any:
    """The parsed schema (for compatibility checks); ``referenced`` are the (type, text) of
    the schemas it references, dependencies first; for PROTOBUF the (import name, text)
    of the Protobuf ones, as its imports name them. Raises InvalidSchemaText."""
    if schema_type == "AVRO":
        return _parse_avro(text, referenced)
    if schema_type == "JSON":
        return _parse_json_schema(text)
    from ingest_gateway.server import schema_protobuf

    try:
        return schema_protobuf.compile_schema(text, referenced)
    except schema_protobuf.InvalidProto as e:
        raise InvalidSchemaText(f"invalid Protobuf schema: {e}") from None


def _avro_shape(doc: Any) -> Any:
    """``doc`` if within :data:`MAX_FIELDS`, :data:`MAX_UNION` and :data:`MAX_UNION_WORK`;
    raises InvalidSchemaText."""
    stack, work = [doc], 0
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            if len(node) > MAX_UNION:
                raise InvalidSchemaText(f"a union of {len(node)} branches: at most {MAX_UNION}")
            work += len(node) ** 2
            if work > MAX_UNION_WORK:
                raise InvalidSchemaText("too many union branches in all: the sum of their "
                                        f"squares passes {MAX_UNION_WORK}")
            stack.extend(node)
        elif isinstance(node, dict):
            fields = node.get("fields")
            if isinstance(fields, list) and len(fields) > MAX_FIELDS:
                raise InvalidSchemaText(f"a record of {len(fields)} fields: at most {MAX_FIELDS}")
            stack.extend(v for k, v in node.items() if k in ("type", "items", "values"))
            if isinstance(fields, list):
                stack.extend(fields)
    return doc


def _cache_record_fields() -> None:
    """Make ``RecordSchema.fields_dict`` computed once per record: avro 1.12 rebuilds the
    dict at every access, and its compatibility checker reads it once per field, which
    made a check quadratic in a record's fields (20,000 fields: 68 s; now linear). A
    parsed record's fields never change, so the cached dict stays right."""
    import functools

    import avro.schema

    prop = avro.schema.RecordSchema.__dict__.get("fields_dict")
    if isinstance(prop, property):
        cached = functools.cached_property(prop.fget)
        cached.__set_name__(avro.schema.RecordSchema, "fields_dict")
        avro.schema.RecordSchema.fields_dict = cached  # type: ignore[assignment]


def _parse_avro(text: str, referenced: list[tuple[str, str]]) -> Any:
    import avro.errors
    import avro.schema

    _cache_record_fields()
    names = avro.schema.Names()
    try:
        for kind, ref_text in referenced:
            if kind == "AVRO":
                avro.schema.make_avsc_object(_avro_shape(_json(ref_text)), names)
        parsed = avro.schema.make_avsc_object(_avro_shape(_json(text)), names)
    except InvalidSchemaText:
        raise
    except RecursionError:
        raise InvalidSchemaText("nested too deeply to parse") from None
    except (avro.errors.AvroException, TypeError, ValueError, AttributeError, KeyError) as e:
        raise InvalidSchemaText(f"invalid Avro schema: {e}") from None
    _check_defaults(parsed)
    return parsed


_INTS = {"int": (-2**31, 2**31 - 1), "long": (-2**63, 2**63 - 1)}


def _valid_default(schema: Any, value: Any, depth: int = 0) -> bool:
    """Whether ``value`` (JSON, as written in the schema) is a valid default for
    ``schema``: Java's ``Schema.isValidDefault``, which Confluent's registry applies. A
    union's default may match any branch (Avro 1.12; 1.11 took the first only)."""
    kind = schema.type
    if depth > MAX_DEPTH:
        return True  # nested past any real default; the parser's bounds already hold
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in _INTS:
        low, high = _INTS[kind]
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    if kind in ("float", "double"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind in ("string", "bytes", "fixed"):
        return isinstance(value, str)
    if kind == "enum":
        return value in schema.symbols
    if kind == "array":
        return isinstance(value, list) and all(_valid_default(schema.items, v, depth + 1)
                                               for v in value)
    if kind == "map":
        return isinstance(value, dict) and all(_valid_default(schema.values, v, depth + 1)
                                               for v in value.values())
    if kind in ("record", "error"):
        return isinstance(value, dict) and all(
            _valid_default(f.type, value[f.name], depth + 1) if f.name in value
            else f.has_default for f in schema.fields)
    if kind == "union":
        return any(_valid_default(branch, value, depth + 1) for branch in schema.schemas)
    return True


def _check_defaults(schema: Any) -> None:
    """Raise InvalidSchemaText for a field whose default does not fit its type."""
    seen: set[int] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        kind = node.type
        if kind in ("record", "error"):
            for f in node.fields:
                if f.has_default and not _valid_default(f.type, f.default):
                    raise InvalidSchemaText(f"invalid default for field {f.name!r} of "
                                            f"{node.fullname}: {json.dumps(f.default)[:80]} "
                                            f"does not fit its type ({f.type.type})")
                stack.append(f.type)
        elif kind == "array":
            stack.append(node.items)
        elif kind == "map":
            stack.append(node.values)
        elif kind == "union":
            stack.extend(node.schemas)


def _parse_json_schema(text: str) -> Any:
    import jsonschema
    import jsonschema.exceptions
    import jsonschema.validators

    doc = _json(text)
    if not isinstance(doc, (dict, bool)):
        raise InvalidSchemaText("a JSON Schema is an object or a boolean")
    if isinstance(doc, dict) and not isinstance(doc.get("$schema", ""), str):
        raise InvalidSchemaText("$schema must be a string (the URI of a meta-schema)")
    try:
        cls = jsonschema.validators.validator_for(doc, default=jsonschema.Draft7Validator) \
            if isinstance(doc, dict) else jsonschema.Draft7Validator
        cls.check_schema(doc)
    except jsonschema.exceptions.SchemaError as e:
        raise InvalidSchemaText(f"invalid JSON Schema: {e.message}") from None
    except RecursionError:
        raise InvalidSchemaText("nested too deeply to check") from None
    except (TypeError, ValueError, AttributeError, LookupError) as e:
        # what jsonschema raises on shapes its meta-schema check did not expect: the
        # client's schema is at fault, not the registry (never a 500)
        raise InvalidSchemaText(f"invalid JSON Schema: {e}") from None
    return doc


def incompatibilities(schema_type: str, reader: Any, writer: Any) -> list[str]:
    """Why data written with ``writer`` cannot be read with ``reader`` (empty: it can)."""
    if schema_type == "AVRO":
        from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

        try:
            result = ReaderWriterCompatibilityChecker().get_compatibility(reader, writer)
        except RecursionError:
            return ["the schemas are nested too deeply to compare"]
        if result.compatibility is SchemaCompatibilityType.compatible:
            return []
        return [f"{', '.join(sorted(i.name for i in result.incompatibilities))} at "
                f"{', '.join(sorted(result.locations))}: {', '.join(sorted(result.messages))}"]
    if schema_type == "JSON":
        return json_incompatibilities(reader, writer, "#")
    from ingest_gateway.server import schema_protobuf_compat

    return schema_protobuf_compat.incompatibilities(reader, writer)


_NUMERIC = {"integer", "number"}


def _types(schema: Mapping[str, Any]) -> set[str] | None:
    kind = schema.get("type")
    if kind is None:
        return None  # any type
    return {kind} if isinstance(kind, str) else set(kind)


def json_incompatibilities(reader: Any, writer: Any, at: str) -> list[str]:
    """Confluent's JSON Schema rules, the subset checked (module docstring): why a value
    valid under ``writer`` may be invalid under ``reader``."""
    if reader is True or reader == {}:
        return []
    if writer is True or writer == {}:
        return [f"{at}: the new reader constrains what was unconstrained"]
    if reader is False or writer is False or not isinstance(reader, dict) \
            or not isinstance(writer, dict):
        return [] if reader == writer else [f"{at}: boolean schema changed"]
    out: list[str] = []
    r_types, w_types = _types(reader), _types(writer)
    if r_types is not None:
        if w_types is None:
            out.append(f"{at}: type narrowed from any to {sorted(r_types)}")
        else:
            widened = r_types | ({"integer"} if "number" in r_types else set())
            if not w_types <= widened:
                out.append(f"{at}: type changed from {sorted(w_types)} to {sorted(r_types)}")
    if "enum" in reader:
        # as sets of canonical JSON: list membership would make two 50,000-value enums
        # 2.5 billion comparisons
        def values(schema: Mapping[str, Any]) -> set[str]:
            enum = schema.get("enum")
            return {json.dumps(v, sort_keys=True) for v in enum} \
                if isinstance(enum, list) else set()
        if "enum" not in writer or not values(writer) <= values(reader):
            out.append(f"{at}: enum narrowed")
    r_props, w_props = reader.get("properties") or {}, writer.get("properties") or {}
    r_closed = reader.get("additionalProperties") is False
    w_closed = writer.get("additionalProperties") is False
    for name, sub in r_props.items():
        if name in w_props:
            out += json_incompatibilities(sub, w_props[name], f"{at}/properties/{name}")
        elif not w_closed and sub not in (True, {}):
            # the old schema let any value through under this name
            out.append(f"{at}/properties/{name}: property added to an open content model")
    if r_closed and not w_closed and (w_types is None or "object" in w_types):
        # the old schema let any other property through: the new one refuses them
        # (Confluent's ADDITIONAL_PROPERTIES_REMOVED)
        out.append(f"{at}: additionalProperties removed (the content model was closed)")
    for name in w_props:
        if name not in r_props and r_closed:
            out.append(f"{at}/properties/{name}: property removed from a closed content model")
    added = set(reader.get("required") or ()) - set(writer.get("required") or ())
    if added:
        out.append(f"{at}: required properties added: {sorted(added)}")
    if isinstance(reader.get("items"), (dict, bool)) and "items" in writer:
        out += json_incompatibilities(reader["items"], writer["items"], f"{at}/items")
    elif isinstance(reader.get("items"), dict) and "items" not in writer and \
            (w_types is None or "array" in w_types):
        out.append(f"{at}/items: items constrained")
    return out
