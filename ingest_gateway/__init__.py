"""The ingest gateway: the HTTP server producers and consumers talk to, and its Python clients.

Three parts, each importable without the ones above it:

- ``client``: what an application embeds. ``from ingest_gateway.client import
  Producer, Consumer``. Loads no server code (no Starlette, no uvicorn): only
  the shared ``errors`` (every typed error of the gateway and its clients) and
  ``partitioner`` (Kafka's murmur2) besides itself. A consumer's direct mode
  reads the store through ``log_layout.direct_reader``.
- ``server``: the gateway's engine, no HTTP: the batcher (per-partition
  batches, flushes, acks, idempotence), the request codec, the consumer hub
  (long-poll fetches), the group coordinator, metrics, and ``runner.serve()``.
- ``http``: the Starlette app and every route (produce, topics and admin,
  fetch, groups, REST consumer instances), the ONE error table
  (``http.errors``), the OpenAPI document. ``http.app.create_app(settings,
  log)`` mounts every route.
- ``security``: TLS settings, authentication, Kafka's ACL authorizer and quotas
  (``http.guard`` applies them to every request).

Arrows point down only: ``http`` -> ``server`` -> ``client`` protocol types
(``client.group_protocol``, ``client.records``) and ``errors``; the client never
imports ``server`` or ``http``, except the coordinator's store functions that a
direct-mode consumer loads when it is built (``client.direct``).
"""
