"""The console's Schema Registry pages (``/ui/schemas``) over HTTP against a real gateway
subprocess, its schemas registered by confluent-kafka's SchemaRegistryClient: the subjects
listing, a subject's versions, schema, level and a diff of two versions, a topic's
subjects, hostile subject names escaped, fuzzed query parameters answered without a
crash; and with the authorizer on, the registry's Subject Read (slow: argon2 logins).
"""

from __future__ import annotations

import base64
import html
import json
import random
import re
from urllib.parse import quote

import pytest
import urllib3

pytest.importorskip("fastavro")

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402

from log_layout import open_log  # noqa: E402
from tests.ingest_gateway.kafka.kafka_gateway import KafkaGatewayProcess  # noqa: E402
from tests.ingest_gateway.kafka.sasl_gateway import PASSWORD, allow, sasl_gateway  # noqa: E402

HOSTILE = '"><script>window.__xss=1</script><img src=x onerror=alert(1)>-value'
SLASHED = "google/protobuf/timestamp.proto"


def avro(*fields: str, name: str = "Click") -> Schema:
    return Schema(json.dumps({"type": "record", "name": name, "namespace": "com.acme",
                              "fields": [{"name": f, "type": "string", "default": ""}
                                         for f in fields]}), "AVRO")


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    store = str(tmp_path_factory.mktemp("console-schemas"))
    open_log(f"file://{store}").create_topic("clicks", {"partitions": 1})
    with KafkaGatewayProcess(f"file://{store}") as g:
        client = SchemaRegistryClient({"url": g.url + "/schema-registry"})
        client.register_schema("clicks-value", avro("url"))
        client.register_schema("clicks-value", avro("url", "referrer_page"))
        client.set_compatibility("clicks-value", "FULL")
        client.register_schema("clicks-key", Schema('{"type": "string"}', "AVRO"))
        client.register_schema("clicks-com.acme.Click", avro("url"))  # topic-record strategy
        client.register_schema("clicks-other-value", avro("x"))  # topic clicks-other's
        client.register_schema(HOSTILE, avro("a"))
        client.register_schema(SLASHED, Schema('syntax = "proto3"; package p; '
                                               'message M { string a = 1; }', "PROTOBUF"))
        yield g


@pytest.fixture(scope="module")
def http():
    return urllib3.PoolManager(retries=False, timeout=30)


def get(http, gw, path: str, user: str | None = None) -> tuple[int, str]:
    headers = {} if user is None else {"Authorization": "Basic " + base64.b64encode(
        f"{user}:{PASSWORD}".encode()).decode()}
    r = http.request("GET", gw.url + path, headers=headers)
    return r.status, r.data.decode()


def rows_of(page: str, table_id: str) -> list[list[str]]:
    """The text of each cell of a table's body rows."""
    body = re.search(f'<table id="{table_id}">.*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    return [[html.unescape(re.sub("<[^>]+>", "", c)).strip()
             for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)]


def test_the_subjects_listing(gw, http):
    status, page = get(http, gw, "/ui/schemas")
    assert status == 200
    rows = {r[0]: r[1:] for r in rows_of(page, "subjects")}
    assert rows["clicks-value"] == ["AVRO", "2", rows["clicks-value"][2], "2", "FULL"]
    assert rows["clicks-key"][:1] == ["AVRO"] and rows["clicks-key"][4] == "BACKWARD (global)"
    assert rows[SLASHED][0] == "PROTOBUF"
    assert "Global compatibility level: <b>BACKWARD</b>" in page
    # every console page links here
    assert '<a href="/ui/schemas"' in get(http, gw, "/ui")[1]
    assert '<a href="/ui/schemas" class=active>' in page


def test_a_subject_its_versions_schema_and_diff(gw, http):
    status, page = get(http, gw, "/ui/schemas?subject=clicks-value")
    assert status == 200
    assert [r[0].split()[0] for r in rows_of(page, "versions")] == ["1", "2"]
    schema = html.unescape(re.search(r'<pre class=json id=schema>(.*?)</pre>', page, re.S)[1])
    assert json.loads(schema)["fields"][1]["name"] == "referrer_page"  # the latest, shown
    assert '\n  "type": "record"' in schema  # pretty-printed
    assert "<b>FULL</b>" in page
    assert "id=diff>" not in page  # no diff before one is asked for (the form only)
    assert "<option value=1 selected>" in page  # the form offers the latest two
    page = get(http, gw, "/ui/schemas?subject=clicks-value&version=1")[1]
    first = html.unescape(re.search(r'id=schema>(.*?)</pre>', page, re.S)[1])
    assert "referrer_page" not in first and '"url"' in first
    status, page = get(http, gw, "/ui/schemas?subject=clicks-value&from=1&to=2")
    assert status == 200
    diff = re.search(r'<pre class=diff id=diff>(.*?)</pre>', page, re.S)[1]
    added = [html.unescape(re.sub("<[^>]+>", "", s))
             for s in re.findall(r'<span class="add">(.*?)</span>', diff)]
    removed = re.findall(r'<span class="del">(.*?)</span>', diff)
    assert any('"name": "referrer_page"' in a for a in added), diff
    assert added[0].startswith("+++ version 2") and removed[0].startswith("--- version 1")
    assert len(removed) == 1 and len(added) == 6  # the headers; a field added, nothing removed
    same = get(http, gw, "/ui/schemas?subject=clicks-value&from=2&to=2")[1]
    assert "have the same schema text" in same


def test_a_subject_with_a_slash_and_a_protobuf_schema(gw, http):
    status, page = get(http, gw, "/ui/schemas?subject=" + quote(SLASHED, safe=""))
    assert status == 200 and "message M" in page
    assert f'href="/ui/schemas?subject={quote(SLASHED, safe="")}&amp;version=1"' in page


def test_hostile_subject_names_are_escaped(gw, http):
    for path in ("/ui/schemas", "/ui/schemas?subject=" + quote(HOSTILE, safe="")):
        status, page = get(http, gw, path)
        assert status == 200
        assert "<script>window.__xss" not in page and "<img src=x" not in page
        assert html.escape(HOSTILE, quote=True) in page
    # the page refuses inline script anyway
    r = http.request("GET", gw.url + "/ui/schemas")
    assert "script-src 'self'" in r.headers["Content-Security-Policy"]


def test_a_topic_page_shows_its_subjects(gw, http):
    status, page = get(http, gw, "/ui/topics/clicks")
    assert status == 200
    names = [r[0] for r in rows_of(page, "topic-subjects")]
    assert names == ["clicks-com.acme.Click", "clicks-key", "clicks-value"]  # not clicks-other's
    assert 'href="/ui/schemas?subject=clicks-value"' in page


def test_a_topic_page_shows_record_name_subjects_its_records_carry(gw, http):
    """A record-name-strategy subject (the record's full name) names no topic: the page
    finds it by the schema id in a recent record's header."""
    client = SchemaRegistryClient({"url": gw.url + "/schema-registry"})
    view = client.register_schema("com.acme.View", avro("page", name="View"))
    client.register_schema("com.acme.Unused", avro("u", name="Unused"))  # no record has it
    assert "com.acme.View" not in [r[0] for r in rows_of(get(http, gw, "/ui/topics/clicks")[1],
                                                         "topic-subjects")]
    r = http.request("POST", gw.url + "/topics/clicks", body=json.dumps(
        {"value_schema_id": view, "records": [{"value": {"page": "/home"}}]}).encode(),
        headers={"Content-Type": "application/vnd.kafka.avro.v2+json"})
    assert r.status == 200, r.data
    names = [r[0] for r in rows_of(get(http, gw, "/ui/topics/clicks")[1], "topic-subjects")]
    assert names == ["clicks-com.acme.Click", "clicks-key", "clicks-value", "com.acme.View"]


def test_unknown_subjects_and_versions_and_bad_numbers(gw, http):
    status, page = get(http, gw, "/ui/schemas?subject=nope-value")
    assert status == 404 and "Subject &#x27;nope-value&#x27; not found" in page
    assert get(http, gw, "/ui/schemas?subject=clicks-value&version=9")[0] == 404
    assert get(http, gw, "/ui/schemas?subject=clicks-value&from=1&to=7")[0] == 404
    status, page = get(http, gw, "/ui/schemas?subject=clicks-value&version=-1")
    assert status == 400 and "version must be a version number" in page
    assert get(http, gw, "/ui/schemas?subject=clicks-value&from=1e3&to=2")[0] == 400
    assert get(http, gw, "/ui/schemas?subject=")[0] == 422  # Confluent's invalid subject
    assert get(http, gw, "/ui/schemas?subject=" + "x" * 5000)[0] == 422


def test_fuzzed_query_parameters_never_crash_the_page(gw, http):
    rng = random.Random(32)
    alphabet = ["%00", "%FF", "%2F", "%", "&", "=", "<", '"', "'", "9" * 30, "-", "1",
                "latest", "%E2%80%AE", "%C3%28", "+", "clicks-value", "%23"]
    for _ in range(150):
        query = "&".join(
            f"{rng.choice(['subject', 'version', 'from', 'to', 'x'])}="
            + "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 6)))
            for _ in range(rng.randrange(1, 5)))
        r = http.request("GET", gw.url + "/ui/schemas?" + query)
        assert r.status in (200, 400, 404, 422), (query, r.status, r.data[:300])
        assert r.headers["Content-Type"].startswith("text/html"), query
    assert get(http, gw, "/healthz")[0] == 200


@pytest.mark.slow
def test_the_registry_subject_read_acls(tmp_path):
    """alice may Read subjects prefixed ``a-``; bob the topic only: each sees what the
    registry would show them."""
    acls = [allow("Subject", "a-", "alice", "Read", "PREFIXED"),
            allow("Topic", "a", "alice", "Describe"), allow("Topic", "a", "bob", "Describe")]
    with sasl_gateway(tmp_path, users=("alice", "bob"), acls=acls, topics={"a": 1}) as g:
        admin = SchemaRegistryClient({"url": g.url + "/schema-registry",
                                      "basic.auth.user.info": f"admin:{PASSWORD}"})
        admin.register_schema("a-value", avro("x"))
        admin.register_schema("b-value", avro("y"))
        http = urllib3.PoolManager(retries=False, timeout=30)
        assert get(http, g, "/ui/schemas")[0] == 401
        names = [r[0] for r in rows_of(get(http, g, "/ui/schemas", "alice")[1], "subjects")]
        assert names == ["a-value"]
        assert rows_of(get(http, g, "/ui/schemas", "bob")[1], "subjects") == [["none"]]
        assert [r[0] for r in rows_of(get(http, g, "/ui/schemas", "admin")[1],
                                      "subjects")] == ["a-value", "b-value"]
        assert get(http, g, "/ui/schemas?subject=a-value", "alice")[0] == 200
        status, page = get(http, g, "/ui/schemas?subject=b-value", "alice")
        assert status == 403 and "b-value" in page
        assert get(http, g, "/ui/schemas?subject=a-value", "bob")[0] == 403
        # a topic's page: only the subjects the principal may Read
        assert [r[0] for r in rows_of(get(http, g, "/ui/topics/a", "alice")[1],
                                      "topic-subjects")] == ["a-value"]
        assert rows_of(get(http, g, "/ui/topics/a", "bob")[1], "topic-subjects") == [["none"]]


def test_a_diff_of_two_huge_versions_is_declined_not_computed():
    """difflib is quadratic at worst: past MAX_DIFF_LINES the page says so instead."""
    from ingest_gateway.http import console_schemas as cs

    def version(n: int, fields: int) -> cs.Version:
        return cs.Version(n, n, "AVRO", json.dumps({"type": "record", "name": "R", "fields": [
            {"name": f"f{i}", "type": "int"} for i in range(fields)]}))

    big = cs.Subject("s<b>", "FULL", "READWRITE", True, (version(1, 3000), version(2, 3001)))
    out = cs.subject_page(big, None, (1, 2))
    assert "too long to compare here" in out and "<pre class=diff" not in out
    assert "s&lt;b&gt;" in out and "s<b>" not in out
    small = cs.Subject("s", "FULL", "READWRITE", True, (version(1, 3), version(2, 4)))
    assert '<span class="add">' in cs.subject_page(small, 1, (1, 2))
