"""``sparklog schemas``: the Schema Registry's subjects and schemas in the store.

  list [--deleted] [--prefix P]      the subjects (with their versions and level)
  describe SUBJECT [--version V]     a subject's versions, compatibility level and one
                                     version's schema (default: the latest) [--json]
  register SUBJECT FILE [--type T]   register the schema in FILE (AVRO, JSON or PROTOBUF;
                                     default AVRO) under SUBJECT; prints its id and version
  check SUBJECT FILE [--version V]   would FILE's schema be accepted after that version
                                     (default: all, under the subject's level)? exit 1 if not
  delete SUBJECT [--version V] [--permanent]
                                     soft-delete the subject (or one version); with
                                     --permanent, remove what was soft-deleted
  compatibility [SUBJECT] [--level LEVEL]
                                     show or set the level (NONE, BACKWARD, FORWARD, FULL
                                     and the _TRANSITIVE ones) of a subject or the global one

The same operations, checks and rules as the gateways' Schema Registry
(``gateway.schema.registry.path``), read and written in the store (``--store``); no
gateway is needed. Deletes ask for confirmation (``--yes`` skips it).

Examples:
  sparklog schemas register clicks-value click.avsc
  sparklog schemas check clicks-value click-v2.avsc
  sparklog schemas compatibility clicks-value --level FULL
  sparklog schemas describe clicks-value --version 1
  sparklog schemas delete clicks-value --yes
"""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("schemas", help="list, describe, register, check and delete "
                                       "Schema Registry subjects",
                       description=__doc__.split("\n\n", 1)[1],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = actions.add_parser("list", help="the subjects")
    ls.add_argument("--deleted", action="store_true", help="soft-deleted subjects too")
    ls.add_argument("--prefix", default="", help="only subjects starting with it")
    d = actions.add_parser("describe", help="a subject's versions and schema")
    d.add_argument("subject")
    d.add_argument("--version", default="latest", help="a version number or latest")
    d.add_argument("--json", action="store_true", help="print Confluent's JSON answer")
    for name, text in (("register", "register a schema from a file"),
                       ("check", "check a schema's compatibility")):
        a = actions.add_parser(name, help=text)
        a.add_argument("subject")
        a.add_argument("file", help="the schema's text (.avsc, .json, .proto); - for stdin")
        a.add_argument("--type", default="AVRO", type=str.upper,
                       choices=("AVRO", "JSON", "PROTOBUF"), help="the schema's type")
        if name == "check":
            a.add_argument("--version", help="against this version only (or latest)")
    x = actions.add_parser("delete", help="delete a subject or one version")
    x.add_argument("subject")
    x.add_argument("--version", help="only this version (or latest)")
    x.add_argument("--permanent", action="store_true",
                   help="remove what was soft-deleted (a soft delete must come first)")
    x.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    c = actions.add_parser("compatibility", help="show or set a compatibility level")
    c.add_argument("subject", nargs="?", help="the subject (default: the global level)")
    c.add_argument("--level", type=str.upper, help="set it: NONE, BACKWARD, FORWARD, FULL, "
                                                   "or one of those with _TRANSITIVE")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ingest_gateway.server.schema_registry import SchemaRegistry
    from jobs.cli import settings_from
    from log_layout import open_log_from_settings
    from log_layout.schema_registry import SchemaStore

    registry = SchemaRegistry(SchemaStore(open_log_from_settings(settings_from(args))))
    return {"list": _list, "describe": _describe, "register": _register, "check": _check,
            "delete": _delete, "compatibility": _compatibility}[args.action](registry, args)


def _read(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


def _list(registry, args) -> int:
    from ingest_gateway.server.schema_registry_config import level_of
    from jobs.cli_output import console, table

    subjects = registry.subjects(deleted=args.deleted, prefix=args.prefix)
    if not subjects:
        console().print("no subjects")
        return 0
    doc = registry.schemas.registry()
    t = table("SUBJECT", "VERSIONS", "LATEST_ID", "COMPATIBILITY")
    for s in subjects:
        versions = registry.versions(s, deleted=args.deleted)
        latest = registry.version(s, versions[-1], deleted=args.deleted)
        t.add_row(s, ",".join(map(str, versions)), latest["id"], level_of(doc, s))
    t.print()
    return 0


def _describe(registry, args) -> int:
    from ingest_gateway.server.schema_registry_config import level_of
    from jobs.cli_output import console

    found = registry.version(args.subject, args.version)
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    doc = registry.schemas.registry()
    out = console()
    out.print(f"subject {found['subject']}: versions "
              f"{', '.join(map(str, registry.versions(args.subject)))}; compatibility "
              f"{level_of(doc, args.subject)}")
    out.print(f"version {found['version']}, id {found['id']}, type "
              f"{found.get('schemaType', 'AVRO')}"
              + (f", references {found['references']}" if found.get("references") else ""))
    text = found["schema"]
    try:
        text = json.dumps(json.loads(text), indent=2)
    except ValueError:
        pass  # PROTOBUF: as written
    print(text)
    return 0


def _body(args) -> dict:
    return {"schema": _read(args.file), "schemaType": args.type}


def _register(registry, args) -> int:
    from jobs.cli_output import console

    answer = registry.register(args.subject, _body(args))
    console().print(f"{args.subject}: id {answer['id']}, version {answer['version']}")
    return 0


def _check(registry, args) -> int:
    from jobs.cli_output import console

    answer = registry.check(args.subject, args.version, _body(args), verbose=True)
    out = console()
    if answer["is_compatible"]:
        out.print(f"compatible with {args.subject}")
        return 0
    out.print(f"NOT compatible with {args.subject}:")
    for message in answer["messages"]:
        out.print(f"  {message}", markup=False)
    return 1


def _delete(registry, args) -> int:
    from jobs.cli_output import confirm, console

    what = f"{args.subject} version {args.version}" if args.version else args.subject
    confirm(f"{'Permanently delete' if args.permanent else 'Delete'} {what}?", yes=args.yes)
    if args.version:
        done = [registry.delete_version(args.subject, args.version, permanent=args.permanent)]
    else:
        done = registry.delete_subject(args.subject, permanent=args.permanent)
    console().print(f"{args.subject}: deleted version{'s' if len(done) > 1 else ''} "
                    f"{', '.join(map(str, done))}" + (" permanently" if args.permanent else ""))
    return 0


def _compatibility(registry, args) -> int:
    from jobs.cli_output import console

    if args.level:
        registry.configs.set_config(args.subject, {"compatibility": args.level})
    level = registry.configs.config(args.subject, default_to_global=True)["compatibilityLevel"]
    console().print(f"{args.subject or 'global'}: {level}")
    return 0
