"""REST Proxy's refusals of records in an embedded format (Avro, JSON Schema), in
Confluent's codes (kafka-rest ``Errors.java``).

- a key or value without a schema: 422 42201 / 42202 (``InvalidKey`` / ``InvalidValue``,
  raised as they are);
- a record that does not fit its schema: 422 42203 (Confluent's "Conversion of JSON to
  Object failed"), :class:`RecordNotMatchingSchema`;
- a schema given as text that does not parse: 422 42205, :class:`InvalidEmbeddedSchema`;
- the registry refusing a lookup or a registration (an unknown id, an incompatible
  schema, a read-only subject): 422 42207 (Confluent's "Error serializing message"),
  :class:`SchemaSerializationFailed`, the registry's own code and message kept in it;
- a record an Avro or JSON Schema consumer instance cannot decode (not in the wire
  format, an unknown id, bytes its schema does not read): 422 42206 as a record that
  is not JSON, :class:`RecordNotDecodable`, naming where it is.
"""

from __future__ import annotations

from conf.errors import SparklogError
from ingest_gateway.errors import BadRequest, RecordNotJson
from log_layout import InvalidRecords


class RecordNotMatchingSchema(InvalidRecords):
    """A record's key or value does not fit its schema (422 42203)."""

    code = "json_conversion"


class InvalidEmbeddedSchema(BadRequest):
    """A key or value schema given as text is not a valid schema of its type (422 42205)."""

    code = "invalid_schema"

    def __init__(self, reason: str):
        super().__init__(f"Invalid schema: {reason}")


class SchemaSerializationFailed(BadRequest):
    """The registry refused the schema's lookup or registration (422 42207);
    ``registry_code`` is the registry's own (40403, 409, 42205, ...)."""

    code = "serialization_error"

    def __init__(self, reason: str, registry_code: int | None = None):
        self.registry_code = registry_code
        super().__init__(f"Error serializing message. {reason}")


class RecordNotDecodable(RecordNotJson):
    """A record a consumer instance of an embedded format with a schema cannot decode
    (answered as RecordNotJson: 422 42206, the position staying on it)."""

    code = "record_not_decodable"

    def __init__(self, topic: str, partition: int, offset: int, part: str, fmt: str,
                 reason: str):
        self.topic, self.partition, self.offset = topic, partition, offset
        self.part, self.reason = part, reason
        SparklogError.__init__(
            self, f"the {part} of record {topic}-{partition}@{offset} cannot be read as "
            f"{fmt} ({reason}): read it in the binary format, or seek to offset {offset + 1}")
