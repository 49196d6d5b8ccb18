"""Registry subjects and Confluent wire-format records for the Spark side's tests: schemas
registered through the gateway's own registry service (compatibility checked, ids from
the store), records encoded as confluent-kafka's serializers write them."""

from __future__ import annotations

import io
import json
import struct

import fastavro

from ingest_gateway.server.schema_registry import SchemaRegistry
from log_layout.schema_registry import SchemaStore


def registry(log) -> SchemaRegistry:
    return SchemaRegistry(SchemaStore(log.store))


def register(log, subject: str, schema: dict, schema_type: str = "AVRO") -> int:
    """Register ``schema`` under ``subject``; its id. Raises the registry's errors
    (incompatible, invalid)."""
    body = {"schema": json.dumps(schema)}
    if schema_type != "AVRO":
        body["schemaType"] = schema_type
    return registry(log).register(subject, body)["id"]


def header(schema_id: int) -> bytes:
    return b"\0" + struct.pack(">I", schema_id)


def avro(schema: dict, schema_id: int, value) -> bytes:
    """``value`` as AvroSerializer writes it: magic byte, id, Avro binary."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return header(schema_id) + out.getvalue()


def jsonschema(schema_id: int, value) -> bytes:
    """``value`` as JSONSerializer writes it: magic byte, id, UTF-8 JSON."""
    return header(schema_id) + json.dumps(value).encode()


def record(name: str, *fields) -> dict:
    return {"type": "record", "name": name, "namespace": "test", "fields": list(fields)}
