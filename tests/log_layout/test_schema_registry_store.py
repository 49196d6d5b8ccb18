"""``log_layout.schema_registry``: ids created exclusively, one per schema, under threads
racing on one local store (each thread its own SchemaStore, as separate gateways are),
a crash between the id and its fingerprint, IMPORT ids, and the subjects document's
optimistic updates."""

from __future__ import annotations

import json
import threading

from log_layout import open_store
from log_layout.schema_registry import (FINGERPRINTS_FOLDER, IDS_FOLDER, SchemaStore,
                                        StoredSchema)


def test_racing_writers_give_one_id_per_schema(tmp_path):
    url = f"file://{tmp_path}"
    got: list[tuple[int, int]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def writer(n: int) -> None:
        store = SchemaStore(open_store(url))  # no shared cache: as another gateway
        barrier.wait()
        for i in [*range(n % 5, 10), *range(n % 5)]:
            sid = store.assign_id("AVRO", f'"schema-{i}"', ())
            with lock:
                got.append((i, sid))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    by_schema: dict[int, set[int]] = {}
    for i, sid in got:
        by_schema.setdefault(i, set()).add(sid)
    assert len(got) == 80 and all(len(ids) == 1 for ids in by_schema.values())
    ids = sorted(next(iter(v)) for v in by_schema.values())
    assert len(set(ids)) == 10  # distinct schemas, distinct ids
    reader = SchemaStore(open_store(url))
    assert reader.ids() == ids  # the losers' id files were removed
    for i, v in by_schema.items():
        assert reader.schema(next(iter(v))).schema == f'"schema-{i}"'


def test_an_id_left_without_its_fingerprint_is_not_reused(tmp_path):
    store = open_store(f"file://{tmp_path}")
    orphan = StoredSchema(1, "AVRO", '"int"')
    # a writer that crashed after creating the id file, before the fingerprint
    store.put_exclusive(f"{IDS_FOLDER}/{1:020d}.json", json.dumps(orphan.to_doc()).encode())
    schemas = SchemaStore(store)
    assert schemas.assign_id("AVRO", '"int"', ()) == 2  # a new id; 1 stays as it was
    assert schemas.schema(1).schema == '"int"'
    assert schemas.assign_id("AVRO", '"int"', ()) == 2
    assert len(store.list(FINGERPRINTS_FOLDER)) == 1


def test_import_keeps_the_given_id_and_refuses_another_schema_there(tmp_path):
    schemas = SchemaStore(open_store(f"file://{tmp_path}"))
    assert schemas.import_id(StoredSchema(500, "AVRO", '"long"'))
    assert schemas.import_id(StoredSchema(500, "AVRO", '"long"'))  # the same: fine
    assert not schemas.import_id(StoredSchema(500, "AVRO", '"string"'))
    assert schemas.id_of("AVRO", '"long"', ()) == 500
    assert schemas.assign_id("AVRO", '"bytes"', ()) == 501  # new ids follow


def test_subject_document_updates_never_lose_a_change(tmp_path):
    url = f"file://{tmp_path}"

    def add(n: int) -> None:
        store = SchemaStore(open_store(url))
        for k in range(5):
            def change(doc, key=f"s{n}-{k}"):
                doc.setdefault("subjects", {})[key] = {"versions": [], "next": 1}
                return doc
            store.update(change)

    threads = [threading.Thread(target=add, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    doc = SchemaStore(open_store(url)).registry()
    assert len(doc["subjects"]) == 30
