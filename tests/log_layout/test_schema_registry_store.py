"""``log_layout.schema_registry``: the registry kept as Confluent's records in the
compacted ``_schemas`` topic. Ids one per schema under threads racing on one store (each
thread its own SchemaStore, as separate gateways are), on every backend; Confluent's
key and value shapes; IMPORT ids; changes never lost; the same state after compaction
(tombstones dropped); the earlier file layout migrated once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pyarrow as pa
import pytest

from compaction.cleaner import compact_partition
from log_layout import LogEndMoved, open_log, open_store
from log_layout.paths import SCHEMAS_TOPIC
from log_layout.schema_registry import OLD_IDS_FOLDER, OLD_REGISTRY_FOLDER, SchemaStore, \
    StoredSchema
from tests.log_layout.schema_registrar_proc import register

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def records(log) -> list[tuple[dict, dict | None]]:
    table = log.partition(SCHEMAS_TOPIC, 0).read_table(0)
    return [(json.loads(k), json.loads(v) if v is not None else None)
            for k, v in zip(table.column("key").to_pylist(), table.column("value").to_pylist())]


def test_racing_registrars_give_one_id_per_schema(store):
    url, options = store
    got: list[tuple[int, int]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def writer(n: int) -> None:
        schemas = SchemaStore(open_log(url, storage_options=options))
        barrier.wait()
        for i in [*range(n % 4, 6), *range(n % 4)]:
            sid, _ = register(schemas, f"s{i % 2}", f'"schema-{i}"')
            with lock:
                got.append((i, sid))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    by_schema: dict[int, set[int]] = {}
    for i, sid in got:
        by_schema.setdefault(i, set()).add(sid)
    assert len(got) == 24 and all(len(ids) == 1 for ids in by_schema.values())
    ids = sorted(next(iter(v)) for v in by_schema.values())
    assert ids == list(range(1, 7))  # distinct schemas, distinct ids, none skipped
    reader = SchemaStore(open_log(url, storage_options=options))
    assert reader.ids() == ids
    for i, v in by_schema.items():
        assert reader.schema(next(iter(v))).schema == f'"schema-{i}"'
    doc = reader.registry()
    assert sorted(v["version"] for v in doc["subjects"]["s0"]["versions"]) == [1, 2, 3]


def test_records_are_confluents(local_log):
    schemas = SchemaStore(local_log)
    assert register(schemas, "clicks-value", '"long"') == (1, 1)

    def soft_delete(doc):
        for v in doc["subjects"]["clicks-value"]["versions"]:
            v["deleted"] = True
        doc["compatibility"] = "FULL"
        doc["subjects"]["clicks-value"]["mode"] = "READONLY"
        return doc

    schemas.update(soft_delete)
    schemas.update(lambda doc: {**doc, "subjects": {}})  # hard delete, config gone
    got = records(local_log)
    assert got[0] == ({"keytype": "SCHEMA", "subject": "clicks-value", "version": 1,
                       "magic": 1},
                      {"subject": "clicks-value", "version": 1, "id": 1, "schema": '"long"',
                       "deleted": False})
    keys = [k for k, _ in got[1:]]
    assert {"keytype": "CONFIG", "subject": None, "magic": 0} in keys
    assert {"keytype": "MODE", "subject": "clicks-value", "magic": 0} in keys
    assert ({"keytype": "DELETE_SUBJECT", "subject": "clicks-value", "magic": 0},
            {"subject": "clicks-value", "version": 1}) in got
    tombstones = [k for k, v in got if v is None]
    assert {"keytype": "SCHEMA", "subject": "clicks-value", "version": 1, "magic": 1} \
        in tombstones
    assert {"keytype": "DELETE_SUBJECT", "subject": "clicks-value", "magic": 0} in tombstones
    # key bytes are canonical (what compaction compares): Confluent's order, compact
    raw = local_log.partition(SCHEMAS_TOPIC, 0).read_table(0).column("key")[0].as_py()
    assert raw == b'{"keytype":"SCHEMA","subject":"clicks-value","version":1,"magic":1}'
    info = local_log.topic(SCHEMAS_TOPIC)
    assert info.partitions == 1 and info.config.compacted
    fresh = SchemaStore(local_log)
    assert fresh.registry() == {"subjects": {}, "compatibility": "FULL"}
    assert fresh.schema(1) is None  # its last version hard-deleted


def test_import_keeps_the_given_id_and_refuses_another_schema_there(tmp_path):
    schemas = SchemaStore(open_store(f"file://{tmp_path}"))

    def imported(subject, schema):
        def change(doc):
            if not schemas.import_id(schema):
                raise ValueError("refused")
            doc.setdefault("subjects", {})[subject] = {
                "versions": [{"version": 1, "id": schema.id, "deleted": False}], "next": 2}
            return doc
        schemas.update(change)

    imported("a", StoredSchema(500, "AVRO", '"long"'))
    imported("b", StoredSchema(500, "AVRO", '"long"'))  # the same: fine
    with pytest.raises(ValueError):
        imported("c", StoredSchema(500, "AVRO", '"string"'))
    assert not schemas.import_id(StoredSchema(500, "AVRO", '"string"'))
    assert schemas.id_of("AVRO", '"long"', ()) == 500
    assert register(schemas, "d", '"bytes"') == (501, 1)  # new ids follow
    with pytest.raises(RuntimeError):
        schemas.assign_id("AVRO", '"x"', ())  # outside an update: no record to hold it


def test_updates_never_lose_a_change(tmp_path):
    url = f"file://{tmp_path}"

    def add(n: int) -> None:
        schemas = SchemaStore(open_store(url))
        for k in range(4):
            def change(doc, key=f"s{n}-{k}"):
                doc.setdefault("subjects", {})[key] = {"versions": [], "next": 1,
                                                       "compatibility": "NONE"}
                return doc
            schemas.update(change)

    threads = [threading.Thread(target=add, args=(n,)) for n in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    doc = SchemaStore(open_store(url)).registry()
    assert len(doc["subjects"]) == 20


def test_the_same_registry_after_compaction(log):
    schemas = SchemaStore(log)
    for i in range(4):
        register(schemas, "a", f'"s{i}"')
        register(schemas, "b", f'"s{i}"')

    def churn(doc):
        a = doc["subjects"]["a"]
        a["versions"][0]["deleted"] = True
        a["compatibility"] = "NONE"
        doc["subjects"]["b"]["versions"] = [v for v in doc["subjects"]["b"]["versions"]
                                            if v["version"] != 4]
        return doc

    schemas.update(churn)
    schemas.update(lambda doc: {**doc, "compatibility": "FULL"})
    schemas.update(lambda doc: {**doc, "compatibility": "FORWARD"})
    register(schemas, "c", '"late"')  # the active segment: compaction leaves it
    before = SchemaStore(log)
    doc, ids = before.registry(), before.ids()
    plog = log.partition(SCHEMAS_TOPIC, 0)
    rows_before = plog.read_table(0).num_rows
    config = log.topic(SCHEMAS_TOPIC).config
    # far past delete.retention.ms: the second pass drops the tombstones the first
    # cleaned (Kafka's rule: a tombstone goes once its segment was cleaned)
    later = plog.snapshot().segments[-1].max_ts + 10 ** 12
    for _ in range(2):
        assert not compact_partition(plog, config, later, force=True).conflict
    rows_after = plog.read_table(0).num_rows
    assert rows_after < rows_before
    assert all(v is not None for _, v in records(log)[:-1])  # tombstones dropped
    after = SchemaStore(log)
    assert after.registry() == doc and after.ids() == ids
    assert before.registry() == doc  # a tailing reader is not confused either
    assert register(after, "d", '"new"')[0] == max(ids) + 1


def test_the_earlier_file_layout_is_migrated_once(local_log):
    store = local_log.store
    for sid, text in ((3, '"int"'), (7, '"string"')):
        store.put_exclusive(f"{OLD_IDS_FOLDER}/{sid:020d}.json", json.dumps(
            {"id": sid, "schemaType": "AVRO", "schema": text, "references": []}).encode())
    old = {"compatibility": "NONE", "subjects": {"x-value": {
        "next": 3, "mode": "READONLY", "versions": [
            {"version": 1, "id": 3, "deleted": True}, {"version": 2, "id": 7, "deleted": False}]}}}
    store.put_exclusive(f"{OLD_REGISTRY_FOLDER}/{1:020d}.json", json.dumps(old).encode())
    first, second = SchemaStore(local_log), SchemaStore(local_log)
    assert first.registry() == {"compatibility": "NONE", "subjects": {"x-value": {
        "next": 3, "mode": "READONLY", "versions": old["subjects"]["x-value"]["versions"]}}}
    assert second.registry() == first.registry()
    assert first.schema(7).schema == '"string"'
    assert len(records(local_log)) == 4  # imported once: two versions, a mode, a level
    assert register(first, "y", '"bytes"') == (8, 1)


def test_a_registrar_killed_mid_way_loses_nothing_acknowledged(tmp_path):
    """Two registrar processes race over the same schemas; one is SIGKILLed in the middle
    of its registrations (inside an append, most likely). Every registration either
    process acknowledged is in the topic as acknowledged, and no schema has two ids."""
    url = f"file://{tmp_path}"
    procs = {name: subprocess.Popen(
        [sys.executable, "-m", "tests.log_layout.schema_registrar_proc", url, name, "40"],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for name in ("killed", "survivor")}
    try:
        for p in procs.values():
            assert p.stdout.readline() == "ready\n"
        for p in procs.values():
            p.stdin.write("go\n")
            p.stdin.flush()
        acks: list[dict] = []
        killed = procs["killed"]
        for line in killed.stdout:
            acks.append(json.loads(line))
            if len(acks) >= 15:
                killed.send_signal(signal.SIGKILL)
                break
        killed.wait(30)
        out, _ = procs["survivor"].communicate(timeout=120)
        assert procs["survivor"].returncode == 0
        acks += [json.loads(line) for line in out.splitlines()]
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    schemas = SchemaStore(open_store(url))
    doc = schemas.registry()
    held = {(s, v["version"]): v["id"] for s, e in doc["subjects"].items() for v in e["versions"]}
    for a in acks:
        assert held[(a["subject"], a["version"])] == a["id"], a
    ids: dict[int, set[int]] = {}
    for a in acks:
        ids.setdefault(a["schema"], set()).add(a["id"])
    assert all(len(v) == 1 for v in ids.values()), ids
    shared = doc["subjects"]["shared"]["versions"]
    assert sorted(schemas.schema(v["id"]).schema for v in shared) == \
        sorted(f'"{i}"' for i in range(40))  # each schema once, none twice
    assert len({v["id"] for v in shared}) == 40
    for i, v in ids.items():  # registering again answers the acknowledged id
        assert register(schemas, "again", f'"{i}"')[0] == next(iter(v))


def test_readers_create_nothing_and_a_deleted_topic_is_an_empty_registry(local_log):
    reader = SchemaStore(local_log)
    assert reader.registry() == {"subjects": {}} and reader.ids() == [] \
        and reader.schema(1) is None
    assert SCHEMAS_TOPIC not in local_log.topics()  # a reader wrote nothing
    writer = SchemaStore(local_log)
    register(writer, "a", '"int"')
    assert reader.registry()["subjects"]["a"]["versions"][0]["id"] == 1
    local_log.delete_topic(SCHEMAS_TOPIC)
    assert reader.registry() == {"subjects": {}}
    assert writer.registry() == {"subjects": {}} and writer.schema(1) is None
    assert register(writer, "b", '"long"') == (1, 1)  # the topic made again
    assert list(reader.registry()["subjects"]) == ["b"]


FOREIGN = [
    (None, b"{}"), (b"", b"{}"), (b"\xff", None), (b"[]", b"{}"), (b"7", None),
    (b'{"keytype":"NOOP","magic":0}', None),
    (b'{"keytype":"SCHEMA","subject":"z","version":1,"magic":1}', b'{"id":"x"}'),
    (b'{"keytype":"SCHEMA","subject":3,"version":1,"magic":1}', b'{}'),
    (b'{"keytype":"SCHEMA","subject":"z","version":1,"magic":1}', b'[1]'),
    (b'{"keytype":"CONFIG","subject":null,"magic":0}', b'{"level":"NONE"}'),
    (b'{"keytype":"CONFIG","subject":"a","magic":0}', b'{"compatibilityLevel":"LAX"}'),
    (b'{"keytype":"MODE","subject":null,"magic":0}', b'{"mode":7}'),
    (b'{"keytype":"DELETE_SUBJECT","subject":"z","magic":0}', b'{"version":"v"}'),
    (b'{"keytype":"SCHEMA","subject":"z","version":1,"magic":1}', b'{"id":1,"schema":"x"}' * 2),
]


def test_records_it_does_not_manage_are_skipped(local_log):
    """What another tool (or a hand) appended to ``_schemas`` is skipped record by
    record, as Karapace skips it; the registry around it still reads and writes."""
    schemas = SchemaStore(local_log)
    register(schemas, "a", '"int"')
    keys, values = zip(*FOREIGN)
    local_log.partition(SCHEMAS_TOPIC, 0).writer().append(
        pa.table({"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary())}))
    fresh = SchemaStore(local_log)
    assert list(fresh.registry()["subjects"]) == ["a"] and fresh.ids() == [1]
    assert fresh._state.skipped == len(FOREIGN)
    assert register(fresh, "b", '"long"') == (2, 1)


def test_a_topic_made_by_hand_is_made_compacted(local_log):
    local_log.create_topic(SCHEMAS_TOPIC, {"partitions": 3, "cleanup.policy": "delete"})
    schemas = SchemaStore(local_log)
    assert register(schemas, "a", '"int"') == (1, 1)
    assert local_log.topic(SCHEMAS_TOPIC, refresh=True).config.compacted
    assert SchemaStore(local_log).registry()["subjects"]["a"]["versions"][0]["id"] == 1


def test_an_append_conditional_on_the_log_end(log):
    """``PartitionWriter.append(if_next_offset=N)``: commits only while the log ends at N
    (the registry's compare-and-swap), on every backend; a maintenance commit in between
    is no conflict, an append is."""
    log.create_topic("t", {"partitions": 1})
    plog = log.partition("t", 0)
    one = pa.table({"key": [b"k"], "value": [b"v"]})
    a, b = plog.writer(), plog.writer()  # two writers at one epoch, as two gateways
    assert a.append(one, if_next_offset=0).base_offset == 0
    with pytest.raises(LogEndMoved) as lost:
        b.append(one, if_next_offset=0)
    assert (lost.value.expected, lost.value.current) == (0, 1)
    assert plog.snapshot().next_offset == 1  # the loser wrote nothing
    assert b.append(one, if_next_offset=1).base_offset == 1
    assert plog.read_table(0).num_rows == 2


def test_a_topic_made_again_by_another_process_is_read_afresh(tmp_path):
    """``_schemas`` deleted and made again through another Log (another gateway): a
    reader holding the old incarnation replays the new one."""
    from log_layout.topics import Log

    def fresh_log():
        return Log(open_store(f"file://{tmp_path}"), topic_cache_ms=0)

    first = SchemaStore(fresh_log())
    register(first, "old", '"int"')
    assert list(first.registry()["subjects"]) == ["old"]
    other_log = fresh_log()
    other_log.delete_topic(SCHEMAS_TOPIC)
    other = SchemaStore(other_log)
    register(other, "new", '"long"')
    register(other, "newer", '"bytes"')
    assert list(first.registry()["subjects"]) == ["new", "newer"]
    assert first.schema(1).schema == '"long"'
    assert register(first, "x", '"string"') == (3, 1)
