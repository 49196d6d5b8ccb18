"""REST Proxy v2 bodies in an embedded format with a schema
(``application/vnd.kafka.avro.v2+json``, ``...jsonschema.v2+json``) to a request's
``Parsed`` parts, their keys and values in Confluent's wire format (``schema_codec``)::

    {"key_schema": "<schema text>" | "key_schema_id": 3,
     "value_schema": "<schema text>" | "value_schema_id": 4,
     "records": [{"key": <data>, "value": <data>, "partition": 0, ...}]}

Records are read as the JSON format reads them (``codec_json``: depth, NaN, surrogates,
timestamps, headers, partitions refused the same way), then each key and value is
encoded by its schema; the answer carries ``key_schema_id`` / ``value_schema_id`` as
Confluent's REST Proxy does. Blocking (the registry reads the store): call it off the
event loop.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ingest_gateway.errors import BadRequest
from ingest_gateway.server import codec_json
from ingest_gateway.server.codec import (DEFAULT_MAX_NESTING_DEPTH, JSON_V2, SCHEMA_FORMATS,
                                         Parsed)
from ingest_gateway.server.schema_codec import Authorize, SchemaChoice, SchemaCodec
from ingest_gateway.server.schema_codec_errors import InvalidEmbeddedSchema
from log_layout import UnknownPartition


def _choice(doc: dict[str, Any], field: str, schema_type: str) -> SchemaChoice | None:
    """The ``{field}_schema`` / ``{field}_schema_id`` of a v2 body; raises BadRequest or
    InvalidEmbeddedSchema for a malformed one."""
    text, schema_id = doc.get(f"{field}_schema"), doc.get(f"{field}_schema_id")
    if schema_id is not None:
        if isinstance(schema_id, bool) or not isinstance(schema_id, int) or \
                not 1 <= schema_id <= 2**31 - 1:
            raise BadRequest(f"{field}_schema_id must be a schema id (1 to 2^31-1), "
                             f"not {schema_id!r:.40}")
        return SchemaChoice(schema_type, schema_id=schema_id)
    if text is not None:
        if not isinstance(text, str):
            raise InvalidEmbeddedSchema(f"{field}_schema must be the schema's text (a string)")
        return SchemaChoice(schema_type, text=text)
    return None


def schema_to_parsed(body: bytes, media: str, codec: SchemaCodec, *, topic: str,
                     partitions: int, path_partition: int | None, sticky: Callable[[], int],
                     max_depth: int = DEFAULT_MAX_NESTING_DEPTH, may_register: Authorize = None
                     ) -> tuple[Parsed, int | None, int | None]:
    """(parts, key schema id, value schema id) of a v2 body in ``media`` (one of
    ``codec.SCHEMA_FORMATS``). Raises what ``codec_json.parse_json`` and
    ``SchemaCodec.encode_request`` raise, and UnknownPartition; ``may_register``: the
    caller's ACL check before a schema is registered (Write on its subject)."""
    keys, values, stamps, headers, wanted = codec_json.parse_json(body, JSON_V2,
                                                                  max_depth=max_depth)
    for p in (path_partition, *wanted):  # before a schema is registered for nothing
        if p is not None and p >= partitions:
            raise UnknownPartition(topic, p, partitions)
    doc = json.loads(body)  # parse_json accepted it: valid, bounded JSON
    schema_type = SCHEMA_FORMATS[media]
    key_choice, value_choice = _choice(doc, "key", schema_type), _choice(doc, "value", schema_type)
    encoded = codec.encode_request(
        topic, [None if k is None else json.loads(k) for k in keys],
        [None if v is None else json.loads(v) for v in values], key_choice, value_choice,
        may_register=may_register)
    parsed = codec_json.route_columns(encoded.keys, encoded.values, stamps, headers, wanted,
                                      topic=topic, partitions=partitions,
                                      path_partition=path_partition, sticky=sticky)
    return parsed, encoded.key_schema_id, encoded.value_schema_id
