"""The links of REST Proxy v3 resources: ``metadata.self``, ``resource_name``, ``related``.

Every v3 resource Confluent's REST Proxy answers carries
``"metadata": {"self": <its URL>, "resource_name": "crn:///kafka=<cluster>/..."}``
and points at the resources around it as ``{"related": <URL>}``; a list carries
``"metadata": {"self": <the list's URL>, "next": null}``. URLs are absolute,
built from the URL the client asked (``request.base_url``), as REST Proxy builds
them from its advertised address.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

V3 = "/v3/clusters"


def cluster_url(request: Request, cluster_id: str) -> str:
    """The absolute URL of the cluster: ``http://host:port/v3/clusters/<id>``."""
    return f"{str(request.base_url).rstrip('/')}{V3}/{cluster_id}"


def crn(cluster_id: str, *parts: tuple[str, object]) -> str:
    """REST Proxy's resource name: ``crn:///kafka=<cluster>/topic=<t>/partition=<p>``."""
    return "/".join([f"crn:///kafka={cluster_id}", *(f"{k}={v}" for k, v in parts)])


def self_meta(url: str, resource_name: str) -> dict[str, Any]:
    return {"self": url, "resource_name": resource_name}


def related(url: str) -> dict[str, str]:
    return {"related": url}


def list_doc(kind: str, url: str, data: list[dict[str, Any]]) -> dict[str, Any]:
    """A v3 list: ``{"kind", "metadata": {"self", "next": null}, "data"}`` (one page)."""
    return {"kind": kind, "metadata": {"self": url, "next": None}, "data": data}
