"""Request bodies declared once (``ingest_gateway.http.bodies``): every declaration is in
``/openapi.json``, and what a declaration refuses the live route refuses, with REST Proxy's
400 ``malformed_request`` (40001) naming the field.

One table drives it: per declaration, the route that reads it and a valid body (answered
2xx). Each field of the valid body, nested ones too, is then replaced in turn by hostile
values (wrong types, a 200 kB string, nested junk, numbers past int64, null); each whole
body by junk. Where the declaration refuses the variant, the route must answer exactly
that refusal (produce, which keeps its raw parser: a 4xx with REST Proxy's code naming the
field); where it accepts it (a long string is still a string), the route must answer a
JSON 2xx or 4xx, never a 5xx.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from urllib.parse import urlencode
from typing import Any

import msgspec
import pytest

from ingest_gateway.errors import BadRequest
from ingest_gateway.http import bodies, v3_acls
from ingest_gateway.http.errors import status_of
from ingest_gateway.http.openapi import document
from log_layout.errors import InvalidAcl
from tests.ingest_gateway.conftest import on_local_store

HUGE = "x" * 200_000  # under max.control.request.size (1 MiB)
#: what replaces each field in turn
HOSTILE_VALUES: dict[str, Any] = {
    "string": "not-a-number", "huge_string": HUGE, "int": 12, "negative": -1,
    "past_int64": 2**70, "float": 1.5, "bool": True, "null": None,
    "nested_junk": {"a": [[{"b": {"c": [None, {}]}}]]}, "deep_list": [[[[[[]]]]]],
    "huge_list": [{"topic": "t"}] * 5_000,
}
#: whole bodies that are not the declared object
HOSTILE_BODIES: dict[str, Any] = {
    "array": [], "string": "x", "number": 0, "true": True,
    "junk_object": {"z": [{"z": [{"z": HUGE[:1000]}]}]},
}


def _refs(doc: Any) -> Iterator[str]:
    if isinstance(doc, dict):
        if isinstance(doc.get("$ref"), str):
            yield doc["$ref"].rsplit("/", 1)[-1]
        for v in doc.values():
            yield from _refs(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from _refs(v)


def test_every_declared_body_is_a_request_body_of_the_document():
    doc = document()
    schemas = doc["components"]["schemas"]
    in_bodies = {name for item in doc["paths"].values() for op in item.values()
                 if isinstance(op, dict) for name in _refs(op.get("requestBody", {}))}
    for kind in bodies.BODIES:
        assert kind.__name__ in in_bodies, f"{kind.__name__} is no route's requestBody"
        schema = schemas[kind.__name__]
        assert schema["type"] == "object"
        assert set(schema["properties"]) == {f.encode_name for f in msgspec.structs.fields(kind)}
    # every reference resolves, and OpenAPI 3.0 has no "null" type
    assert set(_refs(doc)) <= set(schemas)
    assert '"type": "null"' not in json.dumps(doc)
    assert all(s.get("required", ["x"]) for s in schemas.values())


def test_the_document_is_valid_openapi_3_0():
    from openapi_spec_validator import validate
    validate(document())  # raises OpenAPIValidationError naming the bad place


@pytest.mark.parametrize("kind,doc,expected", [
    (bodies.CreateInstance, {"format": "thrift"},
     "field 'format': invalid enum value 'thrift'; expected one of arrow, avro, binary, json, "
     "jsonschema, protobuf"),
    (bodies.CreateInstance, {"auto.offset.reset": "x" * 100_000},  # a name with dots
     "field 'auto.offset.reset': invalid enum value '" + "x" * 39 + "...; expected one of "
     "earliest, latest"),
    (bodies.JoinGroup, {"topics": ["t"], "strategies": ["range", "fair"]},
     "field 'strategies[1]': invalid enum value 'fair'; expected one of cooperative-sticky, "
     "range, roundrobin, sticky"),
    (bodies.AlterConfigs, {"data": [{"name": "x", "operation": "APPEND"}]},
     "field 'data[0].operation': expected str matching regex "
     "'^([sS][eE][tT]|[dD][eE][lL][eE][tT][eE])$'"),
    (bodies.Fetch, {"partitions": [{"topic": "t", "partition": 0}]},
     "field 'partitions[0].offset' is required"),
    (bodies.Offsets, [], "the body does not fit: expected object, got array"),
])
def test_a_refusal_names_the_field_and_what_it_allows(kind, doc, expected):
    with pytest.raises(BadRequest) as refused:
        bodies.convert(doc, kind)
    assert str(refused.value) == expected


def test_every_declared_query_is_the_parameters_of_its_route():
    acls = document()["paths"]["/v3/clusters/{cluster_id}/acls"]
    for method, kind in (("get", bodies.AclQuery), ("delete", bodies.AclDeleteQuery)):
        params = {q["name"]: q for q in acls[method]["parameters"]}
        fields = {f.encode_name: f for f in msgspec.structs.fields(kind)}
        assert set(params) == set(fields)
        assert {n for n, q in params.items() if q["required"]} == \
            {n for n, f in fields.items() if f.required}
    assert {q["name"] for q in acls["delete"]["parameters"] if q["required"]} == \
        {"resource_type", "pattern_type", "operation", "permission"}


@on_local_store
def test_a_hostile_acl_query_is_refused_naming_the_parameter(gateway, live):
    """DELETE without one of its required parameters: 400 invalid_acl (40002) naming it,
    nothing deleted; hostile values of each parameter: a JSON 4xx or 2xx, never a 5xx."""
    every = {"resource_type": "ANY", "pattern_type": "ANY", "operation": "ANY",
             "permission": "ANY"}
    acls = f"{live['v3']}/acls"
    status, answer, _ = gateway.request("POST", acls, body=_acl(live))
    assert status == 201, answer
    try:
        for missing in every:
            for value in (None, ""):  # left out, or empty: the same
                query = {k: v for k, v in every.items() if k != missing}
                if value is not None:
                    query[missing] = value
                status, answer, _ = gateway.request("DELETE", f"{acls}?{urlencode(query)}")
                assert (status, answer["error_code"]) == (400, 40002), (missing, answer)
                assert answer["message"].startswith(f"invalid ACL {missing} "), answer
        for name in [*every, "resource_name", "principal", "host"]:
            for value in ("x" * 20_000, "\x00", "%", "ANY,ANY", "User:*\n"):
                for method in ("GET", "DELETE"):
                    query = {**every, name: value} if method == "DELETE" else {name: value}
                    status, answer, _ = gateway.request(method,
                                                        f"{acls}?{urlencode(query)}")
                    assert status < 500 and isinstance(answer, dict), (name, answer)
        status, answer, _ = gateway.request("GET", acls)
        assert status == 200 and [a["resource_name"] for a in answer["data"]] == \
            [f"acl-{live['topic']}"]  # nothing was deleted but by a whole filter
    finally:
        gateway.request("DELETE", f"{acls}?{urlencode(every)}")


def test_the_route_table_covers_every_declaration():
    assert {kind for kind, *_ in ROUTES} == set(bodies.BODIES)


# -- the live routes --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def live(gateway, gateway_log) -> dict[str, str]:
    """A topic with records, a REST instance assigned its partitions by hand, one that
    subscribes, and a group member: each route has something real to act on."""
    topic = f"b-{uuid.uuid4().hex[:8]}"
    gateway_log.create_topic(topic, {"partitions": 2})
    status, body, _ = gateway.request("POST", f"/topics/{topic}",
                                      content_type="application/vnd.kafka.json.v2+json",
                                      body={"records": [{"value": {"n": i}} for i in range(4)]})
    assert status == 200, body
    names = {"topic": topic, "group": f"g-{topic}", "member_group": f"m-{topic}"}
    for inst in ("manual", "subscriber"):
        status, body, _ = gateway.request("POST", f"/consumers/{names['group']}",
                                          body={"name": inst, "format": "json"})
        assert status == 200, body
    names["inst"] = f"/consumers/{names['group']}/instances/manual"
    names["sub"] = f"/consumers/{names['group']}/instances/subscriber"
    status, body, _ = gateway.request("POST", f"{names['inst']}/assignments", body={
        "partitions": [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 1}]})
    assert status == 204, body
    status, body, _ = gateway.request("POST", f"/groups/{names['member_group']}/members",
                                      body={"topics": [topic], "rebalance_timeout_ms": 1000})
    assert status == 200, body
    names["member"] = body["member_id"]
    status, body, _ = gateway.request("GET", "/v3/clusters")
    assert status == 200, body
    names["v3"] = f"/v3/clusters/{body['data'][0]['cluster_id']}"
    return names


def _acl(n: dict[str, str]) -> dict[str, str]:
    return {"resource_type": "TOPIC", "resource_name": f"acl-{n['topic']}",
            "pattern_type": "LITERAL", "principal": "User:bodies", "host": "*",
            "operation": "READ", "permission": "ALLOW"}


def _tpo(n: dict[str, str]) -> list[dict[str, Any]]:
    return [{"topic": n["topic"], "partition": 0, "offset": 1}]


#: the produce bodies' media types (the others are application/json)
MEDIA = {bodies.ProduceRecords: "application/vnd.kafka.json.v2+json",
         bodies.BinaryProduceRecords: "application/vnd.kafka.binary.v2+json",
         bodies.SchemaProduceRecords: "application/vnd.kafka.jsonschema.v2+json"}
#: routes that keep their own raw parser (produce: server.codec_json): a body the
#: declaration refuses must be refused, with the parser's own REST Proxy code and words
RAW = set(MEDIA)

#: (declaration, method, path, valid body): paths and bodies filled from ``live``
ROUTES: list[tuple[type, str, str, Any]] = [
    (bodies.Partitions, "POST", "{inst}/positions/beginning",
     lambda n: {"partitions": [{"topic": n["topic"], "partition": 1}]}),
    (bodies.Offsets, "POST", "{inst}/positions", lambda n: {"offsets": _tpo(n)}),
    (bodies.InstanceCommit, "POST", "{inst}/offsets", lambda n: {"offsets": _tpo(n)}),
    (bodies.InstanceCommitted, "GET", "{inst}/offsets",
     lambda n: {"partitions": [{"topic": n["topic"], "partition": 0}]}),
    (bodies.Fetch, "POST", "/fetch",
     lambda n: {"partitions": _tpo(n), "max_records": 2, "max_bytes": 10_000, "wait_ms": 0,
                "min_bytes": 1, "isolation_level": "read_committed"}),
    (bodies.CreateInstance, "POST", "/consumers/{group}",
     lambda n: {"format": "binary", "auto.offset.reset": "earliest",
                "auto.commit.enable": "false", "session.timeout.ms": "10000",
                "consumer.instance.timeout.ms": 10_000}),
    (bodies.Subscribe, "POST", "{sub}/subscription", lambda n: {"topics": [n["topic"]]}),
    # a group of its own: the variants join members, which would rebalance member_group
    (bodies.JoinGroup, "POST", "/groups/j-{topic}/members",
     lambda n: {"topics": [n["topic"]], "member_id": None, "client_id": "c",
                "strategies": ["range", "cooperative-sticky"], "session_timeout_ms": 10_000,
                "rebalance_timeout_ms": 1000}),
    (bodies.Heartbeat, "POST", "/groups/{member_group}/members/{member}/heartbeat",
     lambda n: {"generation": -1}),
    (bodies.CommitGroupOffsets, "POST", "/groups/{member_group}/offsets",
     lambda n: {"offsets": _tpo(n), "member_id": n["member"], "generation": n["generation"],
                "metadata": "m"}),
    # validate_only: the variants that fit create nothing
    (bodies.CreateTopic, "POST", "{v3}/topics",
     lambda n: {"topic_name": f"new-{n['topic']}", "partitions_count": 2,
                "replication_factor": 3, "validate_only": True,
                "configs": [{"name": "retention.ms", "value": "100000"}]}),
    (bodies.PatchTopic, "PATCH", "{v3}/topics/{topic}", lambda n: {"partitions_count": 2}),
    (bodies.PutConfig, "PUT", "{v3}/topics/{topic}/configs/retention.ms",
     lambda n: {"value": "3600000"}),
    (bodies.AlterConfigs, "POST", "{v3}/topics/{topic}/configs:alter",
     lambda n: {"data": [{"name": "retention.ms", "value": "7200000", "operation": "set"},
                         {"name": "cleanup.policy", "operation": "DELETE"}],
                "validate_only": True}),
    # one transactional id: init (a new epoch), add a partition and offsets, then abort
    (bodies.InitTransaction, "POST", "/v3/transactions/tx-{topic}:init",
     lambda n: {"transaction_timeout_ms": 30_000}),
    (bodies.AddTxnPartitions, "POST", "/v3/transactions/tx-{topic}/partitions",
     lambda n: {**n["producer"], "partitions": [{"topic": n["topic"], "partition": 0}]}),
    (bodies.AddTxnOffsets, "POST", "/v3/transactions/tx-{topic}/offsets",
     lambda n: {**n["producer"], "group_id": n["group"],
                "offsets": [{"topic": n["topic"], "partition": 0, "offset": 1}]}),
    (bodies.EndTransaction, "POST", "/v3/transactions/tx-{topic}:abort",
     lambda n: n["producer"]),
    (bodies.ProduceRecords, "POST", "/topics/{topic}",
     lambda n: {"records": [{"key": "k", "value": {"n": [1, "x"]}, "partition": 1,
                             "timestamp": 1700000000000,
                             "headers": [{"key": "h", "value": "v"}]}]}),
    (bodies.BinaryProduceRecords, "POST", "/topics/{topic}/partitions/0",
     lambda n: {"records": [{"key": "a2V5", "value": "dmFsdWU=", "timestamp": 0,
                             "headers": {"h": "dg==", "g": None}}]}),
    (bodies.SchemaProduceRecords, "POST", "/topics/{topic}",
     lambda n: {"value_schema": '{"type": "object"}', "key_schema_id": None,
                "records": [{"value": {"n": 1}}]}),
    (bodies.V3Record, "POST", "{v3}/topics/{topic}/records",
     lambda n: {"partition_id": 1, "key": {"type": "BINARY", "data": "a2V5"},
                "value": {"type": "JSON", "data": {"n": [1, "x"]}},
                "headers": [{"name": "h", "value": "dg=="}],
                "timestamp": "2023-11-14T22:13:20Z"}),
    (bodies.V3RecordsBatch, "POST", "{v3}/topics/{topic}/records:batch",
     lambda n: {"entries": [{"id": "1", "partition_id": 0,
                             "value": {"type": "STRING", "data": "s"}},
                            {"id": "2", "key": {"type": "BINARY", "data": "a2V5"},
                             "value": None}]}),
    # last: the ACLs they create (on this module's own topic name) are deleted after each
    (bodies.CreateAcl, "POST", "{v3}/acls", lambda n: _acl(n)),
    (bodies.CreateAcls, "POST", "{v3}/acls:batch", lambda n: {"data": [_acl(n)]}),
]
#: routes answering a body their declaration refuses with their own error (REST Proxy's
#: invalid_acl, 40002), made from the same declaration's refusal
REFUSALS = {bodies.CreateAcl: v3_acls.acl_refusal, bodies.CreateAcls: v3_acls.acl_refusal}
#: a v3 record's refusal is labelled with the record (one of concatenated records)
LABELLED = {bodies.V3Record: "record 0: "}


def _batch_refused(named: str, declared: str, status: int, answer: Any) -> bool:
    """``records:batch`` reads the shape and ids first (refused whole: 400, the
    declaration's words), then each entry alone: a bad field fails its entry (207, the
    entry's failure with 40001 naming the field; the other entry is written)."""
    if status == 400:
        return answer.get("error_code") == 40001 and answer.get("message") == declared
    return (status == 207 and len(answer["failures"]) == 1
            and len(answer["successes"]) == 1 and answer["failures"][0]["error_code"] == 40001
            and named in answer["failures"][0]["message"])


def _leaves(doc: Any, path: tuple = ()) -> Iterator[tuple]:
    """The path of every value in ``doc`` (objects' fields and list items, nested)."""
    if path:
        yield path
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaves(v, (*path, i))


def variants(valid: dict[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """(label, the field a refusal must name, body): ``valid`` with each value in turn
    replaced by each hostile value (the field: the innermost object field on the way,
    ``partitions/0/offset`` -> ``offset``), then the hostile whole bodies (no field)."""
    for path in _leaves(valid):
        named = [k for k in path if isinstance(k, str)][-1]
        for name, value in HOSTILE_VALUES.items():
            body = copy.deepcopy(valid)
            slot = body
            for key in path[:-1]:
                slot = slot[key]
            slot[path[-1]] = value
            yield f"{'/'.join(map(str, path))}={name}", named, body
    for name, body in HOSTILE_BODIES.items():
        yield name, "", body


@on_local_store
@pytest.mark.parametrize("kind,method,path,valid", ROUTES,
                         ids=[kind.__name__ for kind, *_ in ROUTES])
def test_a_body_the_declaration_refuses_the_route_refuses(gateway, live, kind, method, path,
                                                          valid):
    status, state, _ = gateway.request(  # the member's generation now (a join moves it)
        "POST", f"/groups/{live['member_group']}/members/{live['member']}/heartbeat", body={})
    assert status == 200, state
    live = {**live, "generation": state["generation"]}
    if kind.__name__ in ("AddTxnPartitions", "AddTxnOffsets", "EndTransaction"):
        status, producer, _ = gateway.request(  # the producer that owns the transaction
            "POST", f"/v3/transactions/tx-{live['topic']}:init", body={})
        assert status == 200, producer
        live["producer"] = {k: producer[k] for k in ("producer_id", "producer_epoch")}
        if kind is bodies.EndTransaction:  # something to abort
            status, answer, _ = gateway.request(
                "POST", f"/v3/transactions/tx-{live['topic']}/partitions",
                body={**live["producer"],
                      "partitions": [{"topic": live["topic"], "partition": 0}]})
            assert status == 204, answer
    target = path.format(**live)
    good = valid(live)
    bodies.convert(good, kind)  # the valid body fits its declaration ...
    media = MEDIA.get(kind)
    status, answer, _ = gateway.request(method, target, body=good, content_type=media)
    assert 200 <= status < 300, (kind.__name__, answer)  # ... and the route takes it
    tried = refused = 0
    problems = []
    for label, named, body in variants(good):
        code = 40001
        try:
            bodies.convert(body, kind, REFUSALS[kind](body) if kind in REFUSALS else None)
            declared = None
        except (BadRequest, InvalidAcl) as e:
            declared, code = str(e), status_of(e)[1]
        status, answer, _ = gateway.request(method, target, body=body, content_type=media)
        tried += 1
        if declared is not None:
            refused += 1
            if kind is bodies.V3RecordsBatch:
                ok = isinstance(answer, dict) and _batch_refused(named, declared, status,
                                                                 answer)
            elif kind in RAW:  # the raw parser's own refusal, naming the field too
                ok = (400 <= status < 500 and isinstance(answer, dict)
                      and isinstance(answer.get("error_code"), int)
                      # "record 0: ...", "header 'h' ...": the singular of a list
                      and named.rstrip("s") in answer.get("message", ""))
            else:
                ok = (status == 400 and isinstance(answer, dict)
                      and answer.get("error_code") == code
                      and answer.get("message") == LABELLED.get(kind, "") + declared
                      and named in declared
                      # an ACL refusal quotes the value too (at most 80 characters)
                      and len(declared) <= bodies.MAX_MESSAGE + (120 if kind in REFUSALS
                                                                 else 0))
            if not ok:
                problems.append(f"{label}: declared {declared!r}, route {status} {answer!r:.300}")
        elif status >= 500:
            problems.append(f"{label}: accepted by the declaration, route {status} "
                            f"{answer!r:.300}")
    if kind in REFUSALS:  # the ACLs created leave the gateway as they came
        status, answer, _ = gateway.request(
            "DELETE", f"{live['v3']}/acls?resource_type=ANY&pattern_type=ANY&operation=ANY"
                      "&permission=ANY")
        assert status == 200, answer
    assert not problems, f"{len(problems)} of {tried}:\n" + "\n".join(problems[:30])
    assert refused > tried // 2  # the hostile values mostly do not fit
