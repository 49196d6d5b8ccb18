"""The machinery of the request bodies declared in ``bodies`` (msgspec Structs): convert a
parsed JSON document to its declaration with the gateway's refusal (BadRequest, 40001,
naming the field), and write a declaration's JSON Schema in OpenAPI 3.0's dialect.

A ``null`` top-level field means "not given" (its default), as REST Proxy reads it.
Unknown fields are ignored, as REST Proxy (Jackson, FAIL_ON_UNKNOWN_PROPERTIES off) does.
A refusal names the field by its path (``partitions[0].offset``), at most
:data:`MAX_MESSAGE` characters (msgspec quotes the value of an enumeration it refuses),
so a huge value cannot make a huge answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
from msgspec import Struct
from starlette.requests import Request

from ingest_gateway.errors import BadRequest
from ingest_gateway.http.body import read_json

T = TypeVar("T")


class Body(Struct, kw_only=True):
    """A request body: unknown fields ignored (REST Proxy's Jackson ignores them too)."""


#: a route's own refusal of a body its declaration refuses: (the field's path, as
#: ``partitions[0].offset``, "" for the body itself; what is wrong, as ``is required`` or
#: ``expected int, got str``) -> the error to raise (the ACL routes answer REST Proxy's
#: ``invalid_acl`` 40002, not 40001); None: the default BadRequest
Refusal = Callable[[str, str], Exception]


def convert(doc: Any, kind: type[T], refusal: Refusal | None = None) -> T:
    """``doc`` (parsed JSON) as ``kind``; a top-level ``null`` field counts as absent.

    Raises BadRequest naming the first field that does not fit, or what ``refusal``
    makes of it.
    """
    if isinstance(doc, dict) and None in doc.values():
        doc = {k: v for k, v in doc.items() if v is not None}
    try:
        return msgspec.convert(doc, kind)
    except msgspec.ValidationError as e:
        if refusal is not None:
            raise refusal(*split_error(str(e))) from None
        message = refusal_message(str(e))
        if str(e).startswith("Invalid enum value"):  # say what is allowed, as REST Proxy does
            allowed = _enum_at(kind, _AT.search(str(e)))
            if allowed:
                message = f"{message}; expected one of {', '.join(allowed)}"[:MAX_MESSAGE]
        raise BadRequest(message) from None


async def read_body_as(request: Request, kind: type[T], *, empty: bool = False,
                       refusal: Refusal | None = None) -> T:
    """The request's JSON body as ``kind``; an empty body is ``kind()`` when ``empty``.

    Raises what ``body.read_json`` raises (413, NestingTooDeep, BadRequest) and
    BadRequest (or what ``refusal`` makes) for a body ``kind`` refuses.
    """
    doc = await read_json(request, empty={} if empty else None)
    return convert(doc, kind, refusal)


#: a refusal quotes at most this much of msgspec's text (an enum refusal quotes the value)
MAX_MESSAGE = 300
_AT = re.compile(r" - at `\$(.*)`$")
#: an enumeration's refused value, quoted at most this long
_LONG_ENUM_VALUE = re.compile(r"^(Invalid enum value .{40}).+$", re.DOTALL)
_MISSING = re.compile(r"^Object missing required field `(.*)`$")


def split_error(error: str) -> tuple[str, str]:
    """msgspec's ValidationError text as (the field's path, "" for the body itself; what
    is wrong, lower case, at most :data:`MAX_MESSAGE` characters)."""
    m = _AT.search(error)
    path = m.group(1).lstrip(".") if m else ""
    what = error[:m.start()] if m else error
    missing = _MISSING.match(what)
    if missing:
        name = f"{path}.{missing.group(1)}" if path else missing.group(1)
        return name[:MAX_MESSAGE], "is required"
    what = _LONG_ENUM_VALUE.sub(r"\1...", what.replace("`", ""))
    return path[:MAX_MESSAGE], (what[:1].lower() + what[1:])[:MAX_MESSAGE]


def refusal_message(error: str) -> str:
    """msgspec's ValidationError text as the gateway writes a refusal: the field's path
    first (``field 'partitions[0].offset': expected int, got str``)."""
    path, what = split_error(error)
    if what == "is required":
        return f"field {path!r} is required"
    out = f"field {path!r}: {what}" if path else f"the body does not fit: {what}"
    return out if len(out) <= MAX_MESSAGE else out[:MAX_MESSAGE - 3] + "..."


def _enum_at(kind: type, at: re.Match[str] | None) -> list[str]:
    """The values the enumeration at msgspec's error path ``at`` allows (``$.format``,
    ``$.strategies[0]``, ``$.auto.offset.reset``: a name may hold dots), read from
    ``kind``'s JSON Schema; [] if none is found."""
    if at is None:
        return []
    schema = msgspec.json.schema(kind)
    defs = schema.get("$defs", {})

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            node = defs[node["$ref"].rsplit("/", 1)[-1]]
        return node

    def options(node: dict[str, Any]) -> list[dict[str, Any]]:
        return [resolve(o) for o in [node, *node.get("anyOf", [])]]

    node, rest = resolve(schema), at.group(1)
    while rest:
        if rest.startswith("["):
            rest = rest[rest.index("]") + 1:]
            node = next((o["items"] for o in options(node) if "items" in o), {})
        else:
            rest = rest[1:]
            props = {k: v for o in options(node) for k, v in o.get("properties", {}).items()}
            name = max((k for k in props if rest.startswith(k) and rest[len(k):][:1] in
                        ("", ".", "[")), key=len, default=None)
            if name is None:
                return []
            node, rest = props[name], rest[len(name):]
        node = resolve(node)
    for candidate in options(node):
        if "enum" in candidate:
            return [str(v) for v in candidate["enum"]]
    return []


def openapi30(schema: Any) -> Any:
    """A JSON Schema (2020-12, as msgspec writes it) in OpenAPI 3.0's dialect: ``null``
    in a union becomes ``nullable`` (3.0 has no ``null`` type)."""
    if isinstance(schema, list):
        return [openapi30(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: openapi30(v) for k, v in schema.items()}
    if out.get("required") == []:  # 3.0: a required list has at least one name
        del out["required"]
    if "examples" in out and isinstance(out["examples"], list):  # 3.0: one example
        out["example"] = out.pop("examples")[0]
    for key in ("anyOf", "oneOf"):
        options = out.get(key)
        if options and {"type": "null"} in options:
            rest = [o for o in options if o != {"type": "null"}]
            del out[key]
            if len(rest) == 1 and "$ref" not in rest[0]:
                out = {**rest[0], **out, "nullable": True}
            else:  # a $ref takes no siblings in 3.0
                out = {**out, key: rest, "nullable": True}
    return out
