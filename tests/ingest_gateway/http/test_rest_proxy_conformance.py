"""Conformance with Confluent's REST Proxy: its documented v2 and v3 examples, walked.

The examples are Confluent's own, stored next to this file
(``rest_proxy_examples/``, each file names its source and commit;
``rest_proxy_examples/extract.py`` rebuilt them):

- ``v2_examples.json``: every request/response example of the API v2 reference
  (confluentinc/kafka-rest ``docs/api.rst``, the last version before the docs moved);
- ``v3_examples.json``: every operation of the v3 OpenAPI spec
  (confluentinc/kafka-rest ``api/v3/openapi.yaml``) with its request body examples
  and the examples of its 2xx answer.

Each example is sent as documented (method, path, headers, body; only the
documented names are mapped onto this store's: the cluster id, a consumer id the
gateway made) to a real gateway over real sockets with a real store, and the answer
is checked against the documented one: status, Content-Type, and the body's shape
(every documented field present with the documented JSON type, recursively;
values that depend on data compared by type, values the test set up compared
exactly). Every v3 ``metadata.self`` is the URL that was asked, and every
``related`` link resolves (answers 200), except links to the resources below.

**Not applicable to sparklog, and why** (the test checks this list covers every
documented operation and example that is not walked):

- v2 Avro (produce with ``value_schema``, an Avro consumer) is walked in its own test:
  the documented bodies lack a comma after ``value_schema`` (400 as documented; sent
  again with it). v3 Schema Registry data (``schema_id``, ``schema_version``, data
  without a type) name subjects topic-1 never registered, and one example's schema is
  escaped twice: sent as documented they are refused with 422 (42207, 42205; checked).
- v3 ``/broker-configs*``, ``/brokers/{id}/configs*``, ``/brokers/-/configs``:
  a gateway's settings are read once at start (``conf/``, the environment), not
  changed at run time.
- v3 ``replicas_assignments`` on topic creation: replica placement; the store
  (S3, HDFS) replicates, each partition has one replica (refused with 400, checked).
- v3 partition reassignment: sparklog never reassigns replicas. The lists are
  walked (they are empty, so only their envelope is compared); one partition's
  reassignment answers 404, as Kafka answers for a partition not being reassigned.

Documented values sparklog cannot take, changed in the request (and said where):
``compression.type`` ``gzip`` is sent as ``zstd`` (Arrow IPC compresses with lz4
or zstd only; gzip is refused with 400 ``invalid_config``); a documented
``replication_factor`` is accepted and answered as 1 (the store replicates); the ACL
examples' principal ``principalType:principalName`` is sent as ``User:principalName``
(sparklog's principals are users: another type is refused with 400 ``invalid_acl``).
The ACL examples run in Kafka's order of use: created, listed, then deleted with the
filter REST Proxy requires (``resource_type``, ``pattern_type``, ``operation`` and
``permission`` ``ANY``), so the list and the deleted ACLs are not empty.
Documented answers that contradict their own schema: ``earliest_offset`` and
``latest_offset`` are documented as ``"10L"`` strings with an ``int64`` schema;
sparklog answers ints.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from jobs.gateway_process import GatewayProcess, wait_for
from log_layout import open_log

EXAMPLES = Path(__file__).with_name("rest_proxy_examples")
V2 = json.loads((EXAMPLES / "v2_examples.json").read_text())["examples"]
V3 = json.loads((EXAMPLES / "v3_examples.json").read_text())["operations"]
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
#: fields REST Proxy's schema declares nullable that sparklog answers null
NULLABLE = {"instance_id", "max_lag_instance_id", "rack",
            "key"}  # a record produced without a key is read with key null, as REST Proxy
#: v3 path prefixes sparklog does not serve (see the module doc)
NOT_SERVED = ("/broker-configs", "/brokers/-/configs")
NOT_SERVED_RE = re.compile(r"/brokers/[^/]+/configs")
RECORDS = 40  # records per partition of "test": the documented commits name offsets up to 31


# -- the gateway and its data ----------------------------------------------------------------
@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    url = str(tmp_path_factory.mktemp("conformance") / "store")
    lg = open_log(url, fsync=False)
    lg.create_topic("test", {"partitions": 3})
    for t in ("test1", "test2"):
        lg.create_topic(t, {"partitions": 2})
    lg.create_topic("topic-1", {"partitions": 3})
    with GatewayProcess(url) as g:
        for p in range(3):  # JSON keys and values, so binary and JSON consumers read them
            body = {"records": [{"key": "somekey", "value": {"foo": "bar", "n": i}}
                                for i in range(RECORDS)]}
            for t in ("test", "topic-1"):
                status, out, _ = g.request("POST", f"/topics/{t}/partitions/{p}", body=body,
                                           content_type=JSON_V2)
                assert status == 200, out
        g.cluster = g.request("GET", "/v3/clusters")[1]["data"][0]["cluster_id"]
        yield g


def send(gw, method: str, path: str, headers: dict[str, str] | None = None,
         body: Any = None) -> tuple[int, str, Any]:
    """(status, media type, parsed JSON or raw bytes) of a request sent as given."""
    raw = None if body is None else json.dumps(body).encode()
    hdrs = dict(headers or {})
    if raw is not None:
        hdrs.setdefault("Content-Type", "application/json")
    r = gw.http.request(method, gw.url + path, body=raw, headers=hdrs, redirect=False)
    media = (r.headers.get("content-type") or "").split(";")[0].strip()
    data: Any = r.data
    if data and media.endswith("json"):
        data = json.loads(data)
    return r.status, media, data


# -- shapes --------------------------------------------------------------------------------
def mismatches(doc: Any, got: Any, where: str = "$") -> list[str]:
    """Where ``got`` differs from the documented ``doc`` in shape: a documented field
    missing, or of another JSON type (None documented: any; an empty documented list:
    any list; items compared with the first documented item)."""
    if doc is None:
        return []
    if isinstance(doc, bool) or isinstance(got, bool):
        return [] if isinstance(doc, bool) and isinstance(got, bool) else \
            [f"{where}: documented {doc!r}, got {got!r}"]
    if isinstance(doc, dict):
        if not isinstance(got, dict):
            return [f"{where}: documented an object, got {got!r:.80}"]
        out = []
        for k, v in doc.items():
            if k not in got:
                out.append(f"{where}.{k}: documented, missing")
            elif not (got[k] is None and k in NULLABLE):
                out += mismatches(v, got[k], f"{where}.{k}")
        return out
    if isinstance(doc, list):
        if not isinstance(got, list):
            return [f"{where}: documented a list, got {got!r:.80}"]
        return [m for i, g in enumerate(got) if doc for m in mismatches(doc[0], g, f"{where}[{i}]")]
    for kind in (str, int, float):
        if isinstance(doc, kind):
            ok = isinstance(got, kind) or (kind is float and isinstance(got, int))
            return [] if ok else [f"{where}: documented {type(doc).__name__} {doc!r}, "
                                  f"got {got!r:.80}"]
    return [f"{where}: documented {doc!r}, not a JSON value"]


def links(doc: Any) -> list[str]:
    """Every ``related`` URL in ``doc``."""
    if isinstance(doc, dict):
        own = [doc["related"]] if isinstance(doc.get("related"), str) else []
        return own + [u for k, v in doc.items() if k != "related" for u in links(v)]
    if isinstance(doc, list):
        return [u for v in doc for u in links(v)]
    return []


def test_the_shape_check_catches_a_missing_field_and_a_wrong_type():
    assert mismatches({"a": 1, "b": {"c": "x"}}, {"a": 2, "b": {"c": "y"}}) == []
    assert mismatches({"a": 1}, {}) == ["$.a: documented, missing"]
    assert mismatches({"a": 1}, {"a": "1"}) and mismatches({"a": 1}, {"a": None})
    assert mismatches([{"p": 1}], [{"p": 1}, {"p": "x"}]) == ["$[1].p: documented int 1, got 'x'"]
    assert mismatches({"leader": 1}, {"leader": None})  # an int, never null (issue 16)


# -- v2 -----------------------------------------------------------------------------------
def _v2_id(ex: dict[str, Any]) -> str:
    r = ex["request"]
    return f"{ex['source_line']}-{r['method']}-{r['path'].split('?')[0]}"


def _avro(ex: dict[str, Any]) -> bool:
    """An Avro example: its request names Avro or carries a schema."""
    text = json.dumps(ex["request"])
    return "avro" in text or "_schema" in text


class Consumer:
    """A v2 consumer instance made for one example: its group is unique to the test,
    its name the documented one."""

    def __init__(self, gw, *, fmt: str = "binary", name: str = "my_consumer"):
        self.gw, self.name = gw, name
        self.group = f"g-{uuid.uuid4().hex[:8]}"
        status, body, _ = gw.request("POST", f"/consumers/{self.group}", body={
            "name": name, "format": fmt, "auto.offset.reset": "earliest",
            "auto.commit.enable": "false"}, content_type="application/vnd.kafka.v2+json")
        assert status == 200, body
        self.base = f"/consumers/{self.group}/instances/{name}"

    def path(self, documented: str) -> str:
        return re.sub(r"^/consumers/[^/]+/instances/[^/]+", self.base, documented)

    def do(self, method: str, suffix: str, body: Any = None) -> Any:
        status, _, out = send(self.gw, method, self.base + suffix, body=body)
        assert status in (200, 204), (suffix, status, out)
        return out

    def assign(self, *partitions: int) -> None:
        self.do("POST", "/assignments", {"partitions": [{"topic": "test", "partition": p}
                                                        for p in partitions]})


def _prepare_v2(gw, ex: dict[str, Any]) -> tuple[str, Consumer | None]:
    """The state the example needs; returns the path to send it to."""
    endpoint, path = ex["endpoint"], ex["request"]["path"]
    if "/instances/" not in path:
        if endpoint.startswith("POST /consumers/"):  # creation: a fresh group
            return path.replace("testgroup", f"g-{uuid.uuid4().hex[:8]}"), None
        return path, None
    fmt = "json" if "json_consumer" in path else "binary"
    c = Consumer(gw, fmt=fmt, name=path.split("/instances/")[1].split("/")[0])
    suffix = path.split(c.name, 1)[1].split("?")[0]
    if suffix in ("/offsets", "/positions", "/positions/beginning", "/positions/end",
                  "/records") or endpoint.startswith("GET") and suffix == "/assignments":
        c.assign(0, 1) if suffix != "/records" else c.assign(1, 2)
    if endpoint.startswith("GET") and suffix == "/offsets":
        c.do("POST", "/offsets", {"offsets": [{"topic": "test", "partition": 0, "offset": 21},
                                              {"topic": "test", "partition": 1, "offset": 31}]})
    if suffix == "/subscription" and not endpoint.startswith("POST"):
        c.do("POST", "/subscription", {"topics": ["test1", "test2"]})
    return c.path(path), c


V2_WALKED = [ex for ex in V2 if ex["request"] and not _avro(ex)]


@pytest.mark.parametrize("ex", V2_WALKED, ids=_v2_id)
def test_v2_documented_example(gw, ex):
    path, consumer = _prepare_v2(gw, ex)
    req, doc = ex["request"], ex.get("response")
    status, media, got = send(gw, req["method"], path, req["headers"], req["body"])
    if doc is None:  # documented without an answer (a commit): REST Proxy answers 2xx
        assert status in (200, 204), got
        return
    assert status == doc["status"], (status, got)
    if doc["body"] is None:
        return
    assert media == doc["content_type"], media
    assert mismatches(doc["body"], got) == [], got
    if req["method"] == "GET" and path.endswith(("/subscription", "/assignments", "/offsets")):
        assert got == doc["body"]  # values the test set up as documented: equal
    if consumer is not None and path.split("?")[0].endswith("/records"):
        assert got and {(r["topic"], r["partition"]) for r in got} <= {("test", 1), ("test", 2)}
        decoded = got[0]["value"] if media == JSON_V2 else \
            json.loads(base64.b64decode(got[0]["value"]))
        assert decoded == {"foo": "bar", "n": 0}


def test_v2_documented_positions_take_effect(gw):
    """The seek examples move where the next read starts (offsets 20 and 30 documented)."""
    ex = next(e for e in V2_WALKED if e["request"]["path"].endswith("/positions"))
    c = Consumer(gw)
    c.assign(0, 1)
    assert send(gw, "POST", c.path(ex["request"]["path"]), ex["request"]["headers"],
                ex["request"]["body"])[0] == 204
    got = c.do("GET", "/records?timeout=1000&max_bytes=300000")
    first = {}
    for r in got:
        first.setdefault(r["partition"], r["offset"])
    assert first == {0: 20, 1: 30}
    c.do("POST", "/positions/end", {"partitions": [{"topic": "test", "partition": 0}]})
    c.do("POST", "/positions/beginning", {"partitions": [{"topic": "test", "partition": 1}]})
    got = c.do("GET", "/records?timeout=0")
    assert {(r["partition"], r["offset"]) for r in got} >= {(1, 0)}
    assert all(r["partition"] != 0 for r in got)  # at the end: nothing new on 0


def test_v2_topic_pattern_subscribes_to_every_matching_topic(gw):
    ex = next(e for e in V2_WALKED if "topic_pattern" in json.dumps(e["request"]["body"]))
    c = Consumer(gw)
    assert send(gw, "POST", c.path(ex["request"]["path"]), ex["request"]["headers"],
                ex["request"]["body"])[0] == 204
    assert sorted(c.do("GET", "/subscription")["topics"]) == ["test", "test1", "test2"]
    parts = c.do("GET", "/assignments")["partitions"]
    assert {p["topic"] for p in parts} == {"test", "test1", "test2"} and len(parts) == 7


def test_v2_a_binary_consumer_read_as_json_answers_406_40601(gw):
    """REST Proxy's reference: "Mismatches will result in error code 40601"."""
    c = Consumer(gw, fmt="binary")
    c.assign(0)
    status, media, body = send(gw, "GET", f"{c.base}/records?timeout=0",
                               {"Accept": JSON_V2})
    assert (status, body["error_code"]) == (406, 40601)
    status, media, _ = send(gw, "GET", f"{c.base}/records?timeout=0", {"Accept": BINARY_V2})
    assert (status, media) == (200, BINARY_V2)
    j = Consumer(gw, fmt="json")
    j.assign(0)
    assert send(gw, "GET", f"{j.base}/records?timeout=0", {"Accept": BINARY_V2})[0] == 406
    assert send(gw, "GET", f"{j.base}/records?timeout=0",
                {"Accept": "application/vnd.kafka.v2+json"})[1] == JSON_V2


def test_v2_avro_examples(gw):
    """The documented Avro produce examples, with the comma their bodies lack after
    ``value_schema`` restored (as documented they are not JSON: 400), answer 200 with the
    registered ``value_schema_id``; the documented Avro consumer reads them back decoded."""
    avro = [ex for ex in V2 if ex["request"] and _avro(ex)]
    assert len(avro) == 3
    offsets: list[tuple[int, int]] = []
    for ex in avro:
        req = ex["request"]
        if req["method"] == "GET":
            continue
        def post(body: str) -> Any:
            return gw.http.request("POST", gw.url + req["path"], body=body.encode(),
                                   headers=req["headers"])

        assert post(req["body"]).status == 400
        r = post(req["body"].replace('"\n  "records"', '",\n  "records"'))
        out = json.loads(r.data)
        assert (r.status, r.headers["content-type"]) == (200, "application/vnd.kafka.v2+json"), out
        assert out["key_schema_id"] is None and isinstance(out["value_schema_id"], int)
        assert mismatches(ex["response"]["body"], out) == []
        offsets += [(o["partition"], o["offset"]) for o in out["offsets"]]
    (get,) = [ex for ex in avro if ex["request"]["method"] == "GET"]
    base = "/consumers/avrogroup/instances/my_avro_consumer"
    assert send(gw, "POST", "/consumers/avrogroup", body={
        "name": "my_avro_consumer", "format": "avro"})[0] == 200
    assert send(gw, "POST", f"{base}/assignments", body={"partitions": [
        {"topic": "test", "partition": p} for p in sorted({p for p, _ in offsets})]})[0] == 204
    assert send(gw, "POST", f"{base}/positions", body={"offsets": [
        {"topic": "test", "partition": p, "offset": min(o for q, o in offsets if q == p)}
        for p in sorted({p for p, _ in offsets})]})[0] == 204
    got: list = []
    wait_for(lambda: got.extend(send(gw, "GET", get["request"]["path"].split("?")[0]
                                     + "?timeout=200", get["request"]["headers"])[2])
             or len(got) >= len(offsets), timeout=30, what="the Avro records")
    assert sorted(r["value"] for r in got if (r["partition"], r["offset"]) in offsets) == \
        [12, 24, 25, 26]
    assert send(gw, "DELETE", base)[0] == 204


# -- v3 -----------------------------------------------------------------------------------
def _not_applicable(op: dict[str, Any]) -> str | None:
    path = op["path"]
    if any(s in path for s in NOT_SERVED) or NOT_SERVED_RE.search(path):
        return "broker configs (module doc)"
    return None


def _v3_path(gw, op: dict[str, Any], state: dict[str, str]) -> str:
    values = {"cluster_id": gw.cluster, "topic_name": "topic-1", "partition_id": "1",
              "broker_id": "0", "consumer_group_id": "consumer-group-1",
              "consumer_id": state.get("consumer_id", ""), "name": "compression.type"}
    if op["method"] == "DELETE" and op["path"].endswith("{topic_name}"):
        values["topic_name"] = "topic-X"  # created by the documented create example
    path = re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], op["path"])
    if op["operation_id"] == "deleteKafkaAcls":  # the filter REST Proxy requires (module doc)
        path += "?resource_type=ANY&pattern_type=ANY&operation=ANY&permission=ANY"
    return path


def _sparklog_values(body: Any) -> Any:
    """A documented request with the values sparklog cannot take replaced (module doc)."""
    text = json.dumps(body).replace('"gzip"', '"zstd"').replace(
        '"principalType:principalName"', '"User:principalName"')
    return json.loads(text)


SCHEMA_REGISTRY = ("avro", "schema", "latest_schema", "empty_value")
#: the request examples that are sent, per operation, in this order (the dry run before
#: the topic exists); the others are not applicable and must be refused with 400
REQUEST_ORDER = {"createKafkaTopic": ["dry_run_create_topic", "uniform_replication"]}


@pytest.fixture(scope="module")
def group(gw):
    """consumer-group-1: a v2 instance subscribed to topic-1, some records read and
    committed, so its consumers, assignments and lags are not empty."""
    status, _, _ = send(gw, "POST", "/consumers/consumer-group-1", body={
        "name": "consumer-instance-1", "auto.offset.reset": "earliest",
        "auto.commit.enable": "false"})
    assert status == 200
    inst = "/consumers/consumer-group-1/instances/consumer-instance-1"
    assert send(gw, "POST", f"{inst}/subscription", body={"topics": ["topic-1"]})[0] == 204
    got: list = []
    wait_for(lambda: got.extend(send(gw, "GET", f"{inst}/records?timeout=200&max_records=5",
                                     {"Accept": BINARY_V2})[2]) or len(got) >= 1,
             timeout=30, what="records of topic-1")
    assert send(gw, "POST", f"{inst}/offsets", body={})[0] == 204
    status, _, consumers = send(gw, "GET", f"/v3/clusters/{gw.cluster}/consumer-groups/"
                                           "consumer-group-1/consumers")
    return {"consumer_id": consumers["data"][0]["consumer_id"]}


def _v3_ops() -> list[dict[str, Any]]:
    return [op for op in V3 if not _not_applicable(op)]


def _key(op: dict[str, Any]) -> tuple[str, str]:
    return op["method"], op["path"]


def _order(op: dict[str, Any]) -> int:
    # writes that change what later examples read go last: topic-X is created before it is
    # deleted, topic-1 grows after the partition examples; ACLs are created, listed, deleted
    if op["path"].endswith("/acls") and op["method"] in ("GET", "DELETE"):
        return 2 if op["method"] == "GET" else 3
    if op["method"] == "DELETE" and op["path"].endswith("{topic_name}"):
        return 2
    return 1 if op["method"] in ("PATCH", "POST") else 0


@pytest.fixture(scope="module")
def v3_answers(gw, group):
    """Every walked v3 operation's answers: {(method, path): [(example, path, status,
    media type, body)]}."""
    out: dict[str, list] = {}
    for op in sorted(_v3_ops(), key=_order):
        path = _v3_path(gw, op, group)
        examples = op.get("request_examples")
        if not examples:
            out[_key(op)] = [(None, path, *send(gw, op["method"], path))]
            continue
        names = REQUEST_ORDER.get(op["operation_id"], list(examples))
        out[_key(op)] = [
            (name, path, *send(gw, op["method"], path, body=_sparklog_values(examples[name])))
            for name in names
            if not any(s in name or s in json.dumps(examples[name]).lower()
                       for s in ("avro", "schema")) and name not in SCHEMA_REGISTRY]
    return out


@pytest.mark.parametrize("op", _v3_ops(), ids=lambda op: f"{op['method']}-{op['path']}")
def test_v3_documented_example(gw, v3_answers, op):
    answers = v3_answers[_key(op)]
    assert answers, "no example sent"
    documented = op["response"]
    examples = documented["examples"]
    doc = copy.deepcopy(next(iter(examples.values()), None))
    if op["operation_id"] == "listKafkaPartitionOffsets":  # "10L" strings vs its int64 schema
        doc["earliest_offset"], doc["latest_offset"] = 10, 100
    for name, path, status, media, got in answers:
        if op["path"].endswith("/partitions/{partition_id}/reassignment"):
            assert status == 404, got  # none is ever running (module doc)
            continue
        # createKafkaTopic documents 200 (a dry run) first and 201 (created) after it
        want = {"dry_run_create_topic": 200, "uniform_replication": 201}.get(
            name, documented["status"])
        assert status == want, (name, status, got)
        if doc is None or status == 204:
            assert got == b"" or got is None or status != 204
            continue
        assert media == "application/json"
        if isinstance(doc.get("data"), list) and not got.get("data"):
            assert "reassignment" in path, f"{path}: nothing to compare: the list is empty"
            doc = {k: v for k, v in doc.items() if k != "data"}
        if name == "dry_run_create_topic":  # not created: the topic's own fields only
            doc = {k: doc[k] for k in ("kind", "cluster_id", "topic_name", "partitions_count")}
        assert mismatches(doc, got) == [], (name, got)
        if op["method"] == "GET":
            self_url = got["metadata"]["self"]
            assert self_url == gw.url + path, self_url


def test_v3_related_links_resolve(gw, v3_answers):
    urls = {u for answers in v3_answers.values() for *_, got in answers for u in links(got)}
    assert len(urls) > 30
    broken = []
    for url in sorted(urls):
        assert url.startswith(f"{gw.url}/v3/clusters/{gw.cluster}"), url
        path = url[len(gw.url):]
        if any(s in path for s in NOT_SERVED) or NOT_SERVED_RE.search(path) \
                or re.search(r"/partitions/\d+/reassignment$", path) or "topic-X" in path:
            continue  # not applicable (module doc), or deleted by the walk
        status = send(gw, "GET", path)[0]
        if status != 200:
            broken.append((path, status))
    assert broken == []


def test_v3_schema_registry_and_replica_placement_examples_are_refused(gw):
    """Sent as documented, each is refused, nothing written: the Schema Registry examples
    name subjects topic-1 has not registered (or, one, a schema escaped twice): 422 with
    REST Proxy's 42205 / 42207; replica placement is not applicable: 400."""
    before = send(gw, "GET", f"/v3/clusters/{gw.cluster}/topics/topic-1/partitions/1/offset")[2]
    refused = []
    for op in V3:
        for name, body in (op.get("request_examples") or {}).items():
            sent_as_documented = any(s in name or s in json.dumps(body).lower()
                                     for s in ("avro", "schema")) or name in SCHEMA_REGISTRY
            if sent_as_documented or name == "explicit_replicas_assignments":
                path = _v3_path(gw, op, {})
                status, _, got = send(gw, op["method"], path, body=body)
                if sent_as_documented:
                    assert (status, got["error_code"] in (42205, 42207)) == (422, True), \
                        (name, status, got)
                else:
                    assert status == 400, (name, status, got)
                refused.append(name)
    assert sorted(refused) == sorted([
        "binary_and_avro_with_subject_and_raw_schema", "schema_id_and_schema_version",
        "latest_schema", "null_and_empty_data", "empty_value", "explicit_replicas_assignments"])
    after = send(gw, "GET", f"/v3/clusters/{gw.cluster}/topics/topic-1/partitions/1/offset")[2]
    assert after["latest_offset"] == before["latest_offset"]


def test_every_documented_example_is_walked_or_listed_not_applicable():
    v3_paths = {op["path"] for op in V3}
    not_applicable = {op["path"] for op in V3 if _not_applicable(op)}
    assert len(not_applicable) == 7, sorted(not_applicable)  # the module doc's list
    assert v3_paths - not_applicable == {op["path"] for op in _v3_ops()}
    assert len(V2_WALKED) + 3 == len([ex for ex in V2 if ex["request"]])  # 3 Avro
