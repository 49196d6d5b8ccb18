"""The Schema Registry under concurrent writers and hostile input.

- Two gateway processes on one store register the same and different schemas at once
  from many threads: one id per schema, never two; distinct schemas, distinct ids; one
  version per schema in a shared subject.
- Hostile bodies and names (random bytes, truncated JSON, wrong field types, schemas
  nested 100,000 deep, huge schemas and bodies, control characters and 5,000-character
  subjects, reference cycles, thousands of references) are answered with Confluent's
  error codes; nothing answers 5xx and the gateway stays healthy.
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.parse

import pytest
import urllib3

from jobs.gateway_process import GatewayProcess
from log_layout import open_log
from log_layout.paths import SCHEMAS_TOPIC

PREFIX = "/schema-registry"
CT = {"Content-Type": "application/vnd.schemaregistry.v1+json"}


def post(http, url: str, path: str, body) -> tuple[int, object]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = http.request("POST", url + PREFIX + path, body=data, headers=CT, timeout=60,
                     retries=False)
    return r.status, json.loads(r.data) if r.data else None


def avro(i: int) -> str:
    return json.dumps({"type": "record", "name": f"R{i}", "fields": [
        {"name": "f", "type": "long"}]})


SCHEMAS, THREADS = 8, 6


@pytest.mark.slow  # two gateway processes and ~100 contended registrations: ~10 s
def test_two_gateways_give_one_id_per_schema(tmp_path):
    store_url = f"file://{tmp_path}"
    with GatewayProcess(store_url) as a, GatewayProcess(store_url) as b:
        http = urllib3.PoolManager(maxsize=32)
        r = http.request("PUT", a.url + PREFIX + "/config", headers=CT,
                         body=json.dumps({"compatibility": "NONE"}).encode())
        assert r.status == 200
        answers: list[tuple[int, str, int, int]] = []  # (schema, subject, id, version)
        errors: list[object] = []
        lock = threading.Lock()

        def worker(n: int) -> None:
            url = (a, b)[n % 2].url
            rng = random.Random(n)
            order = list(range(SCHEMAS))
            rng.shuffle(order)
            for i in order:
                # the same schema in the one shared subject, and in its own subject
                for subject in ("shared-value", f"own-{i}-value"):
                    status, body = post(http, url, f"/subjects/{subject}/versions",
                                        {"schema": avro(i)})
                    with lock:
                        if status != 200:
                            errors.append((status, body))
                        else:
                            answers.append((i, subject, body["id"], body["version"]))

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors
        assert len(answers) == THREADS * SCHEMAS * 2
        ids = {}
        for i, _, sid, _ in answers:
            ids.setdefault(i, set()).add(sid)
        assert all(len(v) == 1 for v in ids.values()), ids  # one id per schema
        assert len({next(iter(v)) for v in ids.values()}) == SCHEMAS  # distinct schemas, ids
        shared = {(i, v) for i, s, _, v in answers if s == "shared-value"}
        by_schema = {}
        for i, v in shared:
            by_schema.setdefault(i, set()).add(v)
        assert all(len(v) == 1 for v in by_schema.values())  # one version per schema
        assert sorted(v for vs in by_schema.values() for v in vs) == list(range(1, SCHEMAS + 1))
        # both gateways serve every id, and the _schemas topic holds one record per
        # version, each id the same for its schema in every subject
        for sid in {next(iter(v)) for v in ids.values()}:
            for g in (a, b):
                assert http.request("GET", f"{g.url}{PREFIX}/schemas/ids/{sid}").status == 200
        table = open_log(store_url).partition(SCHEMAS_TOPIC, 0).read_table(0)
        values = [json.loads(v) for v in table.column("value").to_pylist()
                  if v is not None and b'"id"' in v]
        assert len(values) == SCHEMAS * 2  # no version written twice, none lost
        assert {(json.loads(v["schema"])["name"], v["id"]) for v in values} == \
            {(f"R{i}", next(iter(ids[i]))) for i in range(SCHEMAS)}


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    with GatewayProcess(f"file://{tmp_path_factory.mktemp('hostile')}") as g:
        yield g


def _deep_record(depth: int) -> str:
    schema: object = "int"
    for d in range(depth):
        schema = {"type": "record", "name": f"N{d}", "fields": [{"name": "x", "type": schema}]}
    return json.dumps(schema)


HOSTILE: list[tuple[str, object, tuple[int, ...]]] = [
    ("/subjects/a/versions", b"", (400,)),
    ("/subjects/a/versions", b"{", (400,)),
    ("/subjects/a/versions", b"\xff\xfe", (400,)),
    ("/subjects/a/versions", b"[]", (422,)),
    ("/subjects/a/versions", {"schema": 7}, (422,)),
    ("/subjects/a/versions", {"schema": None}, (422,)),
    ("/subjects/a/versions", {"schema": ""}, (422,)),
    ("/subjects/a/versions", {"schema": "[" * 100_000}, (422,)),
    ("/subjects/a/versions", {"schema": _deep_record(200)}, (422,)),
    ("/subjects/a/versions", {"schema": '"int"', "schemaType": "XML"}, (422,)),
    ("/subjects/a/versions", {"schema": '"int"', "schemaType": 3}, (422,)),
    ("/subjects/a/versions", {"schema": '"int"', "references": "x"}, (422,)),
    ("/subjects/a/versions", {"schema": '"int"', "references": [{"name": 1}]}, (422,)),
    ("/subjects/a/versions", {"schema": '"int"', "references": [
        {"name": "n", "subject": "s", "version": 1}] * 5000}, (422,)),
    ("/subjects/a/versions", {"schema": '"int"', "id": "seven"}, (422,)),
    ("/subjects/a/versions", {"schema": '"int"', "id": 12, "version": 1}, (422,)),
    ("/subjects/a/versions", {"schema": '{"type": "record", "name": "9bad", "fields": []}'},
     (422,)),
    ("/subjects/a/versions", {"schema": '{"type": "enum", "name": "E", "symbols": [1]}'},
     (422,)),
    ("/subjects/a/versions", {"schema": json.dumps({"type": "record", "name": "D", "fields": [
        {"name": "n", "type": "int", "default": "seven"}]})}, (422,)),
    ("/subjects/a/versions", {"schema": '{"type": "object", "properties": 3}',
                              "schemaType": "JSON"}, (422,)),
    ("/subjects/a/versions", {"schema": "[" * 50_000, "schemaType": "JSON"}, (422,)),
    ("/subjects/a/versions", {"schema": '{"$schema": 5}', "schemaType": "JSON"}, (422,)),
    ("/subjects/a/versions", {"schema": '{"$schema": []}', "schemaType": "JSON"}, (422,)),
    # a reference to the subject's own first version, which does not exist: a cycle
    ("/subjects/cyc/versions", {"schema": '"int"', "references": [
        {"name": "cyc", "subject": "cyc", "version": 1}]}, (422,)),
    ("/subjects/a/versions", b"x" * (2 * 1024 * 1024), (413,)),
    # shapes Apache avro takes quadratic or cubic time over (schema_types.MAX_*): refused
    ("/subjects/a/versions", {"schema": json.dumps(
        [{"type": "fixed", "name": f"F{i}", "size": 1} for i in range(101)])}, (422,)),
    ("/subjects/a/versions", {"schema": json.dumps({"type": "record", "name": "W", "fields": [
        {"name": f"f{i}", "type": [{"type": "fixed", "name": f"F{i}_{j}", "size": 1}
                                   for j in range(100)]} for i in range(30)]})}, (422,)),
    ("/subjects/a/versions", {"schema": json.dumps({"type": "record", "name": "W", "fields": [
        {"name": f"f{i}", "type": "int"} for i in range(5001)]})}, (422,)),
    ("/subjects/" + "s" * 5000 + "/versions", {"schema": '"int"'}, (422,)),
    ("/subjects/" + urllib.parse.quote("a\x00b", safe="") + "/versions",
     {"schema": '"int"'}, (422,)),
    ("/compatibility/subjects/a/versions/-7", {"schema": '"int"'}, (422,)),
    ("/compatibility/subjects/a/versions/99999999999999999999", {"schema": '"int"'}, (422,)),
]


@pytest.mark.parametrize("path,body,statuses", HOSTILE,
                         ids=[f"{i}" for i in range(len(HOSTILE))])
def test_hostile_input_answered_with_codes(gw, path, body, statuses):
    http = urllib3.PoolManager()
    started = time.monotonic()
    status, doc = post(http, gw.url, path, body)
    assert time.monotonic() - started < 10  # refused before any slow parse
    assert status in statuses, (status, doc)
    assert isinstance(doc, dict) and isinstance(doc.get("error_code"), int), doc
    assert http.request("GET", gw.url + "/healthz").status == 200


def test_self_referencing_avro_is_legal(gw):
    http = urllib3.PoolManager()
    linked = {"type": "record", "name": "Node", "fields": [
        {"name": "next", "type": ["null", "Node"], "default": None}]}
    status, doc = post(http, gw.url, "/subjects/linked/versions", {"schema": json.dumps(linked)})
    assert status == 200 and doc["id"] >= 1


def test_fuzzed_bodies_never_fail_the_server(gw):
    """Random mutations of a valid registration: each answered 200 or a 4xx with an
    error code, never a 5xx."""
    http = urllib3.PoolManager()
    valid = json.dumps({"schema": avro(1), "schemaType": "AVRO",
                        "references": []}).encode()
    rng = random.Random(32)
    for n in range(300):
        data = bytearray(valid)
        for _ in range(rng.randint(1, 8)):
            op, pos = rng.randrange(3), rng.randrange(len(data))
            if op == 0:
                data[pos] = rng.randrange(256)
            elif op == 1:
                del data[pos:pos + rng.randint(1, 10)]
            else:
                data[pos:pos] = bytes(rng.choice(b'{}[]":,\\01aZ ') for _ in range(4))
        status, doc = post(http, gw.url, f"/subjects/fuzz-{n % 7}/versions", bytes(data))
        assert status == 200 or (400 <= status < 500 and isinstance(doc.get("error_code"), int)), \
            (bytes(data), status, doc)
    assert http.request("GET", gw.url + "/healthz").status == 200


@pytest.mark.slow  # a gateway with authentication and its argon2 logins: ~10 s here
def test_same_authentication_and_authorizer_as_the_gateway(tmp_path):
    """With ``authentication.method=basic`` and the authorizer on, the registry asks for
    credentials as every route does (401), and for ACLs on the subject (Write to
    register, Read to list; test_schema_registry_acls has the rest); confluent-kafka's
    client logs in with ``basic.auth.user.info``."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    from ingest_gateway.security import passwords
    from log_layout import open_log
    from log_layout.acls import AclBinding, add_acls

    store = str(tmp_path / "store")
    for user in ("alice", "bob"):
        passwords.add(str(tmp_path / "passwords"), user, "secret-" + user)
    add_acls(open_log(store).store, [AclBinding.create(
        "Subject", "a-", "PREFIXED", principal="User:alice", operation="All")])
    settings = {"authentication.method": "basic",
                "authentication.password.file": str(tmp_path / "passwords"),
                "authorizer.enabled": "true"}
    with GatewayProcess(store, settings=settings) as gw:
        url = gw.url + PREFIX
        anonymous = urllib3.request("GET", url + "/subjects")
        assert anonymous.status == 401 and "WWW-Authenticate" in anonymous.headers
        alice = SchemaRegistryClient({"url": url, "basic.auth.user.info": "alice:secret-alice"})
        sid = alice.register_schema("a-value", Schema(avro(1), "AVRO"))
        assert alice.get_schema(sid).schema_str == json.dumps(json.loads(avro(1)),
                                                              separators=(",", ":"))
        bob = SchemaRegistryClient({"url": url, "basic.auth.user.info": "bob:secret-bob"})
        assert bob.get_subjects() == []  # only what bob may Read
        assert alice.get_subjects() == ["a-value"]
        with pytest.raises(SchemaRegistryError) as e:
            bob.register_schema("a-value", Schema(avro(2), "AVRO"))
        assert (e.value.http_status_code, e.value.error_code) == (403, 40301)
