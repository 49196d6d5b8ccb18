"""REST Proxy v3 topic configs.

Routes (under ``/v3/clusters/{cluster_id}``)::

    GET    /topics/{topic}/configs                 every config of the topic
    GET    /topics/-/configs                       every config of every topic
    POST   /topics/{topic}/configs:alter           {"data": [{"name", "value", "operation"}],
                                                    "validate_only": false}
    GET    /topics/{topic}/configs/{name}          one config
    PUT    /topics/{topic}/configs/{name}          {"value": "..."}
    DELETE /topics/{topic}/configs/{name}          back to the gateway's default

Config names and values are Kafka's (``conf.topic``). A value is a string, as
REST Proxy's; a name the topic does not have answers 404 ``unknown_config``
(40405) on GET and 400 ``invalid_config`` (40004) on a change; a bad value 400
``invalid_config``. "Default" is the gateway's ``[topic]`` settings, the
broker-level defaults of Kafka. A change is one exclusive config version
(``server.topic_admin``, which Kafka's config APIs call too): all of a batch applies,
or none. ``partitions`` is read-only here, as there: ``PATCH`` the topic's
``partitions_count`` to grow it.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from conf.topic import validate_topic_name
from ingest_gateway.errors import BadRequest, UnknownTopicConfig
from ingest_gateway.http.access import allowed
from ingest_gateway.http import bodies
from ingest_gateway.http.bodies import read_body_as
from ingest_gateway.http.topics import (batcher_of, check_cluster, metadata_of, topic_admin_of,
                                        topic_url)
from ingest_gateway.http.v3_links import crn, list_doc, self_meta
from ingest_gateway.server.topic_metadata import TopicMetadata

#: a config name longer than any Kafka's is refused before it is looked up or echoed
MAX_NAME = bodies.MAX_CONFIG_NAME


def _defaults(request: Request) -> dict[str, str]:
    return topic_admin_of(request).default_configs()


def _docs(request: Request, meta: TopicMetadata, cid: str, topic: str) -> list[dict[str, Any]]:
    """Blocking: every config of ``topic`` as REST Proxy's KafkaTopicConfig."""
    values = meta.topic(topic, refresh=True).config.to_kafka()
    defaults = _defaults(request)
    base = f"{topic_url(request, cid, topic)}/configs"
    out = []
    for name, value in values.items():
        default = defaults.get(name) == value
        source = "DEFAULT_CONFIG" if default else "DYNAMIC_TOPIC_CONFIG"
        synonyms = [{"name": name, "value": value, "source": source}]
        if not default:
            synonyms.append({"name": name, "value": defaults.get(name), "source": "DEFAULT_CONFIG"})
        out.append({"kind": "KafkaTopicConfig",
                    "metadata": self_meta(f"{base}/{name}", crn(cid, ("topic", topic),
                                                                  ("config", name))),
                    "cluster_id": cid, "topic_name": topic, "name": name, "value": value,
                    "is_default": default, "is_read_only": name == "partitions",
                    "is_sensitive": False, "source": source, "synonyms": synonyms})
    return out


def _name(request: Request) -> str:
    name = request.path_params["name"]
    if not 0 < len(name) <= MAX_NAME:
        raise BadRequest(f"a config name is 1 to {MAX_NAME} characters")
    return name


async def list_configs(request: Request) -> Response:
    cid = await check_cluster(request)
    topic = validate_topic_name(request.path_params["topic"])
    docs = await batcher_of(request).run_blocking(_docs, request, metadata_of(request), cid, topic)
    return JSONResponse(list_doc("KafkaTopicConfigList",
                                 f"{topic_url(request, cid, topic)}/configs", docs))


async def list_all_configs(request: Request) -> Response:
    cid = await check_cluster(request)
    meta = metadata_of(request)
    docs = await batcher_of(request).run_blocking(
        lambda: [d for t in meta.names() if allowed(request, "DescribeConfigs", "Topic", t)
                 for d in _docs(request, meta, cid, t)])
    return JSONResponse(list_doc("KafkaTopicConfigList", f"{topic_url(request, cid, '-')}/configs",
                                 docs))


async def get_config(request: Request) -> Response:
    """Raises UnknownTopicConfig (404) for a name the topic does not have."""
    cid = await check_cluster(request)
    topic = validate_topic_name(request.path_params["topic"])
    name = _name(request)
    docs = await batcher_of(request).run_blocking(_docs, request, metadata_of(request), cid, topic)
    for d in docs:
        if d["name"] == name:
            return JSONResponse(d)
    raise UnknownTopicConfig(topic, name)


async def _alter(request: Request, topic: str, changes: dict[str, Any], *,
                 validate_only: bool = False) -> None:
    """Apply ``changes`` (Kafka names -> values, None: the default) at once; raises
    ConfigError."""
    await topic_admin_of(request).alter_configs(topic, changes, validate_only=validate_only)


async def put_config(request: Request) -> Response:
    """``{"value": "..."}``; raises BadRequest (no string value) or ConfigError."""
    await check_cluster(request)
    topic = validate_topic_name(request.path_params["topic"])
    name = _name(request)
    value = (await read_body_as(request, bodies.PutConfig)).value
    await _alter(request, topic, {name: value})
    return Response(status_code=204)


async def delete_config(request: Request) -> Response:
    """Back to the default; raises ConfigError for a name topics do not have."""
    await check_cluster(request)
    topic = validate_topic_name(request.path_params["topic"])
    await _alter(request, topic, {_name(request): None})
    return Response(status_code=204)


async def alter_configs(request: Request) -> Response:
    """A batch of SET / DELETE, all applied or none; ``validate_only`` checks only."""
    await check_cluster(request)
    topic = validate_topic_name(request.path_params["topic"])
    body = await read_body_as(request, bodies.AlterConfigs)
    changes: dict[str, Any] = {}
    for c in body.data:
        if (c.operation or "SET").upper() == "DELETE":
            changes[c.name] = None
        elif c.value is None:
            raise BadRequest(f"config {c.name!r}: SET needs a string value")
        else:
            changes[c.name] = c.value
    await _alter(request, topic, changes, validate_only=body.validate_only)
    return Response(status_code=204)


def routes() -> list[BaseRoute]:
    t = "/v3/clusters/{cluster_id}/topics"
    return [
        Route(f"{t}/-/configs", list_all_configs, methods=["GET"]),
        Route(f"{t}/{{topic}}/configs", list_configs, methods=["GET"]),
        Route(f"{t}/{{topic}}/configs:alter", alter_configs, methods=["POST"]),
        Route(f"{t}/{{topic}}/configs/{{name}}", get_config, methods=["GET"]),
        Route(f"{t}/{{topic}}/configs/{{name}}", put_config, methods=["PUT"]),
        Route(f"{t}/{{topic}}/configs/{{name}}", delete_config, methods=["DELETE"]),
    ]
