"""OpenAPI links between the gateway's operations: what a client (or a fuzzer) cannot infer.

Ids handed out in one answer under one name and used in a later request under
another (a REST consumer instance's ``instance_id``, a group member's
``member_id`` and ``generation``) are linked here, so schemathesis' stateful
runs chain create -> subscribe -> records -> commit -> delete and join ->
heartbeat -> commit -> leave. ``openapi.document`` adds them to its responses.
"""

from __future__ import annotations

from typing import Any

_INST = "/consumers/{group}/instances/{instance}"
_SAME_INSTANCE = {"path.group": "$request.path.group", "path.instance": "$request.path.instance"}
#: (path, method, status) -> {link name: (target path, method, parameters, requestBody)}
LINKS: dict[tuple[str, str, str], dict[str, tuple[str, str, dict[str, str], Any]]] = {
    ("/consumers/{group}", "post", "200"): {
        f"Instance{name}": (path, method, {"path.group": "$request.path.group",
                                          "path.instance": "$response.body#/instance_id"}, body)
        for name, path, method, body in [
            ("Subscribe", f"{_INST}/subscription", "post", None),
            ("Subscription", f"{_INST}/subscription", "get", None),
            ("Assignments", f"{_INST}/assignments", "get", None),
            ("Records", f"{_INST}/records", "get", None),
            ("Seek", f"{_INST}/positions", "post", None),
            ("SeekBeginning", f"{_INST}/positions/beginning", "post", None),
            ("SeekEnd", f"{_INST}/positions/end", "post", None),
            ("Assign", f"{_INST}/assignments", "post", None),
            ("Unsubscribe", f"{_INST}/subscription", "delete", None),
            ("Commit", f"{_INST}/offsets", "post", None),
            ("Committed", f"{_INST}/offsets", "get", None),
            ("Heartbeat", f"{_INST}/heartbeat", "post", None),
            ("Delete", _INST, "delete", None)]},
    (f"{_INST}/subscription", "post", "204"): {
        f"Subscribed{name}": (path, method, _SAME_INSTANCE, None)
        for name, path, method in [("Records", f"{_INST}/records", "get"),
                                   ("Assignments", f"{_INST}/assignments", "get"),
                                   ("Commit", f"{_INST}/offsets", "post"),
                                   ("Seek", f"{_INST}/positions", "post"),
                                   ("Delete", _INST, "delete")]},
    ("/groups/{group}/members", "post", "200"): {
        "MemberHeartbeat": ("/groups/{group}/members/{member}/heartbeat", "post",
                            {"path.group": "$request.path.group",
                             "path.member": "$response.body#/member_id"},
                            {"generation": "$response.body#/generation"}),
        "MemberLeave": ("/groups/{group}/members/{member}", "delete",
                        {"path.group": "$request.path.group",
                         "path.member": "$response.body#/member_id"}, None),
        "MemberCommit": ("/groups/{group}/offsets", "post", {"path.group": "$request.path.group"},
                         {"member_id": "$response.body#/member_id",
                          "generation": "$response.body#/generation",
                          "offsets": []}),
        "MemberDescribe": ("/groups/{group}", "get", {"path.group": "$request.path.group"}, None),
    },
}


def operation_ref(path: str, method: str) -> str:
    """The JSON pointer of an operation in the document (``#/paths/~1topics/get``)."""
    return "#/paths/" + path.replace("~", "~0").replace("/", "~1") + "/" + method


def add_links(paths: dict[str, Any]) -> None:
    """Add :data:`LINKS` to the responses of ``paths`` (the document's, changed in place).

    Raises KeyError if a link names an operation the paths do not have.
    """
    for (path, method, status), links in LINKS.items():
        have = paths[path][method]["responses"][status].setdefault("links", {})
        for name, (to_path, to_method, parameters, body) in links.items():
            paths[to_path][to_method]  # noqa: B018 - a renamed route must fail here, loudly
            link: dict[str, Any] = {"operationRef": operation_ref(to_path, to_method),
                                    "parameters": parameters}
            if body is not None:
                link["requestBody"] = body
            have[name] = link
