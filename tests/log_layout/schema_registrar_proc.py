"""A registrar process for the Schema Registry's crash and race tests.

``python -m tests.log_layout.schema_registrar_proc URL NAME COUNT`` registers
``COUNT`` schemas (``"<i>"`` for i in 0..COUNT-1, the same set in every process) under
the subject ``shared`` and under ``<NAME>-<i>``, through its own ``SchemaStore``
(``log_layout.schema_registry``), and prints one JSON line per acknowledged
registration (``{"schema": i, "subject": .., "id": .., "version": ..}``), flushed at
once, so a parent that SIGKILLs it knows exactly what was acknowledged. Prints
``ready`` and waits for a line on stdin first, so racing processes start together.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from log_layout import open_log  # noqa: E402
from log_layout.schema_registry import SchemaStore  # noqa: E402


def register(schemas: SchemaStore, subject: str, text: str) -> tuple[int, int]:
    """(id, version) of ``text`` under ``subject`` (the registry's register, no checks)."""
    got: list[tuple[int, int]] = []

    def change(doc):
        got.clear()
        entry = doc.setdefault("subjects", {}).setdefault(subject, {"versions": [], "next": 1})
        for v in entry["versions"]:
            if schemas.schema(v["id"]).schema == text:
                got.append((v["id"], v["version"]))
                return None
        sid = schemas.assign_id("AVRO", text, ())
        entry["versions"].append({"version": entry["next"], "id": sid, "deleted": False})
        got.append((sid, entry["next"]))
        return doc

    schemas.update(change)
    return got[0]


def main(argv: list[str]) -> int:
    url, name, count = argv[0], argv[1], int(argv[2])
    schemas = SchemaStore(open_log(url))
    schemas.registry()
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(count):
        for subject in ("shared", f"{name}-{i}"):
            sid, version = register(schemas, subject, f'"{i}"')
            print(json.dumps({"schema": i, "subject": subject, "id": sid, "version": version}),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
