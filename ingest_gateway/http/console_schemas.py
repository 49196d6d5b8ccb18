"""The console's Schema Registry pages (served by ``http.console``)::

    GET /ui/schemas                              subjects: type, latest version and its id,
                                                 versions, compatibility level
    GET /ui/schemas?subject=S[&version=V]        a subject: its versions, one version's
        [&from=A&to=B]                           schema pretty-printed (default: the
                                                 latest), its level and mode; with from
                                                 and to, a unified diff of the two
                                                 versions' pretty-printed schemas

and the "Schemas" section of a topic's page (:func:`topic_section`): the subjects of
the topic-name strategy (``<topic>-key``, ``<topic>-value``) and of the topic-record-
name strategy (``<topic>-<record name>``), found by name; and those of the record-name
strategy (the record's full name alone, which names no topic), found by the schema ids
the topic's records carry: a subject without a ``-`` (a record's full name has none)
one of whose versions' ids is in Confluent's header of one of the last
:data:`RECENT_RECORDS` keys or values of each of the first :data:`RECENT_PARTITIONS`
partitions. Cheap (a read of each sampled partition's last segment, no decoding) and
right for a topic whose writers use that subject now; one written with it only long ago
does not show it.

The subject is a query parameter, not a path segment: a subject may hold ``/``
(Protobuf references name subjects after their files), which a decoded path cannot
tell from a separator. **Authorization** is the registry's (``http.schema_registry``):
the listings show only the subjects the principal may Read; a subject's page needs
Read on it (403 otherwise). Every name, schema and level shown is escaped.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections.abc import Sequence
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from conf.errors import SparklogError
from ingest_gateway.errors import BadRequest
from ingest_gateway.http import access
from ingest_gateway.http.console_render import esc, link, num, page, table, url
from ingest_gateway.server.schema_registry import SchemaRegistry
from ingest_gateway.server.schema_registry_config import level_of, mode_of
from ingest_gateway.server.schema_registry_errors import (RegistryError, check_subject,
                                                          subject_not_found, version_not_found)
from log_layout.acls import SUBJECT

#: most lines of the two schemas a diff compares (difflib is quadratic at worst)
MAX_DIFF_LINES = 20_000
#: the records at each partition's end, and the partitions, whose schema ids a topic's
#: page looks at for its record-name-strategy subjects (module docstring)
RECENT_RECORDS, RECENT_PARTITIONS = 50, 16


@dataclasses.dataclass(frozen=True)
class Version:
    """One live version of a subject."""
    version: int
    id: int
    schema_type: str
    text: str  # as registered

    @property
    def pretty(self) -> str:
        """The schema indented (Avro and JSON Schema are JSON; Protobuf is kept as is)."""
        if self.schema_type == "PROTOBUF":
            return self.text
        try:
            return json.dumps(json.loads(self.text), indent=2, ensure_ascii=False)
        except ValueError:
            return self.text


@dataclasses.dataclass(frozen=True)
class Subject:
    name: str
    level: str  # the compatibility level that applies (its own or the global one)
    mode: str
    own_level: bool  # set on the subject, not inherited
    versions: tuple[Version, ...]

    @property
    def latest(self) -> Version:
        return self.versions[-1]


# -- data (store reads: run off the event loop) ------------------------------------------------
def _subject(registry: SchemaRegistry, doc: dict[str, Any], name: str) -> Subject | None:
    """``name`` as the subjects document ``doc`` has it; None without live versions."""
    entry = doc.get("subjects", {}).get(name) or {}
    versions = []
    for v in entry.get("versions", ()):
        if v.get("deleted"):
            continue
        stored = registry.schemas.schema(v["id"])
        if stored is not None:
            versions.append(Version(v["version"], v["id"], stored.schema_type, stored.schema))
    if not versions:
        return None
    return Subject(name, level_of(doc, name), mode_of(doc, name),
                   bool(entry.get("compatibility")), tuple(versions))


def subjects(registry: SchemaRegistry, names: Sequence[str]) -> list[Subject]:
    """The subjects of ``names`` that hold live versions, in order (one document read)."""
    doc = registry.schemas.registry()
    found = (_subject(registry, doc, n) for n in names)
    return [s for s in found if s is not None]


def global_level(registry: SchemaRegistry) -> str:
    return level_of(registry.schemas.registry(), None)


def one_subject(registry: SchemaRegistry, name: str) -> Subject:
    """Raises RegistryError 40401 for a subject without live versions."""
    found = subjects(registry, [name])
    if not found:
        raise subject_not_found(name)
    return found[0]


def topic_subject_names(registry: SchemaRegistry, topic: str) -> list[str]:
    """The subjects naming ``topic`` by the topic-name and topic-record-name strategies.
    A subject ``<topic>-x-value`` is another topic's (``<topic>-x``) and left out."""
    prefix = f"{topic}-"
    return [s for s in registry.subjects(prefix=prefix)
            if s in (f"{topic}-key", f"{topic}-value")
            or not (s.endswith("-key") or s.endswith("-value"))]


def recent_schema_ids(meta: Any, topic: str) -> set[int]:
    """The schema ids in Confluent's header (magic byte 0, 4-byte id) of the last
    :data:`RECENT_RECORDS` keys and values of the topic's first :data:`RECENT_PARTITIONS`
    partitions. Raises UnknownTopic, InvalidTopicName; a partition that cannot be read
    (retention moved its start, a store error) gives none."""
    ids: set[int] = set()
    for plog in meta.partitions(topic)[:RECENT_PARTITIONS]:
        try:
            m = plog.snapshot()
            start = max(m.log_start_offset, m.next_offset - RECENT_RECORDS)
            batches = list(plog.read(start, m.next_offset, manifest=m)) \
                if start < m.next_offset else []
        except (OSError, SparklogError):
            continue  # a sample: the page still shows what the other partitions give
        for batch in batches:
            for column in ("key", "value"):
                if column not in batch.schema.names:
                    continue
                for raw in batch.column(column).to_pylist():
                    if raw is not None and len(raw) >= 5 and raw[0] == 0:
                        ids.add(int.from_bytes(raw[1:5], "big", signed=True))
    return ids


def record_subject_names(registry: SchemaRegistry, ids: set[int]) -> list[str]:
    """The record-name-strategy subjects (no ``-`` in the name) one of whose live
    versions has an id in ``ids``."""
    if not ids:
        return []
    subjects = (registry.schemas.registry().get("subjects") or {})
    return sorted(name for name, info in subjects.items() if "-" not in name and any(
        not v.get("deleted") and v.get("id") in ids for v in info.get("versions", ())))


# -- HTML ------------------------------------------------------------------------------------
def subject_url(name: str, **query: Any) -> str:
    return url("/ui/schemas", subject=name, **query)


def _subjects_table(rows: Sequence[Subject], id: str) -> str:
    out = [(link(subject_url(s.name), s.name), esc(s.latest.schema_type), num(s.latest.version),
            num(s.latest.id), num(len(s.versions)),
            esc(s.level) + ("" if s.own_level else ' <span class=muted>(global)</span>'))
           for s in rows]
    return table(["Subject", "Type", "Latest version", "Schema id", "Versions",
                  "Compatibility"], out, id=id, numeric=(2, 3, 4))


def list_page(rows: Sequence[Subject], level: str) -> str:
    body = (f'<p class=muted id=global-level>Global compatibility level: <b>{esc(level)}</b>'
            f' · {num(len(rows))} subject{"s" if len(rows) != 1 else ""}</p>'
            + _subjects_table(rows, "subjects"))
    return page("Schemas", body, active="/ui/schemas")


def _diff(subject: Subject, a: Version, b: Version) -> str:
    left, right = a.pretty.splitlines(), b.pretty.splitlines()
    if len(left) + len(right) > MAX_DIFF_LINES:
        return (f'<p class=muted id=diff>Versions {a.version} and {b.version} are too long '
                f"to compare here (over {num(MAX_DIFF_LINES)} lines).</p>")
    lines = list(difflib.unified_diff(left, right, f"version {a.version}",
                                      f"version {b.version}", lineterm=""))
    if not lines:
        return (f'<p class=muted id=diff>Versions {a.version} and {b.version} have the same '
                "schema text.</p>")
    cls = {"+": "add", "-": "del", "@": "hunk"}
    out = "".join(f'<span class="{cls.get(line[:1], "ctx")}">{esc(line)}</span>\n'
                  for line in lines)
    return f'<pre class=diff id=diff>{out}</pre>'


def _diff_form(subject: Subject, a: int, b: int) -> str:
    def select(name: str, chosen: int) -> str:
        opts = "".join(f'<option value={v.version}{" selected" if v.version == chosen else ""}>'
                       f"{v.version}</option>" for v in subject.versions)
        return f"<select name={name}>{opts}</select>"
    return (f'<form method=get action="/ui/schemas" class=browse id=diff-form>'
            f'<input type=hidden name=subject value="{esc(subject.name)}">'
            f"<label>Compare version {select('from', a)}</label>"
            f"<label>with {select('to', b)}</label><button type=submit>Diff</button></form>")


def _find(subject: Subject, version: int) -> Version:
    for v in subject.versions:
        if v.version == version:
            return v
    raise version_not_found(version)


def subject_page(subject: Subject, version: int | None, diff: tuple[int, int] | None) -> str:
    """Raises RegistryError 40402 for a version the subject does not hold (live)."""
    shown = subject.latest if version is None else _find(subject, version)
    pair = (_find(subject, diff[0]), _find(subject, diff[1])) if diff else None
    cards = [("Type", esc(subject.latest.schema_type)),
             ("Latest version", num(subject.latest.version)),
             ("Compatibility", esc(subject.level)
              + ("" if subject.own_level else " <small>(global)</small>")),
             ("Mode", esc(subject.mode))]
    card_html = "".join(f'<div class=card><span>{esc(k)}</span><b>{v}</b></div>'
                        for k, v in cards)
    rows = [(link(subject_url(subject.name, version=v.version), v.version)
             + (' <span class=tag>shown</span>' if v is shown else ""),
             num(v.id), esc(v.schema_type), num(len(v.text))) for v in subject.versions]
    versions = table(["Version", "Schema id", "Type", "Characters"], rows, id="versions",
                     numeric=(1, 3))
    older = subject.versions[-2].version if len(subject.versions) > 1 else subject.latest.version
    a, b = diff or (older, subject.latest.version)
    body = (f'<p>{link("/ui/schemas", "Schemas")} › {esc(subject.name)}</p>'
            f'<section class=cards id=subject-summary>{card_html}</section>'
            f"<h2>Versions</h2>{versions}"
            f'<h2>Version {num(shown.version)} <small class=muted>(id {num(shown.id)})</small>'
            f'</h2><pre class=json id=schema>{esc(shown.pretty)}</pre>'
            f"<h2>Diff</h2>{_diff_form(subject, a, b)}"
            + (_diff(subject, *pair) if pair else ""))
    return page(f"Subject {subject.name}", body, active="/ui/schemas")


def topic_section(rows: Sequence[Subject]) -> str:
    """The "Schemas" part of a topic's page."""
    return "<h2>Schemas</h2>" + _subjects_table(rows, "topic-subjects")


# -- routes ----------------------------------------------------------------------------------
def _version_query(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name, "").strip()
    if not raw:
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 10:
        raise BadRequest(f"{name} must be a version number, not {raw[:40]!r}")
    return int(raw)


def _registry_refusal(exc: RegistryError) -> Response:
    body = (f'<p class=error id=error>{esc(exc)}</p>'
            '<p><a href="/ui/schemas">Back to the schemas</a></p>')
    return HTMLResponse(page(f"Error {exc.status}", body), status_code=exc.status)


def _readable(request: Request, names: Sequence[str]) -> list[str]:
    if request.app.state.gateway.authorizer is None:
        return list(names)
    return [n for n in names if access.allowed(request, "Read", SUBJECT, n)]


async def schemas_page(request: Request) -> Response:
    """The subjects listing, or with ``?subject=`` one subject (Read on it: 403)."""
    registry = request.app.state.gateway.schema_codec().registry
    name = request.query_params.get("subject")
    try:
        if name is None:
            names = _readable(request, await run_in_threadpool(registry.subjects))
            rows = await run_in_threadpool(subjects, registry, names)
            level = await run_in_threadpool(global_level, registry)
            return HTMLResponse(list_page(rows, level))
        check_subject(name)  # 42208: empty, too long, control characters
        access.require(request, "Read", SUBJECT, name)  # NotAuthorized: 403
        version = _version_query(request, "version")
        a, b = _version_query(request, "from"), _version_query(request, "to")
        subject = await run_in_threadpool(one_subject, registry, name)
        diff = (a, b) if a is not None and b is not None else None
        return HTMLResponse(subject_page(subject, version, diff))
    except RegistryError as exc:
        return _registry_refusal(exc)


async def topic_subjects(request: Request, topic: str) -> str:
    """The topic page's "Schemas" section: its subjects the principal may Read (the
    registry's store unreadable: said in the section, the topic's page still shown)."""
    registry = request.app.state.gateway.schema_codec().registry
    try:
        names = await run_in_threadpool(topic_subject_names, registry, topic)
        ids = await run_in_threadpool(recent_schema_ids, request.app.state.gateway.metadata,
                                      topic)
        names += await run_in_threadpool(record_subject_names, registry, ids)
        return topic_section(await run_in_threadpool(subjects, registry,
                                                     _readable(request, names)))
    except (OSError, SparklogError) as exc:
        return f'<h2>Schemas</h2><p class=error id=topic-subjects>{esc(exc)}</p>'

