"""Keys and values in Confluent's wire format, through the gateway's Schema Registry:
REST Proxy's embedded formats (v2 ``vnd.kafka.avro.v2+json`` / ``jsonschema`` /
``protobuf``, v3 records with ``"type": "AVRO" | "JSONSCHEMA" | "PROTOBUF"``) and the v2
consumers that read them back.

**The wire format** (Confluent's serializers): byte 0 is the magic byte ``0``, bytes 1-4
the schema id (big-endian), then the payload: Avro's binary encoding of the datum
(schemaless, the writer's schema is the id's) or, for JSON Schema, the datum's JSON
text (validated with RE2 for its patterns: ``schema_json_re2``), or, for Protobuf, the
message indexes and the message (``schema_protobuf``: the ``.proto`` compiled by the
``protoc`` in grpcio-tools' wheel).

**Which schema** (``kafka-rest``'s ``SchemaManagerImpl``): an id (the schema of that id);
a subject and version, or a version alone (the topic's ``{topic}-key`` /
``{topic}-value`` subject, Confluent's TopicNameStrategy, or the schema's record name:
:data:`STRATEGIES`); schema text (looked up in that subject, registered there when
absent, after the caller's ACL check); or nothing (the subject's latest version).

**Data as JSON**: Avro data is Avro's JSON encoding, as Confluent's REST Proxy takes
and answers it (a union's branch named, ``{"string": "x"}``; bytes as ISO-8859-1
text), read and written by ``fastavro``; a JSON Schema value is any JSON, validated by
``jsonschema`` (a ``$ref`` to another subject by its reference's name); Protobuf data is
Protobuf's canonical JSON. A record that does not fit its schema is refused (42203) before the
schema is registered and before anything is produced: a request is all or nothing.

Schemas are parsed once per id (ids never change their schema) or per text given, and
kept in small LRUs. Every method may block on the store: adapters call them off the event loop.
"""

from __future__ import annotations

import collections
import dataclasses
import io
import json
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ingest_gateway.errors import InvalidKey, InvalidValue
from ingest_gateway.server import schema_protobuf, schema_types
from ingest_gateway.server.schema_codec_errors import (InvalidEmbeddedSchema,
                                                       RecordNotMatchingSchema,
                                                       SchemaSerializationFailed)
from ingest_gateway.server.schema_registry import SchemaRegistry
from ingest_gateway.server.schema_registry_errors import RegistryError

MAGIC = 0
_HEADER = struct.Struct(">bI")
#: parsed schemas kept by id, and by text
CACHE = 256
#: longest schema text kept parsed (so the text cache holds at most ~16 MiB of text)
CACHED_TEXT = 64 * 1024
#: REST Proxy's embedded format names (v2 media types and consumer ``format``) and v3's
#: data types, to the registry's schema types; the ones served
V2_FORMATS = {"avro": "AVRO", "jsonschema": "JSON", "protobuf": "PROTOBUF"}
V3_TYPES = {"AVRO": "AVRO", "JSONSCHEMA": "JSON", "PROTOBUF": "PROTOBUF"}
V3_NAMES = {"AVRO": "AVRO", "JSON": "JSONSCHEMA", "PROTOBUF": "PROTOBUF"}
#: Confluent's subject name strategies: ``{topic}-key|value``, the schema's record name
#: (Avro's full name, Protobuf's first message's, JSON Schema's ``title``), or both
STRATEGIES = ("TOPIC_NAME", "RECORD_NAME", "TOPIC_RECORD_NAME")

#: an ACL check of registering under a subject: raises NotAuthorized (None: no check)
Authorize = Callable[[str], None] | None

_compact = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode


@dataclasses.dataclass(frozen=True)
class SchemaChoice:
    """What a request names for its keys or values (see the module docstring)."""

    schema_type: str | None  # None: whatever type the id or version has
    text: str | None = None
    schema_id: int | None = None
    subject: str | None = None
    version: int | str | None = None
    strategy: str = "TOPIC_NAME"  # the subject when none is given (STRATEGIES)


@dataclasses.dataclass
class Writer:
    """A resolved schema: its id (None until text is registered), type, subject, text
    and the parsed form the encoder uses."""

    schema_type: str
    subject: str
    schema_id: int | None
    text: str | None
    parsed: Any


@dataclasses.dataclass(frozen=True)
class Encoded:
    """A request's keys and values in the wire format, and the ids they carry."""

    keys: list[bytes | None]
    values: list[bytes | None]
    key_schema_id: int | None
    value_schema_id: int | None


class NotWireFormat(ValueError):
    """Bytes that do not start with the magic byte and a known schema id."""


class SchemaCodec:
    """Encodes and decodes records by the registry's schemas (the module docstring)."""

    def __init__(self, registry: SchemaRegistry):
        self.registry = registry
        self._by_id: collections.OrderedDict[int, Writer] = collections.OrderedDict()
        #: (type, text as sent) -> (normalised text, parsed): schemas given as text
        self._by_text: collections.OrderedDict[tuple[Any, str], tuple[str, Any]] = \
            collections.OrderedDict()
        self._lock = threading.Lock()

    # -- which schema ----------------------------------------------------------------
    def writer(self, topic: str, choice: SchemaChoice, *, is_key: bool) -> Writer:
        """The schema ``choice`` names for ``topic``'s keys or values. Raises
        InvalidEmbeddedSchema (text that does not parse), SchemaSerializationFailed
        (an id, subject or version the registry does not hold, or of another type)."""
        subject = choice.subject or f"{topic}-{'key' if is_key else 'value'}"
        by_record = choice.subject is None and choice.strategy != "TOPIC_NAME"
        try:
            if choice.schema_id is not None:
                found = self._by_schema_id(choice.schema_id)
            elif choice.text is not None:
                writer = self._from_text(subject, choice)
                if by_record:
                    writer.subject = _record_subject(topic, choice.strategy, writer)
                return writer
            else:
                doc = self.registry.version(subject, "latest" if choice.version is None
                                            else choice.version)
                found = self._by_schema_id(doc["id"])
        except RegistryError as e:
            raise SchemaSerializationFailed(f"Error when fetching the schema of subject "
                                            f"{subject[:200]!r}: {e}", e.error_code) from None
        if choice.schema_type is not None and found.schema_type != choice.schema_type:
            raise SchemaSerializationFailed(f"schema {found.schema_id} is {found.schema_type}, "
                                            f"not {choice.schema_type}")
        if by_record:
            subject = _record_subject(topic, choice.strategy, found)
        return dataclasses.replace(found, subject=subject)

    def _from_text(self, subject: str, choice: SchemaChoice) -> Writer:
        if not isinstance(choice.text, str):
            raise InvalidEmbeddedSchema("the schema must be a string")
        key = (choice.schema_type, choice.text)
        with self._lock:  # a client sends the same text with every request: parse it once
            found = self._by_text.get(key)
            if found is not None:
                self._by_text.move_to_end(key)
        if found is None:
            try:
                text = schema_types.normalize(str(choice.schema_type), choice.text)
                if choice.schema_type != "PROTOBUF":  # _parse compiles it: once is enough
                    schema_types.parse(str(choice.schema_type), text, [])  # bounds, names
                found = (text, _parse(str(choice.schema_type), text, []))
            except (schema_types.InvalidSchemaText, schema_protobuf.InvalidProto) as e:
                raise InvalidEmbeddedSchema(str(e)) from None
            if len(choice.text) <= CACHED_TEXT:
                with self._lock:
                    self._by_text[key] = found
                    while len(self._by_text) > CACHE:
                        self._by_text.popitem(last=False)
        return Writer(str(choice.schema_type), subject, None, found[0], found[1])

    def _by_schema_id(self, schema_id: int) -> Writer:
        with self._lock:
            found = self._by_id.get(schema_id)
            if found is not None:
                self._by_id.move_to_end(schema_id)
                return found
        stored, referenced = self.registry.with_references(schema_id)
        try:
            parsed = _parse(stored.schema_type, stored.schema, referenced)
        except schema_protobuf.InvalidProto as e:  # stored unparsed: the registry takes any
            raise SchemaSerializationFailed(f"schema {schema_id} does not compile: {e}") from None
        writer = Writer(stored.schema_type, "", schema_id, stored.schema, parsed)
        with self._lock:
            self._by_id[schema_id] = writer
            while len(self._by_id) > CACHE:
                self._by_id.popitem(last=False)
        return writer

    def registered_id(self, writer: Writer, may_register: Authorize = None) -> int:
        """The id of ``writer``'s schema, registering its text under its subject when the
        subject does not hold it yet (Confluent looks up, then registers), after
        ``may_register(subject)`` (the caller's ACL check: raises NotAuthorized). Raises
        SchemaSerializationFailed (incompatible: the registry's 409 kept; read-only)."""
        if writer.schema_id is not None:
            return writer.schema_id
        body = {"schema": writer.text, "schemaType": writer.schema_type}
        try:
            try:
                return int(self.registry.lookup(writer.subject, body)["id"])
            except RegistryError as e:
                if e.error_code not in (40401, 40403):
                    raise
            if may_register is not None:
                may_register(writer.subject)
            return int(self.registry.register(writer.subject, body)["id"])
        except RegistryError as e:
            raise SchemaSerializationFailed(f"Error when registering schema. subject = "
                                            f"{writer.subject[:200]}: {e}", e.error_code) from None

    # -- encoding --------------------------------------------------------------------
    def encode_request(self, topic: str, keys: Sequence[Any], values: Sequence[Any],
                       key_choice: SchemaChoice | None, value_choice: SchemaChoice | None,
                       *, labels: Sequence[str] | None = None,
                       may_register: Authorize = None) -> Encoded:
        """Every key and value of a request (JSON data; None stays None: a tombstone or
        no key) in the wire format. All are encoded before any schema is registered, so
        a refusal leaves the registry and the log as they were. Raises InvalidKey /
        InvalidValue (data without a schema: 42201 / 42202), RecordNotMatchingSchema,
        InvalidEmbeddedSchema, SchemaSerializationFailed."""
        labels = labels or [f"record {i}" for i in range(len(values))]
        out: dict[str, tuple[list[bytes | None], int | None]] = {}
        for field, data, choice, missing in (("key", keys, key_choice, InvalidKey),
                                             ("value", values, value_choice, InvalidValue)):
            present = [i for i, d in enumerate(data) if d is not None]
            if not present:
                out[field] = ([None] * len(data), None)
                continue
            if choice is None:
                raise missing(f"{labels[present[0]]}: the request has {field}s and uses a "
                              f"format that requires schemas, but gives no {field}_schema or "
                              f"{field}_schema_id")
            writer = self.writer(topic, choice, is_key=field == "key")
            wheres = [f"{labels[i]}'s {field}" for i in range(len(data))]
            if writer.schema_type == "AVRO":  # one JSON reader for the request's records
                payloads = _encode_avro_many(writer, data, wheres)
            else:
                payloads = [None if d is None else _encode(writer, d, wheres[i])
                            for i, d in enumerate(data)]
            out[field] = (payloads, writer)  # type: ignore[assignment]
        framed = {}
        for field, (payloads, writer) in out.items():
            if writer is None:
                framed[field] = (payloads, None)
                continue
            schema_id = self.registered_id(writer, may_register)  # type: ignore[arg-type]
            head = _HEADER.pack(MAGIC, schema_id)
            framed[field] = ([None if p is None else head + p for p in payloads], schema_id)
        return Encoded(framed["key"][0], framed["value"][0], framed["key"][1],
                       framed["value"][1])

    def encode_field(self, topic: str, choice: SchemaChoice, datum: Any, *, is_key: bool,
                     where: str, memo: dict[Any, Any], may_register: Authorize = None
                     ) -> tuple[bytes | None, dict[str, Any]]:
        """One key or value (JSON data; None stays None) in the wire format, and what REST Proxy
        v3 reports of it (``type``, ``subject``, ``schema_id``, ``schema_version``). ``memo`` (one
        per request) keeps each schema resolved and registered once. The datum is
        encoded before its schema is registered. Raises as :meth:`encode_request`."""
        key = (choice, is_key)
        if key not in memo:
            memo[key] = [self.writer(topic, choice, is_key=is_key), None]
        writer, info = memo[key]
        payload = None if datum is None else _encode(writer, datum, where)
        if info is None:
            schema_id, version = self._id_and_version(writer, may_register)
            # REST Proxy v3's names: the format (JSONSCHEMA for JSON) and the schema
            info = memo[key][1] = {"type": V3_NAMES[writer.schema_type],
                                   "subject": writer.subject, "schema_id": schema_id,
                                   "schema_version": version}
        if payload is None:  # null data stays null (a tombstone), its schema still checked
            return None, info
        return _HEADER.pack(MAGIC, info["schema_id"]) + payload, info

    def _id_and_version(self, writer: Writer, may_register: Authorize = None
                        ) -> tuple[int, int | None]:
        """(id, the subject's version holding it, None when the subject does not)."""
        schema_id = self.registered_id(writer, may_register)
        try:
            found = self.registry.lookup(writer.subject, {"schema": writer.text,
                                                          "schemaType": writer.schema_type})
            return schema_id, int(found["version"])
        except RegistryError:
            return schema_id, None

    # -- decoding --------------------------------------------------------------------
    def decode(self, data: bytes | None, schema_type: str) -> Any:
        """A stored key or value in the wire format as JSON data (Avro's JSON encoding, or
        the JSON Schema value); None stays None. Raises NotWireFormat when ``data`` is
        not in the wire format, names an unknown id, an id of another type, or does not
        decode by its schema."""
        if data is None:
            return None
        if len(data) < _HEADER.size or data[0] != MAGIC:
            raise NotWireFormat("not in Confluent's wire format (no magic byte 0 and schema id)")
        schema_id = _HEADER.unpack_from(data)[1]
        try:
            writer = self._by_schema_id(schema_id)
        except (RegistryError, SchemaSerializationFailed) as e:
            raise NotWireFormat(f"schema id {schema_id}: {e}") from None
        if writer.schema_type != schema_type:
            raise NotWireFormat(f"schema id {schema_id} is {writer.schema_type}, not {schema_type}")
        payload = memoryview(data)[_HEADER.size:]
        try:
            if schema_type == "JSON":
                return json.loads(bytes(payload))
            if schema_type == "PROTOBUF":
                return schema_protobuf.decode(writer.parsed, payload)
            import fastavro

            datum = fastavro.schemaless_reader(io.BytesIO(payload), writer.parsed, None)
            text = io.StringIO()
            fastavro.json_writer(text, writer.parsed, [datum])
            return json.loads(text.getvalue())
        except Exception as e:  # noqa: BLE001 - any decoder failure means bytes it cannot read
            raise NotWireFormat(f"does not decode by schema {schema_id}: "
                                f"{type(e).__name__}: {str(e)[:200]}") from None


def _record_subject(topic: str, strategy: str, writer: Writer) -> str:
    """The subject of ``writer``'s schema under RECORD_NAME / TOPIC_RECORD_NAME (Confluent's
    ``RecordNameStrategy``: Avro's full name, Protobuf's first message's full name, JSON
    Schema's ``title``); raises InvalidEmbeddedSchema when the schema has none."""
    if writer.schema_type == "AVRO":
        name = writer.parsed.get("name") if isinstance(writer.parsed, dict) else None
    elif writer.schema_type == "PROTOBUF":
        name = writer.parsed.first.DESCRIPTOR.full_name
    else:
        schema = writer.parsed.schema
        name = schema.get("title") if isinstance(schema, dict) else None
    if not isinstance(name, str) or not name:
        raise InvalidEmbeddedSchema(f"subject_name_strategy={strategy} needs a named record "
                                    "(an Avro record, a Protobuf message, a JSON Schema title)")
    return name if strategy == "RECORD_NAME" else f"{topic}-{name}"


def _parse(schema_type: str, text: str, referenced: list[tuple[str, str, str]]) -> Any:
    """The encoder's form of a schema the registry's parser already accepted: a
    ``fastavro`` parsed schema, a ``jsonschema`` validator, or a compiled Protobuf
    schema (``schema_protobuf``: raises InvalidProto); ``referenced``: (name, type, text)."""
    if schema_type == "PROTOBUF":
        return schema_protobuf.compile_schema(
            text, [(name, t) for name, kind, t in referenced if kind == "PROTOBUF"])
    if schema_type == "AVRO":
        import fastavro

        named: dict[str, Any] = {}
        for _name, kind, ref_text in referenced:
            if kind == "AVRO":
                fastavro.parse_schema(json.loads(ref_text), named_schemas=named)
        return fastavro.parse_schema(json.loads(text), named_schemas=named)
    import jsonschema.validators

    from ingest_gateway.server.schema_json_re2 import linear_validator  # jsonschema: lazily

    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT7

    doc = json.loads(text)
    cls = jsonschema.validators.validator_for(doc, default=jsonschema.Draft7Validator) \
        if isinstance(doc, dict) else jsonschema.Draft7Validator
    # a "$ref" to another subject names it by its reference's name (Confluent's); nothing
    # else resolves (no retrieval: a remote "$ref" is Unresolvable, answered 42207)
    registry = Registry().with_resources(
        (name, Resource.from_contents(json.loads(t), default_specification=DRAFT7))
        for name, kind, t in referenced if kind == "JSON")
    # a client's pattern cannot backtrack without bound
    return linear_validator(cls)(doc, registry=registry)


def _encode(writer: Writer, datum: Any, where: str) -> bytes:
    """The payload of ``datum`` (JSON data) under ``writer``; raises
    RecordNotMatchingSchema saying where and why."""
    if writer.schema_type == "PROTOBUF":
        try:
            return schema_protobuf.encode(writer.parsed, datum)
        except RecursionError:
            raise RecordNotMatchingSchema(f"{where} is nested too deeply") from None
        except Exception as e:  # noqa: BLE001 - json_format's ParseError and kin
            raise RecordNotMatchingSchema(f"{where} does not match its Protobuf schema: "
                                          f"{' '.join(str(e).split())[:300]}") from None
    if writer.schema_type == "JSON":
        try:
            error = next(iter(writer.parsed.iter_errors(datum)), None)
        except RecursionError:
            raise RecordNotMatchingSchema(f"{where} is nested too deeply") from None
        except Exception as e:  # noqa: BLE001 - referencing's Unresolvable and kin
            raise SchemaSerializationFailed(f"{where}: the JSON Schema cannot be applied: "
                                            f"{str(e)[:200]}") from None
        if error is not None:
            path = "/".join(str(p) for p in error.absolute_path)
            raise RecordNotMatchingSchema(f"{where} does not match its JSON Schema at "
                                          f"'/{path}': {error.message[:300]}")
        try:
            return _compact(datum).encode()
        except (ValueError, UnicodeEncodeError) as e:
            raise RecordNotMatchingSchema(f"{where}: {e}") from None
    out = _encode_avro_many(writer, [datum], [where])[0]
    assert out is not None
    return out


def _not_avro(where: str, e: BaseException) -> RecordNotMatchingSchema:
    if isinstance(e, RecursionError):
        return RecordNotMatchingSchema(f"{where} is nested too deeply")
    return RecordNotMatchingSchema(f"{where} does not match its Avro schema: "
                                   f"{' '.join(str(e).split())[:300]}")


def _encode_avro_many(writer: Writer, data: Sequence[Any], wheres: Sequence[str]
                      ) -> list[bytes | None]:
    """The Avro payloads of ``data`` (Avro's JSON encoding; None stays None), read by one
    ``fastavro.json_reader`` over all of them (half the cost of one reader per record),
    each validated (the writer would silently wrap an int past its range) and written.
    Raises RecordNotMatchingSchema naming the first record that does not fit."""
    import fastavro
    from fastavro.validation import validate

    present = [i for i, d in enumerate(data) if d is not None]
    lines = []
    for i in present:
        try:
            lines.append(_compact(data[i]))  # one line each: JSON text escapes newlines
        except (ValueError, RecursionError) as e:
            raise _not_avro(wheres[i], e) from None
    records: list[Any] = []
    try:
        for record in fastavro.json_reader(io.StringIO("\n".join(lines)), writer.parsed):
            records.append(record)
    except Exception as e:  # noqa: BLE001 - fastavro raises many types for data that does not fit
        raise _not_avro(wheres[present[len(records)]], e) from None
    out: list[bytes | None] = [None] * len(data)
    for i, record in zip(present, records):
        try:
            validate(record, writer.parsed, raise_errors=True, strict=True)
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, writer.parsed, record)
        except Exception as e:  # noqa: BLE001 - as above
            raise _not_avro(wheres[i], e) from None
        out[i] = buf.getvalue()
    return out

