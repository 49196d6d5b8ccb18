"""ACLs on Schema Registry subjects, on a real secured gateway (HTTP Basic, the
authorizer on, a SASL Kafka listener): ``Subject`` resources, literal and prefixed,
with Read (versions, lookup, compatibility), Write (register), Delete,
DescribeConfigs / AlterConfigs (config and mode per subject; the cluster's for the
global ones); listings show only what the principal may Read. Set with
``sparklog acls --subject``; Kafka's DescribeAcls and REST Proxy's ``/acls`` neither
see nor break on them. confluent-kafka's SchemaRegistryClient and AvroSerializer log
in with ``basic.auth.user.info``.
"""

from __future__ import annotations

import base64
import json

import pytest
import urllib3

pytest.importorskip("fastavro")

from confluent_kafka.admin import (AclBindingFilter, AclOperation,  # noqa: E402
                                   AclPermissionType, AdminClient, ResourcePatternType,
                                   ResourceType)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroSerializer  # noqa: E402
from confluent_kafka.schema_registry.error import SchemaRegistryError  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from jobs.cli import main  # noqa: E402
from jobs.gateway_process import wait_for  # noqa: E402
from log_layout import open_log  # noqa: E402
from log_layout.acls import AclFilter, list_acls  # noqa: E402
from tests.ingest_gateway.kafka.sasl_gateway import (PASSWORD, allow, client_conf,  # noqa: E402
                                                     sasl_gateway)

#: a gateway with authentication and argon2 logins of several users: ~10 s here
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("registry-acls")]

PREFIX = "/schema-registry"
CT = "application/vnd.schemaregistry.v1+json"
S = "Subject"


def avro(n: int) -> str:
    return json.dumps({"type": "record", "name": "R", "fields": [
        {"name": f"f{i}", "type": "int", "default": 0} for i in range(n)]})


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    acls = [
        # alice: registers and reads every subject starting with a- (prefixed)
        allow(S, "a-", "alice", "Write", "PREFIXED"), allow(S, "a-", "alice", "Read", "PREFIXED"),
        # bob: reads a-value only (literal)
        allow(S, "a-value", "bob", "Read"),
        # dave: the global config and mode (the cluster's), and a-value's
        allow("Cluster", "kafka-cluster", "dave", "AlterConfigs"),
        allow(S, "a-value", "dave", "DescribeConfigs"),
        # a topic for the REST Proxy produce: alice and bob may write it
        allow("Topic", "a", "alice", "Write"), allow("Topic", "a", "bob", "Write"),
    ]
    with sasl_gateway(tmp_path_factory.mktemp("registry-acls"),
                      users=("alice", "bob", "carol", "dave"), acls=acls,
                      topics={"a": 1}) as g:
        yield g


@pytest.fixture(scope="module")
def http():
    return urllib3.PoolManager(retries=False, timeout=30)


def call(http, gw, user, method, path, body=None):
    h = {"Authorization": "Basic " + base64.b64encode(f"{user}:{PASSWORD}".encode()).decode(),
         "Content-Type": CT}
    r = http.request(method, gw.url + PREFIX + path,
                     body=None if body is None else json.dumps(body).encode(), headers=h)
    return r.status, (json.loads(r.data) if r.data else None)


def client(gw, user) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": gw.url + PREFIX,
                                 "basic.auth.user.info": f"{user}:{PASSWORD}"})


def refused(status_doc, operation, resource="Subject"):
    status, doc = status_doc
    assert (status, doc["error_code"]) == (403, 40301), doc
    assert f"operation {operation} on {resource}" in doc["message"], doc


def test_write_read_and_listing_per_subject(gw, http):
    alice = client(gw, "alice")
    sid = alice.register_schema("a-value", Schema(avro(1), "AVRO"))
    alice.register_schema("a-key", Schema(avro(2), "AVRO"))
    # alice may not write outside her prefix; admin (super user) may
    refused(call(http, gw, "alice", "POST", "/subjects/b-value/versions",
                 {"schema": avro(1)}), "Write")
    assert call(http, gw, "admin", "POST", "/subjects/b-value/versions",
                {"schema": avro(3)})[0] == 200
    # bob reads a-value (literal) and nothing else; he may not register there
    assert client(gw, "bob").get_latest_version("a-value").schema_id == sid
    refused(call(http, gw, "bob", "GET", "/subjects/a-key/versions"), "Read")
    refused(call(http, gw, "bob", "POST", "/subjects/a-value/versions",
                 {"schema": avro(2)}), "Write")
    refused(call(http, gw, "bob", "POST", "/compatibility/subjects/a-key/versions",
                 {"schema": avro(2)}), "Read")
    assert call(http, gw, "bob", "POST", "/subjects/a-value", {"schema": avro(1)})[0] == 200
    # listings: only what each may Read
    assert call(http, gw, "admin", "GET", "/subjects")[1] == ["a-key", "a-value", "b-value"]
    assert call(http, gw, "alice", "GET", "/subjects")[1] == ["a-key", "a-value"]
    assert call(http, gw, "bob", "GET", "/subjects")[1] == ["a-value"]
    assert call(http, gw, "carol", "GET", "/subjects")[1] == []
    assert {d["subject"] for d in call(http, gw, "bob", "GET", "/schemas")[1]} == {"a-value"}
    # a schema by id: Read on a subject holding it
    assert call(http, gw, "bob", "GET", f"/schemas/ids/{sid}")[0] == 200
    refused(call(http, gw, "carol", "GET", f"/schemas/ids/{sid}"), "Read")
    assert call(http, gw, "carol", "GET", f"/schemas/ids/{sid}/subjects")[1] == []
    # anyone authenticated: the root and the types; nobody anonymous
    assert call(http, gw, "carol", "GET", "/schemas/types")[0] == 200
    assert http.request("GET", gw.url + PREFIX + "/subjects").status == 401


def test_configs_modes_and_deletes(gw, http):
    alice = client(gw, "alice")
    alice.register_schema("a-cfg-value", Schema(avro(1), "AVRO"))
    # per subject: DescribeConfigs / AlterConfigs on it; global: the cluster's
    refused(call(http, gw, "alice", "GET", "/config/a-cfg-value"), "DescribeConfigs")
    refused(call(http, gw, "alice", "PUT", "/config", {"compatibility": "NONE"}),
            "AlterConfigs", "Cluster")
    refused(call(http, gw, "alice", "GET", "/mode"), "DescribeConfigs", "Cluster")
    assert call(http, gw, "dave", "GET", "/config/a-value")[0] in (200, 404)
    refused(call(http, gw, "dave", "PUT", "/config/a-value", {"compatibility": "FULL"}),
            "AlterConfigs")
    assert call(http, gw, "dave", "PUT", "/config", {"compatibility": "BACKWARD"})[0] == 200
    assert call(http, gw, "dave", "GET", "/mode")[0] == 200  # AlterConfigs implies Describe
    # Delete: not implied by Write; granted with sparklog acls --subject, enforced
    refused(call(http, gw, "alice", "DELETE", "/subjects/a-cfg-value"), "Delete")
    assert main(["acls", "--store", gw.store_url, "--add", "--allow-principal", "User:alice",
                 "--operation", "Delete", "--subject", "a-cfg-", "--resource-pattern-type",
                 "prefixed"]) == 0
    wait_for(lambda: call(http, gw, "alice", "DELETE", "/subjects/a-cfg-value")[0] == 200,
             timeout=20, what="alice's Delete to be enforced")
    assert "a-cfg-value" not in call(http, gw, "admin", "GET", "/subjects")[1]


def test_avro_serializer_and_rest_produce_need_write_on_the_subject(gw, http):
    topic = "a"  # alice may write the topic
    value = {"f0": 1}
    ser = AvroSerializer(client(gw, "carol"), avro(1))
    with pytest.raises(SchemaRegistryError) as e:  # carol may not register a-value
        ser(value, SerializationContext(topic, MessageField.VALUE))
    assert (e.value.http_status_code, e.value.error_code) == (403, 40301)
    out = AvroSerializer(client(gw, "alice"), avro(1))(
        value, SerializationContext(topic, MessageField.VALUE))
    assert out[0] == 0  # Confluent's wire format
    # REST Proxy: registering through a produce needs Write on the subject too
    def produce(user, body):
        h = {"Authorization": "Basic " + base64.b64encode(f"{user}:{PASSWORD}".encode()).decode(),
             "Content-Type": "application/vnd.kafka.avro.v2+json"}
        r = http.request("POST", gw.url + f"/topics/{topic}", headers=h,
                         body=json.dumps(body).encode())
        return r.status, json.loads(r.data)

    new = {"value_schema": avro(4), "records": [{"value": {"f0": 1, "f1": 2}}]}
    versions = client(gw, "admin").get_versions("a-value")
    status, doc = produce("bob", new)  # bob may write the topic, not the subject
    assert (status, doc["error_code"]) == (403, 40301), doc
    assert client(gw, "admin").get_versions("a-value") == versions  # nothing registered
    status, doc = produce("alice", new)
    assert status == 200 and doc["offsets"][0]["offset"] == 0, doc
    # a schema the subject holds needs no Write: bob produces by its id
    status, doc = produce("bob", {"value_schema_id": doc["value_schema_id"],
                                  "records": [{"value": {"f0": 3, "f1": 4}}]})
    assert status == 200 and doc["offsets"][0]["offset"] == 1, doc


def test_subject_acls_stay_out_of_kafkas_and_rest_proxys_acls(gw, http):
    store = open_log(gw.store_url).store
    assert any(b.resource_type == S for b in list_acls(store))  # sparklog acls sees them
    assert all(b.resource_type != S for b in list_acls(store, [AclFilter.create()]))
    assert {b.name for b in list_acls(store, [AclFilter.create(S)])} >= {"a-", "a-value"}
    # Kafka's DescribeAcls of everything answers (no Subject in Kafka's model)
    admin = AdminClient(client_conf(gw, "admin"))
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    found = admin.describe_acls(every).result(timeout=20)
    assert found and {b.restype for b in found} <= {ResourceType.TOPIC, ResourceType.BROKER}
    # REST Proxy's v3 /acls: listed without them; a SUBJECT ACL is refused, not stored
    h = {"Authorization": "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode(),
         "Content-Type": "application/json"}
    cid = json.loads(http.request("GET", gw.url + "/v3/clusters", headers=h).data)[
        "data"][0]["cluster_id"]
    r = http.request("GET", gw.url + f"/v3/clusters/{cid}/acls", headers=h)
    assert r.status == 200 and {a["resource_type"] for a in json.loads(r.data)["data"]} <= \
        {"TOPIC", "CLUSTER"}
    r = http.request("POST", gw.url + f"/v3/clusters/{cid}/acls", headers=h, body=json.dumps({
        "resource_type": "SUBJECT", "resource_name": "x", "pattern_type": "LITERAL",
        "principal": "User:carol", "host": "*", "operation": "READ",
        "permission": "ALLOW"}).encode())
    assert r.status == 400, r.data
    # REST Proxy's "delete every ACL" (the module's last test) leaves the registry's alone
    before = {b for b in list_acls(store) if b.resource_type == S}
    r = http.request("DELETE", gw.url + f"/v3/clusters/{cid}/acls?resource_type=ANY&"
                     "pattern_type=ANY&operation=ANY&permission=ANY", headers=h)
    assert r.status == 200 and json.loads(r.data)["data"], r.data
    assert all(b.resource_type == S for b in list_acls(store))
    assert {b for b in list_acls(store) if b.resource_type == S} == before
