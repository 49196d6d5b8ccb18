"""Rebuilds v2_examples.json and v3_examples.json from Confluent's REST Proxy sources.

    python tests/ingest_gateway/http/rest_proxy_examples/extract.py API_V2_RST OPENAPI_YAML

API_V2_RST: confluentinc/kafka-rest ``docs/api.rst`` at commit
97b79372e22823fdb8217099b9743dd8af818846 (the last before the docs moved to
confluentinc/docs); OPENAPI_YAML: confluentinc/kafka-rest ``api/v3/openapi.yaml``
at commit 985d0e056f841a4136b4fb392cf617ae81878732. The tests do not run it: the
JSON files are the stored examples, and this says exactly how they were made.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent


def _block(lines: list[str], i: int) -> tuple[list[str], int]:
    """The indented body of the ``.. sourcecode:: http`` directive at line ``i``."""
    j, out, indent = i + 1, [], None
    while j < len(lines):
        line = lines[j]
        if not line.strip():
            out.append("")
            j += 1
            continue
        ind = len(line) - len(line.lstrip())
        indent = ind if indent is None else indent
        if ind < indent:
            break
        out.append(line[indent:])
        j += 1
    while out and not out[-1]:
        out.pop()
    while out and not out[0]:
        out.pop(0)
    return out, j


def _json(text: str) -> Any:
    """The documented JSON, its trailing commas removed; the text itself if it is not
    JSON even then (two Avro examples lack a comma)."""
    try:
        return json.loads(re.sub(r",(\s*[}\]])", r"\1", text))
    except ValueError:
        return text


def v2(rst: str) -> list[dict[str, Any]]:
    lines = rst.expandtabs(8).split("\n")
    start = next(i for i, line in enumerate(lines) if line.strip() == "API v2")
    end = next(i for i, line in enumerate(lines) if line.strip() == "API v1")
    examples, endpoint, pending, i = [], None, None, start
    while i < end:
        m = re.match(r"\.\. http:(\w+):: (\S+)", lines[i].strip())
        if m:
            endpoint = f"{m.group(1).upper()} {m.group(2)}"
        if lines[i].strip() != ".. sourcecode:: http":
            i += 1
            continue
        blk, j = _block(lines, i)
        k, headers = 1, {}
        while k < len(blk) and blk[k].strip():
            name, _, value = blk[k].partition(":")
            headers[name.strip()] = value.strip()
            k += 1
        text = "\n".join(blk[k:]).strip()
        body = _json(text) if text else None
        if blk[0].startswith("HTTP/1.1"):
            pending = pending or {"endpoint": endpoint, "source_line": i + 1, "request": None}
            pending["response"] = {"status": int(blk[0].split()[1]),
                                   "content_type": headers.get("Content-Type"), "body": body}
            examples.append(pending)
            pending = None
        else:
            if pending is not None:  # a request documented without its answer
                examples.append(pending)
            method, path = blk[0].split()[:2]
            pending = {"endpoint": endpoint, "source_line": i + 1,
                       "request": {"method": method, "path": path, "body": body,
                                   "headers": {h: v for h, v in headers.items() if h != "Host"}}}
        i = j
    if pending is not None:
        examples.append(pending)
    return examples


def v3(spec: dict[str, Any]) -> list[dict[str, Any]]:
    comp = spec["components"]

    def deref(o: Any) -> Any:
        while isinstance(o, dict) and "$ref" in o:
            kind, name = o["$ref"].split("/")[-2:]
            o = comp[kind][name]
        return o

    def examples(content: Any) -> dict[str, Any]:
        c = (content or {}).get("application/json") or {}
        out = {"example": c["example"]} if "example" in c else {}
        for k, v in (c.get("examples") or {}).items():
            out[k] = deref(v).get("value")
        return out

    ops = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            entry = {"path": "/v3" + path, "method": method.upper(),
                     "operation_id": op.get("operationId"), "summary": op.get("summary")}
            if "requestBody" in op:
                entry["request_examples"] = examples(deref(op["requestBody"]).get("content"))
            for status, resp in op["responses"].items():
                if str(status).startswith("2"):
                    entry["response"] = {"status": int(status),
                                         "examples": examples(deref(resp).get("content"))}
                    break
            ops.append(entry)
    return ops


def main(rst_path: str, yaml_path: str) -> None:
    doc2 = json.loads((HERE / "v2_examples.json").read_text())
    doc2["examples"] = v2(Path(rst_path).read_text())
    (HERE / "v2_examples.json").write_text(json.dumps(doc2, indent=1))
    doc3 = json.loads((HERE / "v3_examples.json").read_text())
    doc3["operations"] = v3(yaml.safe_load(Path(yaml_path).read_text()))
    (HERE / "v3_examples.json").write_text(json.dumps(doc3, indent=1))


if __name__ == "__main__":
    main(*sys.argv[1:])
