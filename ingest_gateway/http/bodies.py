"""Request bodies declared once: msgspec Structs that both check a route's JSON body and
give its schema in ``/openapi.json``.

A route reads its body with :func:`read_body_as` (``body.read_json``'s bounds first: size,
nesting, NaN, lone surrogates), which converts the parsed document to the route's Struct
(``body_struct``: a refusal is BadRequest, 400 ``malformed_request`` 40001, naming the
field); ``openapi`` takes the same Structs' schemas from :func:`components`. A field is
checked here when its rule is the body's shape (type, range, allowed values); a rule a
service checks itself with its own Kafka error code (a client id's 255 characters:
``field_too_long``; a session timeout against the group's bounds) is only documented,
through ``Meta(extra_json_schema=...)``, so the answer keeps that code.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, field

# the routes read their bodies through this module: convert and read_body_as re-exported
from ingest_gateway.http.body_struct import (MAX_MESSAGE, Body, convert, openapi30,
                                             read_body_as, refusal_message)
from ingest_gateway.http.requests import MAX_COUNT, MAX_WAIT_MS
from ingest_gateway.protocol.groups import STRATEGIES
from ingest_gateway.server import acl_admin, schema_codec
from ingest_gateway.server.transaction_service import MAX_TIMEOUT_MS as MAX_TXN_TIMEOUT_MS

#: Kafka's INT32 and INT64
Int32 = Annotated[int, Meta(ge=-2**31, le=2**31 - 1)]
Int64 = Annotated[int, Meta(ge=-2**63, le=2**63 - 1)]
#: REST Proxy takes a millisecond count as a number or as a string of digits
MILLIS_PATTERN = "^[0-9]{1,10}$"
Millis = int | Annotated[str, Meta(pattern=MILLIS_PATTERN)]


class TopicPartition(Body):
    topic: str
    partition: Int32


class TopicPartitionOffset(Body):
    topic: str
    partition: Int32
    offset: Int64


class Partitions(Body):
    """Partitions of a seek to the beginning or end, of an assignment."""
    partitions: list[TopicPartition]


class Offsets(Body):
    """A seek to given offsets."""
    offsets: list[TopicPartitionOffset]


class InstanceCommit(Body):
    """A REST consumer instance's commit: these offsets, or (no body, no offsets) every
    record delivered so far."""
    offsets: list[TopicPartitionOffset] | None = None


class InstanceCommitted(Body):
    """Which partitions' committed offsets to read (none: the instance's assignment)."""
    partitions: list[TopicPartition] | None = None


IsolationLevel = Literal["read_uncommitted", "read_committed"]


class Fetch(Body):
    """``POST /fetch``: many partitions in one long-poll."""
    partitions: list[TopicPartitionOffset]
    max_records: Annotated[int, Meta(ge=1, le=MAX_COUNT)] = 500
    max_bytes: Annotated[int, Meta(ge=1)] = 52_428_800
    wait_ms: Annotated[int, Meta(ge=0, le=MAX_WAIT_MS)] = 0
    min_bytes: Int64 = 1
    isolation_level: IsolationLevel = "read_uncommitted"


#: true or false in any case (REST Proxy reads the string as Boolean.parseBoolean would)
_TRUE_OR_FALSE = "^([tT][rR][uU][eE]|[fF][aA][lL][sS][eE])$"
_SESSION_MS = Meta(description="within group.min.session.timeout.ms .. "
                               "group.max.session.timeout.ms (else 400 invalid_session_timeout)")


class CreateInstance(Body):
    """``POST /consumers/{group}``: a REST Proxy v2 consumer instance."""
    name: str | None = None
    format: Literal["binary", "json", "arrow", "avro", "jsonschema", "protobuf"] = "binary"
    auto_offset_reset: Literal["earliest", "latest"] = field(default="latest",
                                                             name="auto.offset.reset")
    auto_commit_enable: bool | Annotated[str, Meta(pattern=_TRUE_OR_FALSE)] = \
        field(default=True, name="auto.commit.enable")
    session_timeout_ms: Annotated[Millis, _SESSION_MS] | None = \
        field(default=None, name="session.timeout.ms")
    consumer_instance_timeout_ms: Annotated[Millis, Meta(
        description="idle time before the instance is dropped; at most the gateway's "
                    "consumer.instance.timeout.ms (its default)")] | None = \
        field(default=None, name="consumer.instance.timeout.ms")


class Subscribe(Body):
    """A subscription: ``topics`` or ``topic_pattern`` (a regular expression matched
    against whole names), not both."""
    topics: Annotated[list[str], Meta(min_length=1)] | None = None
    topic_pattern: Annotated[str, Meta(extra_json_schema={"maxLength": 1000})] | None = None


#: the coordinator's assignors, by Kafka's names
Strategy = Literal[STRATEGIES]  # type: ignore[valid-type]


class JoinGroup(Body):
    """``POST /groups/{group}/members``: join, or rejoin with ``member_id``."""
    topics: list[str]
    member_id: str | None = None
    # the coordinator refuses a longer one with Kafka's field_too_long (40013)
    client_id: Annotated[str, Meta(extra_json_schema={"maxLength": 255})] = ""
    strategies: Annotated[list[Strategy], Meta(min_length=1)] = \
        field(default_factory=lambda: ["range"])
    session_timeout_ms: Annotated[int, _SESSION_MS] | None = None
    rebalance_timeout_ms: Annotated[int, Meta(ge=1, le=2**31 - 1)] = 60_000


class Heartbeat(Body):
    """A group member's heartbeat (-1: any generation)."""
    generation: Int32 = -1


class CommitGroupOffsets(Body):
    """``POST /groups/{group}/offsets``: ``member_id`` and ``generation`` fence zombies."""
    offsets: list[TopicPartitionOffset]
    member_id: str | None = None
    generation: Int32 = -1
    # the coordinator refuses longer metadata with Kafka's offset_metadata_too_large
    metadata: Annotated[str, Meta(extra_json_schema={"maxLength": 4096})] = ""


#: a topic config's name, as the v3 routes take it (Kafka's longest is 45 characters)
MAX_CONFIG_NAME = 255
ConfigName = Annotated[str, Meta(min_length=1, max_length=MAX_CONFIG_NAME)]


class ConfigEntry(Body):
    name: ConfigName
    value: str


class CreateTopic(Body):
    """REST Proxy v3 topic creation; ``validate_only`` checks without creating."""
    topic_name: Annotated[str, Meta(extra_json_schema={"pattern": "^[a-zA-Z0-9._-]{1,249}$"})]
    # the topic admin refuses a count outside these with its own code (invalid_config)
    partitions_count: Annotated[int, Meta(extra_json_schema={"minimum": 1, "maximum": 10000})] \
        | None = None
    replication_factor: int | None = None  # the store replicates: any value is taken
    # documented so that the route's refusal (sparklog places no replicas) is reachable
    replicas_assignments: dict[str, list[int]] | None = None
    validate_only: bool = False
    configs: list[ConfigEntry] = field(default_factory=list)


class PatchTopic(Body):
    """REST Proxy v3 ``PATCH`` of a topic: grow it to ``partitions_count``."""
    partitions_count: int


class PutConfig(Body):
    """Set one topic config."""
    value: str


#: SET or DELETE in any case, as REST Proxy reads AlterConfigBatchRequestData
_SET_OR_DELETE = "^([sS][eE][tT]|[dD][eE][lL][eE][tT][eE])$"


class ConfigChange(Body):
    name: ConfigName
    value: str | None = None  # SET needs one
    operation: Annotated[str, Meta(pattern=_SET_OR_DELETE)] | None = None  # None: SET


class AlterConfigs(Body):
    """A batch of SET / DELETE of a topic's configs, all applied or none."""
    data: list[ConfigChange]
    validate_only: bool = False


# -- produce (REST Proxy v2) ---------------------------------------------------------------
# The hottest route keeps its raw parser (server.codec_json: json.loads and one loop that
# both checks a record and encodes its key and value); these Structs declare the same
# shape for the document, and test_http_bodies checks that the route refuses what they
# refuse. Converting through them as well would add their cost to every request without
# replacing the loop's encoding work (README "Known limits" has the measurement).
MAX_TIMESTAMP_MS = (2**63 - 1) // 1000
Base64 = Annotated[str, Meta(extra_json_schema={"format": "byte"})]


class Header(Body):
    key: str
    value: str | None = None


class ProduceRecord(Body):
    """A record in the embedded JSON format: key and value any JSON (null: none)."""
    key: Any = None
    value: Any = None
    partition: Annotated[int, Meta(ge=0, le=2**63 - 1)] | None = None
    timestamp: Annotated[int, Meta(ge=0, le=MAX_TIMESTAMP_MS,
                                   description="milliseconds since the epoch")] | None = None
    # a {"name": "value"} object is taken as a shorthand too
    headers: list[Header] | dict[str, str | None] | None = None


class BinaryHeader(Body):
    key: str
    value: Base64 | None = None


class BinaryProduceRecord(Body):
    """A record in the embedded binary format: key, value and header values in base64."""
    key: Base64 | None = None
    value: Base64 | None = None
    partition: Annotated[int, Meta(ge=0, le=2**63 - 1)] | None = None
    timestamp: Annotated[int, Meta(ge=0, le=MAX_TIMESTAMP_MS,
                                   description="milliseconds since the epoch")] | None = None
    headers: list[BinaryHeader] | dict[str, Base64 | None] | None = None


class ProduceRecords(Body):
    """``POST /topics/{topic}``: JSON records."""
    records: Annotated[list[ProduceRecord], Meta(min_length=1, examples=[[
        {"key": "key", "value": {"n": 1}, "headers": [{"key": "h", "value": "v"}],
         "timestamp": 1700000000000}]])]


class BinaryProduceRecords(Body):
    """``POST /topics/{topic}``: binary records."""
    records: Annotated[list[BinaryProduceRecord], Meta(min_length=1, examples=[[
        {"key": "a2V5", "value": "dmFsdWU=", "headers": [{"key": "h", "value": "dg=="}],
         "timestamp": 1700000000000}]])]


SchemaId = Annotated[int, Meta(ge=1, le=2**31 - 1)]


class SchemaProduceRecords(Body):
    """A body in an embedded format with a schema (Avro, JSON Schema, Protobuf): the
    schema's text or id per key and value (registered under the topic's -key/-value
    subject), records as JSON data."""
    records: Annotated[list[ProduceRecord], Meta(min_length=1)]
    key_schema: str | None = None
    key_schema_id: SchemaId | None = None
    value_schema: str | None = None
    value_schema_id: SchemaId | None = None



# -- produce (REST Proxy v3: v3_records) ----------------------------------------------------
#: a key's or value's type: schemaless, or a schema format (``schema_codec.V3_TYPES``)
V3Type = Literal["BINARY", "JSON", "STRING", "AVRO", "JSONSCHEMA", "PROTOBUF"]
#: Confluent's subject name strategies (``schema_codec.STRATEGIES``)
SubjectNameStrategy = Literal[schema_codec.STRATEGIES]  # type: ignore[valid-type]
#: a record id of ``records:batch``
MAX_BATCH_ID = 80


class V3Data(Body):
    """A v3 record's key or value: ``type`` and ``data`` (BINARY: base64, JSON: any JSON,
    STRING: text); or data encoded by a schema: ``type`` and ``schema`` (its text),
    ``schema_id``, ``subject`` and ``schema_version``, or a schema type alone (the
    subject's latest). Which combinations go together, and ``data`` against its type, the
    route checks (each record on its own)."""
    type: V3Type | None = None
    data: Any = None
    schema: str | None = None
    schema_id: SchemaId | None = None
    schema_version: SchemaId | None = None
    subject: str | None = None
    subject_name_strategy: SubjectNameStrategy | None = None


class V3Header(Body):
    name: str
    value: Base64 | None = None


class V3Record(Body):
    """``POST /v3/clusters/{c}/topics/{t}/records``: one record (several: concatenated)."""
    # a partition past the topic's (or negative) is the route's 404 unknown partition
    partition_id: Annotated[int, Meta(extra_json_schema={"minimum": 0})] | None = None
    headers: list[V3Header] | None = None
    key: V3Data | None = None
    value: V3Data | None = None
    # ISO 8601 (Python's fromisoformat; no zone: UTC), checked by the route
    timestamp: Annotated[str, Meta(max_length=64, extra_json_schema={
        "format": "date-time"})] | None = None


class V3BatchEntry(V3Record, kw_only=True):
    """A record of ``records:batch`` with its id (unique within the batch)."""
    id: Annotated[str, Meta(min_length=1, max_length=MAX_BATCH_ID)]


class V3RecordsBatch(Body):
    """``POST .../records:batch``: records each with an id, each written or refused on its
    own (207). The route reads the ids first (:class:`V3BatchIds`), then each entry as a
    :class:`V3Record`, so that one entry's bad field fails that entry alone."""
    entries: Annotated[list[V3BatchEntry], Meta(min_length=1)]


class V3BatchId(Body):
    id: Annotated[str, Meta(min_length=1, max_length=MAX_BATCH_ID)]


class V3BatchIds(Body):
    """The first pass over a :class:`V3RecordsBatch`: its shape and ids (not a body of its
    own: not in the document)."""
    entries: Annotated[list[V3BatchId], Meta(min_length=1)]


# -- transactions (v3_transactions) -------------------------------------------------------
#: a name as Kafka allows it in a file name; the route checks it with Kafka's own code
#: (invalid_topic_exception, invalid_group_id), so the declaration only documents it
Name = Annotated[str, Meta(extra_json_schema={"pattern": "^[a-zA-Z0-9._-]{1,249}$"})]
ProducerId = Annotated[int, Meta(ge=0, le=2**63 - 1)]
ProducerEpoch = Annotated[int, Meta(ge=0, le=32767)]
Partition = Annotated[int, Meta(ge=0, le=2**31 - 1)]
#: at most this many partitions or offsets in one call (a body is bounded anyway)
MAX_TXN_ITEMS = 10_000


class TxnPartition(Body):
    topic: Name
    partition: Partition


class TxnOffset(Body):
    topic: Name
    partition: Partition
    offset: ProducerId  # 0 .. 2^63-1 as well


class InitTransaction(Body):
    """Kafka's InitProducerId for a transactional id."""
    transaction_timeout_ms: Annotated[int, Meta(ge=1, le=MAX_TXN_TIMEOUT_MS)] = 60_000


class EndTransaction(Body):
    """Commit or abort: the producer that owns the transaction."""
    producer_id: ProducerId
    producer_epoch: ProducerEpoch


class AddTxnPartitions(Body):
    """Partitions the transaction writes to (Kafka's AddPartitionsToTxn)."""
    producer_id: ProducerId
    producer_epoch: ProducerEpoch
    partitions: Annotated[list[TxnPartition], Meta(min_length=1, max_length=MAX_TXN_ITEMS)]


class AddTxnOffsets(Body):
    """A group's offsets committed with the transaction (sendOffsetsToTransaction)."""
    producer_id: ProducerId
    producer_epoch: ProducerEpoch
    group_id: Name
    offsets: Annotated[list[TxnOffset], Meta(min_length=1, max_length=MAX_TXN_ITEMS)]



# -- ACLs (v3_acls) -------------------------------------------------------------------------
def rest_name(value: str) -> str:
    """sparklog's spelling of an ACL enumeration value in REST Proxy's: ``TransactionalId``
    -> ``TRANSACTIONAL_ID``, ``DescribeConfigs`` -> ``DESCRIBE_CONFIGS``, ``Allow`` ->
    ``ALLOW``."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", value).upper()


def _acl_enum(values: tuple[str, ...], extra: tuple[str, ...] = (),
              description: str | None = None) -> Any:
    """A string documented as one of ``extra`` and ``values`` in REST Proxy's spelling: the
    route reads it in any case with ``_`` and ``-`` ignored, and refuses another with
    Kafka's model's error (``invalid_acl``), so the declaration only documents them."""
    return Annotated[str, Meta(description=description, extra_json_schema={
        "enum": [*extra, *(rest_name(v) for v in values)]})]


#: at most this many ACLs in one batch (a body is bounded anyway)
MAX_ACL_BATCH = 10_000


class CreateAcl(Body):
    """REST Proxy's ``CreateAclRequest``: one ACL. A field missing or not a string, or a
    value Kafka's ACL model refuses: 400 ``invalid_acl`` (40002), naming the field."""
    resource_type: _acl_enum(acl_admin.RESOURCE_TYPES)  # type: ignore[valid-type]
    resource_name: Annotated[str, Meta(examples=["orders"])]
    pattern_type: _acl_enum(acl_admin.PATTERN_TYPES)  # type: ignore[valid-type]
    principal: Annotated[str, Meta(description="User:<name> or User:*",
                                   examples=["User:alice"])]
    host: Annotated[str, Meta(description="* or an IP address", examples=["*"])]
    operation: _acl_enum(acl_admin.OPERATIONS)  # type: ignore[valid-type]
    permission: _acl_enum(acl_admin.PERMISSIONS)  # type: ignore[valid-type]


class CreateAcls(Body):
    """``POST /acls:batch``: ACLs created all or none."""
    data: Annotated[list[CreateAcl], Meta(min_length=1, max_length=MAX_ACL_BATCH)]


_ANY_TYPE = _acl_enum(acl_admin.RESOURCE_TYPES, ("ANY", "DELEGATION_TOKEN"),
                      "ANY: every type (DELEGATION_TOKEN: none kept)")
_ANY_PATTERN = _acl_enum(acl_admin.PATTERN_TYPES, ("ANY", "MATCH"), "how names match")
_ANY_OPERATION = _acl_enum(acl_admin.OPERATIONS, ("ANY",), "ANY: every operation")
_ANY_PERMISSION = _acl_enum(acl_admin.PERMISSIONS, ("ANY",), "ANY: both")


class AclQuery(Body):
    """The query of ``GET /acls`` (Kafka's DescribeAcls): a filter, a parameter left out
    (or empty) matching any value; MATCH: every ACL that applies to ``resource_name``."""
    resource_type: _ANY_TYPE | None = None  # type: ignore[valid-type]
    resource_name: Annotated[str, Meta(
        description="the name; with MATCH, every ACL applying to it")] | None = None
    pattern_type: _ANY_PATTERN | None = None  # type: ignore[valid-type]
    principal: Annotated[str, Meta(description="User:<name> or User:*")] | None = None
    host: Annotated[str, Meta(description="* or an IP address")] | None = None
    operation: _ANY_OPERATION | None = None  # type: ignore[valid-type]
    permission: _ANY_PERMISSION | None = None  # type: ignore[valid-type]


class AclDeleteQuery(AclQuery, kw_only=True):
    """The query of ``DELETE /acls`` (Kafka's DeleteAcls): the four enumerations are
    required, as REST Proxy's (ANY matches every value)."""
    resource_type: _ANY_TYPE  # type: ignore[valid-type]
    pattern_type: _ANY_PATTERN  # type: ignore[valid-type]
    operation: _ANY_OPERATION  # type: ignore[valid-type]
    permission: _ANY_PERMISSION  # type: ignore[valid-type]


#: every declared query (each field a query parameter: ``query_parameters``)
QUERIES: tuple[type[Body], ...] = (AclQuery, AclDeleteQuery)

#: every declared body, in the order of the document's components
BODIES: tuple[type[Body], ...] = (
    Partitions, Offsets, InstanceCommit, InstanceCommitted, Fetch, CreateInstance, Subscribe,
    JoinGroup, Heartbeat, CommitGroupOffsets, CreateTopic, PatchTopic, PutConfig,
    AlterConfigs, ProduceRecords, BinaryProduceRecords, SchemaProduceRecords, V3Record,
    V3RecordsBatch, InitTransaction, EndTransaction, AddTxnPartitions, AddTxnOffsets,
    CreateAcl, CreateAcls)


def offsets_of(items: list[TopicPartitionOffset]) -> dict[tuple[str, int], int]:
    """``{(topic, partition): offset}``; a partition named twice takes its last offset."""
    return {(i.topic, i.partition): i.offset for i in items}


def partitions_of(items: list[TopicPartition]) -> list[tuple[str, int]]:
    """``[(topic, partition)]`` in request order, each once."""
    return list(dict.fromkeys((i.topic, i.partition) for i in items))


def ref(kind: type[Body]) -> dict[str, str]:
    """The OpenAPI reference to ``kind``'s schema."""
    return {"$ref": f"#/components/schemas/{kind.__name__}"}


def components() -> dict[str, Any]:
    """The OpenAPI 3.0 schemas of every declared body (and the structs they hold)."""
    _, schemas = msgspec.json.schema_components(
        BODIES, ref_template="#/components/schemas/{name}")
    return {name: openapi30(s) for name, s in schemas.items()}


def query_parameters(kind: type[Body]) -> list[dict[str, Any]]:
    """The OpenAPI 3.0 query parameters of a declared query (one per field: its schema,
    description, and whether it is required)."""
    _, schemas = msgspec.json.schema_components((kind,))
    node = schemas[kind.__name__]
    required = set(node.get("required", ()))
    out = []
    for name, prop in node["properties"].items():
        prop = openapi30(prop)
        for key in ("default", "nullable"):  # a parameter left out is the absent value
            prop.pop(key, None)
        description = prop.pop("description", "")
        out.append({"name": name, "in": "query", "required": name in required,
                    "schema": prop, "description": description})
    return out


__all__ = ["MAX_MESSAGE", "Body", "convert", "read_body_as", "refusal_message"]
