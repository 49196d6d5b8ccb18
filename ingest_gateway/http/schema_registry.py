"""Confluent's Schema Registry REST API, served under ``gateway.schema.registry.path``.

A thin adapter over ``server.schema_registry.SchemaRegistry``: each handler reads its
path, query and body, runs the operation off the event loop (it reads the store) and
answers in ``application/vnd.schemaregistry.v1+json``. Refusals are Confluent's:
``{"error_code": 40401, "message": "Subject 'x' not found."}``; a body that is not JSON
or nests too deep is 400 (``error_code`` 400), one too large 413 (``error_code`` 413; a
declared length over the limit is refused before routing, with the gateway's own body),
a store failure 500 ``50001``. Routes (relative to the prefix)::

    GET    /  /schemas  /schemas/types  /schemas/ids/{id}[/schema|/versions|/subjects]
    GET    /subjects                     POST   /subjects/{s}               (lookup)
    GET    /subjects/{s}/versions        POST   /subjects/{s}/versions      (register)
    GET    /subjects/{s}/versions/{v}[/schema|/referencedby]
    DELETE /subjects/{s}[?permanent=true]  /subjects/{s}/versions/{v}[?permanent=true]
    GET|PUT|DELETE /config[/{s}]         GET|PUT /mode[/{s}]   DELETE /mode/{s}
    GET    /contexts                     (the default context, ".", only)
    POST   /compatibility/subjects/{s}/versions[/{v}]

A subject may hold ``/`` (Protobuf references name subjects after their files:
``google/protobuf/timestamp.proto``): clients send it as ``%2F``, which the server would
decode into a path separator before routing, so :class:`EncodedSlashes` routes on the
raw path with ``%2F`` (and ``%25``) kept, and the handlers decode path parameters once.
**Authorization** (with the authorizer on; the guard leaves these routes to their
handlers, ``route_acls.REGISTRY_ROUTE``): ACLs on ``Subject`` resources, literal or
prefixed (``sparklog acls --subject``), as Confluent's registry authorizes subjects:

- Read on the subject: its versions, a version, its schema, ``referencedby``, lookup
  (``POST /subjects/{s}``), the compatibility check;
- Write: register (``POST /subjects/{s}/versions``); Delete: delete a subject or version;
- DescribeConfigs / AlterConfigs on the subject: ``GET`` / ``PUT``, ``DELETE``
  ``/config/{s}`` and ``/mode/{s}``; on the cluster: the global ``/config`` and ``/mode``;
- ``GET /subjects``, ``/schemas`` and ``/schemas/ids/{id}/versions|subjects`` list only
  what the principal may Read; ``/schemas/ids/{id}`` needs Read on a subject holding the
  id (Describe on the cluster for an id no subject holds); ``/``, ``/schemas/types``
  and ``/contexts`` any authenticated principal.

A refusal is 403 with Confluent's ``error_code`` 40301, naming the operation and resource.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route, Router

from conf.errors import SparklogError
from ingest_gateway.errors import NotAuthorized
from ingest_gateway.http import access
from ingest_gateway.http.body import read_json
from ingest_gateway.http.errors import status_of
from ingest_gateway.server.schema_registry import SchemaRegistry
from ingest_gateway.server.schema_registry_errors import RegistryError, schema_not_found
from ingest_gateway.server.schema_types import TYPES
from log_layout.acls import CLUSTER_NAME as CLUSTER
from log_layout.acls import SUBJECT

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


def _json(status: int, doc: Any) -> Response:
    return Response(json.dumps(doc, ensure_ascii=False), status_code=status,
                    media_type=CONTENT_TYPE)


def registry_of(request: Request) -> SchemaRegistry:
    # one per gateway (Gateway.schema_codec): it caches schemas by id
    return request.app.state.gateway.schema_codec().registry


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "false").lower() == "true"


def _id(request: Request) -> int:
    text = request.path_params["id"]
    if not text.isdigit() or len(text) > 10:
        raise schema_not_found(f"Schema {text[:20]} not found")
    return int(text)


def _require(q: Request, operation: str, resource_type: str, name: str) -> None:
    """Raise NotAuthorized unless the principal may (free with the authorizer off)."""
    access.require(q, operation, resource_type, name)


def _readable(q: Request, subjects: Any) -> Any:
    """The subjects of ``subjects`` the principal may Read, in order."""
    if q.app.state.gateway.authorizer is None:
        return list(subjects)
    return [s for s in subjects if access.allowed(q, "Read", SUBJECT, s)]


def _need(operation: str, cluster_if_global: bool = False) -> Any:
    """The check of a route on its subject (or, ``cluster_if_global`` and no subject in
    the path, on the cluster)."""
    def check(q: Request) -> None:
        subject = q.path_params.get("subject")
        if subject is None and cluster_if_global:
            _require(q, operation, "Cluster", CLUSTER)
        else:
            _require(q, operation, SUBJECT, unquote(subject))
    return check


def handler(operation: Any, need: Any = None) -> Any:
    """A route calling ``operation(registry, request, body)`` in a thread after
    ``need(request)`` (its ACL check; None: none); errors become Confluent's answers."""
    async def route(request: Request) -> Response:
        try:
            if need is not None:  # before the body is read: a refusal costs nothing
                need(request)
            body = await read_json(request) if request.method in ("POST", "PUT") else None
            status, doc = 200, await run_in_threadpool(operation, registry_of(request),
                                                       request, body)
            if isinstance(doc, Response):
                return doc
        except RegistryError as e:
            status, doc = e.status, {"error_code": e.error_code, "message": str(e)}
        except NotAuthorized as e:  # Confluent's code and sentence
            status, doc = 403, {"error_code": 40301, "message": f"User {e.principal} is denied "
                                f"operation {e.operation} on {e.resource_type}: {e.name}"}
        except SparklogError as e:  # malformed or too large a body; a store's corrupt file
            status, _ = status_of(e)
            doc = {"error_code": 50001 if status >= 500 else status, "message": str(e)}
        except OSError as e:
            status, doc = 500, {"error_code": 50001,
                                "message": f"Error in the backend data store: {e}"}
        return _json(status, doc)
    return route


# -- handlers: each (registry, request, body) -> answer -------------------------------------
def _root(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return {}


def _types(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return list(TYPES)


def _all_schemas(r: SchemaRegistry, q: Request, b: Any) -> Any:
    found = r.all_schemas(prefix=q.query_params.get("subjectPrefix", ""),
                          deleted=_flag(q, "deleted"), latest_only=_flag(q, "latestOnly"))
    readable = set(_readable(q, {d["subject"] for d in found}))
    return [d for d in found if d["subject"] in readable]


def _readable_id(r: SchemaRegistry, q: Request) -> int:
    """The path's id, if the principal may Read a subject holding it (module doc)."""
    schema_id = _id(q)
    if q.app.state.gateway.authorizer is not None:
        holders = {v["subject"] for v in r.id_versions(schema_id, deleted=True)}
        if not holders:
            _require(q, "Describe", "Cluster", CLUSTER)
        elif not _readable(q, sorted(holders)):
            _require(q, "Read", SUBJECT, min(holders))  # raises, naming one of them
    return schema_id


def _by_id(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return r.by_id(_readable_id(r, q))


def _by_id_text(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return Response(r.by_id(_readable_id(r, q))["schema"], media_type=CONTENT_TYPE)


def _id_versions(r: SchemaRegistry, q: Request, b: Any) -> Any:
    found = r.id_versions(_id(q), deleted=_flag(q, "deleted"))
    readable = set(_readable(q, {v["subject"] for v in found}))
    return [v for v in found if v["subject"] in readable]


def _id_subjects(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return _readable(q, sorted({v["subject"] for v in r.id_versions(
        _id(q), deleted=_flag(q, "deleted"))}))


def _subjects(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return _readable(q, r.subjects(deleted=_flag(q, "deleted"),
                                   prefix=q.query_params.get("subjectPrefix", "")))


def _s(q: Request) -> str:
    return unquote(q.path_params["subject"])  # kept encoded by EncodedSlashes


def _versions(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return r.versions(_s(q), deleted=_flag(q, "deleted"))


def _register(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return r.register(_s(q), b, normalize=_flag(q, "normalize"))


def _lookup(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return r.lookup(_s(q), b, deleted=_flag(q, "deleted"))


def _version(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return r.version(_s(q), q.path_params["version"], deleted=_flag(q, "deleted"))


def _version_text(r: SchemaRegistry, q: Request, b: Any) -> Any:
    found = r.version(_s(q), q.path_params["version"], deleted=_flag(q, "deleted"))
    return Response(found["schema"], media_type=CONTENT_TYPE)


def _referenced_by(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return r.referenced_by(_s(q), q.path_params["version"])


def _delete_subject(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return r.delete_subject(_s(q), permanent=_flag(q, "permanent"))


def _delete_version(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return r.delete_version(_s(q), q.path_params["version"], permanent=_flag(q, "permanent"))


def _subject_or_none(q: Request) -> str | None:
    subject = q.path_params.get("subject")
    return None if subject is None else unquote(subject)


def _config(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return r.configs.config(_subject_or_none(q), default_to_global=_flag(q, "defaultToGlobal"))


def _set_config(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return r.configs.set_config(_subject_or_none(q), b)


def _delete_config(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return r.configs.delete_config(_subject_or_none(q))


def _mode(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return r.configs.mode(_subject_or_none(q))


def _set_mode(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return r.configs.set_mode(_subject_or_none(q), b, force=_flag(q, "force"))


def _delete_mode(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return r.configs.delete_mode(_s(q))


def _contexts(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return ["."]  # the default context only: contexts are not served


def _check(r: SchemaRegistry, q: Request, b: Any) -> Any:
    return r.check(_s(q), q.path_params.get("version"), b, verbose=_flag(q, "verbose"))


def routes() -> list[BaseRoute]:
    """The registry's routes, relative to its prefix."""
    def route(path: str, operation: Any, method: str, need: Any = None) -> Route:
        return Route(path, handler(operation, need), methods=[method])

    s, v = "/subjects/{subject}", "/subjects/{subject}/versions/{version}"
    read, write, delete = _need("Read"), _need("Write"), _need("Delete")
    describe, alter = _need("DescribeConfigs", True), _need("AlterConfigs", True)
    return [  # listings and ids filter or check in their operation (module doc)
        route("/", _root, "GET"),
        route("/schemas", _all_schemas, "GET"),
        route("/schemas/types", _types, "GET"),
        route("/schemas/ids/{id}", _by_id, "GET"),
        route("/schemas/ids/{id}/schema", _by_id_text, "GET"),
        route("/schemas/ids/{id}/versions", _id_versions, "GET"),
        route("/schemas/ids/{id}/subjects", _id_subjects, "GET"),
        route("/subjects", _subjects, "GET"),
        route(s, _lookup, "POST", read),
        route(s, _delete_subject, "DELETE", delete),
        route(f"{s}/versions", _versions, "GET", read),
        route(f"{s}/versions", _register, "POST", write),
        route(v, _version, "GET", read),
        route(v, _delete_version, "DELETE", delete),
        route(f"{v}/schema", _version_text, "GET", read),
        route(f"{v}/referencedby", _referenced_by, "GET", read),
        route("/config", _config, "GET", describe),
        route("/config", _set_config, "PUT", alter),
        route("/config", _delete_config, "DELETE", alter),
        route("/config/{subject}", _config, "GET", describe),
        route("/config/{subject}", _set_config, "PUT", alter),
        route("/config/{subject}", _delete_config, "DELETE", alter),
        route("/mode", _mode, "GET", describe),
        route("/mode", _set_mode, "PUT", alter),
        route("/mode/{subject}", _mode, "GET", describe),
        route("/mode/{subject}", _set_mode, "PUT", alter),
        route("/mode/{subject}", _delete_mode, "DELETE", alter),
        route("/contexts", _contexts, "GET"),
        route("/compatibility/subjects/{subject}/versions", _check, "POST", read),
        route("/compatibility/subjects/{subject}/versions/{version}", _check, "POST", read),
    ]


_KEPT = re.compile(r"(%2[fF]|%25)")


class EncodedSlashes:
    """Routes on the request's raw path, percent-decoded except ``%2F`` and ``%25``, so
    a subject holding ``/`` stays one path segment (the handlers decode it)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        raw = scope.get("raw_path")
        if scope["type"] == "http" and raw:
            parts = _KEPT.split(raw.decode("latin-1"))
            path = "".join(p.upper() if i % 2 else unquote(p)
                           for i, p in enumerate(parts)) if len(parts) > 1 else scope["path"]
            scope = dict(scope, path=path)
        await self.app(scope, receive, send)


def mount(prefix: str) -> list[BaseRoute]:
    """The registry mounted at ``prefix`` (``gateway.schema.registry.path``); none if
    empty."""
    prefix = prefix.rstrip("/")
    if not prefix:
        return []
    return [Mount(prefix, app=EncodedSlashes(Router(routes=routes())))]
