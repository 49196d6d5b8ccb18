"""The ingest gateway: the HTTP server producers and consumers talk to, and its Python clients.

Its parts, each importable without the ones above it:

- ``client``: what an application embeds. ``from ingest_gateway.client import
  Producer, Consumer``. Loads no server code (no Starlette, no uvicorn): only
  the shared ``errors`` (every typed error of the gateway and its clients) and
  ``partitioner`` (Kafka's murmur2) besides itself. A consumer's direct mode
  reads the store through ``log_layout.direct_reader``.
- ``server``: the gateway's engine, no HTTP: the batcher (per-partition
  batches, flushes, acks, idempotence), the request codec, the consumer hub
  (long-poll fetches), the group coordinator, metrics, the typed ``Gateway``
  holding them.
- ``http``: the Starlette app and every route (produce, topics and admin,
  fetch, groups, REST consumer instances), the HTTP answers of the one error
  table (``error_table``; ``http.errors``), the OpenAPI document. ``http.app.create_app(settings,
  log, gateway=...)`` mounts every route and serves the Gateway it is handed.
- ``kafka``: Kafka's wire protocol over the same server (``kafka.listener``).
- ``protocol``: what the server and the clients share (group protocol types, the HTTP
  session and its security).
- ``security``: TLS settings, authentication, Kafka's ACL authorizer and quotas
  (``http.guard`` applies them to every request).

Arrows point down only: ``http`` and ``kafka`` (the two protocol adapters) ->
``server`` -> ``protocol`` (what server and client share: the group protocol's types,
the HTTP session) and ``errors``; ``client`` -> ``protocol``. ``tests/test_architecture.py``
holds the rules and the arrows still owed (a direct-mode consumer runs the server's
group coordinator in its own process). ``runner`` is the composition root: the one
module that knows both adapters.
"""
