"""REST Proxy's refusals of records in an embedded format (Avro, JSON Schema), in
Confluent's codes (kafka-rest ``Errors.java``).

- a key or value without a schema: 422 42201 / 42202 (``InvalidKey`` / ``InvalidValue``,
  raised as they are);
- a record that does not fit its schema: 422 42203 (Confluent's "Conversion of JSON to
  Object failed"), :class:`RecordNotMatchingSchema`;
- a schema given as text that does not parse: 422 42205, :class:`InvalidEmbeddedSchema`;
- the registry refusing a lookup or a registration (an unknown id, an incompatible
  schema, a read-only subject): 422 42207 (Confluent's "Error serializing message"),
  :class:`SchemaSerializationFailed`, the registry's own code and message kept in it.
"""

from __future__ import annotations

from ingest_gateway.errors import BadRequest
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
