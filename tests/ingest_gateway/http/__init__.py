"""Tests of the HTTP adapter (ingest_gateway/http/): REST Proxy v2/v3 routes, the console,
OpenAPI and its fuzzing, TLS and authentication of the HTTP listener, ACLs of routes."""
